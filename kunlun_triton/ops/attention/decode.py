"""`decode_attention`: one query token per request over its paged KV."""

from __future__ import annotations

import torch
import triton

from ...kernels.attention.decode import decode_merge_kernel, decode_partial_kernel
from ...reference.attention import decode_attention_reference
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

OP = "decode_attention"


def _validate(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, check):
    require_tensor(OP, "q", q, 3)
    require_tensor(OP, "o", o, 3)
    require_tensor(OP, "kv_indptr", kv_indptr, 1, float_data=False)
    require_tensor(OP, "kv_indices", kv_indices, 1, float_data=False)
    group = check_kv_pool(OP, q.shape[1], q.shape[2], k_buffer, v_buffer, "q")
    require_same(OP, "dtypes", q=q.dtype, k_buffer=k_buffer.dtype, v_buffer=v_buffer.dtype, o=o.dtype)
    require_same(OP, "o's shape and (batch, q heads, v head dim)", o=tuple(o.shape), expected=(q.shape[0], q.shape[1], v_buffer.shape[2]))
    require_same_device(OP, q=q, k_buffer=k_buffer, v_buffer=v_buffer, o=o, kv_indptr=kv_indptr, kv_indices=kv_indices)
    if checked_mode(check):
        indptr = check_indptr(OP, "kv_indptr", kv_indptr, q.shape[0], kv_indices.numel(), "len(kv_indices)")
        check_slots(OP, "kv_indices", kv_indices, k_buffer.shape[0], int(indptr[-1]))
    elif kv_indptr.numel() != q.shape[0] + 1:
        raise ValueError(f"{OP}: kv_indptr must have batch + 1 = {q.shape[0] + 1} entries, got {kv_indptr.numel()}")
    return group


def choose_splits(config: dict, batch: int, kv_heads: int, total_kv: int, window: int, block_n: int) -> int:
    """KV splits per request, from host-side sizes only (no sync):
    enough programs to fill the device (TARGET_PROGRAMS), at most
    MAX_KV_SPLITS, and no more than the keys could fill (total_kv bounds the
    longest request; a window bounds every request) at MIN_SPLIT_TOKENS each."""
    target = int(config.get("TARGET_PROGRAMS", 64))
    longest = min(total_kv, window + 1) if window else total_kv
    min_tokens = max(int(config.get("MIN_SPLIT_TOKENS", 4 * block_n)), 1)
    splits = triton.cdiv(target, max(batch * kv_heads, 1))
    return max(1, min(splits, int(config.get("MAX_KV_SPLITS", 16)), triton.cdiv(max(longest, 1), min_tokens)))


def decode_attention(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    o: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    sm_scale: float,
    logit_cap: float = 0.0,
    sliding_window: int | None = None,
    num_kv_splits: int | None = None,
    check: bool = True,
    formulation: str | None = None,
) -> torch.Tensor:
    """Attention of one new token per request over its cached keys; writes `o`.

    q [batch, q_heads, head_dim]; k_buffer [slots, kv_heads, head_dim] and
    v_buffer [slots, kv_heads, v_head_dim] (one layer's KV pool); o [batch,
    q_heads, v_head_dim]. Request b's keys are the slots
    kv_indices[kv_indptr[b]:kv_indptr[b+1]] in position order, the query's
    own token last (store_kv runs first). q_heads must be a multiple of
    kv_heads (MHA, GQA, MQA). `logit_cap` > 0 applies cap * tanh(s / cap);
    `sliding_window` is SGLang's sliding_window_size (the query sees itself
    and the `sliding_window` tokens before it). `num_kv_splits` overrides the
    split count; `formulation` ("dot" | "sum") the config's. A request with
    no keys gets zeros. Returns `o`.
    """
    group = _validate(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, check)
    batch, q_heads, head_dim = q.shape
    kv_heads, v_dim = k_buffer.shape[1], v_buffer.shape[2]
    if batch == 0:
        return o
    if not use_triton(OP, q, k_buffer, v_buffer, o, kv_indptr, kv_indices):
        o.copy_(decode_attention_reference(q, k_buffer, v_buffer, kv_indptr, kv_indices, sm_scale, logit_cap, sliding_window))
        return o

    config = get_config(OP, head_dim=head_dim, group=group, batch=batch)
    form = choose_formulation(OP, q.dtype, config, formulation)
    block_n = int(config.get("BLOCK_N", 32))
    block_n = max(block_n, 16) if form.use_dot else block_n
    window = window_constexpr(sliding_window)
    splits = num_kv_splits or choose_splits(config, batch, kv_heads, kv_indices.numel(), window, block_n)
    block_h = triton.next_power_of_2(group)
    if form.use_dot:
        block_h = max(block_h, 16)

    part_out = torch.empty(batch, q_heads, splits, v_dim, dtype=torch.float32, device=q.device)
    part_lse = torch.empty(batch, q_heads, splits, dtype=torch.float32, device=q.device)
    launch = launch_options(config)
    decode_partial_kernel[(batch, kv_heads, splits)](
        q, k_buffer, v_buffer, kv_indptr, kv_indices, part_out, part_lse,
        float(sm_scale), q_heads,
        q.stride(0), q.stride(1), k_buffer.stride(0), k_buffer.stride(1), v_buffer.stride(0), v_buffer.stride(1),
        GROUP=group, HEAD_DIM=head_dim, V_DIM=v_dim,
        BLOCK_H=block_h, BLOCK_D=dim_block(head_dim, form), BLOCK_DV=dim_block(v_dim, form), BLOCK_N=block_n,
        SPLITS=splits, LOGIT_CAP=float(logit_cap or 0.0), WINDOW=window,
        USE_DOT=form.use_dot, DOT_FP32=form.dot_fp32,
        **launch,
    )
    decode_merge_kernel[(batch, kv_heads)](
        part_out, part_lse, o, q_heads, o.stride(0), o.stride(1),
        GROUP=group, V_DIM=v_dim, BLOCK_DV=triton.next_power_of_2(v_dim),
        SPLITS=splits, BLOCK_S=triton.next_power_of_2(splits),
        **launch,
    )
    return o
