"""Sampling kernels for `sample` and `greedy`: each row split over many
programs, one to three reads of it in practice, no sort.

Notation per row: ``l`` the raw logits in fp32 (NaN -> -inf, never drawn;
+inf -> the largest finite float, so several +inf tie and share the draw),
``m = max l``, ``x = (l - m) / T`` (the max is subtracted *before* scaling
by the temperature: logits near the float limit or offset by 1e7 stay exact
and finite), ``w = exp(x)``, ``Z = sum w``. A token of value v is *kept* when

    Kept(v):  #{l > v} < k   and   sum_{l > v} w <= top_p * Z   and   exp((v - m) / T) >= min_p

(SGLang's joint top-k / top-p on the unfiltered distribution, ties kept
together, then min-p against the top prob). Kept is monotone in v, so the
kept set is ``{l >= tau}``. The token is the exponential race over it,
``argmax_{kept} w_j / E_j`` with ``E_j = -log u_j`` and ``u_j`` a hash of
(seed, position, j) (`primitives.exponential`): the Gumbel-max draw with
``g = -log E``, one log per token, and a pure function of the row, its
parameters, seed and position whatever the batch around it. Ties go to the
lowest id; greedy rows take the argmax of ``l``, ties to the lowest id.

Launches; the vocabulary is cut into ``n_blocks = cdiv(vocab, BLOCK_V)``
blocks, the same for every row of every batch (the config is looked up by
the vocabulary only), so a row's arithmetic never depends on its batch:

1. `block_stats_kernel`, grid (n_blocks, rows): the one read every call
   makes. Per block: max m_b, ``sum exp((l - m_b) / T)``, the block's race
   winner and its TOP_R largest values with their ids.
2. `combine_kernel`, one program per row: the union S of the blocks' top
   values holds *every* value above ``U = max_b (b's TOP_R-th value)``, so
   Kept(v) is exact from S for v >= U. U rejected: the kept set lies inside
   S; thresholds by bisection over S's keys in registers, race over S,
   done (top-k <= ~70 at vocab 152k, peaked top-p). U kept: the whole row's
   race winner c0 is the answer when c0 >= U (or only min-p filters and c0
   passes it), done. Else the row goes on with ``lo < tau <= hi = U``.
3. `pivot_kernels`: ROUNDS pivot rounds (rejection sampling with pivots,
   FlashInfer's idea, on the race): each reads the row once (blocks with
   nothing above the lowest pivot read nothing) and decides nearly every row
   left; the last round finishes the rest in one program per row.

Why this design, measured at vocab 151936 (README "Sampling";
``scripts/sampling_counts.py``): the logits are read 1.0-2.2 times per row
on average over the filter mixes, at most 4 times, on Gaussian and on
peaked logits. A radix select needs 4 histogram passes of 256 bins before
the draw (256 compares per element per pass without shared-memory
atomics, which Kunlun lacks) and bisection up to 32 passes; FlashInfer's
dual-pivot rejection needs a softmax pass, then per round one sampling pass
and one counting pass over the probabilities, O(log(1/eps)) rounds. The
race turns "is the draw kept?" into one count and one mass per pivot, and
the blocks' top values settle the usual top-k in the first read. TOP_R = 4:
8 settles top-k 50 in the first read too but costs ~19 more SASS per
element in every first read; 2 sends most top-k 50 rows to a round.
PIVOTS = 4 and one round (ROUNDS in `ops`): 8 pivots cut the rows finished
per row in the worst mix from 10 to 6 of 32, for ~60 more SASS per element
in the round; a second launched round costs two launches for the few rows
the per-row finish handles in one or two reads.

Everything is plain loads/stores with masks, tl.sum/max/min, integer ops,
tl.exp/tl.log; no atomics, no sort: the portable subset (docs/design.md).
"""

import triton
import triton.language as tl

from .primitives import (
    FLT_MAX,
    FLT_MIN,
    ID_BIG,
    KEY_NEG_INF,
    argmax_lowest,
    exponential,
    load_logits,
    masked_load,
    ordered_key,
    row_stream,
    threshold_in_tile,
)

# Per-row state fields in the int32 scratch (see _sections).
ST_DONE, ST_LO, ST_HI = tl.constexpr(0), tl.constexpr(1), tl.constexpr(2)
ST_CAND, ST_CAND_KEY, ST_TOP = tl.constexpr(3), tl.constexpr(4), tl.constexpr(5)
ST_FIELDS = tl.constexpr(6)


