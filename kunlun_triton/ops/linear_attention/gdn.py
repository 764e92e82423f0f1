"""Gated delta rule ops (math: gdn_kernels): `gated_delta_rule_decode`, one
token per request fused with the gating and the q/k L2 norm (SGLang's
``fused_sigmoid_gating_delta_rule_update``), and `gated_delta_rule_prefill`,
a ragged batch in chunks (SGLang's ``fused_gdn_gating`` followed by FLA's
``chunk_gated_delta_rule``, in one launch). Both read each request's
recurrent state from the pool by slot and write it back in place."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...runtime import capabilities, launch_options, plan_cache, use_triton
from ..launch import KernelLaunch, constexpr_args, run_keywords
from ..spec import explicit_config, lookup_config
from ..validation import checked_mode, require_number, require_same_device, require_tensor
from . import gdn_kernels, gdn_prefill_kernels, reference
from .checks import check_slots, check_track_slots, check_track_state, ragged_max_len, require_requests

MAX_HEAD_DIM = 256  # a program holds a [head_dim, BLOCK_V] slice of the state
# prefill's chunk kernel (the config's launch options are the state pass's). sm_90, Qwen3-Next dims,
# 512 tokens, bf16: 4 warps, 246 registers, no spill, 9,608 warp-instructions a token (Triton 3.8;
# 3.9: 237, 10,110); 8 warps 17,264 (a [64, 64] product's operand staging is per warp)
CHUNK_WARPS = 4
MAX_CHUNK = 512  # gdn_prefill_kernels.LOG2_MAX


@dataclass(frozen=True)
class GdnPlan:
    launch: KernelLaunch  # decode's kernel; prefill's state pass
    block_v: int
    chunk_launch: KernelLaunch | None = None  # prefill's per-(chunk, value head) kernel
    chunk: int = 0
    block_k: int = 0
    bf16_workspace: bool = False  # prefill: k / |k| and T diag(beta) in bf16 when q is (bf16 dots)


def _pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _plan(op, key_dim, value_dim, group, l2norm, has_init, packed, has_track, config) -> GdnPlan:
    caps = capabilities()
    block_k = max(_pow2(key_dim), 16)
    block_v = min(config["BLOCK_V"], max(_pow2(value_dim), 16))
    common = dict(KEY_DIM=key_dim, VALUE_DIM=value_dim, BLOCK_K=block_k, BLOCK_V=block_v, GROUP=group,
                  QK_L2NORM=l2norm, LOAD_IGNORES_OTHER=caps.load_ignores_other, PACKED_STATE=packed)  # fmt: skip
    if op == "gated_delta_rule_decode":
        kernel = gdn_kernels.gdn_decode_kernel
        constexprs = constexpr_args(kernel, **common, HAS_TRACK=has_track)
    else:
        formulation = config.get("formulation") or ("dot" if caps.has_dot else "sum")
        if formulation not in ("dot", "sum"):
            raise ValueError(f"{op}: formulation must be 'dot' or 'sum', got {formulation!r}")
        use_dot = formulation == "dot"
        chunk = config["CHUNK"]
        if chunk & (chunk - 1) or not 0 < chunk <= MAX_CHUNK:
            raise ValueError(f"{op}: CHUNK must be a power of two up to {MAX_CHUNK}, got {chunk}")
        if use_dot:  # tl.dot takes no dimension under 16
            chunk, block_v = max(chunk, 16), max(block_v, 16)
            common["BLOCK_V"] = block_v
        prefill = dict(KEY_DIM=key_dim, BLOCK_K=block_k, CHUNK=chunk, USE_DOT=use_dot,
                       LOAD_IGNORES_OTHER=caps.load_ignores_other)  # fmt: skip
        kernel = gdn_prefill_kernels.gdn_prefill_state_kernel
        constexprs = constexpr_args(kernel, **prefill, VALUE_DIM=value_dim, BLOCK_V=block_v, HAS_INIT_FLAGS=has_init,
                                    PACKED_STATE=packed, DOT_BF16=caps.dot_bf16, HAS_TRACK=has_track)  # fmt: skip
        chunk_kernel = gdn_prefill_kernels.gdn_prefill_chunk_kernel
        chunk_constexprs = constexpr_args(chunk_kernel, **prefill, GROUP=group, QK_L2NORM=l2norm,
                                          DOT_BF16=caps.dot_bf16)  # fmt: skip
        chunk_options = {**config, "num_warps": CHUNK_WARPS}
        return GdnPlan(KernelLaunch(kernel, constexprs, run_keywords(launch_options(config))), block_v,
                       KernelLaunch(chunk_kernel, chunk_constexprs, run_keywords(launch_options(chunk_options))),
                       chunk, block_k, use_dot and caps.dot_bf16)  # fmt: skip
    return GdnPlan(KernelLaunch(kernel, constexprs, run_keywords(launch_options(config))), block_v)


@plan_cache
def _cached_plan(op, key_dim, value_dim, group, l2norm, has_init, packed, has_track) -> GdnPlan:
    return _plan(op, key_dim, value_dim, group, l2norm, has_init, packed, has_track,
                 lookup_config(op, key_dim=key_dim, value_dim=value_dim))  # fmt: skip


def _get_plan(op, key_dim, value_dim, group, l2norm, has_init, packed, config, has_track=False) -> GdnPlan:
    if config is None:
        return _cached_plan(op, key_dim, value_dim, group, l2norm, has_init, packed, has_track)
    return _plan(op, key_dim, value_dim, group, l2norm, has_init, packed, has_track,
                 explicit_config(op, config, key_dim=key_dim, value_dim=value_dim))  # fmt: skip


def _check(op, q, k, v, a, b, A_log, dt_bias, state_pool, scale):
    for name, t in (("q", q), ("k", k), ("v", v)):
        require_tensor(op, name, t, ndim=3)
    tokens, heads, key_dim = k.shape
    value_heads, value_dim = v.shape[1], v.shape[2]
    if tuple(q.shape) != tuple(k.shape):
        raise ValueError(f"{op}: q and k must have one shape, got {tuple(q.shape)} and {tuple(k.shape)}")
    if v.shape[0] != tokens:
        raise ValueError(f"{op}: v has {v.shape[0]} tokens but k has {tokens}")
    if heads == 0 or value_heads % heads:
        raise ValueError(f"{op}: value heads ({value_heads}) must be a multiple of key heads ({heads})")
    if max(key_dim, value_dim) > MAX_HEAD_DIM:
        raise ValueError(f"{op}: head dims must be <= {MAX_HEAD_DIM}, got key {key_dim}, value {value_dim}")
    for name, t in (("a", a), ("b", b)):
        require_tensor(op, name, t, ndim=2)
        if tuple(t.shape) != (tokens, value_heads):
            raise ValueError(f"{op}: {name} must be [tokens, value heads] = [{tokens}, {value_heads}], got "
                             f"{tuple(t.shape)}")  # fmt: skip
    for name, t in (("A_log", A_log), ("dt_bias", dt_bias)):
        require_tensor(op, name, t, ndim=1)
        if t.shape[0] != value_heads:
            raise ValueError(f"{op}: {name} has {t.shape[0]} entries for {value_heads} value heads")
    require_tensor(op, "state_pool", state_pool, ndim=4, last_dim_contiguous=False)
    if tuple(state_pool.shape[1:]) != (value_heads, value_dim, key_dim):
        raise ValueError(f"{op}: state_pool must be [slots, value heads, value dim, key dim] = "
                         f"[slots, {value_heads}, {value_dim}, {key_dim}], got {tuple(state_pool.shape)}")  # fmt: skip
    if scale is not None:
        require_number(op, "scale", scale, above=0.0)


def _packed(state_pool) -> bool:
    """Each slot's [V, K] heads packed, K contiguous (SGLang's pool): the
    kernels' PACKED_STATE (constant state strides)."""
    return state_pool.stride(3) == 1 and state_pool.stride(2) == state_pool.shape[3]


