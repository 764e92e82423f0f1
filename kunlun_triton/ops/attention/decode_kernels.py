"""The kernels of `decode_attention` (its launcher: `decode_attention.py`).

Stage 1 (`decode_partial_kernel`), grid (batch, kv_heads * head blocks, max_splits):
request b's visible keys (the last WINDOW + 1 with a sliding window, else
all) are cut into `splits_b` contiguous ranges of whole BLOCK_N tiles; a
program runs an online softmax over one range for all GROUP query heads of
one kv head, so every K/V tile is loaded once and shared by the group
(GQA/MQA). It writes the range's normalised output and its log-sum-exp:

    o_s = sum_j e^(s_j - lse_s) v_j,     lse_s = log sum_j e^(s_j)

Stage 2 (`decode_merge_kernel`), grid (batch, kv_heads * head blocks): the exact softmax
over all keys is the lse-weighted mean of the splits,

    o = sum_s e^(lse_s - M) o_s / sum_s e^(lse_s - M),   M = max_s lse_s.

With attention sinks (HAS_SINKS, gpt-oss: one logit per query head) the
merge adds the head's sink to that denominator once, after the splits
(`tiles.fold_sink`), never per split: stage 1 is the same kernel with or
without sinks.

Split counts are decided on the device, per request, from its length and
two run-time integers (never constexprs, so neither batch size nor context
length ever recompiles a kernel, and a CUDA graph can replay any lengths):

    splits_b = clamp(ceil(n_b / split_tokens), 1, max_splits)
    split_len_b = ceil(ceil(n_b / splits_b) / BLOCK_N) * BLOCK_N
"""

import triton
import triton.language as tl

from ..loads import masked_load
from .fp8 import fp8_unit, kv_values, pool_scores_scale
from .tiles import finish_rows, fold_sink, load_tile, online_softmax_update, scale_and_cap, scores


@triton.jit
def split_range(kv_len, split, split_tokens, max_splits, WINDOW: tl.constexpr, BLOCK_N: tl.constexpr):
    """Keys [lo, hi) of split `split` of a request with kv_len keys, and the
    number of non-empty splits (both stages compute them the same way)."""
    first = 0
    if WINDOW > 0:  # the query sits at kv_len - 1 and sees WINDOW keys before it
        first = tl.maximum(kv_len - 1 - WINDOW, 0)
    n_keys = kv_len - first
    splits = tl.minimum(tl.maximum(tl.cdiv(n_keys, split_tokens), 1), max_splits)
    split_len = tl.maximum(tl.cdiv(tl.cdiv(n_keys, splits), BLOCK_N), 1) * BLOCK_N
    lo = first + split * split_len
    return lo, tl.minimum(lo + split_len, kv_len), tl.cdiv(n_keys, split_len)


@triton.jit
def tile_slots(kv_row_ptr, n0, hi, BLOCK_N: tl.constexpr, MASK_N: tl.constexpr, LOAD_IGNORES_OTHER: tl.constexpr):
    """The pool slots of keys n0 .. n0 + BLOCK_N (0 past `hi` when MASK_N)."""
    offs_n = n0 + tl.arange(0, BLOCK_N)
    if MASK_N:
        return masked_load(kv_row_ptr + offs_n, offs_n < hi, 0, LOAD_IGNORES_OTHER)
    else:
        return tl.load(kv_row_ptr + offs_n)


