"""Pivot rounds of `sample` (see `kernels` for the whole design): rows that
stage 2 could not decide, with ``lo < tau <= hi`` and a candidate token.

Each round is `pivot_kernel` (grid (n_blocks, rows): one read of each block
still holding a value above the lowest pivot) and `decide_kernel` (one
program per BLOCK_R rows). A round evaluates Kept at PIVOTS keys: the
candidate's own key v0, the key midpoint of (v0, hi) and keys spread evenly
in value; and the race winner above each. The candidate is the answer when
kept (it wins over a superset of the kept set); else the largest rejected
pivot becomes lo and its winner the candidate, the answer at once when it
reaches the smallest kept pivot (new hi). The midpoint pivot halves (lo, hi)
in key space every round, so the last `decide_kernel` (LAST) can finish any
row itself in at most 33 more reads of it; on the rows measured (README) no
row ever needed that.
"""

import triton
import triton.language as tl

from .kernels import (
    ST_CAND,
    ST_CAND_KEY,
    ST_DONE,
    ST_HI,
    ST_LO,
    ST_TOP,
    _inverse_temperature,
    _row_params,
    _sections,
    scratch_pointers,
    _stream,
)
from .primitives import (
    ID_BIG,
    FLT_MAX,
    KEY_BIG,
    KEY_NEG_INF,
    SEARCH_ITERS,
    argmax_lowest,
    exponential,
    key_value,
    load_logits,
    masked_load,
    ordered_key,
)


