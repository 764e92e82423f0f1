"""Gated delta rule kernels: the one-token decode (fused with the gating and
the q/k L2 norm, as SGLang's ``fused_sigmoid_gating_delta_rule_update``) and
the helpers the chunked prefill (gdn_prefill_kernels) shares.

Per request and value head hv (key head hv // GROUP), state S [K, V] fp32:

    g_t = -exp(A_log) * softplus(a_t + dt_bias)    beta_t = sigmoid(b_t)
    q_t, k_t <- q_t / sqrt(|q_t|^2 + 1e-6), k_t / sqrt(|k_t|^2 + 1e-6)
    S <- exp(g_t) S;   S <- S + k_t (beta_t (v_t - S^T k_t))^T;   o_t = scale S^T q_t

The chunked prefill (gdn_prefill_kernels) solves each chunk's system once
per (chunk, value head) and walks the chunks with the state in a second
kernel. The products are `tl.dot` (USE_DOT, from the target's capabilities /
the config's ``formulation``) or broadcast `tl.sum`s (Kunlun: small tiles).
A decode program owns one request, one value head and BLOCK_V value columns:
it reads its [K, BLOCK_V] slice of the state once and writes it once. The
pool holds S transposed ([slots, HV, V, K], SGLang's layout); any strides
work.
"""

import triton
import triton.language as tl

from ..loads import masked_load

L2_EPS = tl.constexpr(1e-6)
SOFTPLUS_THRESHOLD = tl.constexpr(20.0)


@triton.jit
def _gates(a, b, A_log, dt_bias):
    """g = -exp(A_log) softplus(a + dt_bias) (linear above 20, as SGLang), beta = sigmoid(b)."""
    x = a + dt_bias
    softplus = tl.where(x <= SOFTPLUS_THRESHOLD, tl.log(1.0 + tl.exp(tl.minimum(x, SOFTPLUS_THRESHOLD))), x)
    return -tl.exp(A_log) * softplus, 1.0 / (1.0 + tl.exp(-b))


@triton.jit
def _l2_rows(x, ENABLED: tl.constexpr):
    """Each row of x [R, K] over sqrt(|row|^2 + 1e-6)."""
    if ENABLED:
        return x * (1.0 / tl.sqrt(tl.sum(x * x, axis=1) + L2_EPS))[:, None]
    else:
        return x


@triton.jit
def _mm(a, b, USE_DOT: tl.constexpr):
    """a [M, K] @ b [K, N]."""
    if USE_DOT:
        return tl.dot(a, b)
    else:
        return tl.sum(a[:, :, None] * b[None, :, :], axis=1)


@triton.jit
def _mm_nt(a, b, USE_DOT: tl.constexpr):
    """a [M, K] @ b[N, K]^T."""
    if USE_DOT:
        return tl.dot(a, tl.trans(b))
    else:
        return tl.sum(a[:, None, :] * b[None, :, :], axis=2)


@triton.jit
def _mm_tn(a, b, USE_DOT: tl.constexpr):
    """a[K, M]^T @ b [K, N]."""
    if USE_DOT:
        return tl.dot(tl.trans(a), b)
    else:
        return tl.sum(a[:, :, None] * b[:, None, :], axis=0)


@triton.jit
def _state_ptrs(state_ptr, slot, hv, kk, vv, st_stride_slot, st_stride_h, st_stride_v, st_stride_k,
                KEY_DIM: tl.constexpr, PACKED_STATE: tl.constexpr):
    """[BLOCK_K, BLOCK_V] addresses of a slot's state slice. PACKED_STATE (each
    [V, K] head packed, K contiguous): constant strides, so the tile's offsets
    fold into the loads' and stores' immediates instead of 64-bit addresses
    held from the load to the store (sm_90 decode: 170 registers, not 255)."""
    base = state_ptr + tl.maximum(slot, 0) * st_stride_slot + hv * st_stride_h
    if PACKED_STATE:
        return base + vv[None, :] * KEY_DIM + kk[:, None]
    else:
        return base + vv[None, :] * st_stride_v + kk[:, None] * st_stride_k


