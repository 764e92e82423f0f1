"""The kernels of `extend_attention` (its launcher: `extend_attention.py`).

Request b has a cached prefix of P tokens in the pool (slots
kv_indices[kv_indptr[b]:kv_indptr[b+1]]) and E new tokens in contiguous rows
qo_indptr[b]:qo_indptr[b+1] of q_extend / k_extend / v_extend. New token m
sits at position P + m and attends to every prefix key and causally to new
keys n <= m (and, with a sliding window, only to keys at most WINDOW
positions back).

Grid (batch, q_heads, cdiv(max_len_extend, BLOCK_M)): a program owns BLOCK_M
new tokens of one head and runs one online softmax over two key streams, the
prefix gathered from the pool by slot id, then the new tokens up to its own
last row (tiles past the causal diagonal are never loaded). Each stream is
cut into whole tiles every row of the block sees (loaded and scored without
masks: most of a long context) and masked tiles (a ragged end, the causal
diagonal, a sliding window's edge), each kind its own loop.

A key a row cannot see never reaches it, whatever its K or V holds; a NaN
a row does see makes its output NaN. With tl.dot and heads up to 256
wide the loops only hide scores (SGLang's cost per tile) and the rare block
whose rows come out NaN runs again with the hidden values screened
(`extend_tile`, `extend_kernel`); elsewhere the one pass screens.

Unified mode (``unified_kv=True``, deterministic inference): kv_indices list
the whole sequence, prefix and new tokens (store_kv wrote them first), and a
program runs ONE paged stream over positions 0 .. prefix + m_last on the
fixed grid of BLOCK_N tiles from position 0. A row's reduction order then
depends only on its own position, never on where the cached prefix ends or
how the prompt was chunked: a tile past the row's position or outside its
window adds exactly 0 to its softmax (m unchanged, e^0 = 1 rescale, p = 0),
and a tile is the same keys in the same lanes whichever part they came from.
Query blocks sit on the same kind of grid (position p in lane p % BLOCK_M),
so a row also meets its dot products in the same lane every time.
The two-stream split costs nothing extra per key; unified mode reads the
new tokens' slot ids too (4 bytes a key).

Target verify (speculative decoding, CUSTOM_MASK): the new tokens are a
draft tree and a flat mask (SGLang's layout, `custom_mask`) says which of
them each one sees; the new tokens' stream then runs every tile masked,
reading one mask byte per (row, key), on a row tile of its own
(VERIFY_BLOCK_M: a few draft tokens over a long prefix; docs/speculative.md).

Attention sinks (HAS_SINKS, gpt-oss: one logit per query head) join each
row's softmax once, after both streams (`tiles.fold_sink`): the loops are
the same with or without them.

MLA (V the latent part of K's rows, in the pool and in the new tokens each:
`extend_inputs.latent_flags`): the stream takes V from the K tile it loaded
(V_IN_K / NEW_V_IN_K), the latent read once per tile (docs/decode-occupancy.md).
"""

import triton
import triton.language as tl

from ..loads import masked_load
from .fp8 import fp8_unit, kv_values, pool_scores_scale
from .tiles import (
    finish_rows,
    fold_sink,
    load_tile,
    online_softmax_update,
    scale_and_cap,
    scores,
    stream_rows,
    value_poison,
    visibility,
)


