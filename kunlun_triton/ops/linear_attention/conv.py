"""Causal depthwise conv1d ops of gated-delta-net layers: `causal_conv1d`
(a ragged prefill batch, each request's conv state read from and written to
the state pool by slot) and `causal_conv1d_update` (one decode token per
request). SGLang's counterparts: ``causal_conv1d_fn`` (which takes x as the
[dim, tokens] transpose of this x) and ``causal_conv1d_update``
(sglang/kernels/ops/mamba/causal_conv1d_triton.py)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...runtime import capabilities, launch_options, plan_cache, use_triton
from ..launch import KernelLaunch, constexpr_args, run_keywords
from ..spec import explicit_config, lookup_config
from ..validation import checked_mode, require_choice, require_same_device, require_tensor
from . import conv_kernels, reference
from .checks import check_slots, check_track_slots, ragged_max_len, require_requests

ACTIVATIONS = (None, "silu", "swish")
MAX_WIDTH = 4  # the kernels hold a window of three columns and the current token


@dataclass(frozen=True)
class ConvPlan:
    launch: KernelLaunch
    block_d: int
    block_t: int


def _plan(op: str, dim: int, width: int, has_bias: bool, has_init: bool, silu: bool, has_track: bool,
          config: dict) -> ConvPlan:  # fmt: skip
    block_d = config["BLOCK_D"]
    options = launch_options(config)
    if "num_warps" in options:  # BLOCK_D >= 32 * num_warps: no replicated lanes (conv_kernels' docstring)
        options["num_warps"] = max(1, min(options["num_warps"], block_d // 32))
    caps = capabilities()
    if op == "causal_conv1d":
        block_t = max(config["BLOCK_T"], 4)  # a later block's window is the 3 rows before it
        kernel = conv_kernels.conv1d_prefill_kernel
        constexprs = constexpr_args(kernel, DIM=dim, WIDTH=width, BLOCK_D=block_d, BLOCK_T=block_t, HAS_BIAS=has_bias,
                                    HAS_INIT_FLAGS=has_init, SILU=silu, LOAD_IGNORES_OTHER=caps.load_ignores_other)  # fmt: skip
    else:
        block_t = 1
        kernel = conv_kernels.conv1d_update_kernel
        constexprs = constexpr_args(kernel, DIM=dim, WIDTH=width, BLOCK_D=block_d, HAS_BIAS=has_bias, SILU=silu,
                                    LOAD_IGNORES_OTHER=caps.load_ignores_other, HAS_TRACK=has_track)  # fmt: skip
    return ConvPlan(KernelLaunch(kernel, constexprs, run_keywords(options)), block_d, block_t)


@plan_cache
def _cached_plan(op, dim, width, has_bias, has_init, silu, has_track) -> ConvPlan:
    return _plan(op, dim, width, has_bias, has_init, silu, has_track, lookup_config(op, dim=dim))


def _get_plan(op, dim, width, has_bias, has_init, silu, config, has_track=False) -> ConvPlan:
    if config is None:
        return _cached_plan(op, dim, width, has_bias, has_init, silu, has_track)
    return _plan(op, dim, width, has_bias, has_init, silu, has_track, explicit_config(op, config, dim=dim))


def _check_conv(op, x, weight, bias, conv_states, activation):
    require_tensor(op, "x", x, ndim=2)
    require_tensor(op, "weight", weight, ndim=2, last_dim_contiguous=False)
    dim, width = weight.shape
    if x.shape[1] != dim:
        raise ValueError(f"{op}: x has {x.shape[1]} channels but weight has {dim}")
    if not 2 <= width <= MAX_WIDTH:
        raise ValueError(f"{op}: weight's kernel width must be 2..{MAX_WIDTH}, got {width}")
    if bias is not None:
        require_tensor(op, "bias", bias, ndim=1)
        if bias.shape[0] != dim:
            raise ValueError(f"{op}: bias has {bias.shape[0]} entries for {dim} channels")
    require_tensor(op, "conv_states", conv_states, ndim=3, last_dim_contiguous=False)
    if tuple(conv_states.shape[1:]) != (dim, width - 1):
        raise ValueError(f"{op}: conv_states must be [slots, {dim}, {width - 1}], got {tuple(conv_states.shape)}")
    require_choice(op, "activation", activation, ACTIVATIONS)


def _state_strides(conv_states):
    return conv_states.stride(0), conv_states.stride(1), conv_states.stride(2)


def causal_conv1d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, conv_states: torch.Tensor,
                  query_start_loc: torch.Tensor, cache_indices: torch.Tensor,
                  has_initial_state: torch.Tensor | None = None, activation: str | None = "silu", *,
                  max_len: int | None = None, check: bool = True, config: dict | None = None) -> torch.Tensor:  # fmt: skip
    """Causal depthwise conv1d of a ragged prefill batch (math: conv_kernels).

    x: [tokens, dim], requests back to back, request n at rows
    query_start_loc[n]:query_start_loc[n + 1]; weight: [dim, width] (width
    2..4); bias: [dim] or None; conv_states: [slots, dim, width - 1] (any
    strides), request n reads slot cache_indices[n] (where
    has_initial_state[n], default all) and writes its last width - 1 inputs
    there; slot -1 is padding (zero state, nothing written). activation:
    "silu" / "swish" or None. max_len: the longest request (None: read from
    query_start_loc, a host sync). Returns [tokens, dim] in x's dtype.
    """
    op = "causal_conv1d"
    checked = checked_mode(check)
    batch = query_start_loc.shape[0] - 1 if isinstance(query_start_loc, torch.Tensor) else -1
    if checked:
        _check_conv(op, x, weight, bias, conv_states, activation)
        require_requests(op, cache_indices, has_initial_state, batch)
        require_same_device(op, x=x, weight=weight, bias=bias, conv_states=conv_states, query_start_loc=query_start_loc,
                            cache_indices=cache_indices, has_initial_state=has_initial_state)  # fmt: skip
        check_slots(op, "cache_indices", cache_indices, conv_states.shape[0])
    longest = ragged_max_len(op, query_start_loc, batch, x.shape[0], max_len, checked)
    if not use_triton(op, x, weight, conv_states):
        return reference.causal_conv1d(x, weight, bias, conv_states, query_start_loc, cache_indices,
                                       has_initial_state, activation)  # fmt: skip
    dim, width = weight.shape
    silu = activation is not None
    plan = _get_plan(op, dim, width, bias is not None, has_initial_state is not None, silu, config)
    out = x.new_empty(x.shape)
    if batch == 0 or longest == 0:
        return out
    grid = (-(-dim // plan.block_d), -(-longest // plan.block_t), batch)
    plan.launch(grid, x, weight, weight if bias is None else bias, conv_states, query_start_loc, cache_indices,
                cache_indices if has_initial_state is None else has_initial_state, out, batch, x.stride(0),
                out.stride(0), weight.stride(0), weight.stride(1), *_state_strides(conv_states))  # fmt: skip
    return out


def causal_conv1d_update(x: torch.Tensor, conv_states: torch.Tensor, weight: torch.Tensor,
                         bias: torch.Tensor | None, cache_indices: torch.Tensor, activation: str | None = "silu", *,
                         track_slots: torch.Tensor | None = None, check: bool = True,
                         config: dict | None = None) -> torch.Tensor:  # fmt: skip
    """One decode token per request: x [batch, dim]; request n's window is
    conv_states[cache_indices[n]] ([dim, width - 1], rolled left by one and
    x appended, in place; slot -1: zeros, nothing written). track_slots
    [batch] (optional): where track_slots[n] >= 0 the new window is written
    to that slot too (SGLang's prefix-cache snapshot). Returns [batch, dim]
    in x's dtype."""
    op = "causal_conv1d_update"
    if checked_mode(check):
        _check_conv(op, x, weight, bias, conv_states, activation)
        require_requests(op, cache_indices, None, x.shape[0])
        require_same_device(op, x=x, weight=weight, bias=bias, conv_states=conv_states, cache_indices=cache_indices,
                            track_slots=track_slots)  # fmt: skip
        check_slots(op, "cache_indices", cache_indices, conv_states.shape[0])
        check_track_slots(op, track_slots, cache_indices, conv_states.shape[0])
    if not use_triton(op, x, weight, conv_states):
        return reference.causal_conv1d_update(x, conv_states, weight, bias, cache_indices, activation,
                                              track_slots=track_slots)  # fmt: skip
    dim, width = weight.shape
    plan = _get_plan(op, dim, width, bias is not None, False, activation is not None, config, track_slots is not None)
    out = x.new_empty(x.shape)
    batch = x.shape[0]
    if batch == 0:
        return out
    plan.launch((-(-dim // plan.block_d), batch), x, weight, weight if bias is None else bias, conv_states,
                cache_indices, cache_indices if track_slots is None else track_slots, out, batch, x.stride(0),
                out.stride(0), weight.stride(0), weight.stride(1), *_state_strides(conv_states))  # fmt: skip
    return out
