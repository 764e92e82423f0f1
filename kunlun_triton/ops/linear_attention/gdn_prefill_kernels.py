"""Gated delta rule prefill over a ragged batch, chunked (WY / UT form), in two
kernels (the recurrence and the decode: gdn_kernels).

A chunk of C tokens from state S0 [K, V] (k and q L2-normalised, G_i = g_1 +
... + g_i inside the chunk, so G_i - G_j <= 0 for j <= i since g <= 0): the
new values X [C, V] solve the unit lower-triangular system

    (I + L) X = beta (v - e^G k S0),   L_ij = beta_i e^{G_i - G_j} (k_i . k_j)  (j < i)

so with T = (I + L)^-1 (FLA's w = T (beta e^G k), u = T (beta v)):

    X   = T diag(beta) (v - e^G k S0)                  (= u - w S0)
    o_i = scale (e^{G_i} q_i S0 + sum_{j<=i} e^{G_i - G_j} (q_i . k_j) X_j)
    S   = e^{G_C} S0 + sum_j e^{G_C - G_j} k_j X_j^T

`gdn_prefill_chunk_kernel`, a program per (chunk, value head), does all that
needs no state, once: gates, in-chunk cumsum, the L2 norms (as row scales),
T diag(beta), the causal scores, k / |k|, scale e^G q / |q|, into a
workspace (fp32; the q in bf16 when q is, k / |k| and T diag(beta) too where
the dots take bf16). `gdn_prefill_state_kernel`, a program per (value block, value
head, request), walks the request's chunks with its [K, BLOCK_V] state slice
and its own v columns (T applied there, so no [C, V] u and no [C, K] w is
stored: w S0 = T diag(beta) e^G k S0), the output fused (no per-chunk states
stored). The one-kernel form it replaces solved each chunk row by row on
[C, BLOCK_V] tiles, once per value block: 399,016 warp-instructions a token
and 72 spilled bytes on sm_90 at Qwen3-Next dims and 512 tokens, against
13,958 here with SGLang's Triton 3.8 and 14,330 with 3.9, no spills with
either (docs/linear-attention-cost.md).
The output's q (scale e^G q / |q|) is kept in bf16 when q is and multiplied
with S in bf16 (as FLA's output kernel does with bf16 states): it reaches only the
output, and halves that tile's registers in the state pass. With bf16 inputs
where the dots take bf16 (sm_90, gfx942), k / |k| and T diag(beta) are bf16
too and the state pass's three other products are bf16 dots ((k / |k|) S,
T diag(beta) (v - ...), (k / |k|)^T X, with S, the right side and X rounded
to bf16), as FLA's chain keeps w, u, A, h and v_new in bf16: at 32 columns x
4 warps the pass drops from 255 registers (Triton 3.9: 128 spilled bytes) to
166 (3.8: 186), none spilled, 7,312 -> 4,220 warp-instructions a token (3.8:
7,154 -> 4,350). That rounding, emulated at Qwen3-Next dims (512 to 2,048
tokens), leaves the final state 2.8e-3 to 4.2e-3 off the float64 recurrence
(relative norm; fp32 workspace 3.2e-4 to 5.3e-4, FLA's chain 2.7e-3 to
4.7e-3) and the output 2.4e-3 to 5.0e-3 (FLA's 4.0e-3 to 5.4e-3).

T by doubling the diagonal blocks (`_unit_lower_inverse`): log2(C) - 1
levels of two [C, C] products (C = 64: ten), instead of C - 1 dependent
row steps; the products are `tl.dot` (USE_DOT) or broadcast `tl.sum`s
(Kunlun: chunk 8). No reshape, no scan, no atomics. Padded rows of a
request's last chunk load as zeros with g = beta = 0: their k, q and T's
columns are zero, so they add nothing, and the state pass masks them out of
the output.
"""

import triton
import triton.language as tl

from ..loads import masked_load
from .gdn_kernels import L2_EPS, _gates, _mm, _mm_nt, _mm_tn, _state_ptrs

LOG2_MAX = tl.constexpr(9)  # doubling levels 1..8: chunks up to 512 tokens (gdn.MAX_CHUNK)


