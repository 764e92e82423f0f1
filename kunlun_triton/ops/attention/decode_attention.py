"""`decode_attention`: split-KV paged attention, one query token per request.

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

OP = "decode_attention"


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


def _validate(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, check):
    require_tensor(OP, "q", q, ndim=3)
    require_tensor(OP, "o", o, ndim=3)
    require_tensor(OP, "kv_indptr", kv_indptr, dtypes=INDEX_DTYPES, ndim=1)
    require_tensor(OP, "kv_indices", kv_indices, dtypes=INDEX_DTYPES, ndim=1)
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
    *,
    config: dict | None = None,
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
    sm_scale = require_number(OP, "sm_scale", sm_scale, above=0.0)
    logit_cap = require_number(OP, "logit_cap", logit_cap or 0.0, minimum=0.0)
    window = window_constexpr(OP, sliding_window)
    if num_kv_splits is not None:
        num_kv_splits = require_number(OP, "num_kv_splits", num_kv_splits, minimum=1, integer=True)
    batch, q_heads, head_dim = q.shape
    kv_heads, v_dim = k_buffer.shape[1], v_buffer.shape[2]
    if batch == 0:
        return o
    if not use_triton(OP, q, k_buffer, v_buffer, o, kv_indptr, kv_indices):
        return reference.decode_attention(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, sm_scale, logit_cap, window)

    config = get_config(OP, head_dim=head_dim, group=group, batch=batch) if config is None else config
    form = choose_formulation(OP, q.dtype, config, formulation)
    block_n = int(config.get("BLOCK_N", 32))
    block_n = max(block_n, 16) if form.use_dot else block_n
    splits = num_kv_splits or choose_splits(config, batch, kv_heads, kv_indices.numel(), window, block_n)
    block_h = triton.next_power_of_2(group)
    if form.use_dot:
        block_h = max(block_h, 16)

    part_out = torch.empty(batch, q_heads, splits, v_dim, dtype=torch.float32, device=q.device)
    part_lse = torch.empty(batch, q_heads, splits, dtype=torch.float32, device=q.device)
    launch = launch_options(config)
    decode_partial_kernel[(batch, kv_heads, splits)](
        q, k_buffer, v_buffer, kv_indptr, kv_indices, part_out, part_lse,
        sm_scale, q_heads,
        q.stride(0), q.stride(1), k_buffer.stride(0), k_buffer.stride(1), v_buffer.stride(0), v_buffer.stride(1),
        GROUP=group, HEAD_DIM=head_dim, V_DIM=v_dim,
        BLOCK_H=block_h, BLOCK_D=dim_block(head_dim, form), BLOCK_DV=dim_block(v_dim, form), BLOCK_N=block_n,
        SPLITS=splits, LOGIT_CAP=logit_cap, WINDOW=window,
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