@triton.jit
def decode_tile(q, q_pe, m_i, l_i, acc, slot, k_head_ptr, v_head_ptr, n0, hi, sm_scale, kb_stride_s,
                vb_stride_s, offs_d, offs_dpe, offs_dv, d_mask, dpe_mask, dv_mask, BLOCK_N: tl.constexpr,
                MASK_N: tl.constexpr, MASK_D: tl.constexpr, MASK_DPE: tl.constexpr, MASK_DV: tl.constexpr,
                BLOCK_DPE: tl.constexpr, LOGIT_CAP: tl.constexpr, USE_DOT: tl.constexpr, DOT_FP32: tl.constexpr,
                POOL_I64: tl.constexpr, LOAD_IGNORES_OTHER: tl.constexpr, k_scale, v_scale,
                KV_FORMAT: tl.constexpr, FP8_RUNTIME_UNIT: tl.constexpr, FP8_NAN_ARITH: tl.constexpr, V_IN_K: tl.constexpr,
                K_KEY_MAJOR: tl.constexpr):  # fmt: skip
    """Fold keys n0 .. n0 + BLOCK_N (those below `hi` when MASK_N), at pool
    slots `slot` [BLOCK_N] (`tile_slots`), into the running softmax of the
    group's heads. A split head dim (BLOCK_DPE > 0)
    scores as q[:BLOCK_D].k[:BLOCK_D] + q_pe.k[BLOCK_D:] (MLA: latent + rope).
    V_IN_K (MLA: V is the first BLOCK_D = V_DIM values of each K row) takes
    V as the transposed K tile already loaded: the latent is read once per
    tile, as SGLang's HAS_MLA path does. Otherwise, with K_KEY_MAJOR, K is
    loaded as V is, one key per row ([N, D], scored through its transpose,
    a view of the tile in shared memory): both loads then address rows by
    the same slot vector in the same layout, so its ids are loaded once per
    tile, not once per layout (sm_90, 32-key tile: 8 index loads of 4
    addresses without, 4 with). An fp8 pool's bytes (KV_FORMAT > 0)
    are decoded after the load, unscaled (`fp8.kv_values`): k_scale
    multiplies the scores, v_scale the program's output (its keys are all
    the pool's); KV_FORMAT 0 adds no code."""
    offs_n = n0 + tl.arange(0, BLOCK_N)
    n_mask = offs_n < hi
    k_unit, v_unit = fp8_unit(k_scale, KV_FORMAT, FP8_RUNTIME_UNIT), fp8_unit(v_scale, KV_FORMAT, FP8_RUNTIME_UNIT)
    if POOL_I64:
        slot = slot.to(tl.int64)
    if V_IN_K or BLOCK_DPE > 0 or not K_KEY_MAJOR:  # (MLA's tiles as measured: docs/decode-occupancy.md)
        k_raw = load_tile(k_head_ptr + offs_d[:, None] + slot[None, :] * kb_stride_s, d_mask, n_mask, MASK_D, MASK_N,
                          LOAD_IGNORES_OTHER)  # fmt: skip
        k_t = kv_values(k_raw, k_unit, q, KV_FORMAT, FP8_NAN_ARITH, USE_DOT, DOT_FP32)
    else:
        k_raw = load_tile(k_head_ptr + slot[:, None] * kb_stride_s + offs_d[None, :], n_mask, d_mask, MASK_N, MASK_D,
                          LOAD_IGNORES_OTHER)  # fmt: skip
        k_t = tl.trans(kv_values(k_raw, k_unit, q, KV_FORMAT, FP8_NAN_ARITH, USE_DOT, DOT_FP32))
    s = scores(q, k_t, USE_DOT, DOT_FP32)
    if BLOCK_DPE > 0:
        kpe_t = load_tile(k_head_ptr + offs_dpe[:, None] + slot[None, :] * kb_stride_s, dpe_mask, n_mask, MASK_DPE,
                          MASK_N, LOAD_IGNORES_OTHER)  # fmt: skip
        kpe_t = kv_values(kpe_t, k_unit, q, KV_FORMAT, FP8_NAN_ARITH, USE_DOT, DOT_FP32)
        s += scores(q_pe, kpe_t, USE_DOT, DOT_FP32)
    s = scale_and_cap(s, pool_scores_scale(sm_scale, k_scale, KV_FORMAT), LOGIT_CAP)
    if MASK_N:
        s = tl.where(n_mask[None, :], s, float("-inf"))
    if V_IN_K:
        v = kv_values(tl.trans(k_raw), v_unit, q, KV_FORMAT, FP8_NAN_ARITH, USE_DOT, DOT_FP32)
    else:
        v = load_tile(v_head_ptr + slot[:, None] * vb_stride_s + offs_dv[None, :], n_mask, dv_mask, MASK_N, MASK_DV,
                      LOAD_IGNORES_OTHER)  # fmt: skip
        v = kv_values(v, v_unit, q, KV_FORMAT, FP8_NAN_ARITH, USE_DOT, DOT_FP32)
    return online_softmax_update(s, v, m_i, l_i, acc, USE_DOT, DOT_FP32)


