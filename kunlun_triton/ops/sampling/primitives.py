"""Jit building blocks the sampling kernels share: order-preserving keys,
counter-based exponential noise, cleaned loads and the exact joint top-k / top-p
threshold of values held in registers.

Masked loads honour the per-target flag `IGNORES_OTHER`
(``capabilities().load_ignores_other``, True on Kunlun only): where it is set
the masked lanes are filled with ``tl.where`` after the load, elsewhere with
``other=`` (no extra select on CUDA/HIP).
"""

import triton
import triton.language as tl

from ..loads import masked_load  # noqa: F401  (the sampling kernels import it from here with the rest)

# Order-preserving int32 key of fp32 -inf (bits 0xff800000 with the low 31
# bits flipped, see ordered_key).
KEY_NEG_INF = tl.constexpr(-2139095041)
# Above every key of a non-NaN float (the key of +inf is 0x7f800000).
KEY_BIG = tl.constexpr(2147483647)
ID_BIG = tl.constexpr(2147483647)
FLT_MAX = tl.constexpr(3.4028234663852886e38)
FLT_MIN = tl.constexpr(1.1754943508222875e-38)  # the smallest normal float32
# A 32-bit key is pinned exactly after 32 halvings of a <= 2**32 wide range.
SEARCH_ITERS = tl.constexpr(32)


@triton.jit
def ordered_key(x):
    """int32 key with key(a) < key(b) iff a < b for non-NaN fp32 a, b.

    Non-negative floats order like their bit patterns; negative ones in
    reverse, so their low 31 bits are flipped (they stay negative as int32).
    ``x + 0.0`` turns -0.0 into +0.0 so the two zeros tie.
    """
    bits = (x + 0.0).to(tl.int32, bitcast=True)
    return tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


@triton.jit
def key_value(key):
    """The fp32 whose `ordered_key` is `key` (int32)."""
    bits = tl.where(key < 0, key ^ 0x7FFFFFFF, key)
    return bits.to(tl.float32, bitcast=True)


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
def row_stream(seed, position):
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
def exponential(stream, ids):
    """Exp(1) noise E = -log(u) for token ids `ids` of row streams `stream`
    (broadcast together): u = (23 bits of fmix32(stream + id * golden) +
    0.5) / 2**23, exactly representable in fp32 and strictly inside (0, 1),
    so 6e-8 < E < 16.7. The exponential race ``argmax_j w_j / E_j`` is the
    Gumbel-max draw ``argmax_j log w_j + g_j`` with ``g = -log E``: token j
    wins with probability w_j / sum w, at one log per token."""
    h = _fmix32(stream + ids.to(tl.uint32) * 0x9E3779B9)
    u = ((h >> 9).to(tl.float32) + 0.5) * 1.1920928955078125e-07
    return -tl.log(u)


@triton.jit
def load_logits(ptrs, mask, IGNORES_OTHER: tl.constexpr):
    """Logits as fp32 with NaN and masked lanes -> -inf (never drawn) and
    +inf -> the largest finite float (so differences stay finite)."""
    x = masked_load(ptrs, mask, float("-inf"), IGNORES_OTHER).to(tl.float32)
    x = tl.where(x == x, x, float("-inf"))
    return tl.minimum(x, FLT_MAX)


@triton.jit
def load_probs(ptrs, mask, IGNORES_OTHER: tl.constexpr):
    """Probabilities as fp32 with NaN, negatives and masked lanes -> 0 (the
    test comes first: a NaN must not survive a clamp), +inf -> the largest
    finite float."""
    p = masked_load(ptrs, mask, 0.0, IGNORES_OTHER).to(tl.float32)
    p = tl.where(p > 0.0, p, 0.0)
    return tl.minimum(p, FLT_MAX)


@triton.jit
def argmax_lowest(score, ids, axis: tl.constexpr):
    """(max, lowest id attaining it) along `axis`."""
    best = tl.max(score, axis=axis)
    best_id = tl.min(tl.where(score == tl.expand_dims(best, axis), ids, ID_BIG), axis=axis)
    return best, best_id


