"""`extend_attention`: new tokens over their cached prefix and each other."""

from __future__ import annotations

import torch
import triton

from ...kernels.attention.extend import extend_kernel
from ...reference.attention import extend_attention_reference
from ...runtime import get_config, launch_options, use_triton
from .formulation import choose_formulation, dim_block, window_constexpr
from .validate import (
    check_indptr,
    check_kv_pool,
    check_slots,
    checked_mode,
    require_same,
    require_same_device,
    require_tensor,
)

OP = "extend_attention"


def _validate(q, k, v, o, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices, max_len_extend, check):
    for name, t in (("q_extend", q), ("k_extend", k), ("v_extend", v), ("o_extend", o)):
        require_tensor(OP, name, t, 3)
    for name, t in (("qo_indptr", qo_indptr), ("kv_indptr", kv_indptr), ("kv_indices", kv_indices)):
        require_tensor(OP, name, t, 1, float_data=False)
    group = check_kv_pool(OP, q.shape[1], q.shape[2], k_buffer, v_buffer, "q_extend")
    require_same(OP, "dtypes", q_extend=q.dtype, k_extend=k.dtype, v_extend=v.dtype, o_extend=o.dtype,
                 k_buffer=k_buffer.dtype, v_buffer=v_buffer.dtype)
    require_same(OP, "k_extend's shape and (tokens, kv heads, head dim)", k_extend=tuple(k.shape),
                 expected=(q.shape[0], k_buffer.shape[1], k_buffer.shape[2]))
    require_same(OP, "v_extend's shape and (tokens, kv heads, v head dim)", v_extend=tuple(v.shape),
                 expected=(q.shape[0], v_buffer.shape[1], v_buffer.shape[2]))
    require_same(OP, "o_extend's shape and (tokens, q heads, v head dim)", o_extend=tuple(o.shape),
                 expected=(q.shape[0], q.shape[1], v_buffer.shape[2]))
    require_same_device(OP, q_extend=q, k_extend=k, v_extend=v, o_extend=o, k_buffer=k_buffer, v_buffer=v_buffer,
                        qo_indptr=qo_indptr, kv_indptr=kv_indptr, kv_indices=kv_indices)
    batch = qo_indptr.numel() - 1
    if batch < 0:
        raise ValueError(f"{OP}: qo_indptr must have batch + 1 entries, got none")
    if checked_mode(check):
        qo = check_indptr(OP, "qo_indptr", qo_indptr, batch, q.shape[0], "the token count of q_extend")
        longest = int((qo[1:] - qo[:-1]).max()) if batch else 0
        if longest > max_len_extend:
            raise ValueError(f"{OP}: max_len_extend = {max_len_extend} but a request extends by {longest} tokens")
        kv = check_indptr(OP, "kv_indptr", kv_indptr, batch, kv_indices.numel(), "len(kv_indices)")
        check_slots(OP, "kv_indices", kv_indices, k_buffer.shape[0], int(kv[-1]))
    elif kv_indptr.numel() != batch + 1:
        raise ValueError(f"{OP}: kv_indptr must have batch + 1 = {batch + 1} entries, got {kv_indptr.numel()}")
    return group, batch


def extend_attention(
    q_extend: torch.Tensor,
    k_extend: torch.Tensor,
    v_extend: torch.Tensor,
    o_extend: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    max_len_extend: int,
    sm_scale: float,
    logit_cap: float = 0.0,
    sliding_window: int | None = None,
    check: bool = True,
    formulation: str | None = None,
) -> torch.Tensor:
    """Causal attention for a batch of extends; writes `o_extend`.

    Request b's new tokens are rows qo_indptr[b]:qo_indptr[b+1] of q_extend
    [tokens, q_heads, head_dim], k_extend / v_extend [tokens, kv_heads, dim]
    and o_extend [tokens, q_heads, v_head_dim]. Its cached prefix is the pool
    slots kv_indices[kv_indptr[b]:kv_indptr[b+1]] (PREFIX ONLY: the new
    tokens come from k_extend / v_extend, even when store_kv already wrote
    them to the pool). New token m (position prefix + m) sees the whole
    prefix and new tokens 0..m. `max_len_extend` bounds every request's new
    token count (it sizes the grid; checked mode verifies it). `logit_cap`,
    `sliding_window` and `formulation` as in `decode_attention`. Returns
    `o_extend`.
    """
    group, batch = _validate(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer,
                             qo_indptr, kv_indptr, kv_indices, max_len_extend, check)
    tokens, q_heads, head_dim = q_extend.shape
    v_dim = v_buffer.shape[2]
    if batch == 0 or tokens == 0 or max_len_extend <= 0:
        return o_extend
    if not use_triton(OP, q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices):
        o_extend.copy_(extend_attention_reference(q_extend, k_extend, v_extend, k_buffer, v_buffer, qo_indptr,
                                                  kv_indptr, kv_indices, sm_scale, logit_cap, sliding_window))
        return o_extend

    config = get_config(OP, head_dim=head_dim, group=group)
    form = choose_formulation(OP, q_extend.dtype, config, formulation)
    block_m = int(config.get("BLOCK_M", 32))
    block_n = int(config.get("BLOCK_N", 32))
    if form.use_dot:
        block_m, block_n = max(block_m, 16), max(block_n, 16)
    grid = (batch, q_heads, triton.cdiv(max_len_extend, block_m))
    extend_kernel[grid](
        q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices,
        float(sm_scale),
        q_extend.stride(0), q_extend.stride(1), k_extend.stride(0), k_extend.stride(1),
        v_extend.stride(0), v_extend.stride(1), o_extend.stride(0), o_extend.stride(1),
        k_buffer.stride(0), k_buffer.stride(1), v_buffer.stride(0), v_buffer.stride(1),
        GROUP=group, HEAD_DIM=head_dim, V_DIM=v_dim, BLOCK_M=block_m, BLOCK_N=block_n,
        BLOCK_D=dim_block(head_dim, form), BLOCK_DV=dim_block(v_dim, form),
        LOGIT_CAP=float(logit_cap or 0.0), WINDOW=window_constexpr(sliding_window),
        USE_DOT=form.use_dot, DOT_FP32=form.dot_fp32,
        **launch_options(config),
    )
    return o_extend
