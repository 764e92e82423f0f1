"""Sampling kernels: greedy argmax, filtered Gumbel-max draws, renormalised probs.

No sort of the vocabulary. Each program owns ``BLOCK_R`` rows and walks the
vocabulary in ``BLOCK_V`` tiles, several times:

1. statistics (only when some row in the program filters): row max ``m``
   and ``Z = sum_j exp(x_j - m)`` (online softmax), ``x = logit / temperature``;
2. threshold search (only when some row in the program needs top-k or
   top-p): up to ``SEARCH_ITERS`` bisection steps over the *order-preserving
   integer key* of the fp32 values. Each step is one pass over the row that
   counts ``C(t) = #{j: key_j >= t}`` (top-k) and sums
   ``M(t) = sum_{key_j > t} w_j`` (top-p) for two independent midpoints.
   32 steps pin a 32-bit key exactly, so the thresholds are exact, ties
   included:
       top-k keeps ``key >= t_k``, t_k the largest key with ``C(t_k) >= k``
             (= the k-th largest value; ties with it are kept too);
       top-p keeps ``key >= t_p``, t_p the smallest key with ``M(t_p) <= p*Z``
             (a token is kept when the mass strictly above it is <= p, which
             is SGLang's ``cumsum - prob <= top_p`` rule, ties kept together);
       min-p keeps ``exp(x - m) >= min_p`` (prob >= min_p * top prob).
   A search stops early once its interval holds a single distinct key, and
   a program skips the remaining passes once all its rows have stopped:
   on random logits at 32k-152k tokens that is after 15-29 steps
   (an emulation of the search, not a device measurement).
3. draw: Gumbel-max over the kept set, ``argmax_j x_j + g_j`` with
   ``g_j = -log(-log(u_j))`` and ``u_j`` a counter-based hash of
   (seed, position, token id); the token is then a pure function of those and
   of the row's logits, whatever the batch around it. Greedy rows take
   ``argmax_j x_j``; ties go to the lowest token id.

Everything is plain loads/stores with masks, tl.sum/tl.max/tl.min, integer
ops, tl.exp/tl.log: the portable subset (docs/design.md). Masked loads never rely
on ``other=``: values outside the row are replaced with tl.where.
"""

import triton
import triton.language as tl

# Order-preserving int32 key of fp32 -inf (bits 0xff800000 with the low 31
# bits flipped, see _ordered_key).
KEY_NEG_INF = tl.constexpr(-2139095041)
# Above every key of a non-NaN float (the key of +inf is 0x7f800000).
KEY_BIG = tl.constexpr(2147483647)
FLT_MAX = tl.constexpr(3.4028234663852886e38)
# A 32-bit key is pinned exactly after 32 halvings of a <= 2**32 wide range.
SEARCH_ITERS = tl.constexpr(32)


@triton.jit
def _ordered_key(x):
    """int32 key with key(a) < key(b) iff a < b for non-NaN fp32 a, b.

    Non-negative floats order like their bit patterns; negative ones in
    reverse, so their low 31 bits are flipped (they stay negative as int32).
    ``x + 0.0`` turns -0.0 into +0.0 so the two zeros tie.
    """
    bits = (x + 0.0).to(tl.int32, bitcast=True)
    return tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


@triton.jit
def _fmix32(h):
    """MurmurHash3's 32-bit finaliser: a bijection with full avalanche."""
    h = h ^ (h >> 16)
    h = h * 0x85EBCA6B
    h = h ^ (h >> 13)
    h = h * 0xC2B2AE35
    h = h ^ (h >> 16)
    return h


@triton.jit
def _row_stream(seed, position):
    """Per-row 32-bit stream key from int64 (seed, position)."""
    s_lo = (seed & 0xFFFFFFFF).to(tl.uint32)
    s_hi = ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32)
    p_lo = (position & 0xFFFFFFFF).to(tl.uint32)
    p_hi = ((position >> 32) & 0xFFFFFFFF).to(tl.uint32)
    h = _fmix32(s_lo ^ 0x9E3779B9)
    h = _fmix32(h ^ s_hi)
    h = _fmix32(h ^ p_lo)
    return _fmix32(h ^ p_hi)