@triton.jit
def search_counts(key, w, valid, mid_k, mid_p, lo_k, hi_k, lo_p, hi_p):
    """One bisection step's view of a [rows, n] tile, per row: C(mid_k) =
    #{key >= mid_k}, M(mid_p) = sum of w over key > mid_p, and the smallest
    / largest key inside the intervals [lo_k, hi_k) and (lo_p, hi_p]
    (+-KEY_BIG when none)."""
    count = tl.sum((valid & (key >= mid_k[:, None])).to(tl.int32), axis=1)
    mass = tl.sum(tl.where(valid & (key > mid_p[:, None]), w, 0.0), axis=1)
    in_k = valid & (key >= lo_k[:, None]) & (key < hi_k[:, None])
    in_p = valid & (key > lo_p[:, None]) & (key <= hi_p[:, None])
    k_min = tl.min(tl.where(in_k, key, KEY_BIG), axis=1)
    k_max = tl.max(tl.where(in_k, key, -KEY_BIG), axis=1)
    p_min = tl.min(tl.where(in_p, key, KEY_BIG), axis=1)
    p_max = tl.max(tl.where(in_p, key, -KEY_BIG), axis=1)
    return count, mass, k_min, k_max, p_min, p_max


@triton.jit
def search_start(hi_key, need_k, need_p, BLOCK_R: tl.constexpr):
    """Initial bisection state: t_k in [lo_k, hi_k), t_p in (lo_p, hi_p];
    bounds in int64 so midpoints cannot overflow."""
    lo_k = tl.full([BLOCK_R], KEY_NEG_INF, tl.int64)  # C(lo_k) >= k
    hi_k = hi_key.to(tl.int64) + 1  # C(hi_k) = 0 < k
    lo_p = tl.full([BLOCK_R], KEY_NEG_INF - 1, tl.int64)  # M(lo_p) > limit
    hi_p = hi_key.to(tl.int64)  # M(hi_p) = 0 <= limit
    t_k = tl.full([BLOCK_R], KEY_NEG_INF, tl.int64)
    t_p = tl.full([BLOCK_R], KEY_NEG_INF, tl.int64)
    return lo_k, hi_k, lo_p, hi_p, t_k, t_p, ~need_k, ~need_p


@triton.jit
def search_update(
    count, mass, k_min, k_max, p_min, p_max, top_k, mass_limit, lo_k, hi_k, lo_p, hi_p, t_k, t_p, done_k, done_p
):
    """Move the bisection bounds after one step (see `threshold_in_tile`).

    A search is decided, and its bounds frozen, once its interval holds one
    distinct key (t_k is that key; t_p is lo_p + 1: keep key > lo_p), or when
    the other threshold is decided and provably larger.
    """
    mid_k = (lo_k + hi_k) >> 1
    mid_p = (lo_p + hi_p) >> 1
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
    return lo_k, hi_k, lo_p, hi_p, t_k, t_p, done_k, done_p


@triton.jit
def search_result(lo_k, hi_p, t_k, t_p, done_k, done_p, need_k, need_p):
    """Undecided after 32 steps means fully converged: t_k = lo_k, t_p = hi_p."""
    t_k = tl.where(done_k, t_k, lo_k)
    t_p = tl.where(done_p, t_p, hi_p)
    return tl.where(need_k | need_p, tl.maximum(t_k, t_p), KEY_NEG_INF).to(tl.int32)


@triton.jit
def threshold_in_tile(key, w, valid, top_k, mass_limit, hi_key, need_k, need_p, BLOCK_R: tl.constexpr):
    """The joint top-k / top-p threshold of values held in a [BLOCK_R, n]
    tile: keep a value when its key >= the result.

        top-k keeps key >= t_k, t_k the largest key with #{key >= t_k} >= k
              (= the k-th largest value; ties with it are kept too);
        top-p keeps key >= t_p, t_p the smallest key whose mass strictly
              above is <= mass_limit (SGLang's ``cumsum - prob <= top_p``
              rule, ties kept together).

    Bisection over the int32 key, both thresholds at once, each step one
    sweep of the tile; a row stops once its interval holds one distinct key.
    """
    lo_k, hi_k, lo_p, hi_p, t_k, t_p, done_k, done_p = search_start(hi_key, need_k, need_p, BLOCK_R)
    for _step in range(SEARCH_ITERS):
        if tl.max((~(done_k & done_p)).to(tl.int32), axis=0) > 0:
            # Every bound fits int32 (only their sums may not): compare in int32.
            count, mass, k_min, k_max, p_min, p_max = search_counts(
                key, w, valid, ((lo_k + hi_k) >> 1).to(tl.int32), ((lo_p + hi_p) >> 1).to(tl.int32),
                lo_k.to(tl.int32), hi_k.to(tl.int32), lo_p.to(tl.int32), hi_p.to(tl.int32),
            )
            lo_k, hi_k, lo_p, hi_p, t_k, t_p, done_k, done_p = search_update(
                count, mass, k_min, k_max, p_min, p_max, top_k, mass_limit,
                lo_k, hi_k, lo_p, hi_p, t_k, t_p, done_k, done_p,
            )  # fmt: skip
    return search_result(lo_k, hi_p, t_k, t_p, done_k, done_p, need_k, need_p)