@triton.jit(do_not_specialize=["n_requests"])
def gdn_decode_kernel(
    q_ptr, k_ptr, v_ptr, a_ptr, b_ptr, alog_ptr, dt_bias_ptr, state_ptr, slots_ptr, track_slots_ptr, out_ptr,
    n_requests, q_stride_t, q_stride_h, k_stride_t, k_stride_h, v_stride_t, v_stride_h, a_stride, b_stride,
    st_stride_slot, st_stride_h, st_stride_v, st_stride_k, out_stride_t, out_stride_h, scale,
    KEY_DIM: tl.constexpr, VALUE_DIM: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
    GROUP: tl.constexpr, QK_L2NORM: tl.constexpr, LOAD_IGNORES_OTHER: tl.constexpr, PACKED_STATE: tl.constexpr,
    HAS_TRACK: tl.constexpr,
):
    """Program (value block, value head, request): one token's step. HAS_TRACK: the new state also
    goes to slot track_slots[n] where that is >= 0 (SGLang's prefix-cache snapshot, written here
    rather than copied from the slot by another launch)."""
    pid_v, hv, n = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    h = hv // GROUP
    kk = tl.arange(0, BLOCK_K)
    vv = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
    kmask, vmask = kk < KEY_DIM, vv < VALUE_DIM
    slot = tl.load(slots_ptr + n).to(tl.int64)
    state_ptrs = _state_ptrs(state_ptr, slot, hv, kk, vv, st_stride_slot, st_stride_h, st_stride_v, st_stride_k,
                             KEY_DIM, PACKED_STATE)  # fmt: skip
    smask = kmask[:, None] & vmask[None, :]
    s = masked_load(state_ptrs, smask & ((kk[:, None] * 0 + slot) >= 0), 0.0, LOAD_IGNORES_OTHER)  # [BK, BV]
    # q and k normalised over the key dim, then as [BLOCK_K, 1] columns
    q = masked_load(q_ptr + n * q_stride_t + h * q_stride_h + kk, kmask, 0.0, LOAD_IGNORES_OTHER).to(tl.float32)
    k = masked_load(k_ptr + n * k_stride_t + h * k_stride_h + kk, kmask, 0.0, LOAD_IGNORES_OTHER).to(tl.float32)
    if QK_L2NORM:
        q = q * (1.0 / tl.sqrt(tl.sum(q * q, axis=0) + L2_EPS))
        k = k * (1.0 / tl.sqrt(tl.sum(k * k, axis=0) + L2_EPS))
    # scale folded into q before the products (sm_90: 168 registers instead of 214, fewer instructions)
    q = (q * scale)[:, None]
    k = k[:, None]
    v = tl.load(v_ptr + n * v_stride_t + hv * v_stride_h + vv, mask=vmask).to(tl.float32)
    g, beta = _gates(tl.load(a_ptr + n * a_stride + hv).to(tl.float32), tl.load(b_ptr + n * b_stride + hv).to(tl.float32),
                     tl.load(alog_ptr + hv).to(tl.float32), tl.load(dt_bias_ptr + hv).to(tl.float32))  # fmt: skip
    s = s.to(tl.float32) * tl.exp(g)
    delta = beta * (v - tl.sum(s * k, axis=0))  # [BV]
    s = s + k * delta[None, :]
    o = tl.sum(s * q, axis=0)
    tl.store(out_ptr + n * out_stride_t + hv * out_stride_h + vv, o.to(out_ptr.dtype.element_ty), mask=vmask)
    if slot >= 0:
        tl.store(state_ptrs, s.to(state_ptr.dtype.element_ty), mask=smask)
    if HAS_TRACK:
        track = tl.load(track_slots_ptr + n).to(tl.int64)
        if track >= 0:
            tl.store(_state_ptrs(state_ptr, track, hv, kk, vv, st_stride_slot, st_stride_h, st_stride_v, st_stride_k,
                                 KEY_DIM, PACKED_STATE), s.to(state_ptr.dtype.element_ty), mask=smask)  # fmt: skip
