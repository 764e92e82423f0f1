"""`extend_attention`: paged extend (prefill / chunked prefill / radix-cache hit) attention.

Request b has a cached prefix of P tokens in the pool (slots
kv_indices[kv_indptr[b]:kv_indptr[b+1]]) and E new tokens in contiguous rows
qo_indptr[b]:qo_indptr[b+1] of q_extend / k_extend / v_extend. New token m
sits at position P + m and attends to every prefix key and causally to new
keys n <= m (and, with a sliding window, only to keys at most WINDOW
positions back).

Grid (batch, q_heads, cdiv(max_len_extend, BLOCK_M)): a program owns BLOCK_M
new tokens of one head and runs one online softmax over two key streams, the
prefix gathered from the pool by slot id, then the new tokens up to its own
last row (tiles past the causal diagonal are never loaded).
"""

import torch
import triton
import triton.language as tl

from ...runtime import INDEX_DTYPES, get_config, launch_options, use_triton
from ..validation import (
    check_indptr,
    check_slots,
    checked_mode,
    require_number,
    require_same,
    require_same_device,
    require_tensor,
)
from . import reference
from .shared import check_kv_pool, choose_formulation, dim_block, window_constexpr
from .tiles import NO_SCORE, capped_scores, load_k_transposed, load_v, online_softmax_update

OP = "extend_attention"


