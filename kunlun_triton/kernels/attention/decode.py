"""Split-KV paged decode attention: one query token per request.

Stage 1 (`decode_partial_kernel`), grid (batch, kv_heads, SPLITS): request b's
visible keys (the last WINDOW + 1 with a sliding window, else all) are cut
into SPLITS contiguous ranges of whole BLOCK_N tiles; a program runs an online
softmax over one range for all GROUP query heads of one kv head, so every K/V
tile is loaded once and shared by the group (GQA/MQA). It writes the range's
normalised output and its log-sum-exp:

    o_s = sum_j e^(s_j - lse_s) v_j,     lse_s = log sum_j e^(s_j)

Stage 2 (`decode_merge_kernel`), grid (batch, kv_heads): the exact softmax
over all keys is the lse-weighted mean of the splits,

    o = sum_s e^(lse_s - M) o_s / sum_s e^(lse_s - M),   M = max_s lse_s,

with empty splits at lse = -inf (weight 0). Splitting is what lets a batch of
one with a long context fill the device.
"""

import triton
import triton.language as tl

from .common import NO_SCORE, capped_scores, load_k_transposed, load_v, online_softmax_update


@triton.jit
def decode_partial_kernel(
    q_ptr,
    k_buffer_ptr,
    v_buffer_ptr,
    kv_indptr_ptr,
    kv_indices_ptr,
    part_out_ptr,  # [batch, q_heads, SPLITS, V_DIM] fp32
    part_lse_ptr,  # [batch, q_heads, SPLITS] fp32
    sm_scale,
    num_q_heads,
    q_stride_b,
    q_stride_h,
    kb_stride_s,
    kb_stride_h,
    vb_stride_s,
    vb_stride_h,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    V_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLITS: tl.constexpr,
    LOGIT_CAP: tl.constexpr,
    WINDOW: tl.constexpr,
    USE_DOT: tl.constexpr,
    DOT_FP32: tl.constexpr,
):
    b = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)

    kv_start = tl.load(kv_indptr_ptr + b)
    kv_len = tl.load(kv_indptr_ptr + b + 1) - kv_start
    first = 0
    if WINDOW > 0:  # the query sits at kv_len - 1 and sees WINDOW keys before it
        first = tl.maximum(kv_len - 1 - WINDOW, 0)
    split_len = tl.cdiv(tl.cdiv(kv_len - first, SPLITS), BLOCK_N) * BLOCK_N
    lo = first + split * split_len
    hi = tl.minimum(lo + split_len, kv_len)

    offs_h = tl.arange(0, BLOCK_H)
    heads = kv_head * GROUP + offs_h
    head_mask = offs_h < GROUP
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    d_mask = offs_d < HEAD_DIM
    dv_mask = offs_dv < V_DIM

    q_mask = head_mask[:, None] & d_mask[None, :]
    q = tl.load(q_ptr + b * q_stride_b + heads[:, None] * q_stride_h + offs_d[None, :], mask=q_mask)
    q = tl.where(q_mask, q, 0.0)

    m_i = tl.zeros([BLOCK_H], dtype=tl.float32) + NO_SCORE
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_DV], dtype=tl.float32)
    for n0 in range(lo, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        n_mask = offs_n < hi
        slot = tl.load(kv_indices_ptr + kv_start + offs_n, mask=n_mask)
        slot = tl.where(n_mask, slot, 0).to(tl.int64)

        k_t = load_k_transposed(k_buffer_ptr, slot, kb_stride_s, kv_head * kb_stride_h, offs_d, d_mask, n_mask)
        s = capped_scores(q, k_t, sm_scale, LOGIT_CAP, USE_DOT, DOT_FP32)
        s = tl.where(n_mask[None, :], s, float("-inf"))
        v = load_v(v_buffer_ptr, slot, vb_stride_s, kv_head * vb_stride_h, offs_dv, dv_mask, n_mask)
        m_i, l_i, acc = online_softmax_update(s, v, m_i, l_i, acc, USE_DOT, DOT_FP32)

    has_keys = l_i > 0.0
    out = tl.where(has_keys[:, None], acc / tl.where(has_keys, l_i, 1.0)[:, None], 0.0)
    lse = tl.where(has_keys, m_i + tl.log(tl.where(has_keys, l_i, 1.0)), float("-inf"))
    row = (b * num_q_heads + heads) * SPLITS + split  # [BLOCK_H]
    tl.store(part_out_ptr + row[:, None] * V_DIM + offs_dv[None, :], out, mask=head_mask[:, None] & dv_mask[None, :])
    tl.store(part_lse_ptr + row, lse, mask=head_mask)


@triton.jit
def decode_merge_kernel(
    part_out_ptr,
    part_lse_ptr,
    o_ptr,
    num_q_heads,
    o_stride_b,
    o_stride_h,
    GROUP: tl.constexpr,
    V_DIM: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    SPLITS: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    b = tl.program_id(0)
    kv_head = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    s_mask = offs_s < SPLITS
    offs_dv = tl.arange(0, BLOCK_DV)
    dv_mask = offs_dv < V_DIM
    part_mask = s_mask[:, None] & dv_mask[None, :]
    for g in range(GROUP):
        head = kv_head * GROUP + g
        row = (b * num_q_heads + head) * SPLITS + offs_s
        lse = tl.load(part_lse_ptr + row, mask=s_mask)
        lse = tl.where(s_mask, lse, float("-inf"))
        top = tl.max(lse, 0)
        top = tl.where(top == float("-inf"), 0.0, top)  # no keys at all: all weights 0
        w = tl.exp(lse - top)
        part = tl.load(part_out_ptr + row[:, None] * V_DIM + offs_dv[None, :], mask=part_mask)
        part = tl.where(part_mask, part, 0.0)
        num = tl.sum(w[:, None] * part, 0)
        den = tl.sum(w, 0)
        out = tl.where(den > 0.0, num / tl.where(den > 0.0, den, 1.0), 0.0)
        tl.store(o_ptr + b * o_stride_b + head * o_stride_h + offs_dv, out.to(o_ptr.dtype.element_ty), mask=dv_mask)
