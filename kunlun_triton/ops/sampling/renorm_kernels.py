"""Renormalised probabilities: `renorm_probs_kernel` backs
`top_k_renorm_probs`, `top_p_renorm_probs`, `min_p_renorm_probs` and
`renorm_probs`.

    out_j = p_j * [j kept] / sum_{kept} p

with `sample`'s rules on probabilities (see `kernels`): top-k keeps values
>= the k-th largest (ties kept), top-p keeps a value when the mass strictly
above it is <= top_p * sum p, min-p keeps p >= min_p * max p. NaN and
negative entries count as 0, +inf as the largest float.

Every sum is taken in units of the row's largest entry, ``q = p / max p``
(so q <= 1 and sum q <= vocab): two entries of 3e38 renormalise to 0.5 /
0.5 instead of overflowing to inf, and a row of denormals keeps its
precision. One program owns BLOCK_R rows and walks them: one pass for max
and sum (rescaled as the max grows), the joint threshold by bisection over
the int32 key (up to 32 passes, stopping once each interval holds one
distinct key; one load for all of them when the row fits one tile), one
pass for the kept sum, one for the output.
"""

import triton
import triton.language as tl

from .primitives import (
    KEY_NEG_INF,
    SEARCH_ITERS,
    load_probs,
    masked_load,
    ordered_key,
    search_counts,
    search_result,
    search_start,
    search_update,
    threshold_in_tile,
)


@triton.jit
def _scaled(p, p_max):
    """p / max p, safe where the row is all zero."""
    return p / tl.where(p_max > 0.0, p_max, 1.0)[:, None]


@triton.jit
def _threshold_over_tiles(
    ptr, rows, row_mask, row_stride, vocab, p_max, top_k, mass_limit, hi_key, need_k, need_p,
    BLOCK_R: tl.constexpr, BLOCK_V: tl.constexpr, IGNORES_OTHER: tl.constexpr,
):  # fmt: skip
    """`threshold_in_tile` for rows wider than a tile: each bisection step
    walks the row."""
    lo_k, hi_k, lo_p, hi_p, t_k, t_p, done_k, done_p = search_start(hi_key, need_k, need_p, BLOCK_R)
    for _step in range(SEARCH_ITERS):
        if tl.max((~(done_k & done_p)).to(tl.int32), axis=0) > 0:
            mid_k, mid_p = ((lo_k + hi_k) >> 1).to(tl.int32), ((lo_p + hi_p) >> 1).to(tl.int32)
            count = tl.zeros([BLOCK_R], tl.int32)
            mass = tl.zeros([BLOCK_R], tl.float32)
            k_min = tl.full([BLOCK_R], 2147483647, tl.int32)
            k_max = -k_min
            p_min = k_min
            p_max_key = k_max
            for start in range(0, vocab, BLOCK_V):
                cols = start + tl.arange(0, BLOCK_V)
                valid = row_mask[:, None] & (cols[None, :] < vocab)
                p = load_probs(ptr + rows[:, None].to(tl.int64) * row_stride + cols[None, :], valid, IGNORES_OTHER)
                c, s, kn, kx, pn, px = search_counts(
                    ordered_key(p), _scaled(p, p_max), valid, mid_k, mid_p,
                    lo_k.to(tl.int32), hi_k.to(tl.int32), lo_p.to(tl.int32), hi_p.to(tl.int32),
                )  # fmt: skip
                count += c
                mass += s
                k_min, k_max = tl.minimum(k_min, kn), tl.maximum(k_max, kx)
                p_min, p_max_key = tl.minimum(p_min, pn), tl.maximum(p_max_key, px)
            lo_k, hi_k, lo_p, hi_p, t_k, t_p, done_k, done_p = search_update(
                count, mass, k_min, k_max, p_min, p_max_key, top_k, mass_limit,
                lo_k, hi_k, lo_p, hi_p, t_k, t_p, done_k, done_p,
            )  # fmt: skip
    return search_result(lo_k, hi_p, t_k, t_p, done_k, done_p, need_k, need_p)