@triton.jit
def _sections(n_rows, n_blocks, TOP_R: tl.constexpr, PIVOTS: tl.constexpr):
    """Offsets (in 4-byte words) of the scratch sections in the one int32
    buffer a call allocates (read as fp32 through one pointer, int32 through
    the other: `scratch_pointers`). ``ns = rows * blocks`` slots, slot = row * n_blocks + block.
    fp32: block max, block sum, block winner score, top values [ns, TOP_R],
    row max and Z [2, rows], pivot masses and winners [ns, PIVOTS] each;
    int32: block winner id, top ids [ns, TOP_R], row state [ST_FIELDS, rows],
    pivot counts and winner ids [ns, PIVOTS] each. `ops.scratch_words`
    computes the same total."""
    ns = n_rows.to(tl.int64) * n_blocks
    f_sum = ns
    f_win = 2 * ns
    f_top = 3 * ns
    f_row = f_top + ns * TOP_R
    f_mass = f_row + 2 * n_rows
    f_pwin = f_mass + ns * PIVOTS
    i_win = f_pwin + ns * PIVOTS
    i_top = i_win + ns
    i_row = i_top + ns * TOP_R
    i_count = i_row + ST_FIELDS * n_rows
    i_pid = i_count + ns * PIVOTS
    return f_sum, f_win, f_top, f_row, f_mass, f_pwin, i_win, i_top, i_row, i_count, i_pid


@triton.jit
def scratch_pointers(scratch_ptr):
    """(fp32, int32) pointers to the int32 scratch: a bitcast in the kernel
    instead of a second tensor view per call on the host (0.8 us there)."""
    return scratch_ptr.to(tl.pointer_type(tl.float32), bitcast=True), scratch_ptr


@triton.jit
def _inverse_temperature(temperature):
    """1 / T for T > 0, clamped to [FLT_MIN, FLT_MAX], 1 for greedy rows
    (T = 0). Never 0: T = +inf (SGLang stores a temperature of 1e308 in
    fp32) made 1 / T = 0, and the -inf of masked lanes and padded blocks
    times 0 is NaN, which reached the block sums top-p reads (issue 39 row
    8). With 1 / T >= FLT_MIN, -inf stays -inf (weight 0) and every finite
    logit weighs exp(~0) = 1: T = inf is uniform over the finite logits. A
    normal, not a denormal, bound: GPUs flush denormal products to 0."""
    safe = tl.where(temperature > 0.0, temperature, 1.0)
    return tl.minimum(tl.maximum(1.0 / safe, FLT_MIN), FLT_MAX)


@triton.jit
def _row_params(temperature_ptr, top_k_ptr, top_p_ptr, min_p_ptr, rows, row_mask, vocab,
                HAS_TOP_K: tl.constexpr, HAS_TOP_P: tl.constexpr, HAS_MIN_P: tl.constexpr,
                IGNORES_OTHER: tl.constexpr):  # fmt: skip
    """(T, k, top_p, min_p, greedy) per row. k <= 0 or past the vocabulary
    means no top-k (k = vocab); a filter the launcher knows is off for
    every row (constexpr) is not even loaded."""
    temp = masked_load(temperature_ptr + rows, row_mask, 1.0, IGNORES_OTHER)
    k = tl.full(rows.shape, 0, tl.int32) + vocab
    if HAS_TOP_K:
        k_given = masked_load(top_k_ptr + rows, row_mask, 0, IGNORES_OTHER)
        k = tl.where((k_given < 1) | (k_given > vocab), vocab, k_given).to(tl.int32)
    top_p = tl.full(rows.shape, 1.0, tl.float32)
    if HAS_TOP_P:
        top_p = masked_load(top_p_ptr + rows, row_mask, 1.0, IGNORES_OTHER)
    min_p = tl.zeros(rows.shape, tl.float32)
    if HAS_MIN_P:
        min_p = masked_load(min_p_ptr + rows, row_mask, 0.0, IGNORES_OTHER)
    greedy = (temp == 0.0) | (k == 1)
    return temp, k, top_p, min_p, greedy


@triton.jit
def _stream(seed_ptr, position_ptr, rows, row_mask, IGNORES_OTHER: tl.constexpr):
    seed = masked_load(seed_ptr + rows, row_mask, 0, IGNORES_OTHER)
    position = masked_load(position_ptr + rows, row_mask, 0, IGNORES_OTHER)
    return row_stream(seed, position)


