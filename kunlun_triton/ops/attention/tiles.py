"""Device functions shared by the decode and extend kernels.

Tiles come in two kinds. A *full* tile holds only keys every query row of
the program may see: it is loaded without masks and scored without a
visibility test, which is what most of a long context is. A *masked* tile
(the last, ragged tile of a range; the causal diagonal; a sliding window's
edge) applies the visibility mask to the scores, and keeps non-finite values
of keys some row cannot see away from that row (`extend_attention`).
"""

import triton
import triton.language as tl

from ..loads import masked_load
from ..tanh import soft_cap  # cap * tanh(s / cap), sound for any cap (tiny s / cap included)
from .fp8 import fp8_to_fp32


@triton.jit
def scores(q, k_t, USE_DOT: tl.constexpr, DOT_FP32: tl.constexpr):
    """q [M, D] times k_t [D, N] -> [M, N] in fp32.

    dot: tensor cores in the operands' dtype (fp32 operands when DOT_FP32,
    with ieee precision so fp32 inputs are not silently rounded to tf32).
    sum: broadcast product [M, D, N] reduced over D in fp32."""
    if USE_DOT:
        if DOT_FP32:
            return tl.dot(q.to(tl.float32), k_t.to(tl.float32), input_precision="ieee")
        else:
            return tl.dot(q, k_t)
    else:
        return tl.sum(q.to(tl.float32)[:, :, None] * k_t.to(tl.float32)[None, :, :], axis=1)


@triton.jit
def weighted_values(p, v, USE_DOT: tl.constexpr, DOT_FP32: tl.constexpr):
    """p [M, N] (fp32 probabilities) times v [N, Dv] -> [M, Dv] in fp32.

    dot: p is rounded to v's dtype for the tensor cores (the usual flash
    attention trade: one rounding of each weight, fp32 accumulation)."""
    if USE_DOT:
        if DOT_FP32:
            return tl.dot(p, v.to(tl.float32), input_precision="ieee")
        else:
            return tl.dot(p.to(v.dtype), v)
    else:
        return tl.sum(p[:, :, None] * v.to(tl.float32)[None, :, :], axis=1)


@triton.jit
def scale_and_cap(s, sm_scale, LOGIT_CAP: tl.constexpr):
    """sm_scale * s, soft-capped when LOGIT_CAP > 0 (Gemma-2 style)."""
    s = s * sm_scale
    if LOGIT_CAP > 0:
        s = soft_cap(s, LOGIT_CAP)
    return s


@triton.jit
def capped_scores(q, k_t, sm_scale, LOGIT_CAP: tl.constexpr, USE_DOT: tl.constexpr, DOT_FP32: tl.constexpr):
    """sm_scale * q k^T, soft-capped when LOGIT_CAP > 0 (Gemma-2 style)."""
    return scale_and_cap(scores(q, k_t, USE_DOT, DOT_FP32), sm_scale, LOGIT_CAP)


@triton.jit
def load_tile(ptrs, row_mask, col_mask, MASK_ROWS: tl.constexpr, MASK_COLS: tl.constexpr,
              LOAD_IGNORES_OTHER: tl.constexpr):  # fmt: skip
    """A [R, C] tile, zero outside `row_mask` [R] x `col_mask` [C]; a
    constexpr-false MASK_* drops that mask (a full tile, a head dim that is
    a power of two) so the load carries no predicate for it."""
    if MASK_ROWS:
        if MASK_COLS:
            return masked_load(ptrs, row_mask[:, None] & col_mask[None, :], 0.0, LOAD_IGNORES_OTHER)
        else:
            return masked_load(ptrs, row_mask[:, None], 0.0, LOAD_IGNORES_OTHER)
    else:
        if MASK_COLS:
            return masked_load(ptrs, col_mask[None, :], 0.0, LOAD_IGNORES_OTHER)
        else:
            return tl.load(ptrs)