def _strides(q, k, v, a, b, state_pool):
    return (q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), a.stride(0), b.stride(0),
            *state_pool.stride())  # fmt: skip


def gated_delta_rule_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                            A_log: torch.Tensor, dt_bias: torch.Tensor, state_pool: torch.Tensor,
                            cache_indices: torch.Tensor, scale: float | None = None, *, qk_l2norm: bool = True,
                            track_slots: torch.Tensor | None = None, check: bool = True,
                            config: dict | None = None) -> torch.Tensor:  # fmt: skip
    """One gated-delta-rule step per request (math: gdn_kernels).

    q, k: [N, key heads, K]; v: [N, value heads, V] (value heads a multiple of
    key heads); a, b: [N, value heads]; A_log, dt_bias: [value heads];
    state_pool: [slots, value heads, V, K] (SGLang's layout, any strides,
    fp32 in practice): request n steps slot cache_indices[n] in place (slot
    -1: a zero state, nothing written). track_slots [N] (optional): where
    track_slots[n] >= 0 the new state goes to that slot too (SGLang's
    prefix-cache snapshot, extra_buffer). scale: default K ** -0.5. Returns o
    [N, value heads, V] in q's dtype.
    """
    op = "gated_delta_rule_decode"
    if checked_mode(check):
        _check(op, q, k, v, a, b, A_log, dt_bias, state_pool, scale)
        require_requests(op, cache_indices, None, q.shape[0])
        require_same_device(op, q=q, k=k, v=v, a=a, b=b, A_log=A_log, dt_bias=dt_bias, state_pool=state_pool,
                            cache_indices=cache_indices, track_slots=track_slots)  # fmt: skip
        check_slots(op, "cache_indices", cache_indices, state_pool.shape[0])
        check_track_slots(op, track_slots, cache_indices, state_pool.shape[0])
    scale = k.shape[-1] ** -0.5 if scale is None else float(scale)
    if not use_triton(op, q, k, v, state_pool):
        return reference.gated_delta_rule_decode(q, k, v, a, b, A_log, dt_bias, state_pool, cache_indices, scale,
                                                 qk_l2norm=qk_l2norm, track_slots=track_slots).to(q.dtype)  # fmt: skip
    tokens, heads, key_dim = k.shape
    value_heads, value_dim = v.shape[1], v.shape[2]
    plan = _get_plan(op, key_dim, value_dim, value_heads // heads, bool(qk_l2norm), False, _packed(state_pool),
                     config, track_slots is not None)  # fmt: skip
    out = q.new_empty(tokens, value_heads, value_dim)
    if tokens == 0:
        return out
    plan.launch((-(-value_dim // plan.block_v), value_heads, tokens), q, k, v, a, b, A_log, dt_bias, state_pool,
                cache_indices, cache_indices if track_slots is None else track_slots, out, tokens,
                *_strides(q, k, v, a, b, state_pool), out.stride(0), out.stride(1), scale)  # fmt: skip
    return out


def gated_delta_rule_prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                             A_log: torch.Tensor, dt_bias: torch.Tensor, state_pool: torch.Tensor,
                             cache_indices: torch.Tensor, query_start_loc: torch.Tensor,
                             has_initial_state: torch.Tensor | None = None, scale: float | None = None, *,
                             qk_l2norm: bool = True, track_state: torch.Tensor | None = None,
                             track_chunk_idx: torch.Tensor | None = None, track_chunk_size: int = 64,
                             check: bool = True, config: dict | None = None) -> torch.Tensor:  # fmt: skip
    """The gated delta rule over a ragged batch, in chunks (math: gdn_kernels).

    q, k: [T, key heads, K]; v: [T, value heads, V]; a, b: [T, value heads];
    request n is rows query_start_loc[n]:query_start_loc[n + 1]. It starts
    from slot cache_indices[n] of state_pool ([slots, value heads, V, K]),
    or from zeros where has_initial_state[n] is false (default: every
    request reads its slot) or the slot is -1, and writes its final state to
    the slot (not for -1). Returns o [T, value heads, V] in q's dtype.
    track_state [N, value heads, V, K] (contiguous) with track_chunk_idx [N]:
    the state after track_chunk_idx[n] * track_chunk_size tokens of request
    n goes to track_state[n] (-1: none; the point inside the request), as
    SGLang's snapshot-capable prefill kernels take it (extra_buffer);
    track_chunk_size must be a multiple of the config's CHUNK.
    config: CHUNK (tokens a chunk), BLOCK_V, formulation (dot | sum).
    """
    op = "gated_delta_rule_prefill"
    checked = checked_mode(check)
    batch = query_start_loc.shape[0] - 1 if isinstance(query_start_loc, torch.Tensor) else -1
    if (track_state is None) != (track_chunk_idx is None):
        raise ValueError(f"{op}: track_state and track_chunk_idx go together")
    if checked:
        _check(op, q, k, v, a, b, A_log, dt_bias, state_pool, scale)
        require_requests(op, cache_indices, has_initial_state, batch)
        require_same_device(op, q=q, k=k, v=v, a=a, b=b, A_log=A_log, dt_bias=dt_bias, state_pool=state_pool,
                            cache_indices=cache_indices, query_start_loc=query_start_loc,
                            has_initial_state=has_initial_state, track_state=track_state,
                            track_chunk_idx=track_chunk_idx)  # fmt: skip
        check_slots(op, "cache_indices", cache_indices, state_pool.shape[0])
        ragged_max_len(op, query_start_loc, batch, q.shape[0], None, True)
        check_track_state(op, track_state, track_chunk_idx, track_chunk_size, query_start_loc, state_pool)
    scale = k.shape[-1] ** -0.5 if scale is None else float(scale)
    if not use_triton(op, q, k, v, state_pool):
        return reference.gated_delta_rule_prefill(q, k, v, a, b, A_log, dt_bias, state_pool, cache_indices,
                                                  query_start_loc, has_initial_state, scale, qk_l2norm=qk_l2norm,
                                                  track_state=track_state, track_chunk_idx=track_chunk_idx,
                                                  track_chunk_size=track_chunk_size).to(q.dtype)  # fmt: skip
    tokens, heads, key_dim = k.shape
    value_heads, value_dim = v.shape[1], v.shape[2]
    tracking = track_state is not None
    plan = _get_plan(op, key_dim, value_dim, value_heads // heads, bool(qk_l2norm), has_initial_state is not None,
                     _packed(state_pool), config, tracking)  # fmt: skip
    if tracking and track_chunk_size % plan.chunk:
        raise ValueError(f"{op}: track_chunk_size {track_chunk_size} is not a multiple of the config's CHUNK "
                         f"{plan.chunk}: the snapshot must fall on a chunk boundary")  # fmt: skip
    out = q.new_empty(tokens, value_heads, value_dim)
    if batch <= 0:
        return out
    # chunks: at most tokens // CHUNK + requests, a bound from shapes (no host sync); chunk_start[n] is
    # request n's first chunk, chunk_request[c] chunk c's request (n_requests for the spare ones)
    chunk = plan.chunk
    lengths = query_start_loc[1:] - query_start_loc[:-1]
    chunk_start = torch.zeros(batch + 1, dtype=torch.int64, device=q.device)
    torch.cumsum(torch.div(lengths + (chunk - 1), chunk, rounding_mode="floor"), 0, dtype=torch.int64,
                 out=chunk_start[1:])  # fmt: skip
    chunks = tokens // chunk + batch
    chunk_request = torch.searchsorted(chunk_start[1:], torch.arange(chunks, device=q.device), right=True,
                                       out_int32=True)  # fmt: skip
    ws = lambda *shape: torch.empty(chunks, value_heads, *shape, dtype=torch.float32, device=q.device)  # noqa: E731
    scores = ws(chunk, chunk)
    # k / |k| and T diag(beta) in bf16 when q is and the state pass multiplies them as bf16 dots (as
    # FLA keeps w, u and A in the inputs' dtype); fp32 otherwise
    dtype = torch.bfloat16 if q.dtype == torch.bfloat16 and plan.bf16_workspace else torch.float32
    kn = torch.empty(chunks, value_heads, chunk, plan.block_k, dtype=dtype, device=q.device)
    tb = torch.empty(chunks, value_heads, chunk, chunk, dtype=dtype, device=q.device)
    # the output's q in bf16 when q is (its product with S in bf16, as FLA's output kernel); fp32
    # otherwise: fp16 would hold S rounded to fp16's range
    qg = torch.empty(chunks, value_heads, chunk, plan.block_k, device=q.device,
                     dtype=q.dtype if q.dtype == torch.bfloat16 else torch.float32)  # fmt: skip
    row_scales, decay = ws(2, chunk), ws()
    plan.chunk_launch((chunks, value_heads), q, k, a, b, A_log, dt_bias, query_start_loc, chunk_start, chunk_request,
                      kn, qg, scores, tb, row_scales, decay, batch, q.stride(0), q.stride(1), k.stride(0), k.stride(1),
                      a.stride(0), b.stride(0), scale)  # fmt: skip
    plan.launch((-(-value_dim // plan.block_v), value_heads, batch), kn, qg, scores, tb, row_scales, decay, v,
                state_pool, cache_indices, query_start_loc, chunk_start,
                cache_indices if has_initial_state is None else has_initial_state, out,
                state_pool if track_state is None else track_state,
                cache_indices if track_chunk_idx is None else track_chunk_idx, batch, v.stride(0), v.stride(1),
                *state_pool.stride(), out.stride(0), out.stride(1), int(track_chunk_size))  # fmt: skip
    return out