@triton.jit
def _chunk_ptrs(ptr, chunk, hv, rows, cols, CHUNK: tl.constexpr, WIDTH: tl.constexpr):
    """[CHUNK, WIDTH] addresses of a workspace tile [chunks, value heads, CHUNK, WIDTH] (contiguous;
    the value heads are both kernels' grid axis 1)."""
    return (ptr + (chunk * tl.num_programs(1) + hv) * (CHUNK * WIDTH)) + (rows[:, None] * WIDTH + cols[None, :])


@triton.jit
def _chunk_rows(base, stride_t, rows, kk, tile, DOT_BF16: tl.constexpr, LOAD_IGNORES_OTHER: tl.constexpr):
    """A chunk's [C, BLOCK_K] rows of q or k from `base` (its first token, its head): (the dot
    operand: the input's dtype, fp32 where a bf16 dot is wrong (DOT_BF16 off); the rows in fp32)."""
    x = masked_load(base + (rows[:, None] * stride_t + kk[None, :]), tile, 0.0, LOAD_IGNORES_OTHER)
    xf = x.to(tl.float32)
    if not DOT_BF16 and base.dtype.element_ty == tl.bfloat16:
        x = xf
    return x, xf


@triton.jit
def _inv_norms(gram, eye, ENABLED: tl.constexpr):
    """1 / sqrt(|x_i|^2 + 1e-6) from the diagonal of gram = x x^T [R, R] (ones when not ENABLED): a
    reduction over [R, R] rather than [R, K]."""
    if ENABLED:
        return 1.0 / tl.sqrt(tl.sum(tl.where(eye, gram, 0.0), axis=1) + L2_EPS)
    else:
        return tl.sum(tl.where(eye, 1.0, 0.0), axis=1)


@triton.jit
def _unit_lower_inverse(a, CHUNK: tl.constexpr, USE_DOT: tl.constexpr):
    """(I + a)^-1 for a [C, C] strictly lower, by doubling the diagonal
    blocks: with T the inverse of the diagonal blocks of size s (exact for
    s = 2: I - a on them), the blocks of size 2s are T - T E T, E the part
    of a inside those blocks and outside the size-s ones ((I + T E)^-1 =
    I - T E: T E has no two consecutive nonzero blocks). Two products a
    level, log2(C) - 1 levels (C = 64: ten [64, 64] products); no row-by-row
    step, no reshape, and the same block forward substitution as a
    row-by-row solve in exact arithmetic."""
    rows = tl.arange(0, CHUNK)
    # (i ^ j) >> s == 1: i and j in one block of 2^(s+1) rows and not in one of 2^s
    apart = rows[:, None] ^ rows[None, :]
    t = tl.where(apart < 2, -a, 0.0) + tl.where(apart == 0, 1.0, 0.0)
    for level in tl.static_range(1, LOG2_MAX):
        if (1 << level) < CHUNK:  # t inverts the blocks of 2^level rows
            t = t - _mm(t, _mm(tl.where((apart >> level) == 1, a, 0.0), t, USE_DOT), USE_DOT)
    return t


@triton.jit
def _ws_mm(a, b, TRANS_A: tl.constexpr, USE_DOT: tl.constexpr, DOT_BF16: tl.constexpr):
    """a [M, K] (a [K, M]^T where TRANS_A), a workspace tile, @ b [K, N] (fp32). A bf16 tile (the
    launcher stores k / |k| and T diag(beta) in bf16 only where these run as bf16 dots): a bf16 dot
    with b rounded to bf16, as FLA's w h, A (beta v) and k^T v_new with its bf16 h and v_new."""
    if USE_DOT and DOT_BF16 and a.dtype == tl.bfloat16:
        if TRANS_A:
            return tl.dot(tl.trans(a), b.to(tl.bfloat16))
        else:
            return tl.dot(a, b.to(tl.bfloat16))
    elif TRANS_A:
        return _mm_tn(a.to(tl.float32), b, USE_DOT)
    else:
        return _mm(a.to(tl.float32), b, USE_DOT)