@triton.jit(do_not_specialize=["split_tokens", "max_splits"])
def decode_partial_kernel(
    q_ptr,
    k_buffer_ptr,
    v_buffer_ptr,
    kv_indptr_ptr,
    kv_indices_ptr,
    part_out_ptr,  # [>= batch, num_q_heads, max_splits, V_DIM] fp32
    part_lse_ptr,  # [>= batch, num_q_heads, max_splits] fp32
    sm_scale,
    split_tokens,
    max_splits,
    num_q_heads,
    q_stride_b,
    q_stride_h,
    kb_stride_s,
    kb_stride_h,
    vb_stride_s,
    vb_stride_h,
    k_scale,
    v_scale,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    V_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr,
    HEAD_BLOCKS: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DPE: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_N: tl.constexpr,
    LOGIT_CAP: tl.constexpr,
    WINDOW: tl.constexpr,
    USE_DOT: tl.constexpr,
    DOT_FP32: tl.constexpr,
    POOL_I64: tl.constexpr,
    LOAD_IGNORES_OTHER: tl.constexpr,
    KV_FORMAT: tl.constexpr,
    FP8_RUNTIME_UNIT: tl.constexpr, FP8_NAN_ARITH: tl.constexpr,
    V_IN_K: tl.constexpr,
    K_KEY_MAJOR: tl.constexpr,
    PREFETCH_SLOTS: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    b = tl.program_id(0)
    kv_head = tl.program_id(1) // HEAD_BLOCKS  # program 1 axis: (kv head, block of its group's heads)
    h0 = tl.program_id(1) % HEAD_BLOCKS * BLOCK_H
    split = tl.program_id(2)
    kv_start = tl.load(kv_indptr_ptr + b)
    kv_len = tl.load(kv_indptr_ptr + b + 1) - kv_start
    lo, hi, _ = split_range(kv_len, split, split_tokens, max_splits, WINDOW, BLOCK_N)
    if lo >= hi:  # a split this request does not use
        return

    offs_h = h0 + tl.arange(0, BLOCK_H)
    heads = kv_head * GROUP + offs_h
    head_mask = offs_h < GROUP
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    d_mask = offs_d < HEAD_DIM
    dv_mask = offs_dv < V_DIM
    q_row_ptr = q_ptr + b * q_stride_b + heads[:, None] * q_stride_h
    q = masked_load(q_row_ptr + offs_d[None, :], head_mask[:, None] & d_mask[None, :], 0.0, LOAD_IGNORES_OTHER)
    if BLOCK_DPE > 0:  # the tail of a split head dim (MLA's rope part)
        offs_dpe = BLOCK_D + tl.arange(0, BLOCK_DPE)
        dpe_mask = offs_dpe < HEAD_DIM
        q_pe = masked_load(q_row_ptr + offs_dpe[None, :], head_mask[:, None] & dpe_mask[None, :], 0.0,
                           LOAD_IGNORES_OTHER)  # fmt: skip
    else:
        offs_dpe, dpe_mask, q_pe = offs_d, d_mask, q

    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_DV], dtype=tl.float32)
    kv_row_ptr = kv_indices_ptr + kv_start
    k_head_ptr = k_buffer_ptr + kv_head * kb_stride_h
    v_head_ptr = v_buffer_ptr + kv_head * vb_stride_h
    full_hi = lo + (hi - lo) // BLOCK_N * BLOCK_N
    # Whole tiles, no key masks. With PREFETCH_SLOTS each tile's slot ids are
    # loaded one tile ahead (the next tile's, clamped to the last whole tile:
    # in bounds, no mask), so the K/V loads Triton pipelines never wait on an
    # index load issued in the same iteration (the ids then live across an
    # iteration: registers, see autotune_configs/default.yaml).
    slot = tile_slots(kv_row_ptr, lo, full_hi, BLOCK_N, True, LOAD_IGNORES_OTHER)
    for n0 in range(lo, full_hi, BLOCK_N):
        if PREFETCH_SLOTS:
            slot_next = tile_slots(kv_row_ptr, tl.minimum(n0 + BLOCK_N, full_hi - BLOCK_N), full_hi, BLOCK_N, False,
                                   LOAD_IGNORES_OTHER)  # fmt: skip
        else:
            slot = tile_slots(kv_row_ptr, n0, full_hi, BLOCK_N, False, LOAD_IGNORES_OTHER)
            slot_next = slot
        m_i, l_i, acc = decode_tile(q, q_pe, m_i, l_i, acc, slot, k_head_ptr, v_head_ptr, n0, hi, sm_scale,
                                    kb_stride_s, vb_stride_s, offs_d, offs_dpe, offs_dv, d_mask, dpe_mask, dv_mask,
                                    BLOCK_N, False, BLOCK_D > HEAD_DIM, BLOCK_D + BLOCK_DPE > HEAD_DIM,
                                    BLOCK_DV != V_DIM, BLOCK_DPE, LOGIT_CAP, USE_DOT, DOT_FP32, POOL_I64,
                                    LOAD_IGNORES_OTHER, k_scale, v_scale, KV_FORMAT, FP8_RUNTIME_UNIT, FP8_NAN_ARITH, V_IN_K,
                                    K_KEY_MAJOR)  # fmt: skip
        slot = slot_next
    # The ragged last tile, as a loop of at most one trip: Triton pipelines a
    # loop's loads into shared memory, where a straight-line tile after the
    # loop would stage them in registers (126 registers instead of 64 on sm_90).
    for n0 in range(full_hi, hi, BLOCK_N):
        slot = tile_slots(kv_row_ptr, n0, hi, BLOCK_N, True, LOAD_IGNORES_OTHER)
        m_i, l_i, acc = decode_tile(q, q_pe, m_i, l_i, acc, slot, k_head_ptr, v_head_ptr, n0, hi, sm_scale,
                                    kb_stride_s, vb_stride_s, offs_d, offs_dpe, offs_dv, d_mask, dpe_mask, dv_mask,
                                    BLOCK_N, True, BLOCK_D > HEAD_DIM, BLOCK_D + BLOCK_DPE > HEAD_DIM,
                                    BLOCK_DV != V_DIM, BLOCK_DPE, LOGIT_CAP, USE_DOT, DOT_FP32, POOL_I64,
                                    LOAD_IGNORES_OTHER, k_scale, v_scale, KV_FORMAT, FP8_RUNTIME_UNIT, FP8_NAN_ARITH, V_IN_K,
                                    K_KEY_MAJOR)  # fmt: skip

    if KV_FORMAT > 0:  # the fp8 tiles were decoded unscaled (`decode_tile`)
        acc = acc * v_scale
    lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log(tl.where(l_i == 0.0, 1.0, l_i)))
    row = (b.to(tl.int64) * num_q_heads + heads) * max_splits + split  # [BLOCK_H]
    tl.store(part_out_ptr + row[:, None] * V_DIM + offs_dv[None, :], finish_rows(acc, l_i),
             mask=head_mask[:, None] & dv_mask[None, :])  # fmt: skip
    tl.store(part_lse_ptr + row, lse, mask=head_mask)
    if USE_PDL:  # the merge, launched dependent, may start once every program got here
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit(do_not_specialize=["split_tokens", "max_splits"])
def decode_merge_kernel(
    part_out_ptr,
    part_lse_ptr,
    o_ptr,
    kv_indptr_ptr,
    sinks_ptr,  # [num_q_heads] (read only with HAS_SINKS)
    split_tokens,
    max_splits,
    num_q_heads,
    o_stride_b,
    o_stride_h,
    GROUP: tl.constexpr,
    V_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr,
    HEAD_BLOCKS: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_N: tl.constexpr,
    WINDOW: tl.constexpr,
    LOAD_IGNORES_OTHER: tl.constexpr,
    HAS_SINKS: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    if USE_PDL:  # launched dependent on stage 1 (sm_90): its partials are complete past this
        tl.extra.cuda.gdc_wait()
    b = tl.program_id(0)
    kv_head = tl.program_id(1) // HEAD_BLOCKS
    h0 = tl.program_id(1) % HEAD_BLOCKS * BLOCK_H
    kv_len = tl.load(kv_indptr_ptr + b + 1) - tl.load(kv_indptr_ptr + b)
    _, _, used = split_range(kv_len, 0, split_tokens, max_splits, WINDOW, BLOCK_N)

    offs_h = h0 + tl.arange(0, BLOCK_H)
    heads = kv_head * GROUP + offs_h
    head_mask = offs_h < GROUP
    offs_dv = tl.arange(0, BLOCK_DV)
    part_mask = head_mask[:, None] & (offs_dv < V_DIM)[None, :]
    row = (b.to(tl.int64) * num_q_heads + heads) * max_splits  # [BLOCK_H], split 0
    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    den = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_DV], dtype=tl.float32)
    for split in range(0, used):  # the same online rescale as stage 1, one split at a time
        lse = masked_load(part_lse_ptr + row + split, head_mask, float("-inf"), LOAD_IGNORES_OTHER)
        part = masked_load(part_out_ptr + (row + split)[:, None] * V_DIM + offs_dv[None, :], part_mask, 0.0,
                           LOAD_IGNORES_OTHER)  # fmt: skip
        m_new = tl.maximum(m_i, lse)
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
        scale = tl.exp(m_i - m_ref)
        w = tl.exp(lse - m_ref)
        acc = acc * scale[:, None] + w[:, None] * part
        den = den * scale + w
        m_i = m_new
    if HAS_SINKS:  # once per head, after every split
        sink = masked_load(sinks_ptr + heads, head_mask, 0.0, LOAD_IGNORES_OTHER).to(tl.float32)
        den, acc = fold_sink(m_i, den, acc, sink)
    out = finish_rows(acc, den)
    tl.store(o_ptr + b * o_stride_b + heads[:, None] * o_stride_h + offs_dv[None, :],
             out.to(o_ptr.dtype.element_ty), mask=part_mask)  # fmt: skip