@triton.jit
def block_stats_kernel(
    logits_ptr, temperature_ptr, seed_ptr, position_ptr, scratch_ptr, n_rows, vocab, row_stride, n_blocks,
    BLOCK_R: tl.constexpr, BLOCK_V: tl.constexpr, TOP_R: tl.constexpr, PIVOTS: tl.constexpr,
    SAMPLING: tl.constexpr, NEED_SUM: tl.constexpr, IGNORES_OTHER: tl.constexpr,
):  # fmt: skip
    """Pass 1, one vocabulary block of BLOCK_R rows: block max m_b, the TOP_R
    largest values and ids (ties: lowest id first) and, when SAMPLING, the
    block's race winner of ``w / E`` with ``w = exp((l - m_b) / T)``, and
    (NEED_SUM) ``sum w``."""
    block = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_mask = rows < n_rows
    cols = block * BLOCK_V + tl.arange(0, BLOCK_V)
    valid = row_mask[:, None] & (cols[None, :] < vocab)
    logits = load_logits(logits_ptr + rows[:, None].to(tl.int64) * row_stride + cols[None, :], valid, IGNORES_OTHER)
    f_ptr, i_ptr = scratch_pointers(scratch_ptr)
    f_sum, f_win, f_top, f_row, f_mass, f_pwin, i_win, i_top, i_row, i_count, i_pid = _sections(
        n_rows, n_blocks, TOP_R, PIVOTS
    )
    slot = rows.to(tl.int64) * n_blocks + block
    block_max = tl.max(logits, axis=1)
    tl.store(f_ptr + slot, block_max, mask=row_mask)
    rest = logits
    for r in tl.static_range(TOP_R):
        value, value_id = argmax_lowest(rest, cols[None, :], 1)
        tl.store(f_ptr + f_top + slot * TOP_R + r, value, mask=row_mask)
        tl.store(i_ptr + i_top + slot * TOP_R + r, value_id, mask=row_mask)
        if r + 1 < TOP_R:
            rest = tl.where(cols[None, :] == value_id[:, None], float("-inf"), rest)
    if SAMPLING:
        inv_t = _inverse_temperature(masked_load(temperature_ptr + rows, row_mask, 1.0, IGNORES_OTHER))
        base = tl.where(block_max > float("-inf"), block_max, 0.0)
        w = tl.exp((logits - base[:, None]) * inv_t[:, None])
        if NEED_SUM:
            tl.store(f_ptr + f_sum + slot, tl.sum(w, axis=1), mask=row_mask)
        noise = exponential(_stream(seed_ptr, position_ptr, rows, row_mask, IGNORES_OTHER)[:, None], cols[None, :])
        win, win_id = argmax_lowest(tl.where(logits > float("-inf"), w / noise, -1.0), cols[None, :], 1)
        tl.store(f_ptr + f_win + slot, win, mask=row_mask)
        tl.store(i_ptr + i_win + slot, win_id, mask=row_mask)