@triton.jit
def extend_tile(q, q_pe, m_i, l_i, acc, n0, hi, q_pos, rows, k_head_ptr, v_head_ptr, k_stride,
                v_stride, sm_scale, offs_d, offs_dpe, offs_dv, d_mask, dpe_mask, dv_mask, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
                CAUSAL: tl.constexpr, WINDOW: tl.constexpr, PAGED: tl.constexpr, MASK_D: tl.constexpr, MASK_DPE: tl.constexpr,
                BLOCK_DPE: tl.constexpr, MASK_DV: tl.constexpr, LOGIT_CAP: tl.constexpr, USE_DOT: tl.constexpr, DOT_FP32: tl.constexpr,
                INDEX_I64: tl.constexpr, LOAD_IGNORES_OTHER: tl.constexpr, SCREEN_HIDDEN: tl.constexpr,
                k_scale, v_scale, KV_FORMAT: tl.constexpr, FP8_RUNTIME_UNIT: tl.constexpr, FP8_NAN_ARITH: tl.constexpr, mask_ptr, mask_stride, CUSTOM_MASK: tl.constexpr,
                V_IN_K: tl.constexpr):  # fmt: skip
    """Fold keys n0 .. n0 + BLOCK_N of one stream, K/V rows `rows` (their
    pool slots or rows of the new tokens: `tiles.stream_rows`), into the
    block's softmax.

    A full tile (MASKED false) is seen whole by every query row: no masks.
    A masked tile hides keys by `visibility`. K/V of an fp8 pool
    (KV_FORMAT > 0) are decoded after the load, unscaled (`fp8.kv_values`):
    k_scale multiplies the scores, v_scale the weights. With SCREEN_HIDDEN (the rerun
    of a block that came out NaN, `extend_kernel`), where that leaves loaded
    keys some rows cannot see (CAUSAL, a WINDOW, a CUSTOM_MASK), a key whose value row
    holds an inf or NaN is loaded as zeros (its weight for a row that
    cannot see it is exactly 0, but 0 * inf is NaN) and scores NaN for the
    rows that do see it, so their output is NaN: a visible NaN stays
    visible. With CUSTOM_MASK (the new tokens' stream of a target verify) a
    row m also needs mask_ptr[m * mask_stride + n] nonzero to see key n: one
    byte per (real row, key) of the tile. V_IN_K (MLA: the stream's V is
    the first BLOCK_D = V_DIM values of its K rows) loads that part of K as
    V's [N, D] tile and scores through its transpose, as SGLang's MLA decode
    does: the latent is read once per tile (a screened tile also reads it
    for the check, in a plain layout)."""
    offs_n = n0 + tl.arange(0, BLOCK_N)
    n_mask = offs_n < hi
    k_unit, v_unit = fp8_unit(k_scale, KV_FORMAT, FP8_RUNTIME_UNIT), fp8_unit(v_scale, KV_FORMAT, FP8_RUNTIME_UNIT)
    v_ptrs = v_head_ptr + rows[:, None] * v_stride + offs_dv[None, :]
    if V_IN_K:  # K's rows as V's [N, D] tile, scored through its transpose (a view of the same tile)
        k_mask = n_mask
        if MASKED and SCREEN_HIDDEN and (CAUSAL or WINDOW > 0 or CUSTOM_MASK):
            # A key whose latent holds an inf or NaN loads as zeros, K and V at
            # once (its score turns NaN below for the rows that see it). The
            # check reads the latent in a plain layout (cached): zeroing the
            # loaded tile instead spills (sm_90, MLA 32 x 32: 224 bytes; none so).
            poison = value_poison(v_ptrs, n_mask, dv_mask, MASK_DV, LOAD_IGNORES_OTHER, KV_FORMAT)
            k_mask = n_mask & (poison == 0.0)
        k_raw = load_tile(k_head_ptr + rows[:, None] * k_stride + offs_d[None, :], k_mask, d_mask, MASKED, MASK_D,
                          LOAD_IGNORES_OTHER)  # fmt: skip
        k_t = tl.trans(kv_values(k_raw, k_unit, q, KV_FORMAT, FP8_NAN_ARITH, USE_DOT, DOT_FP32))
    else:
        k_raw = load_tile(k_head_ptr + offs_d[:, None] + rows[None, :] * k_stride, d_mask, n_mask, MASK_D, MASKED,
                          LOAD_IGNORES_OTHER)  # fmt: skip
        k_t = kv_values(k_raw, k_unit, q, KV_FORMAT, FP8_NAN_ARITH, USE_DOT, DOT_FP32)
    s = scores(q, k_t, USE_DOT, DOT_FP32)
    if BLOCK_DPE > 0:  # the tail of a split head dim (MLA's rope part)
        kpe_t = load_tile(k_head_ptr + offs_dpe[:, None] + rows[None, :] * k_stride, dpe_mask, n_mask, MASK_DPE,
                          MASKED, LOAD_IGNORES_OTHER)  # fmt: skip
        kpe_t = kv_values(kpe_t, k_unit, q, KV_FORMAT, FP8_NAN_ARITH, USE_DOT, DOT_FP32)
        s += scores(q_pe, kpe_t, USE_DOT, DOT_FP32)
    s = scale_and_cap(s, pool_scores_scale(sm_scale, k_scale, KV_FORMAT), LOGIT_CAP)
    if MASKED:
        visible = visibility(q_pos, offs_n, n_mask, CAUSAL, WINDOW)
        if CUSTOM_MASK:  # the stream's hi is the block's last real row + 1: rows at or past it are padding
            allowed = masked_load(mask_ptr + (q_pos * mask_stride)[:, None] + offs_n[None, :],
                                  (q_pos < hi)[:, None] & n_mask[None, :], 0, LOAD_IGNORES_OTHER)  # fmt: skip
            visible = visible & (allowed != 0)
        if SCREEN_HIDDEN and (CAUSAL or WINDOW > 0 or CUSTOM_MASK):
            if V_IN_K:  # poisoned keys were loaded as zeros
                v = kv_values(k_raw, v_unit, q, KV_FORMAT, FP8_NAN_ARITH, USE_DOT, DOT_FP32)
            else:
                poison = value_poison(v_ptrs, n_mask, dv_mask, MASK_DV, LOAD_IGNORES_OTHER, KV_FORMAT)
                v = load_tile(v_ptrs, n_mask & (poison == 0.0), dv_mask, True, MASK_DV, LOAD_IGNORES_OTHER)
                v = kv_values(v, v_unit, q, KV_FORMAT, FP8_NAN_ARITH, USE_DOT, DOT_FP32)
            s = tl.where(visible, s + poison[None, :], float("-inf"))
        else:
            s = tl.where(visible, s, float("-inf"))
            if V_IN_K:
                v = kv_values(k_raw, v_unit, q, KV_FORMAT, FP8_NAN_ARITH, USE_DOT, DOT_FP32)
            else:
                v = load_tile(v_ptrs, n_mask, dv_mask, True, MASK_DV, LOAD_IGNORES_OTHER)
                v = kv_values(v, v_unit, q, KV_FORMAT, FP8_NAN_ARITH, USE_DOT, DOT_FP32)
    elif V_IN_K:
        v = kv_values(k_raw, v_unit, q, KV_FORMAT, FP8_NAN_ARITH, USE_DOT, DOT_FP32)
    else:
        v = load_tile(v_ptrs, n_mask, dv_mask, False, MASK_DV, LOAD_IGNORES_OTHER)
        v = kv_values(v, v_unit, q, KV_FORMAT, FP8_NAN_ARITH, USE_DOT, DOT_FP32)
    m_i, l_i, acc = online_softmax_update(s, v, m_i, l_i, acc, USE_DOT, DOT_FP32, v_scale, KV_FORMAT > 0)
    return m_i, l_i, acc