@triton.jit
def _pivots(lo, hi, cand_key, has_cand, PIVOTS: tl.constexpr):
    """[rows, PIVOTS] keys in [v0, hi], v0 = the candidate's key (or lo):
    pivot 1 is the key midpoint of (v0, hi) (guaranteed halving; about the
    value midpoint too when v0 and hi share sign and binade), the others at
    the other multiples of 1 / PIVOTS of the value range (1/4 and 3/4 for
    4 pivots). Returns (pivots, v0)."""
    v0 = tl.where(has_cand, cand_key, lo)
    j = tl.arange(0, PIVOTS)[None, :]
    # Clamped to finite values and mixed as a * (1 - f) + b * f: with v0 the
    # key of -inf (no candidate yet), or a range past FLT_MAX, ``a + (b - a)
    # * f`` formed inf * 0 and -inf + inf, NaN pivots (the interpreter's
    # 'invalid value encountered in multiply', issue 39 row 8).
    a = tl.minimum(tl.maximum(key_value(v0), -FLT_MAX), FLT_MAX)[:, None]
    b = tl.minimum(tl.maximum(key_value(hi), -FLT_MAX), FLT_MAX)[:, None]
    # f in [0, 1] (pivot 0, at f < 0, is v0 anyway): the mix cannot overflow
    f = tl.maximum(tl.where(j - 1 < PIVOTS // 2, j - 1, j).to(tl.float32) / PIVOTS, 0.0)
    spread = ordered_key(a * (1.0 - f) + b * f)
    mid = ((v0.to(tl.int64) + hi.to(tl.int64)) >> 1).to(tl.int32)
    pivots = tl.where(j == 1, mid[:, None], spread)
    pivots = tl.minimum(tl.maximum(pivots, v0[:, None]), hi[:, None])
    return tl.where(j == 0, v0[:, None], pivots), v0


@triton.jit
def _pivot_partials(logits, cols, pivots, base, inv_t, min_p, stream, PIVOTS: tl.constexpr,
                    COUNT: tl.constexpr, MASS: tl.constexpr):  # fmt: skip
    """Per row and pivot v of a [rows, BLOCK_V] tile: #{l > v} (COUNT), the
    mass sum of w over them (MASS), and the race winner (score w / E, lowest
    id; -1: none) over {l > v, w >= min_p}; -inf lanes count nowhere.
    Returned as [rows, PIVOTS] tiles, one pivot at a time (2-D tiles only)."""
    key = ordered_key(logits)
    w = tl.exp((logits - base[:, None]) * inv_t[:, None])
    ok = (logits > float("-inf")) & (w >= min_p[:, None])
    score = tl.where(ok, w / exponential(stream[:, None], cols[None, :]), -1.0)
    j = tl.arange(0, PIVOTS)[None, :]
    count = tl.zeros(pivots.shape, tl.int32)
    mass = tl.zeros(pivots.shape, tl.float32)
    win = tl.full(pivots.shape, -1.0, tl.float32)
    win_id = tl.full(pivots.shape, ID_BIG, tl.int32)
    for p in tl.static_range(PIVOTS):
        pivot = tl.sum(tl.where(j == p, pivots, 0), axis=1)
        above = key > pivot[:, None]
        if COUNT:
            count = tl.where(j == p, tl.sum(above.to(tl.int32), axis=1)[:, None], count)
        if MASS:
            mass = tl.where(j == p, tl.sum(tl.where(above, w, 0.0), axis=1)[:, None], mass)
        best, best_id = argmax_lowest(tl.where(above, score, -1.0), cols[None, :], 1)
        win = tl.where(j == p, best[:, None], win)
        win_id = tl.where(j == p, best_id[:, None], win_id)
    return count, mass, win, win_id


@triton.jit
def pivot_kernel(
    logits_ptr, temperature_ptr, min_p_ptr, seed_ptr, position_ptr, scratch_ptr, n_rows, vocab, row_stride, n_blocks,
    BLOCK_R: tl.constexpr, BLOCK_V: tl.constexpr, TOP_R: tl.constexpr, PIVOTS: tl.constexpr,
    HAS_TOP_K: tl.constexpr, HAS_TOP_P: tl.constexpr, HAS_MIN_P: tl.constexpr, IGNORES_OTHER: tl.constexpr,
):  # fmt: skip
    """A pivot round's read of one block of BLOCK_R rows; finished rows and
    blocks with nothing above the lowest pivot load nothing."""
    block = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_mask = rows < n_rows
    f_ptr, i_ptr = scratch_pointers(scratch_ptr)
    f_sum, f_win, f_top, f_row, f_mass, f_pwin, i_win, i_top, i_row, i_count, i_pid = _sections(
        n_rows, n_blocks, TOP_R, PIVOTS
    )
    active = row_mask & (masked_load(i_ptr + i_row + ST_DONE * n_rows + rows, row_mask, 1, IGNORES_OTHER) == 0)
    slot = rows.to(tl.int64) * n_blocks + block
    block_key = ordered_key(masked_load(f_ptr + slot, active, float("-inf"), IGNORES_OTHER))
    lo = masked_load(i_ptr + i_row + ST_LO * n_rows + rows, active, 0, IGNORES_OTHER)
    hi = masked_load(i_ptr + i_row + ST_HI * n_rows + rows, active, 0, IGNORES_OTHER)
    cand = masked_load(i_ptr + i_row + ST_CAND * n_rows + rows, active, -1, IGNORES_OTHER)
    cand_key = masked_load(i_ptr + i_row + ST_CAND_KEY * n_rows + rows, active, 0, IGNORES_OTHER)
    pivots, v0 = _pivots(lo, hi, cand_key, cand >= 0, PIVOTS)
    live = active & (block_key > v0)
    if tl.max(live.to(tl.int32), axis=0) > 0:
        base = masked_load(f_ptr + f_row + rows, live, 0.0, IGNORES_OTHER)
        inv_t = _inverse_temperature(masked_load(temperature_ptr + rows, live, 1.0, IGNORES_OTHER))
        min_p = tl.zeros([BLOCK_R], tl.float32)
        if HAS_MIN_P:
            min_p = masked_load(min_p_ptr + rows, live, 0.0, IGNORES_OTHER)
        cols = block * BLOCK_V + tl.arange(0, BLOCK_V)
        valid = live[:, None] & (cols[None, :] < vocab)
        logits = load_logits(logits_ptr + rows[:, None].to(tl.int64) * row_stride + cols[None, :], valid, IGNORES_OTHER)
        stream = _stream(seed_ptr, position_ptr, rows, live, IGNORES_OTHER)
        count, mass, win, win_id = _pivot_partials(
            logits, cols, pivots, base, inv_t, min_p, stream, PIVOTS, HAS_TOP_K, HAS_TOP_P
        )
        offs = slot[:, None] * PIVOTS + tl.arange(0, PIVOTS)[None, :]
        tl.store(i_ptr + i_count + offs, count, mask=live[:, None])
        tl.store(f_ptr + f_mass + offs, mass, mask=live[:, None])
        tl.store(f_ptr + f_pwin + offs, win, mask=live[:, None])
        tl.store(i_ptr + i_pid + offs, win_id, mask=live[:, None])


@triton.jit
def _decide(count, mass, win, win_id, pivots, lo, hi, cand, k, limit, min_p, base, inv_t, direct,
            logits_ptr, rows, row_stride, vocab, active, PIVOTS: tl.constexpr, IGNORES_OTHER: tl.constexpr):  # fmt: skip
    """One round's verdict per row from the pivots' counts, masses and
    winners: (accepted, token, lo, hi, new candidate id, its key)."""
    j = tl.arange(0, PIVOTS)[None, :]
    has_cand = cand >= 0
    pivot_minp = tl.exp((key_value(pivots) - base[:, None]) * inv_t[:, None]) >= min_p[:, None]
    kept = (count < k[:, None]) & (mass <= limit[:, None]) & pivot_minp
    kept = kept & ((j > 0) | has_cand[:, None])  # without a candidate pivot 0 is lo: rejected
    accept_cand = has_cand & (tl.sum((kept & (j == 0)).to(tl.int32), axis=1) > 0)
    new_lo = tl.maximum(lo, tl.max(tl.where(kept, KEY_NEG_INF, pivots), axis=1))
    new_hi = tl.minimum(hi, tl.min(tl.where(kept, pivots, KEY_BIG), axis=1))
    # The new candidate: the winner above the largest rejected pivot.
    at_lo = ~kept & (pivots == new_lo[:, None])
    new_win, new_id = argmax_lowest(tl.where(at_lo, win, -1.0), win_id, 1)
    found = active & (new_win >= 0.0) & (new_id < vocab)
    new_val = load_logits(logits_ptr + rows.to(tl.int64) * row_stride + new_id, found, IGNORES_OTHER)
    new_key = ordered_key(new_val)
    accepted = accept_cand | (found & ((new_key >= new_hi) | direct))
    token = tl.where(accept_cand, cand, new_id)
    return accepted, token, new_lo, new_hi, tl.where(found, new_id, -1), new_key


@triton.jit
def decide_kernel(
    logits_ptr, temperature_ptr, top_k_ptr, top_p_ptr, min_p_ptr, seed_ptr, position_ptr, scratch_ptr, out_ptr,
    n_rows, vocab, row_stride, n_blocks,
    BLOCK_R: tl.constexpr, BLOCK_V: tl.constexpr, NB_PAD: tl.constexpr, TOP_R: tl.constexpr,
    PIVOTS: tl.constexpr, HAS_TOP_K: tl.constexpr, HAS_TOP_P: tl.constexpr, HAS_MIN_P: tl.constexpr,
    LAST: tl.constexpr, IGNORES_OTHER: tl.constexpr,
):  # fmt: skip
    """A pivot round's verdict for BLOCK_R rows. With LAST, rows still open
    are finished here, one read of the row per round (module docstring)."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_mask = rows < n_rows
    f_ptr, i_ptr = scratch_pointers(scratch_ptr)
    f_sum, f_win, f_top, f_row, f_mass, f_pwin, i_win, i_top, i_row, i_count, i_pid = _sections(
        n_rows, n_blocks, TOP_R, PIVOTS
    )
    active = row_mask & (masked_load(i_ptr + i_row + ST_DONE * n_rows + rows, row_mask, 1, IGNORES_OTHER) == 0)
    if tl.max(active.to(tl.int32), axis=0) > 0:
        temp, k, top_p, min_p, greedy = _row_params(
            temperature_ptr, top_k_ptr, top_p_ptr, min_p_ptr, rows, active, vocab,
            HAS_TOP_K, HAS_TOP_P, HAS_MIN_P, IGNORES_OTHER,
        )  # fmt: skip
        inv_t = _inverse_temperature(temp)
        base = masked_load(f_ptr + f_row + rows, active, 0.0, IGNORES_OTHER)
        z = masked_load(f_ptr + f_row + n_rows + rows, active, 1.0, IGNORES_OTHER)
        limit = tl.where(top_p < 1.0, top_p * z, float("inf"))
        direct = (k >= vocab) & (top_p >= 1.0)
        lo = masked_load(i_ptr + i_row + ST_LO * n_rows + rows, active, 0, IGNORES_OTHER)
        hi = masked_load(i_ptr + i_row + ST_HI * n_rows + rows, active, 0, IGNORES_OTHER)
        cand = masked_load(i_ptr + i_row + ST_CAND * n_rows + rows, active, -1, IGNORES_OTHER)
        cand_key = masked_load(i_ptr + i_row + ST_CAND_KEY * n_rows + rows, active, 0, IGNORES_OTHER)
        pivots, v0 = _pivots(lo, hi, cand_key, cand >= 0, PIVOTS)
        blocks = tl.arange(0, NB_PAD)
        slot = rows[:, None].to(tl.int64) * n_blocks + blocks[None, :]
        block_key = ordered_key(masked_load(f_ptr + slot, active[:, None] & (blocks[None, :] < n_blocks),
                                            float("-inf"), IGNORES_OTHER))  # fmt: skip
        live = (active[:, None] & (blocks[None, :] < n_blocks) & (block_key > v0[:, None]))[:, :, None]
        offs = slot[:, :, None] * PIVOTS + tl.arange(0, PIVOTS)[None, None, :]
        count = tl.sum(masked_load(i_ptr + i_count + offs, live, 0, IGNORES_OTHER), axis=1)
        mass = tl.sum(masked_load(f_ptr + f_mass + offs, live, 0.0, IGNORES_OTHER), axis=1)
        win, win_id = argmax_lowest(
            masked_load(f_ptr + f_pwin + offs, live, -1.0, IGNORES_OTHER),
            masked_load(i_ptr + i_pid + offs, live, ID_BIG, IGNORES_OTHER), 1,
        )  # fmt: skip
        accepted, token, lo, hi, cand, cand_key = _decide(
            count, mass, win, win_id, pivots, lo, hi, cand, k, limit, min_p, base, inv_t, direct,
            logits_ptr, rows, row_stride, vocab, active, PIVOTS, IGNORES_OTHER,
        )  # fmt: skip
        if LAST:
            stream = _stream(seed_ptr, position_ptr, rows, active, IGNORES_OTHER)
            for _round in range(SEARCH_ITERS + 1):
                still = active & ~accepted
                if tl.max(still.to(tl.int32), axis=0) > 0:
                    pivots, v0 = _pivots(lo, hi, cand_key, cand >= 0, PIVOTS)
                    count = tl.zeros([BLOCK_R, PIVOTS], tl.int32)
                    mass = tl.zeros([BLOCK_R, PIVOTS], tl.float32)
                    win = tl.full([BLOCK_R, PIVOTS], -1.0, tl.float32)
                    win_id = tl.full([BLOCK_R, PIVOTS], ID_BIG, tl.int32)
                    for start in range(0, vocab, BLOCK_V):
                        cols = start + tl.arange(0, BLOCK_V)
                        valid = still[:, None] & (cols[None, :] < vocab)
                        logits = load_logits(logits_ptr + rows[:, None].to(tl.int64) * row_stride + cols[None, :],
                                             valid, IGNORES_OTHER)  # fmt: skip
                        c, ms, w, wi = _pivot_partials(
                            logits, cols, pivots, base, inv_t, min_p, stream, PIVOTS, HAS_TOP_K, HAS_TOP_P
                        )
                        count += c
                        mass += ms
                        better = w > win  # tiles come in id order: ties keep the lower id
                        win_id = tl.where(better, wi, win_id)
                        win = tl.where(better, w, win)
                    now, now_token, lo2, hi2, cand2, key2 = _decide(
                        count, mass, win, win_id, pivots, lo, hi, cand, k, limit, min_p, base, inv_t, direct,
                        logits_ptr, rows, row_stride, vocab, still, PIVOTS, IGNORES_OTHER,
                    )  # fmt: skip
                    token = tl.where(still, now_token, token)
                    lo, hi = tl.where(still, lo2, lo), tl.where(still, hi2, hi)
                    cand, cand_key = tl.where(still, cand2, cand), tl.where(still, key2, cand_key)
                    accepted = accepted | (still & now)
            # Not reachable in exact arithmetic (the key interval halves each
            # round); a row left open takes its top token.
            top = masked_load(i_ptr + i_row + ST_TOP * n_rows + rows, active, 0, IGNORES_OTHER)
            token = tl.where(accepted, token, top)
            accepted = active
        tl.store(out_ptr + rows, token.to(tl.int64), mask=active & accepted)
        tl.store(i_ptr + i_row + ST_DONE * n_rows + rows, accepted.to(tl.int32), mask=active)
        tl.store(i_ptr + i_row + ST_LO * n_rows + rows, lo, mask=active)
        tl.store(i_ptr + i_row + ST_HI * n_rows + rows, hi, mask=active)
        tl.store(i_ptr + i_row + ST_CAND * n_rows + rows, cand, mask=active)
        tl.store(i_ptr + i_row + ST_CAND_KEY * n_rows + rows, cand_key, mask=active)
