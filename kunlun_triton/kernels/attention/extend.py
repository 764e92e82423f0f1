"""Paged extend (prefill / chunked prefill / radix-cache hit) attention.

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

import triton
import triton.language as tl

from .common import NO_SCORE, capped_scores, load_k_transposed, load_v, online_softmax_update


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