@triton.jit
def extend_stream(q, q_pe, m_i, l_i, acc, lo, full_lo, full_hi, hi, q_pos, index_ptr, row_base, k_head_ptr,
                  v_head_ptr, k_stride, v_stride, sm_scale, offs_d, offs_dpe, offs_dv, d_mask, dpe_mask, dv_mask, BLOCK_N: tl.constexpr,
                  CAUSAL: tl.constexpr, WINDOW: tl.constexpr, PAGED: tl.constexpr, MASK_D: tl.constexpr, MASK_DPE: tl.constexpr,
                  BLOCK_DPE: tl.constexpr, MASK_DV: tl.constexpr, LOGIT_CAP: tl.constexpr, USE_DOT: tl.constexpr, DOT_FP32: tl.constexpr,
                  INDEX_I64: tl.constexpr, LOAD_IGNORES_OTHER: tl.constexpr, SCREEN_HIDDEN: tl.constexpr,
                  k_scale, v_scale, KV_FORMAT: tl.constexpr, FP8_RUNTIME_UNIT: tl.constexpr, FP8_NAN_ARITH: tl.constexpr, mask_ptr, mask_stride, CUSTOM_MASK: tl.constexpr,
                  V_IN_K: tl.constexpr):  # fmt: skip
    """Keys [lo, hi) of one stream in tiles of BLOCK_N from lo: masked tiles
    up to the first tile inside [full_lo, full_hi) (a window's edge), full
    tiles while they stay inside it, masked tiles after (ragged end, causal
    diagonal). Each part is a loop, even of one trip: Triton stages a loop's
    loads through shared memory, a straight-line tile's through registers.
    (A CUSTOM_MASK stream passes full_hi = lo: every tile masked.)"""
    head_end = lo + tl.cdiv(tl.maximum(full_lo - lo, 0), BLOCK_N) * BLOCK_N
    tail_start = head_end + tl.maximum(full_hi - head_end, 0) // BLOCK_N * BLOCK_N
    if WINDOW > 0:
        for n0 in range(lo, tl.minimum(head_end, hi), BLOCK_N):
            offs_n = n0 + tl.arange(0, BLOCK_N)
            rows = stream_rows(index_ptr, row_base, offs_n, offs_n < hi, PAGED, True, INDEX_I64, LOAD_IGNORES_OTHER)
            m_i, l_i, acc = extend_tile(
                q, q_pe, m_i, l_i, acc, n0, hi, q_pos, rows, k_head_ptr, v_head_ptr, k_stride,
                v_stride, sm_scale, offs_d, offs_dpe, offs_dv, d_mask, dpe_mask, dv_mask, BLOCK_N, True, CAUSAL, WINDOW, PAGED, MASK_D, MASK_DPE, BLOCK_DPE,
                MASK_DV, LOGIT_CAP, USE_DOT, DOT_FP32, INDEX_I64, LOAD_IGNORES_OTHER, SCREEN_HIDDEN, k_scale, v_scale,
                KV_FORMAT, FP8_RUNTIME_UNIT, FP8_NAN_ARITH, mask_ptr, mask_stride, CUSTOM_MASK, V_IN_K)  # fmt: skip
    # Whole tiles. (Loading a paged stream's slot ids one tile ahead spilled 8
    # bytes on gfx942 in the MLA fp8 extend, 293 VGPRs: each tile loads its own.)
    for n0 in range(head_end, tail_start, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        rows = stream_rows(index_ptr, row_base, offs_n, offs_n < tail_start, PAGED, False, INDEX_I64,
                           LOAD_IGNORES_OTHER)  # fmt: skip
        m_i, l_i, acc = extend_tile(
            q, q_pe, m_i, l_i, acc, n0, hi, q_pos, rows, k_head_ptr, v_head_ptr, k_stride,
            v_stride, sm_scale, offs_d, offs_dpe, offs_dv, d_mask, dpe_mask, dv_mask, BLOCK_N, False, CAUSAL, WINDOW, PAGED, MASK_D, MASK_DPE, BLOCK_DPE,
            MASK_DV, LOGIT_CAP, USE_DOT, DOT_FP32, INDEX_I64, LOAD_IGNORES_OTHER, SCREEN_HIDDEN, k_scale, v_scale,
            KV_FORMAT, FP8_RUNTIME_UNIT, FP8_NAN_ARITH, mask_ptr, mask_stride, CUSTOM_MASK, V_IN_K)  # fmt: skip
    for n0 in range(tail_start, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        rows = stream_rows(index_ptr, row_base, offs_n, offs_n < hi, PAGED, True, INDEX_I64, LOAD_IGNORES_OTHER)
        m_i, l_i, acc = extend_tile(
            q, q_pe, m_i, l_i, acc, n0, hi, q_pos, rows, k_head_ptr, v_head_ptr, k_stride,
            v_stride, sm_scale, offs_d, offs_dpe, offs_dv, d_mask, dpe_mask, dv_mask, BLOCK_N, True, CAUSAL, WINDOW, PAGED, MASK_D, MASK_DPE, BLOCK_DPE,
            MASK_DV, LOGIT_CAP, USE_DOT, DOT_FP32, INDEX_I64, LOAD_IGNORES_OTHER, SCREEN_HIDDEN, k_scale, v_scale,
            KV_FORMAT, FP8_RUNTIME_UNIT, FP8_NAN_ARITH, mask_ptr, mask_stride, CUSTOM_MASK, V_IN_K)  # fmt: skip
    return m_i, l_i, acc


@triton.jit
def attend_block(q, q_pe, offs_m, m0, m_last, prefix_len, q_start, kv_start, kv_head, k_extend_ptr, v_extend_ptr,
                 k_buffer_ptr, v_buffer_ptr, kv_indices_ptr, ke_stride_t, ke_stride_h, ve_stride_t, ve_stride_h,
                 kb_stride_s, kb_stride_h, vb_stride_s, vb_stride_h, sm_scale, offs_d, offs_dpe, offs_dv, d_mask,
                 dpe_mask, dv_mask, HEAD_DIM: tl.constexpr, V_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_D: tl.constexpr, BLOCK_DPE: tl.constexpr, BLOCK_DV: tl.constexpr, LOGIT_CAP: tl.constexpr,
                 WINDOW: tl.constexpr, USE_DOT: tl.constexpr, DOT_FP32: tl.constexpr, INDEX_I64: tl.constexpr,
                 LOAD_IGNORES_OTHER: tl.constexpr, UNIFIED: tl.constexpr, SCREEN_HIDDEN: tl.constexpr,
                 k_scale, v_scale, KV_FORMAT: tl.constexpr, FP8_RUNTIME_UNIT: tl.constexpr, FP8_NAN_ARITH: tl.constexpr, mask_ptr, mask_stride, CUSTOM_MASK: tl.constexpr,
                 V_IN_K: tl.constexpr, NEW_V_IN_K: tl.constexpr):  # fmt: skip
    """One online softmax of the block's rows over every key they see: (m, l, acc).
    V_IN_K / NEW_V_IN_K: the pool's / the new tokens' V is their K rows' latent (`extend_tile`)."""
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)

    if UNIFIED:
        # One paged stream over the whole sequence, causal, on tiles from
        # position 0 (a window's first tile rounded down onto that grid).
        lo, full_lo = 0, 0
        if WINDOW > 0:
            lo = tl.maximum(prefix_len + m0 - WINDOW, 0) // BLOCK_N * BLOCK_N
            full_lo = prefix_len + m_last - WINDOW
        m_i, l_i, acc = extend_stream(
            q, q_pe, m_i, l_i, acc, lo, full_lo, prefix_len + m0 + 1, prefix_len + m_last + 1, prefix_len + offs_m,
            kv_indices_ptr + kv_start, 0, k_buffer_ptr + kv_head * kb_stride_h, v_buffer_ptr + kv_head * vb_stride_h,
            kb_stride_s, vb_stride_s, sm_scale, offs_d, offs_dpe, offs_dv, d_mask, dpe_mask, dv_mask, BLOCK_N, True,
            WINDOW, True, BLOCK_D > HEAD_DIM, BLOCK_D + BLOCK_DPE > HEAD_DIM, BLOCK_DPE, BLOCK_DV != V_DIM, LOGIT_CAP,
            USE_DOT, DOT_FP32, INDEX_I64, LOAD_IGNORES_OTHER, SCREEN_HIDDEN, k_scale, v_scale, KV_FORMAT,
            FP8_RUNTIME_UNIT, FP8_NAN_ARITH, mask_ptr, mask_stride, False, V_IN_K)  # fmt: skip
    else:
        # Stream 1: the cached prefix, keys at positions 0 .. prefix_len - 1; query
        # row m sits at position prefix_len + m.
        lo, full_lo = 0, 0
        if WINDOW > 0:
            lo = tl.maximum(prefix_len + m0 - WINDOW, 0)
            full_lo = prefix_len + m_last - WINDOW
        m_i, l_i, acc = extend_stream(
            q, q_pe, m_i, l_i, acc, lo, full_lo, prefix_len, prefix_len, prefix_len + offs_m,
            kv_indices_ptr + kv_start, 0, k_buffer_ptr + kv_head * kb_stride_h, v_buffer_ptr + kv_head * vb_stride_h,
            kb_stride_s, vb_stride_s, sm_scale, offs_d, offs_dpe, offs_dv, d_mask, dpe_mask, dv_mask, BLOCK_N, False, WINDOW, True,
            BLOCK_D > HEAD_DIM, BLOCK_D + BLOCK_DPE > HEAD_DIM, BLOCK_DPE, BLOCK_DV != V_DIM, LOGIT_CAP, USE_DOT, DOT_FP32, INDEX_I64, LOAD_IGNORES_OTHER, SCREEN_HIDDEN,
            k_scale, v_scale, KV_FORMAT, FP8_RUNTIME_UNIT, FP8_NAN_ARITH, mask_ptr, mask_stride, False, V_IN_K)  # fmt: skip

        # Stream 2: the new tokens themselves, causal: key n (at prefix_len + n) is
        # seen by rows m >= n; keys up to m0 by the whole block; none past m_last.
        # A custom mask (target verify) hides more: every tile is masked.
        lo, full_lo, full_hi = 0, 0, m0 + 1
        if WINDOW > 0:
            lo = tl.maximum(m0 - WINDOW, 0)
            full_lo = m_last - WINDOW
        if CUSTOM_MASK:
            full_hi = 0
        m_i, l_i, acc = extend_stream(
            q, q_pe, m_i, l_i, acc, lo, full_lo, full_hi, m_last + 1, offs_m, kv_indices_ptr, q_start,
            k_extend_ptr + kv_head * ke_stride_h, v_extend_ptr + kv_head * ve_stride_h, ke_stride_t, ve_stride_t,
            sm_scale, offs_d, offs_dpe, offs_dv, d_mask, dpe_mask, dv_mask, BLOCK_N, True, WINDOW, False, BLOCK_D > HEAD_DIM, BLOCK_D + BLOCK_DPE > HEAD_DIM, BLOCK_DPE,
            BLOCK_DV != V_DIM, LOGIT_CAP, USE_DOT, DOT_FP32, INDEX_I64, LOAD_IGNORES_OTHER, SCREEN_HIDDEN, 1.0, 1.0,
            0, False, False, mask_ptr, mask_stride, CUSTOM_MASK, NEW_V_IN_K)  # fmt: skip  (the new tokens' K/V arrive in the compute dtype: KV_FORMAT 0)

    return m_i, l_i, acc


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
    mask_ptr,
    mask_indptr_ptr,
    sinks_ptr,  # [q_heads] (read only with HAS_SINKS)
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
    k_scale,
    v_scale,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    V_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DPE: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    LOGIT_CAP: tl.constexpr,
    WINDOW: tl.constexpr,
    USE_DOT: tl.constexpr,
    DOT_FP32: tl.constexpr,
    INDEX_I64: tl.constexpr,
    LOAD_IGNORES_OTHER: tl.constexpr,
    UNIFIED: tl.constexpr,
    SCREEN_INLINE: tl.constexpr,
    KV_FORMAT: tl.constexpr,
    FP8_RUNTIME_UNIT: tl.constexpr, FP8_NAN_ARITH: tl.constexpr,
    CUSTOM_MASK: tl.constexpr,
    V_IN_K: tl.constexpr,
    NEW_V_IN_K: tl.constexpr,
    HAS_SINKS: tl.constexpr,
):
    b = tl.program_id(0)
    head = tl.program_id(1)
    m0 = tl.program_id(2) * BLOCK_M

    q_start = tl.load(qo_indptr_ptr + b)
    extend_len = tl.load(qo_indptr_ptr + b + 1) - q_start
    kv_start = tl.load(kv_indptr_ptr + b)
    prefix_len = tl.load(kv_indptr_ptr + b + 1) - kv_start  # unified: the whole sequence, made prefix below
    if UNIFIED:
        # Query blocks on the global grid too: position p is always lane
        # p % BLOCK_M of its block (a dot's rounding may depend on the lane).
        prefix_len -= extend_len
        m0 -= prefix_len % BLOCK_M
    if m0 >= extend_len:
        return
    kv_head = head // GROUP
    m_last = tl.minimum(m0 + BLOCK_M, extend_len) - 1  # the block's last real query row
    if CUSTOM_MASK:
        # Request b's E x (P + E) block; its prefix columns are not read.
        mask_stride = prefix_len + extend_len
        mask_base = mask_ptr + tl.load(mask_indptr_ptr + b).to(tl.int64) + prefix_len
    else:
        mask_stride = 0
        mask_base = mask_ptr

    offs_m = m0 + tl.arange(0, BLOCK_M)
    m_mask = (offs_m >= 0) & (offs_m < extend_len)  # below 0: unified mode's lanes of cached positions
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    d_mask = offs_d < HEAD_DIM
    dv_mask = offs_dv < V_DIM
    rows = (q_start + offs_m).to(tl.int64)
    q_row_ptr = q_ptr + rows[:, None] * q_stride_t + head * q_stride_h
    q = masked_load(q_row_ptr + offs_d[None, :], m_mask[:, None] & d_mask[None, :], 0.0, LOAD_IGNORES_OTHER)
    if BLOCK_DPE > 0:  # the tail of a split head dim (MLA's rope part)
        offs_dpe = BLOCK_D + tl.arange(0, BLOCK_DPE)
        dpe_mask = offs_dpe < HEAD_DIM
        q_pe = masked_load(q_row_ptr + offs_dpe[None, :], m_mask[:, None] & dpe_mask[None, :], 0.0,
                           LOAD_IGNORES_OTHER)  # fmt: skip
    else:
        offs_dpe, dpe_mask, q_pe = offs_d, d_mask, q

    # A key some row cannot see (the causal future, outside a window) gets
    # weight 0 from that row, and 0 * inf = NaN: a value row holding an inf
    # or NaN there would leak into it. With tl.dot that is left to a rerun:
    # the loops do not screen, and a block whose real rows came out NaN (rare:
    # a broken model or input) runs again screening the hidden values
    # (`extend_tile`): one reduction per block when nothing is wrong instead
    # of a second read of every masked value tile (sm_90, per diagonal tile:
    # 659 instructions instead of 813 with Triton 3.8, 765 instead of 869
    # with 3.9; SGLang's: 763 with 3.8). SCREEN_INLINE (the sum formulation,
    # MLA's 576-wide heads) screens in the one pass instead: there a second
    # copy of the loops spills (sm_90: Kunlun's 16 x 8 sum tiles 32 B, MLA
    # 728 B).
    m_i, l_i, acc = attend_block(
        q, q_pe, offs_m, m0, m_last, prefix_len, q_start, kv_start, kv_head, k_extend_ptr, v_extend_ptr, k_buffer_ptr,
        v_buffer_ptr, kv_indices_ptr, ke_stride_t, ke_stride_h, ve_stride_t, ve_stride_h, kb_stride_s, kb_stride_h,
        vb_stride_s, vb_stride_h, sm_scale, offs_d, offs_dpe, offs_dv, d_mask, dpe_mask, dv_mask, HEAD_DIM, V_DIM,
        BLOCK_M, BLOCK_N, BLOCK_D, BLOCK_DPE, BLOCK_DV, LOGIT_CAP, WINDOW, USE_DOT, DOT_FP32, INDEX_I64, LOAD_IGNORES_OTHER,
        UNIFIED, SCREEN_INLINE, k_scale, v_scale, KV_FORMAT, FP8_RUNTIME_UNIT, FP8_NAN_ARITH, mask_base, mask_stride, CUSTOM_MASK, V_IN_K,
        NEW_V_IN_K)  # fmt: skip
    if not SCREEN_INLINE:
        row_sums = tl.sum(acc, 1)
        if tl.max(tl.where(m_mask & (row_sums != row_sums), 1, 0), 0) > 0:
            m_i, l_i, acc = attend_block(
                q, q_pe, offs_m, m0, m_last, prefix_len, q_start, kv_start, kv_head, k_extend_ptr, v_extend_ptr,
                k_buffer_ptr, v_buffer_ptr, kv_indices_ptr, ke_stride_t, ke_stride_h, ve_stride_t, ve_stride_h,
                kb_stride_s, kb_stride_h, vb_stride_s, vb_stride_h, sm_scale, offs_d, offs_dpe, offs_dv, d_mask,
                dpe_mask, dv_mask, HEAD_DIM, V_DIM, BLOCK_M, BLOCK_N, BLOCK_D, BLOCK_DPE, BLOCK_DV, LOGIT_CAP, WINDOW,
                USE_DOT, DOT_FP32, INDEX_I64, LOAD_IGNORES_OTHER, UNIFIED, True, k_scale, v_scale, KV_FORMAT, FP8_RUNTIME_UNIT, FP8_NAN_ARITH,
                mask_base, mask_stride, CUSTOM_MASK, V_IN_K, NEW_V_IN_K)  # fmt: skip

    if HAS_SINKS:  # the head's sink, once per row, after every key
        l_i, acc = fold_sink(m_i, l_i, acc, tl.load(sinks_ptr + head).to(tl.float32))
    out = finish_rows(acc, l_i)
    tl.store(o_ptr + rows[:, None] * o_stride_t + head * o_stride_h + offs_dv[None, :], out.to(o_ptr.dtype.element_ty),
             mask=m_mask[:, None] & dv_mask[None, :])  # fmt: skip