@triton.jit
def combine_kernel(
    logits_ptr, temperature_ptr, top_k_ptr, top_p_ptr, min_p_ptr, seed_ptr, position_ptr, scratch_ptr, out_ptr,
    n_rows, vocab, row_stride, n_blocks,
    BLOCK_R: tl.constexpr, NB_PAD: tl.constexpr, TOP_R: tl.constexpr, PIVOTS: tl.constexpr,
    SAMPLING: tl.constexpr, HAS_TOP_K: tl.constexpr, HAS_TOP_P: tl.constexpr, HAS_MIN_P: tl.constexpr,
    IGNORES_OTHER: tl.constexpr,
):  # fmt: skip
    """Stage 2, BLOCK_R rows: combine the blocks; decide every row it can
    (module docstring) and leave the others' state for the pivot rounds."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_mask = rows < n_rows
    f_ptr, i_ptr = scratch_pointers(scratch_ptr)
    f_sum, f_win, f_top, f_row, f_mass, f_pwin, i_win, i_top, i_row, i_count, i_pid = _sections(
        n_rows, n_blocks, TOP_R, PIVOTS
    )
    blocks = tl.arange(0, NB_PAD)
    block_mask = row_mask[:, None] & (blocks[None, :] < n_blocks)
    slot = rows[:, None].to(tl.int64) * n_blocks + blocks[None, :]
    block_max = masked_load(f_ptr + slot, block_mask, float("-inf"), IGNORES_OTHER)
    m = tl.max(block_max, axis=1)
    finite = m > float("-inf")
    # S: every block's TOP_R largest values (-inf entries are fillers).
    s = tl.arange(0, NB_PAD * TOP_R)
    s_mask = row_mask[:, None] & ((s // TOP_R)[None, :] < n_blocks)
    s_offs = rows[:, None].to(tl.int64) * n_blocks * TOP_R + s[None, :]
    s_val = masked_load(f_ptr + f_top + s_offs, s_mask, float("-inf"), IGNORES_OTHER)
    s_id = masked_load(i_ptr + i_top + s_offs, s_mask, ID_BIG, IGNORES_OTHER)
    top_val, top_id = argmax_lowest(s_val, s_id, 1)
    top_id = tl.where(finite, top_id, 0)  # no finite logit: token 0
    if not SAMPLING:
        tl.store(out_ptr + rows, top_id.to(tl.int64), mask=row_mask)
    else:
        temp, k, top_p, min_p, greedy = _row_params(
            temperature_ptr, top_k_ptr, top_p_ptr, min_p_ptr, rows, row_mask, vocab,
            HAS_TOP_K, HAS_TOP_P, HAS_MIN_P, IGNORES_OTHER,
        )  # fmt: skip
        inv_t = _inverse_temperature(tl.where(greedy, 1.0, temp))
        base = tl.where(finite, m, 0.0)
        z = tl.full([BLOCK_R], 1.0, tl.float32)
        if HAS_TOP_P:
            block_sum = masked_load(f_ptr + f_sum + slot, block_mask, 0.0, IGNORES_OTHER)
            z = tl.sum(block_sum * tl.exp((block_max - base[:, None]) * inv_t[:, None]), axis=1)
        limit = tl.where(top_p < 1.0, top_p * z, float("inf"))
        # c0: the race winner of the whole row (block scores re-based to m;
        # -1: no valid token).
        block_win = masked_load(f_ptr + f_win + slot, block_mask, -1.0, IGNORES_OTHER)
        block_win = tl.where(block_win >= 0.0, block_win * tl.exp((block_max - base[:, None]) * inv_t[:, None]), -1.0)
        block_win_id = masked_load(i_ptr + i_win + slot, block_mask, ID_BIG, IGNORES_OTHER)
        c0_score, c0 = argmax_lowest(block_win, block_win_id, 1)
        c0_live = row_mask & finite & (c0 < vocab)
        c0_val = load_logits(logits_ptr + rows.to(tl.int64) * row_stride + c0, c0_live, IGNORES_OTHER)
        c0_key = ordered_key(c0_val)
        c0_minp = tl.exp((c0_val - base) * inv_t) >= min_p
        # Kept(U) from S, exact: every value above U is in S.
        s_w = tl.exp((s_val - base[:, None]) * inv_t[:, None])
        s_valid = s_val > float("-inf")
        u = tl.max(tl.where(((s % TOP_R) == TOP_R - 1)[None, :], s_val, float("-inf")), axis=1)
        above_u = s_valid & (s_val > u[:, None])
        u_kept = (tl.sum(above_u.to(tl.int32), axis=1) < k) & (tl.sum(tl.where(above_u, s_w, 0.0), axis=1) <= limit)
        u_kept = u_kept & (tl.exp((u - base) * inv_t) >= min_p)
        from_s = (u == float("-inf")) | ~u_kept  # the kept set lies inside S
        direct = (k >= vocab) & (top_p >= 1.0)  # min-p alone (or nothing) filters
        s_key = ordered_key(s_val)
        threshold = tl.full([BLOCK_R], KEY_NEG_INF, tl.int32)
        if HAS_TOP_K or HAS_TOP_P:
            search = row_mask & finite & ~greedy & from_s & ~direct
            if tl.max(search.to(tl.int32), axis=0) > 0:
                threshold = threshold_in_tile(
                    s_key, s_w, s_valid, k, limit, ordered_key(m), search & (k < vocab), search & (top_p < 1.0), BLOCK_R
                )
        stream = _stream(seed_ptr, position_ptr, rows, row_mask, IGNORES_OTHER)
        s_kept = s_valid & (s_key >= threshold[:, None]) & (s_w >= min_p[:, None])
        s_score = tl.where(s_kept, s_w / exponential(stream[:, None], s_id), -1.0)
        s_best, s_token = argmax_lowest(s_score, s_id, 1)
        accept_c0 = (c0_key >= ordered_key(u)) | (direct & c0_minp)
        decided = greedy | ~finite | from_s | accept_c0
        token = tl.where(greedy | ~finite, top_id, tl.where(from_s, s_token, c0))
        tl.store(out_ptr + rows, token.to(tl.int64), mask=row_mask & decided)
        if HAS_TOP_K or HAS_TOP_P or HAS_MIN_P:
            # c0 failing min-p is rejected: lo = its key, no candidate.
            tl.store(f_ptr + f_row + rows, base, mask=row_mask)
            tl.store(f_ptr + f_row + n_rows + rows, z, mask=row_mask)
            tl.store(i_ptr + i_row + ST_DONE * n_rows + rows, decided.to(tl.int32), mask=row_mask)
            tl.store(i_ptr + i_row + ST_LO * n_rows + rows, tl.where(c0_minp, KEY_NEG_INF, c0_key), mask=row_mask)
            tl.store(i_ptr + i_row + ST_HI * n_rows + rows, ordered_key(u), mask=row_mask)
            tl.store(i_ptr + i_row + ST_CAND * n_rows + rows, tl.where(c0_minp, c0, -1), mask=row_mask)
            tl.store(i_ptr + i_row + ST_CAND_KEY * n_rows + rows, c0_key, mask=row_mask)
            tl.store(i_ptr + i_row + ST_TOP * n_rows + rows, top_id, mask=row_mask)