@triton.jit
def online_softmax_update(s, v, m_i, l_i, acc, USE_DOT: tl.constexpr, DOT_FP32: tl.constexpr, v_scale=1.0,
                          SCALE_V: tl.constexpr = False):  # fmt: skip
    """Fold one tile of scores s [M, N] (hidden keys at -inf) and values
    v [N, Dv] (times v_scale with SCALE_V: an fp8 pool's tile, decoded
    unscaled, `fp8.kv_values`) into the running max m_i [M], sum l_i [M]
    and unnormalised output acc [M, Dv]:

        m' = max(m, max_j s_j);  l' = l e^(m - m') + sum_j e^(s_j - m')
        acc' = acc e^(m - m') + sum_j e^(s_j - m') v_j

    The running max starts at -inf, so any score, however far below zero
    (a huge sm_scale), sets it. A row that has seen no key yet has
    m = m' = -inf; the exponents then use 0 in place of m' (e^(-inf - 0) = 0
    for the hidden keys and the empty history), never -inf - -inf = NaN."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp(m_i - m_ref)
    p = tl.exp(s - m_ref[:, None])
    l_new = l_i * alpha + tl.sum(p, 1)
    if SCALE_V:  # the weights [M, N] carry the scale, not the tile [N, Dv]
        acc = acc * alpha[:, None] + weighted_values(p * v_scale, v, USE_DOT, DOT_FP32)
    else:
        acc = acc * alpha[:, None] + weighted_values(p, v, USE_DOT, DOT_FP32)
    return m_new, l_new, acc


@triton.jit
def fold_sink(m_i, l_i, acc, sink):
    """Join each row's sink logit (gpt-oss's attention sinks, [M] fp32) to
    its softmax, once, after every key: the sink adds its term to the sum and
    no value,

        M' = max(m, sink);  l' = l e^(m - M') + e^(sink - M');  acc' = acc e^(m - M')

    (the max taken with the sink so that a sink far above every score makes
    l' = 1 and acc' tiny, not e^(sink - m) = inf). A row that saw no key
    (m = -inf, acc = 0) ends with l' = 1, acc' = 0: output 0. Returns (l', acc')."""
    m_new = tl.maximum(m_i, sink)
    m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp(m_i - m_ref)
    return l_i * alpha + tl.exp(sink - m_ref), acc * alpha[:, None]


@triton.jit
def finish_rows(acc, l_i):
    """acc / l per row; 0 for a row that saw no key (a NaN sum, from a
    visible NaN, stays NaN)."""
    no_keys = l_i == 0.0
    return tl.where(no_keys[:, None], 0.0, acc / tl.where(no_keys, 1.0, l_i)[:, None])


@triton.jit
def stream_rows(index_ptr, row_base, offs_n, n_mask, PAGED: tl.constexpr, MASKED: tl.constexpr,
                INDEX_I64: tl.constexpr, LOAD_IGNORES_OTHER: tl.constexpr):  # fmt: skip
    """The K/V rows of a stream's keys `offs_n`: pool slots index_ptr[n] when
    PAGED, else row_base + n."""
    if PAGED:
        if MASKED:
            rows = masked_load(index_ptr + offs_n, n_mask, 0, LOAD_IGNORES_OTHER)
        else:
            rows = tl.load(index_ptr + offs_n)
    else:
        rows = row_base + offs_n
    if INDEX_I64:
        rows = rows.to(tl.int64)
    return rows


@triton.jit
def visibility(q_pos, offs_n, n_mask, CAUSAL: tl.constexpr, WINDOW: tl.constexpr):
    """[M, N]: query row i (at q_pos[i], counted in the stream's key
    positions) sees key n < hi when, if CAUSAL, n <= q_pos[i] and, with a
    WINDOW, q_pos[i] - n <= WINDOW. (CAUSAL alone implies n < hi for every
    real row; the block's padding rows beyond the extend are never stored.)"""
    if CAUSAL:
        visible = offs_n[None, :] <= q_pos[:, None]
    else:
        visible = n_mask[None, :]
    if WINDOW > 0:
        visible = visible & (q_pos[:, None] - offs_n[None, :] <= WINDOW)
    return visible


@triton.jit
def value_poison(v_ptrs, n_mask, dv_mask, MASK_DV: tl.constexpr, LOAD_IGNORES_OTHER: tl.constexpr,
                 KV_FORMAT: tl.constexpr = 0):  # fmt: skip
    """[N] fp32: NaN for a key whose value row holds an inf or NaN, else 0
    (sum_d 0 * v_d: 0 * inf and 0 * NaN are NaN, in v's own dtype). A
    second, plain-layout read of the tile (cached): checking the tile the
    dot consumes would move it from shared memory through registers."""
    v = load_tile(v_ptrs, n_mask, dv_mask, True, MASK_DV, LOAD_IGNORES_OTHER)
    if KV_FORMAT > 0:  # fp8 bytes: their values (NaN codes, e5m2's infinities)
        v = fp8_to_fp32(v, KV_FORMAT)
    return tl.sum(v * 0.0, axis=1).to(tl.float32)