@triton.jit
def extend_kernel(
    q_ptr,
    k_extend_ptr,
    v_extend_ptr,
    o_ptr,
    k_buffer_ptr,
    v_buffer_ptr,
    qo_indptr_ptr,
    kv_indptr_ptr,
    kv_indices_ptr,
    sm_scale,
    q_stride_t,
    q_stride_h,
    ke_stride_t,
    ke_stride_h,
    ve_stride_t,
    ve_stride_h,
    o_stride_t,
    o_stride_h,
    kb_stride_s,
    kb_stride_h,
    vb_stride_s,
    vb_stride_h,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    V_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    LOGIT_CAP: tl.constexpr,
    WINDOW: tl.constexpr,
    USE_DOT: tl.constexpr,
    DOT_FP32: tl.constexpr,
):
    b = tl.program_id(0)
    head = tl.program_id(1)
    m_block = tl.program_id(2)

    q_start = tl.load(qo_indptr_ptr + b)
    extend_len = tl.load(qo_indptr_ptr + b + 1) - q_start
    if m_block * BLOCK_M >= extend_len:
        return
    kv_start = tl.load(kv_indptr_ptr + b)
    prefix_len = tl.load(kv_indptr_ptr + b + 1) - kv_start
    kv_head = head // GROUP

    offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    m_mask = offs_m < extend_len
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    d_mask = offs_d < HEAD_DIM
    dv_mask = offs_dv < V_DIM
    rows = (q_start + offs_m).to(tl.int64)

    q_mask = m_mask[:, None] & d_mask[None, :]
    q = tl.load(q_ptr + rows[:, None] * q_stride_t + head * q_stride_h + offs_d[None, :], mask=q_mask)
    q = tl.where(q_mask, q, 0.0)

    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) + NO_SCORE
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)

    # Stream 1: the cached prefix, keys at positions 0 .. prefix_len - 1.
    lo = 0
    if WINDOW > 0:  # the block's first query (position prefix_len + first row) looks WINDOW back
        lo = tl.maximum(prefix_len + m_block * BLOCK_M - WINDOW, 0)
    for n0 in range(lo, prefix_len, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        n_mask = offs_n < prefix_len
        slot = tl.load(kv_indices_ptr + kv_start + offs_n, mask=n_mask)
        slot = tl.where(n_mask, slot, 0).to(tl.int64)
        k_t = load_k_transposed(k_buffer_ptr, slot, kb_stride_s, kv_head * kb_stride_h, offs_d, d_mask, n_mask)
        s = capped_scores(q, k_t, sm_scale, LOGIT_CAP, USE_DOT, DOT_FP32)
        visible = m_mask[:, None] & n_mask[None, :]
        if WINDOW > 0:
            visible = visible & ((prefix_len + offs_m[:, None]) - offs_n[None, :] <= WINDOW)
        s = tl.where(visible, s, float("-inf"))
        v = load_v(v_buffer_ptr, slot, vb_stride_s, kv_head * vb_stride_h, offs_dv, dv_mask, n_mask)
        m_i, l_i, acc = online_softmax_update(s, v, m_i, l_i, acc, USE_DOT, DOT_FP32)

    # Stream 2: the new tokens themselves, causal; stop at this block's last row.
    hi = tl.minimum(extend_len, (m_block + 1) * BLOCK_M)
    lo = 0
    if WINDOW > 0:
        lo = tl.maximum(m_block * BLOCK_M - WINDOW, 0)
    for n0 in range(lo, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        n_mask = offs_n < hi
        keys = (q_start + offs_n).to(tl.int64)
        k_t = load_k_transposed(k_extend_ptr, keys, ke_stride_t, kv_head * ke_stride_h, offs_d, d_mask, n_mask)
        s = capped_scores(q, k_t, sm_scale, LOGIT_CAP, USE_DOT, DOT_FP32)
        visible = m_mask[:, None] & n_mask[None, :] & (offs_n[None, :] <= offs_m[:, None])
        if WINDOW > 0:
            visible = visible & (offs_m[:, None] - offs_n[None, :] <= WINDOW)
        s = tl.where(visible, s, float("-inf"))
        v = load_v(v_extend_ptr, keys, ve_stride_t, kv_head * ve_stride_h, offs_dv, dv_mask, n_mask)
        m_i, l_i, acc = online_softmax_update(s, v, m_i, l_i, acc, USE_DOT, DOT_FP32)

    has_keys = l_i > 0.0
    out = tl.where(has_keys[:, None], acc / tl.where(has_keys, l_i, 1.0)[:, None], 0.0)
    o_mask = m_mask[:, None] & dv_mask[None, :]
    tl.store(o_ptr + rows[:, None] * o_stride_t + head * o_stride_h + offs_dv[None, :], out.to(o_ptr.dtype.element_ty), mask=o_mask)


def _validate(q, k, v, o, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices, max_len_extend, check):
    for name, t in (("q_extend", q), ("k_extend", k), ("v_extend", v), ("o_extend", o)):
        require_tensor(OP, name, t, ndim=3)
    for name, t in (("qo_indptr", qo_indptr), ("kv_indptr", kv_indptr), ("kv_indices", kv_indices)):
        require_tensor(OP, name, t, dtypes=INDEX_DTYPES, ndim=1)
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
    *,
    config: dict | None = None,
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
    max_len_extend = require_number(OP, "max_len_extend", max_len_extend, minimum=0, integer=True)
    group, batch = _validate(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer,
                             qo_indptr, kv_indptr, kv_indices, max_len_extend, check)
    sm_scale = require_number(OP, "sm_scale", sm_scale, above=0.0)
    logit_cap = require_number(OP, "logit_cap", logit_cap or 0.0, minimum=0.0)
    window = window_constexpr(OP, sliding_window)
    tokens, q_heads, head_dim = q_extend.shape
    v_dim = v_buffer.shape[2]
    if batch == 0 or tokens == 0 or max_len_extend <= 0:
        return o_extend
    if not use_triton(OP, q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices):
        return reference.extend_attention(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr,
                                          kv_indptr, kv_indices, max_len_extend, sm_scale, logit_cap, window)

    config = get_config(OP, head_dim=head_dim, group=group) if config is None else config
    form = choose_formulation(OP, q_extend.dtype, config, formulation)
    block_m = int(config.get("BLOCK_M", 32))
    block_n = int(config.get("BLOCK_N", 32))
    if form.use_dot:
        block_m, block_n = max(block_m, 16), max(block_n, 16)
    grid = (batch, q_heads, triton.cdiv(max_len_extend, block_m))
    extend_kernel[grid](
        q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices,
        sm_scale,
        q_extend.stride(0), q_extend.stride(1), k_extend.stride(0), k_extend.stride(1),
        v_extend.stride(0), v_extend.stride(1), o_extend.stride(0), o_extend.stride(1),
        k_buffer.stride(0), k_buffer.stride(1), v_buffer.stride(0), v_buffer.stride(1),
        GROUP=group, HEAD_DIM=head_dim, V_DIM=v_dim, BLOCK_M=block_m, BLOCK_N=block_n,
        BLOCK_D=dim_block(head_dim, form), BLOCK_DV=dim_block(v_dim, form),
        LOGIT_CAP=logit_cap, WINDOW=window,
        USE_DOT=form.use_dot, DOT_FP32=form.dot_fp32,
        **launch_options(config),
    )
    return o_extend