@triton.jit
def _gumbel(stream, cols):
    """Gumbel(0, 1) noise for token ids `cols` ([1, BLOCK_V]) of row streams
    `stream` ([BLOCK_R, 1]): u = (23 hash bits + 0.5) / 2**23, exactly
    representable in fp32 and strictly inside (0, 1), so -log(-log(u)) is
    finite (|g| < 17)."""
    h = _fmix32(stream ^ (cols.to(tl.uint32) * 0x9E3779B9))
    h = _fmix32(h + 0x7F4A7C15)
    u = ((h >> 9).to(tl.float32) + 0.5) * 1.1920928955078125e-07
    return -tl.log(-tl.log(u))


@triton.jit
def _load_logits(ptr, rows, row_mask, row_stride, cols, vocab, temperature):
    """A [BLOCK_R, BLOCK_V] tile of x = logit / temperature in fp32.

    NaN -> -inf (never drawn), +inf -> the largest finite float (so x - m
    stays finite), columns past the row -> -inf (`valid` says which exist).
    """
    valid = row_mask[:, None] & (cols[None, :] < vocab)
    offs = rows[:, None].to(tl.int64) * row_stride + cols[None, :]
    x = tl.load(ptr + offs, mask=valid).to(tl.float32) / temperature[:, None]
    x = tl.where(x == x, x, float("-inf"))
    x = tl.minimum(x, FLT_MAX)
    return tl.where(valid, x, float("-inf")), valid


@triton.jit
def _load_probs(ptr, rows, row_mask, row_stride, cols, vocab):
    """A [BLOCK_R, BLOCK_V] tile of probabilities in fp32; NaN, negatives and
    columns past the row read as 0."""
    valid = row_mask[:, None] & (cols[None, :] < vocab)
    offs = rows[:, None].to(tl.int64) * row_stride + cols[None, :]
    p = tl.load(ptr + offs, mask=valid).to(tl.float32)
    p = tl.minimum(p, FLT_MAX)
    return tl.where(valid & (p > 0.0), p, 0.0), valid


@triton.jit
def _tile_counts(key, w, valid, mid_k, mid_p, lo_k, hi_k, lo_p, hi_p):
    """One tile's share of a search step, per row: C(mid_k), M(mid_p), and
    the smallest / largest key inside the search intervals [lo_k, hi_k) and
    (lo_p, hi_p] (+-KEY_BIG when none)."""
    count = tl.sum((valid & (key >= mid_k[:, None])).to(tl.int32), axis=1)
    mass = tl.sum(tl.where(key > mid_p[:, None], w, 0.0), axis=1)
    in_k = valid & (key >= lo_k[:, None]) & (key < hi_k[:, None])
    in_p = valid & (key > lo_p[:, None]) & (key <= hi_p[:, None])
    k_min = tl.min(tl.where(in_k, key, KEY_BIG), axis=1)
    k_max = tl.max(tl.where(in_k, key, -KEY_BIG), axis=1)
    p_min = tl.min(tl.where(in_p, key, KEY_BIG), axis=1)
    p_max = tl.max(tl.where(in_p, key, -KEY_BIG), axis=1)
    return count, mass, k_min, k_max, p_min, p_max