@triton.jit
def renorm_probs_kernel(
    probs_ptr, top_k_ptr, top_p_ptr, min_p_ptr, out_ptr, n_rows, vocab, row_stride, out_row_stride,
    BLOCK_R: tl.constexpr, BLOCK_V: tl.constexpr, ONE_TILE: tl.constexpr, IGNORES_OTHER: tl.constexpr,
):  # fmt: skip
    """out = probs restricted to what top-k, top-p and min-p keep, divided
    by the kept sum. A row with no positive probability comes out all zero.
    top_k arrives clamped to [1, vocab] (vocab: no top-k), top_p in (0, 1]."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_mask = rows < n_rows
    top_k = masked_load(top_k_ptr + rows, row_mask, 0, IGNORES_OTHER)
    top_k = tl.where((top_k < 1) | (top_k > vocab), vocab, top_k).to(tl.int32)
    top_p = masked_load(top_p_ptr + rows, row_mask, 1.0, IGNORES_OTHER)
    min_p = masked_load(min_p_ptr + rows, row_mask, 0.0, IGNORES_OTHER)

    # Pass 1: max and sum of q = p / max, rescaled when the max grows.
    p_max = tl.zeros([BLOCK_R], tl.float32)
    total = tl.zeros([BLOCK_R], tl.float32)
    for start in range(0, vocab, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        valid = row_mask[:, None] & (cols[None, :] < vocab)
        p = load_probs(probs_ptr + rows[:, None].to(tl.int64) * row_stride + cols[None, :], valid, IGNORES_OTHER)
        new_max = tl.maximum(p_max, tl.max(p, axis=1))
        total = total * tl.where(new_max > 0.0, p_max / tl.where(new_max > 0.0, new_max, 1.0), 0.0)
        total += tl.sum(_scaled(p, new_max), axis=1)
        p_max = new_max

    threshold = tl.full([BLOCK_R], KEY_NEG_INF, tl.int32)
    need_search = row_mask & ((top_k < vocab) | (top_p < 1.0))
    if tl.max(need_search.to(tl.int32), axis=0) > 0:
        # top_p 1 means no top-p: an infinite limit, not 1 * sum, whose
        # rounding could cut the least likely tokens.
        mass_limit = tl.where(top_p < 1.0, top_p * total, float("inf"))
        need_k, need_p = need_search & (top_k < vocab), need_search & (top_p < 1.0)
        if ONE_TILE:
            cols = tl.arange(0, BLOCK_V)
            valid = row_mask[:, None] & (cols[None, :] < vocab)
            p = load_probs(probs_ptr + rows[:, None].to(tl.int64) * row_stride + cols[None, :], valid, IGNORES_OTHER)
            threshold = threshold_in_tile(
                ordered_key(p), _scaled(p, p_max), valid, top_k, mass_limit, ordered_key(p_max), need_k, need_p, BLOCK_R
            )
        else:
            threshold = _threshold_over_tiles(
                probs_ptr, rows, row_mask, row_stride, vocab, p_max, top_k, mass_limit, ordered_key(p_max),
                need_k, need_p, BLOCK_R, BLOCK_V, IGNORES_OTHER,
            )  # fmt: skip
    kept_total = tl.zeros([BLOCK_R], tl.float32)
    for start in range(0, vocab, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        valid = row_mask[:, None] & (cols[None, :] < vocab)
        p = load_probs(probs_ptr + rows[:, None].to(tl.int64) * row_stride + cols[None, :], valid, IGNORES_OTHER)
        q = _scaled(p, p_max)  # min-p on q = p / max: no rounding of min_p * a denormal max
        kept = (ordered_key(p) >= threshold[:, None]) & (q >= min_p[:, None])
        kept_total += tl.sum(tl.where(kept, q, 0.0), axis=1)
    inv_total = tl.where(kept_total > 0.0, 1.0 / tl.where(kept_total > 0.0, kept_total, 1.0), 0.0)

    for start in range(0, vocab, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        valid = row_mask[:, None] & (cols[None, :] < vocab)
        p = load_probs(probs_ptr + rows[:, None].to(tl.int64) * row_stride + cols[None, :], valid, IGNORES_OTHER)
        q = _scaled(p, p_max)
        kept = (ordered_key(p) >= threshold[:, None]) & (q >= min_p[:, None])
        out = tl.where(kept, q * inv_total[:, None], 0.0)
        offs = rows[:, None].to(tl.int64) * out_row_stride + cols[None, :]
        tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=valid)
