"""Float64 references of the linear-attention ops: the oracles of the kernels
and the torch fallback, with the ops' own signatures.

The gated delta rule, for one request and one value head (key head
``hv // (value heads / key heads)``), state S [key dim, value dim]:

    g_t    = -exp(A_log) * softplus(a_t + dt_bias)     beta_t = sigmoid(b_t)
    q_t, k_t <- q_t / sqrt(|q_t|^2 + 1e-6), k_t / sqrt(|k_t|^2 + 1e-6)
    S     <- exp(g_t) S
    S     <- S + k_t (beta_t (v_t - S^T k_t))^T
    o_t    = scale * S^T q_t

(SGLang's ``fused_sigmoid_gating_delta_rule_update``, softplus with beta 1 and
threshold 20). The pool stores S transposed, [slots, value heads, value dim,
key dim] as SGLang's does; the ops take any strides. The plain loop below is
the oracle of the decode and the chunked prefill alike.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

L2_EPS = 1e-6


def _silu(y: torch.Tensor) -> torch.Tensor:
    return y * torch.sigmoid(y)


def _slots(cache_indices: torch.Tensor) -> list[int]:
    return [int(s) for s in cache_indices.tolist()]


def causal_conv1d(x, weight, bias, conv_states, query_start_loc, cache_indices, has_initial_state=None,
                  activation="silu", *, max_len=None):  # fmt: skip
    """x [tokens, dim] (requests back to back, bounds in query_start_loc);
    weight [dim, width]; conv_states [slots, dim, width - 1] (updated in place)."""
    width = weight.shape[1]
    out = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    bounds = query_start_loc.tolist()
    w = weight.double()
    for n, slot in enumerate(_slots(cache_indices)):
        start, end = bounds[n], bounds[n + 1]
        use = slot >= 0 and (has_initial_state is None or bool(has_initial_state[n]))
        init = conv_states[slot].double().T if use else x.new_zeros(width - 1, x.shape[1], dtype=torch.float64)
        full = torch.cat([init, x[start:end].double()])  # [width - 1 + L, dim]
        for t in range(end - start):
            y = (full[t : t + width] * w.T).sum(0)
            out[start + t] = y + (bias.double() if bias is not None else 0)
        if slot >= 0:
            conv_states[slot] = full[full.shape[0] - (width - 1) :].T.to(conv_states.dtype)
    if activation == "silu":
        out = _silu(out)
    return out.to(x.dtype)


def causal_conv1d_update(x, conv_states, weight, bias, cache_indices, activation="silu", *, track_slots=None):
    """x [batch, dim], one token per request; the state rolls left by one (and
    is copied to track_slots[n] where that is >= 0)."""
    width = weight.shape[1]
    out = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    tracks = _slots(track_slots) if track_slots is not None else [-1] * x.shape[0]
    for n, slot in enumerate(_slots(cache_indices)):
        init = conv_states[slot].double().T if slot >= 0 else x.new_zeros(width - 1, x.shape[1], dtype=torch.float64)
        full = torch.cat([init, x[n : n + 1].double()])
        out[n] = (full * weight.double().T).sum(0) + (bias.double() if bias is not None else 0)
        for target in (slot, tracks[n]):
            if target >= 0:
                conv_states[target] = full[1:].T.to(conv_states.dtype)
    if activation == "silu":
        out = _silu(out)
    return out.to(x.dtype)


def gdn_gates(a, b, A_log, dt_bias):
    """g = -exp(A_log) * softplus(a + dt_bias) (threshold 20), beta = sigmoid(b), float64."""
    x = a.double() + dt_bias.double()
    softplus = torch.where(x <= 20.0, F.softplus(x), x)
    return -torch.exp(A_log.double()) * softplus, torch.sigmoid(b.double())


def _l2(x):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + L2_EPS)


def gated_delta_recurrence(q, k, v, g, beta, state, scale, qk_l2norm=True):
    """The plain loop for one request: q, k [T, H, K]; v [T, HV, V]; g, beta
    [T, HV]; state [HV, K, V] float64 (updated). Returns o [T, HV, V] float64."""
    hv_heads, group = v.shape[1], v.shape[1] // k.shape[1]
    q, k, v = q.double(), k.double(), v.double()
    if qk_l2norm:
        q, k = _l2(q), _l2(k)
    out = torch.empty(v.shape, dtype=torch.float64, device=v.device)
    for t in range(q.shape[0]):
        for h in range(hv_heads):
            kt, qt = k[t, h // group], q[t, h // group]
            s = state[h] * torch.exp(g[t, h])
            s = s + torch.outer(kt, beta[t, h] * (v[t, h] - s.T @ kt))
            state[h] = s
            out[t, h] = scale * (s.T @ qt)
    return out


def _scale(scale, k):
    return k.shape[-1] ** -0.5 if scale is None else scale


def gated_delta_rule_decode(q, k, v, a, b, A_log, dt_bias, state_pool, cache_indices, scale=None, *,
                            qk_l2norm=True, track_slots=None):  # fmt: skip
    """One token per request: q, k [N, H, K]; v [N, HV, V]; a, b [N, HV];
    state_pool [slots, HV, V, K] (fp32, updated in place; slot < 0: zero
    state, nothing written; the new state also to track_slots[n] where that
    is >= 0). Returns o [N, HV, V] in v's dtype."""
    g, beta = gdn_gates(a, b, A_log, dt_bias)
    out = torch.empty(v.shape, dtype=torch.float64, device=v.device)
    tracks = _slots(track_slots) if track_slots is not None else [-1] * q.shape[0]
    for n, slot in enumerate(_slots(cache_indices)):
        state = _read_state(state_pool, slot, True, v.shape[1], k.shape[-1], v.shape[-1], v.device)
        out[n : n + 1] = gated_delta_recurrence(q[n : n + 1], k[n : n + 1], v[n : n + 1], g[n : n + 1],
                                                beta[n : n + 1], state, _scale(scale, k), qk_l2norm)  # fmt: skip
        for target in (slot, tracks[n]):
            if target >= 0:
                state_pool[target] = state.transpose(-1, -2).to(state_pool.dtype)
    return out.to(v.dtype)