@triton.jit
def _search_threshold(
    ptr, rows, row_mask, row_stride, vocab, temperature, m, top_k, mass_limit, hi_key, need_k, need_p,
    FROM_LOGITS: tl.constexpr, ONE_TILE: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_V: tl.constexpr,
):
    """The joint top-k / top-p threshold: keep a token when key >= the result.

    Bisects t_k in [lo_k, hi_k) and t_p in (lo_p, hi_p] at once (module
    docstring); weights are w = exp(x - m) for logits, w = p for probs.
    A search is decided early, and its bounds frozen, once its interval holds
    one distinct key (t_k is that key; t_p is lo_p + 1: keep key > lo_p), or
    when the other threshold is decided and provably larger. When every row
    of the program is decided the remaining steps skip their pass over the
    vocabulary: random logits at 32k-152k decide in 15-29 steps of 32.
    Bounds live in int64 so midpoints cannot overflow. With ONE_TILE the row
    is loaded once and every step reuses it.
    """
    lo_k = tl.full([BLOCK_R], KEY_NEG_INF, tl.int64)  # C(lo_k) >= k
    hi_k = hi_key.to(tl.int64) + 1  # C(hi_k) = 0 < k
    lo_p = tl.full([BLOCK_R], KEY_NEG_INF - 1, tl.int64)  # M(lo_p) > p * Z
    hi_p = hi_key.to(tl.int64)  # M(hi_p) = 0 <= p * Z
    t_k = tl.full([BLOCK_R], KEY_NEG_INF, tl.int64)
    t_p = tl.full([BLOCK_R], KEY_NEG_INF, tl.int64)
    done_k = ~need_k
    done_p = ~need_p
    if ONE_TILE:
        cols = tl.arange(0, BLOCK_V)
        if FROM_LOGITS:
            x, valid = _load_logits(ptr, rows, row_mask, row_stride, cols, vocab, temperature)
            w = tl.where(x > float("-inf"), tl.exp(x - m[:, None]), 0.0)
        else:
            x, valid = _load_probs(ptr, rows, row_mask, row_stride, cols, vocab)
            w = x
        key = _ordered_key(x)
    for _ in range(SEARCH_ITERS):
        if tl.max((~(done_k & done_p)).to(tl.int32), axis=0) > 0:
            mid_k = (lo_k + hi_k) >> 1
            mid_p = (lo_p + hi_p) >> 1
            # Every bound fits int32 (only their sums may not): compare in int32.
            mid_k32, mid_p32 = mid_k.to(tl.int32), mid_p.to(tl.int32)
            lo_k32, hi_k32 = lo_k.to(tl.int32), hi_k.to(tl.int32)
            lo_p32, hi_p32 = lo_p.to(tl.int32), hi_p.to(tl.int32)
            if ONE_TILE:
                count, mass, k_min, k_max, p_min, p_max = _tile_counts(
                    key, w, valid, mid_k32, mid_p32, lo_k32, hi_k32, lo_p32, hi_p32
                )
            else:
                count = tl.zeros([BLOCK_R], tl.int32)
                mass = tl.zeros([BLOCK_R], tl.float32)
                k_min = tl.full([BLOCK_R], KEY_BIG, tl.int32)
                k_max = tl.full([BLOCK_R], -KEY_BIG, tl.int32)
                p_min = tl.full([BLOCK_R], KEY_BIG, tl.int32)
                p_max = tl.full([BLOCK_R], -KEY_BIG, tl.int32)
                for start in range(0, vocab, BLOCK_V):
                    cols = start + tl.arange(0, BLOCK_V)
                    if FROM_LOGITS:
                        x, valid = _load_logits(ptr, rows, row_mask, row_stride, cols, vocab, temperature)
                        w = tl.where(x > float("-inf"), tl.exp(x - m[:, None]), 0.0)
                    else:
                        x, valid = _load_probs(ptr, rows, row_mask, row_stride, cols, vocab)
                        w = x
                    c, s, kn, kx, pn, px = _tile_counts(
                        _ordered_key(x), w, valid, mid_k32, mid_p32, lo_k32, hi_k32, lo_p32, hi_p32
                    )
                    count += c
                    mass += s
                    k_min = tl.minimum(k_min, kn)
                    k_max = tl.maximum(k_max, kx)
                    p_min = tl.minimum(p_min, pn)
                    p_max = tl.maximum(p_max, px)
            # Decide on the bounds this step started from, then move the rest.
            k_now = (~done_k) & (k_min >= k_max)
            t_k = tl.where(k_now, tl.where(k_min == k_max, k_max.to(tl.int64), lo_k), t_k)
            done_k = done_k | k_now
            p_now = (~done_p) & (p_min >= p_max)
            t_p = tl.where(p_now, lo_p + 1, t_p)
            done_p = done_p | p_now
            # t_p <= hi_p <= t_k, or t_k < hi_k <= t_p: only one threshold matters.
            p_moot = (~done_p) & done_k & (hi_p <= t_k)
            k_moot = (~done_k) & done_p & (hi_k <= t_p)
            t_p = tl.where(p_moot, KEY_NEG_INF, t_p)
            t_k = tl.where(k_moot, KEY_NEG_INF, t_k)
            done_p = done_p | p_moot
            done_k = done_k | k_moot
            enough = count >= top_k
            lo_k = tl.where(done_k | ~enough, lo_k, mid_k)
            hi_k = tl.where(done_k | enough, hi_k, mid_k)
            within = mass <= mass_limit
            hi_p = tl.where(done_p | ~within, hi_p, mid_p)
            lo_p = tl.where(done_p | within, lo_p, mid_p)
    # Undecided after 32 steps means fully converged: t_k = lo_k, t_p = hi_p.
    t_k = tl.where(done_k, t_k, lo_k)
    t_p = tl.where(done_p, t_p, hi_p)
    return tl.where(need_k | need_p, tl.maximum(t_k, t_p), KEY_NEG_INF).to(tl.int32)