@triton.jit(do_not_specialize=["n_requests"])
def gdn_prefill_chunk_kernel(
    q_ptr, k_ptr, a_ptr, b_ptr, alog_ptr, dt_bias_ptr, query_start_loc_ptr, chunk_start_ptr, chunk_request_ptr,
    kn_ptr, qg_ptr, scores_ptr, tb_ptr, rows_ptr, decay_ptr,
    n_requests, q_stride_t, q_stride_h, k_stride_t, k_stride_h, a_stride, b_stride, scale,
    KEY_DIM: tl.constexpr, BLOCK_K: tl.constexpr, GROUP: tl.constexpr, CHUNK: tl.constexpr,
    QK_L2NORM: tl.constexpr, USE_DOT: tl.constexpr, DOT_BF16: tl.constexpr, LOAD_IGNORES_OTHER: tl.constexpr,
):
    """Program (chunk, value head): writes k / |k| and scale e^G q / |q|
    [C, K], the causal scores e^{G_i - G_j} (q_i . k_j) [C, C], T diag(beta)
    [C, C], e^G and e^{G_C - G} [2, C] and e^{G_C}. The grid bounds the
    chunks from shapes alone (tokens // C + requests); chunk_request (a
    device-side searchsorted) says whose a chunk is, n_requests for the
    spare ones, which do nothing."""
    c, hv = tl.program_id(0), tl.program_id(1)
    n = tl.load(chunk_request_ptr + c)
    if n < n_requests:
        h = hv // GROUP
        start = tl.load(query_start_loc_ptr + n).to(tl.int64)
        length = tl.load(query_start_loc_ptr + n + 1).to(tl.int64) - start
        c0 = (c - tl.load(chunk_start_ptr + n)).to(tl.int64) * CHUNK
        rows = tl.arange(0, CHUNK)
        kk = tl.arange(0, BLOCK_K)
        tmask = c0 + rows < length
        first = start + c0  # the chunk's first token: scalar bases, int32 offsets inside the chunk
        a = masked_load(a_ptr + first * a_stride + hv + rows * a_stride, tmask, 0.0, LOAD_IGNORES_OTHER)
        b = masked_load(b_ptr + first * b_stride + hv + rows * b_stride, tmask, 0.0, LOAD_IGNORES_OTHER)
        g, beta = _gates(a.to(tl.float32), b.to(tl.float32), tl.load(alog_ptr + hv).to(tl.float32),
                         tl.load(dt_bias_ptr + hv).to(tl.float32))  # fmt: skip
        g = tl.where(tmask, g, 0.0)
        beta = tl.where(tmask, beta, 0.0)
        causal = rows[:, None] >= rows[None, :]
        eye = rows[:, None] == rows[None, :]
        G = tl.sum(tl.where(causal, g[None, :], 0.0), axis=1)  # G_i = sum_{j <= i} g_j
        g_total = tl.sum(g, axis=0)
        # the L2 norms as row scales (from the Gram matrices' diagonals) on the products and the stores,
        # never a pass over a [C, K] tile; k . k and q . k in the inputs' dtype where there is a dot
        # (products exact, fp32 sums; fp32 operands where a bf16 dot is wrong, DOT_BF16: the interpreter)
        tile_k = tmask[:, None] & (kk < KEY_DIM)[None, :]
        kx, kf = _chunk_rows(k_ptr + first * k_stride_t + h * k_stride_h, k_stride_t, rows, kk, tile_k, DOT_BF16,
                             LOAD_IGNORES_OTHER)  # fmt: skip
        if USE_DOT:
            kkt = tl.dot(kx, tl.trans(kx))
        else:
            kkt = _mm_nt(kf, kf, USE_DOT)
        rk = _inv_norms(kkt, eye, QK_L2NORM)
        # whole tiles stored: the padded rows and columns are zeros, so the state pass loads without masks.
        # Stored here (k's live range ends): later (after q k^T or at the end) sm_90 spills 8 to 88 bytes
        tl.store(_chunk_ptrs(kn_ptr, c, hv, rows, kk, CHUNK, BLOCK_K),
                 (kf * rk[:, None]).to(kn_ptr.dtype.element_ty))  # fmt: skip
        qx, qf = _chunk_rows(q_ptr + first * q_stride_t + h * q_stride_h, q_stride_t, rows, kk, tile_k, DOT_BF16,
                             LOAD_IGNORES_OTHER)  # fmt: skip
        if USE_DOT:
            qkt, qqt = tl.dot(qx, tl.trans(kx)), tl.dot(qx, tl.trans(qx))
        else:
            qkt, qqt = _mm_nt(qf, kf, USE_DOT), _mm_nt(qf, qf, USE_DOT)
        rq = _inv_norms(qqt, eye, QK_L2NORM) * scale  # the output's scale folded into q
        e_g = tl.exp(G)
        # in q's dtype, scaled there: it reaches the output only (as FLA's bf16 q and states in its output
        # kernel); no fp32 [C, K] q tile on a bf16 dot (Triton 3.9: 24 spilled bytes with one)
        tl.store(_chunk_ptrs(qg_ptr, c, hv, rows, kk, CHUNK, BLOCK_K), qx * (rq * e_g).to(qx.dtype)[:, None])
        decay = tl.exp(tl.where(causal, G[:, None] - G[None, :], 0.0))  # e^{G_i - G_j}, j <= i (<= 1)
        tl.store(_chunk_ptrs(scores_ptr, c, hv, rows, rows, CHUNK, CHUNK),
                 tl.where(causal, decay * qkt * rq[:, None] * rk[None, :], 0.0))  # fmt: skip
        vec = (c * tl.num_programs(1) + hv) * (2 * CHUNK) + rows
        tl.store(rows_ptr + vec, e_g)
        tl.store(rows_ptr + vec + CHUNK, tl.exp(g_total - G))
        tl.store(decay_ptr + c * tl.num_programs(1) + hv, tl.exp(g_total))
        lmat = tl.where(rows[:, None] > rows[None, :], decay * kkt * (beta * rk)[:, None] * rk[None, :], 0.0)
        # beta on T's columns: the state pass needs T diag(beta) v, and v is never scaled
        tl.store(_chunk_ptrs(tb_ptr, c, hv, rows, rows, CHUNK, CHUNK),
                 (_unit_lower_inverse(lmat, CHUNK, USE_DOT) * beta[None, :]).to(tb_ptr.dtype.element_ty))  # fmt: skip