def _read_state(state_pool, slot, use, heads, key_dim, value_dim, device):
    if slot >= 0 and use:
        return state_pool[slot].double().transpose(-1, -2).clone()  # [HV, K, V]
    return torch.zeros(heads, key_dim, value_dim, dtype=torch.float64, device=device)


def gated_delta_rule_prefill(q, k, v, a, b, A_log, dt_bias, state_pool, cache_indices, query_start_loc,
                             has_initial_state=None, scale=None, *, qk_l2norm=True, track_state=None,
                             track_chunk_idx=None, track_chunk_size=64):  # fmt: skip
    """Requests back to back: q, k [T, H, K]; v [T, HV, V]; a, b [T, HV];
    each request starts from its slot's state (zeros where has_initial_state
    is false or the slot is negative) and writes its final state there; the
    state after track_chunk_idx[n] * track_chunk_size of its tokens to
    track_state[n] (where that index is >= 0). Returns o [T, HV, V] in v's
    dtype."""
    g, beta = gdn_gates(a, b, A_log, dt_bias)
    out = torch.empty(v.shape, dtype=torch.float64, device=v.device)
    bounds = query_start_loc.tolist()
    points = [-1] * len(bounds) if track_chunk_idx is None else [i * track_chunk_size for i in _slots(track_chunk_idx)]
    for n, slot in enumerate(_slots(cache_indices)):
        s, e = bounds[n], bounds[n + 1]
        use = has_initial_state is None or bool(has_initial_state[n])
        state = _read_state(state_pool, slot, use, v.shape[1], k.shape[-1], v.shape[-1], v.device)
        cut = s + max(points[n], 0)  # the recurrence up to the snapshot, then on from it
        for lo, hi in ((s, cut), (cut, e)):
            out[lo:hi] = gated_delta_recurrence(q[lo:hi], k[lo:hi], v[lo:hi], g[lo:hi], beta[lo:hi], state,
                                                _scale(scale, k), qk_l2norm)  # fmt: skip
            if hi == cut and points[n] >= 0:
                track_state[n] = state.transpose(-1, -2).to(track_state.dtype)
        if slot >= 0:
            state_pool[slot] = state.transpose(-1, -2).to(state_pool.dtype)
    return out.to(v.dtype)


def gdn_split_qkvzba(mixed_qkvz, mixed_ba, num_k_heads, num_v_heads, head_k_dim, head_v_dim, layout="interleaved"):
    """(mixed_qkv [T, q | k | v], z [T, HV, V], b, a [T, HV]), new contiguous
    tensors. interleaved: HF transformers' ``Qwen3NextGatedDeltaNet.
    fix_query_key_value_ordering`` (per key head [q | k | v | z] and [b | a],
    value heads of a key head back to back), then its forward's flatten and
    cat of q, k, v. contiguous: Qwen3.5's separate projections (HF's
    ``in_proj_qkv`` [q | k | v], ``in_proj_z``, ``in_proj_b``, ``in_proj_a``)
    side by side, [qkv | z] and [b | a]."""
    tokens, group = mixed_qkvz.shape[0], num_v_heads // num_k_heads
    if layout == "interleaved":
        per_head = mixed_qkvz.reshape(tokens, num_k_heads, 2 * head_k_dim + 2 * group * head_v_dim)
        q, k, v, z = torch.split(per_head, [head_k_dim, head_k_dim, group * head_v_dim, group * head_v_dim], dim=2)
        b, a = torch.split(mixed_ba.reshape(tokens, num_k_heads, 2 * group), [group, group], dim=2)
    else:
        key_width, value_width = num_k_heads * head_k_dim, num_v_heads * head_v_dim
        q, k, v, z = torch.split(mixed_qkvz, [key_width, key_width, value_width, value_width], dim=1)
        b, a = torch.split(mixed_ba, [num_v_heads, num_v_heads], dim=1)
    flat = lambda t: t.reshape(tokens, math.prod(t.shape[1:]))  # noqa: E731 (not -1: ambiguous at 0 tokens)
    mixed_qkv = torch.cat([flat(q), flat(k), flat(v)], dim=-1)
    return (mixed_qkv, z.reshape(tokens, num_v_heads, head_v_dim).contiguous(),
            b.reshape(tokens, num_v_heads).contiguous(), a.reshape(tokens, num_v_heads).contiguous())  # fmt: skip