@triton.jit
def _fold_argmax(score, cols, best, best_id):
    """Fold one vocab tile into a running per-row argmax. Ties go to the
    lowest id: within a tile by the min over equal columns, across tiles by
    the strict `>` (tiles arrive in increasing id order)."""
    tile_best = tl.max(score, axis=1)
    tile_id = tl.min(tl.where(score == tile_best[:, None], cols[None, :], 2147483647), axis=1)
    better = tile_best > best
    return tl.where(better, tile_best, best), tl.where(better, tile_id, best_id)


@triton.jit
def greedy_kernel(
    logits_ptr, out_ptr, n_rows, vocab, row_stride,
    BLOCK_R: tl.constexpr, BLOCK_V: tl.constexpr,
):
    """out[r] = argmax_j logits[r, j], ties to the lowest j; NaN never wins; a
    row with nothing but -inf/NaN gives 0."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_mask = rows < n_rows
    one = tl.full([BLOCK_R], 1.0, tl.float32)
    best = tl.full([BLOCK_R], float("-inf"), tl.float32)
    best_id = tl.zeros([BLOCK_R], tl.int32)
    for start in range(0, vocab, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        x, valid = _load_logits(logits_ptr, rows, row_mask, row_stride, cols, vocab, one)
        best, best_id = _fold_argmax(x, cols, best, best_id)
    tl.store(out_ptr + rows, best_id.to(tl.int64), mask=row_mask)


@triton.jit
def sample_kernel(
    logits_ptr, temperature_ptr, top_k_ptr, top_p_ptr, min_p_ptr, seed_ptr, position_ptr,
    out_ptr, n_rows, vocab, row_stride,
    BLOCK_R: tl.constexpr, BLOCK_V: tl.constexpr, ONE_TILE: tl.constexpr,
):
    """One token per row from softmax(logits / T) filtered by top-k, top-p
    (jointly, on the unfiltered distribution) and min-p (relative to the top
    prob), drawn by Gumbel-max with hash noise of (seed, position, token id).

    Greedy rows (T == 0 or top_k == 1) take the argmax, ties to the lowest id.
    The launcher passes top_k already clamped to [1, vocab] and top_p in (0, 1].
    A row with no finite logit gives token 0.
    """
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_mask = rows < n_rows
    # Masked loads may ignore `other=`: pick safe values with tl.where after.
    temp = tl.load(temperature_ptr + rows, mask=row_mask)
    top_k = tl.where(row_mask, tl.load(top_k_ptr + rows, mask=row_mask), 1)
    top_p = tl.where(row_mask, tl.load(top_p_ptr + rows, mask=row_mask), 1.0)
    min_p = tl.where(row_mask, tl.load(min_p_ptr + rows, mask=row_mask), 0.0)
    greedy = (~row_mask) | (temp == 0.0) | (top_k == 1)
    temp = tl.where(greedy, 1.0, temp)

    # Pass 1: row max and softmax normaliser (rescaled as the max grows),
    # needed only by the filters: plain temperature sampling skips it.
    m = tl.full([BLOCK_R], float("-inf"), tl.float32)
    z = tl.zeros([BLOCK_R], tl.float32)
    filtered = (~greedy) & ((top_k < vocab) | (top_p < 1.0) | (min_p > 0.0))
    if tl.max(filtered.to(tl.int32), axis=0) > 0:
        for start in range(0, vocab, BLOCK_V):
            cols = start + tl.arange(0, BLOCK_V)
            x, valid = _load_logits(logits_ptr, rows, row_mask, row_stride, cols, vocab, temp)
            m_new = tl.maximum(m, tl.max(x, axis=1))
            # Rows seen only -inf so far use 0 as their max (no -inf - -inf).
            m_safe = tl.where(m_new > float("-inf"), m_new, 0.0)
            scale = tl.where(m > float("-inf"), tl.exp(m - m_safe), 0.0)
            e = tl.exp(x - m_safe[:, None])
            z = z * scale + tl.sum(e, axis=1)
            m = m_new
    # From here a row with no finite logit (or no pass 1) has m = 0: exp(x - m)
    # never sees -inf - -inf, and min_p 0 keeps every finite token.
    m = tl.where(m > float("-inf"), m, 0.0)

    # Pass 2: the joint top-k / top-p threshold (skipped when no row needs it).
    # top_p 1 means no top-p: an infinite mass limit, not 1 * Z, whose
    # rounding could cut the least likely tokens.
    threshold = tl.full([BLOCK_R], KEY_NEG_INF, tl.int32)
    need_search = (~greedy) & ((top_k < vocab) | (top_p < 1.0))
    if tl.max(need_search.to(tl.int32), axis=0) > 0:
        mass_limit = tl.where(top_p < 1.0, top_p * z, float("inf"))
        threshold = _search_threshold(
            logits_ptr, rows, row_mask, row_stride, vocab, temp, m, top_k, mass_limit, _ordered_key(m),
            need_search & (top_k < vocab), need_search & (top_p < 1.0), True, ONE_TILE, BLOCK_R, BLOCK_V,
        )

    # Pass 3: Gumbel-max over the kept set (plain argmax for greedy rows).
    seed = tl.load(seed_ptr + rows, mask=row_mask)
    position = tl.load(position_ptr + rows, mask=row_mask)
    stream = _row_stream(seed, position)
    best = tl.full([BLOCK_R], float("-inf"), tl.float32)
    best_id = tl.zeros([BLOCK_R], tl.int32)
    for start in range(0, vocab, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        x, valid = _load_logits(logits_ptr, rows, row_mask, row_stride, cols, vocab, temp)
        key = _ordered_key(x)
        kept = (key >= threshold[:, None]) & (tl.exp(x - m[:, None]) >= min_p[:, None])
        kept = (kept | greedy[:, None]) & (x > float("-inf"))
        noise = _gumbel(stream[:, None], cols[None, :])
        score = tl.where(greedy[:, None], x, x + noise)
        score = tl.where(kept, score, float("-inf"))
        best, best_id = _fold_argmax(score, cols, best, best_id)
    tl.store(out_ptr + rows, best_id.to(tl.int64), mask=row_mask)


@triton.jit
def renorm_probs_kernel(
    probs_ptr, top_k_ptr, top_p_ptr, min_p_ptr, out_ptr, n_rows, vocab, row_stride, out_row_stride,
    BLOCK_R: tl.constexpr, BLOCK_V: tl.constexpr, ONE_TILE: tl.constexpr,
):
    """out = probs restricted to the tokens top-k, top-p and min-p keep (the
    same rules as sample_kernel, on probabilities), divided by their sum.

    A row with no positive probability comes out all zero.
    """
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_mask = rows < n_rows
    top_k = tl.where(row_mask, tl.load(top_k_ptr + rows, mask=row_mask), vocab)
    top_p = tl.where(row_mask, tl.load(top_p_ptr + rows, mask=row_mask), 1.0)
    min_p = tl.where(row_mask, tl.load(min_p_ptr + rows, mask=row_mask), 0.0)
    unused = tl.full([BLOCK_R], 1.0, tl.float32)

    p_max = tl.zeros([BLOCK_R], tl.float32)
    total = tl.zeros([BLOCK_R], tl.float32)
    for start in range(0, vocab, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        p, valid = _load_probs(probs_ptr, rows, row_mask, row_stride, cols, vocab)
        p_max = tl.maximum(p_max, tl.max(p, axis=1))
        total += tl.sum(p, axis=1)

    threshold = tl.full([BLOCK_R], KEY_NEG_INF, tl.int32)
    need_search = row_mask & ((top_k < vocab) | (top_p < 1.0))
    if tl.max(need_search.to(tl.int32), axis=0) > 0:
        mass_limit = tl.where(top_p < 1.0, top_p * total, float("inf"))
        threshold = _search_threshold(
            probs_ptr, rows, row_mask, row_stride, vocab, unused, p_max, top_k, mass_limit, _ordered_key(p_max),
            need_search & (top_k < vocab), need_search & (top_p < 1.0), False, ONE_TILE, BLOCK_R, BLOCK_V,
        )
    floor = min_p * p_max

    kept_total = tl.zeros([BLOCK_R], tl.float32)
    for start in range(0, vocab, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        p, valid = _load_probs(probs_ptr, rows, row_mask, row_stride, cols, vocab)
        key = _ordered_key(p)
        kept = (key >= threshold[:, None]) & (p >= floor[:, None])
        kept_total += tl.sum(tl.where(kept, p, 0.0), axis=1)
    inv_total = tl.where(kept_total > 0.0, 1.0 / tl.where(kept_total > 0.0, kept_total, 1.0), 0.0)

    for start in range(0, vocab, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        p, valid = _load_probs(probs_ptr, rows, row_mask, row_stride, cols, vocab)
        key = _ordered_key(p)
        kept = (key >= threshold[:, None]) & (p >= floor[:, None])
        out = tl.where(kept, p * inv_total[:, None], 0.0)
        offs = rows[:, None].to(tl.int64) * out_row_stride + cols[None, :]
        tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=valid)