@triton.jit(do_not_specialize=["n_requests"])
def gdn_prefill_state_kernel(
    kn_ptr, qg_ptr, scores_ptr, tb_ptr, rows_ptr, decay_ptr, v_ptr, state_ptr, slots_ptr, query_start_loc_ptr,
    chunk_start_ptr, has_init_ptr, out_ptr, track_ptr, track_chunk_ptr,
    n_requests, v_stride_t, v_stride_h, st_stride_slot, st_stride_h, st_stride_v, st_stride_k, out_stride_t,
    out_stride_h, track_chunk_size,
    KEY_DIM: tl.constexpr, VALUE_DIM: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
    CHUNK: tl.constexpr, HAS_INIT_FLAGS: tl.constexpr, USE_DOT: tl.constexpr, LOAD_IGNORES_OTHER: tl.constexpr,
    PACKED_STATE: tl.constexpr, DOT_BF16: tl.constexpr, HAS_TRACK: tl.constexpr,
):
    """Program (value block, value head, request): the request's chunks in
    order from its slot's state, on its BLOCK_V value columns:

        X = T diag(beta) (v - e^G (k / |k|) S)           (= u - w S)
        o = qg S + scores X
        S = e^{G_C} S + (k / |k|)^T (e^{G_C - G} X)

    and the final state back to the slot. HAS_TRACK: the state after
    track_chunk[n] * track_chunk_size tokens (a multiple of CHUNK, the start
    of one of our chunks) also goes to track[n] ([requests, value heads, V,
    K], packed): SGLang's prefix-cache snapshot (extra_buffer)."""
    pid_v, hv, n = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    start = tl.load(query_start_loc_ptr + n).to(tl.int64)
    length = tl.load(query_start_loc_ptr + n + 1).to(tl.int64) - start
    first = tl.load(chunk_start_ptr + n).to(tl.int64)
    kk = tl.arange(0, BLOCK_K)
    vv = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
    kmask, vmask = kk < KEY_DIM, vv < VALUE_DIM
    slot = tl.load(slots_ptr + n).to(tl.int64)
    read = (kk[:, None] * 0 + slot) >= 0  # per-lane (a scalar mask trips the interpreter)
    if HAS_INIT_FLAGS:
        read = read & ((kk[:, None] * 0 + tl.load(has_init_ptr + n).to(tl.int32)) != 0)
    state_ptrs = _state_ptrs(state_ptr, slot, hv, kk, vv, st_stride_slot, st_stride_h, st_stride_v, st_stride_k,
                             KEY_DIM, PACKED_STATE)  # fmt: skip
    smask = kmask[:, None] & vmask[None, :]
    s = masked_load(state_ptrs, smask & read, 0.0, LOAD_IGNORES_OTHER).to(tl.float32)  # [BK, BV]
    rows = tl.arange(0, CHUNK)
    track_at = -1
    if HAS_TRACK:
        track_at = tl.load(track_chunk_ptr + n).to(tl.int64) * track_chunk_size
    for c0 in range(0, length, CHUNK):
        c = first + c0 // CHUNK
        if HAS_TRACK:
            if c0 == track_at:
                tl.store(_state_ptrs(track_ptr, n, hv, kk, vv, tl.num_programs(1) * VALUE_DIM * KEY_DIM,
                                     VALUE_DIM * KEY_DIM, KEY_DIM, 1, KEY_DIM, True),
                         s.to(track_ptr.dtype.element_ty), mask=smask)  # fmt: skip
        tile = ((c0 + rows) < length)[:, None] & vmask[None, :]
        v = masked_load((v_ptr + (start + c0) * v_stride_t + hv * v_stride_h) + (rows[:, None] * v_stride_t + vv[None, :]),
                        tile, 0.0, LOAD_IGNORES_OTHER).to(tl.float32)  # fmt: skip
        # workspace tiles are whole (zeros past the request's end and the head dims): no masks
        vec = (c * tl.num_programs(1) + hv) * (2 * CHUNK) + rows
        kn = tl.load(_chunk_ptrs(kn_ptr, c, hv, rows, kk, CHUNK, BLOCK_K))
        rhs = v - tl.load(rows_ptr + vec)[:, None] * _ws_mm(kn, s, False, USE_DOT, DOT_BF16)
        x = _ws_mm(tl.load(_chunk_ptrs(tb_ptr, c, hv, rows, rows, CHUNK, CHUNK)), rhs, False, USE_DOT,
                   DOT_BF16)  # [C, BV]
        qg = tl.load(_chunk_ptrs(qg_ptr, c, hv, rows, kk, CHUNK, BLOCK_K))
        if USE_DOT and (DOT_BF16 or qg_ptr.dtype.element_ty != tl.bfloat16):
            o = tl.dot(qg, s.to(qg_ptr.dtype.element_ty))
        else:
            o = _mm(qg.to(tl.float32), s, USE_DOT)
        o += _mm(tl.load(_chunk_ptrs(scores_ptr, c, hv, rows, rows, CHUNK, CHUNK)), x, USE_DOT)
        tl.store((out_ptr + (start + c0) * out_stride_t + hv * out_stride_h) + (rows[:, None] * out_stride_t + vv[None, :]),
                 o.to(out_ptr.dtype.element_ty), mask=tile)  # fmt: skip
        x = x * tl.load(rows_ptr + vec + CHUNK)[:, None]
        # k / |k| loaded again rather than held through the output (an L1 hit)
        kn = tl.load(_chunk_ptrs(kn_ptr, c, hv, rows, kk, CHUNK, BLOCK_K))
        s = tl.load(decay_ptr + c * tl.num_programs(1) + hv) * s + _ws_mm(kn, x, True, USE_DOT, DOT_BF16)
    if slot >= 0:
        tl.store(state_ptrs, s.to(state_ptr.dtype.element_ty), mask=smask)
