"""Rotary position embedding, in place: `rotary_embedding`.

Same contract as vLLM's / sgl_kernel's ``rotary_embedding(positions, query,
key, head_size, cos_sin_cache, is_neox)`` that SGLang's RotaryEmbedding calls:
query and key are [tokens, heads * head_size] or [tokens, heads, head_size]
(token rows may be strided, e.g. slices of a fused qkv projection; the last
dim must be contiguous), key may be None, cos_sin_cache is [max_position,
rotary_dim] with rows [cos | sin], and rotary_dim may be smaller than
head_size (the tail of each head is left untouched).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...runtime import INDEX_DTYPES, capabilities, launch_options, plan_cache, use_triton
from ..spec import explicit_config, lookup_config
from ..launch import KernelLaunch, constexpr_args, run_keywords
from ..validation import (checked_mode, power_of_two_at_most, require_disjoint, require_number, require_same_device,
                          require_tensor)
from . import kernels, reference

OP = "rotary_embedding"


def _heads_layout(x: torch.Tensor, name: str, head_size: int, n_tokens: int) -> tuple[int, int, int]:
    """(num_heads, token_stride, head_stride) of a query/key tensor."""
    require_tensor(OP, name, x, min_ndim=2, max_ndim=3)
    if x.shape[0] != n_tokens:
        raise ValueError(f"{OP}: {name} has {x.shape[0]} tokens but positions has {n_tokens}")
    if x.dim() == 3:
        if x.shape[2] != head_size:
            raise ValueError(
                f"{OP}: {name} is [tokens, heads, head_size] but its last dim {x.shape[2]} != head_size {head_size}"
            )
        _require_own_memory(x, name, x.stride(1), x.shape[1], head_size)
        return x.shape[1], x.stride(0), x.stride(1)
    if x.shape[1] % head_size:
        raise ValueError(f"{OP}: {name} rows are {x.shape[1]} wide, not a multiple of head_size {head_size}")
    _require_own_memory(x, name, head_size, x.shape[1] // head_size, head_size)
    return x.shape[1] // head_size, x.stride(0), head_size


def _require_own_memory(x: torch.Tensor, name: str, head_stride: int, num_heads: int, head_size: int) -> None:
    """`x` is rotated in place, so its (token, head) rows must not share
    memory: an expanded (stride-0) view would be rotated once per alias and
    come back as garbage."""
    token_alias = x.shape[0] > 1 and x.stride(0) == 0
    head_alias = num_heads > 1 and head_stride < head_size
    if token_alias or head_alias:
        raise ValueError(
            f"{OP}: {name} is rotated in place but its {'tokens' if token_alias else 'heads'} share memory "
            f"(shape {tuple(x.shape)}, strides {x.stride()}: an expanded view?); pass .contiguous() or .clone()"
        )


@dataclass(frozen=True)
class RopePlan:
    tokens_per_program: int
    heads_per_program: int
    launch: KernelLaunch  # the kernel with its constexprs and options (`ops.launch`)


def _rope_plan(num_q_heads: int, num_k_heads: int, rotary_dim: int, is_neox: bool, config: dict) -> RopePlan:
    num_heads = num_q_heads + num_k_heads
    tokens = power_of_two_at_most(config["TOKENS_PER_PROGRAM"])  # defaults: autotune_configs/default.yaml
    heads = max(1, min(int(config["HEADS_PER_PROGRAM"]), num_heads))
    # HEAD_TILE (the interpreter's config): every head in one program, one
    # [tokens, heads, half] tile per tensor instead of a loop over heads.
    head_tile = 0
    if config["HEAD_TILE"]:
        heads, head_tile = num_heads, 1 << max(max(num_q_heads, num_k_heads) - 1, 0).bit_length()
    rot_half = rotary_dim // 2
    constexprs = constexpr_args(
        kernels.rotary_embedding_kernel, NUM_Q_HEADS=num_q_heads, NUM_K_HEADS=num_k_heads, ROT_HALF=rot_half,
        BLOCK_HALF=1 << max(rot_half - 1, 0).bit_length(), IS_NEOX=is_neox, TOKENS_PER_PROGRAM=tokens,
        HEADS_PER_PROGRAM=heads, LOAD_IGNORES_OTHER=capabilities().load_ignores_other, HEAD_TILE=head_tile)  # fmt: skip
    return RopePlan(tokens, heads, KernelLaunch(kernels.rotary_embedding_kernel, constexprs,
                                               run_keywords(launch_options(config))))


@plan_cache
def _cached_plan(head_size: int, tokens: int, num_q_heads: int, num_k_heads: int, rotary_dim: int,
                 is_neox: bool) -> RopePlan:  # fmt: skip
    return _rope_plan(num_q_heads, num_k_heads, rotary_dim, is_neox,
                      lookup_config(OP, head_size=head_size, tokens=tokens))  # fmt: skip


def _layout(x: torch.Tensor, head_size: int) -> tuple[int, int, int]:
    """`_heads_layout` without the checks."""
    if x.dim() == 3:
        strides = x.stride()
        return x.shape[1], strides[0], strides[1]
    return x.shape[1] // head_size, x.stride(0), head_size


def _check_positions_in_range(positions: torch.Tensor, max_position: int) -> None:
    # Reading the bounds syncs a GPU; skipped while a CUDA graph is captured
    # (no host reads allowed there) and when the caller opts out.
    if positions.numel() == 0:
        return
    if positions.is_cuda and torch.cuda.is_current_stream_capturing():
        return
    low, high = int(positions.min()), int(positions.max())
    if low < 0 or high >= max_position:
        raise ValueError(f"{OP}: positions must lie in [0, {max_position}) (cos_sin_cache rows), got [{low}, {high}]")


def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor | None,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    check_positions: bool = True,
    *,
    check: bool = True,
    config: dict | None = None,
):
    """Rotate query and key in place by the cos/sin rows of their positions.

    positions: [tokens] int32/int64; is_neox: NeoX (halves) or GPT-J
    (interleaved pairs) layout. ``check_positions=False`` skips the range
    check (a device-to-host read) for callers that guarantee it;
    ``check=False`` (or ``KUNLUN_TRITON_CHECK=0``) skips every input check,
    and a position outside the cache then reads unrelated memory.
    Returns (query, key), the same tensors.
    """
    if checked_mode(check):
        require_tensor(OP, "positions", positions, dtypes=INDEX_DTYPES, ndim=1)
        head_size = require_number(OP, "head_size", head_size, above=0, integer=True)
        n_tokens = positions.shape[0]
        num_q_heads, q_token_stride, q_head_stride = _heads_layout(query, "query", head_size, n_tokens)
        num_k_heads, k_token_stride, k_head_stride = 0, 0, 0
        if key is not None:
            num_k_heads, k_token_stride, k_head_stride = _heads_layout(key, "key", head_size, n_tokens)
            if key.dtype != query.dtype:
                raise TypeError(f"{OP}: key has dtype {key.dtype} but query has {query.dtype}")
        require_tensor(OP, "cos_sin_cache", cos_sin_cache, ndim=2)
        rotary_dim = cos_sin_cache.shape[1]
        if rotary_dim % 2 or not 0 < rotary_dim <= head_size:
            raise ValueError(
                f"{OP}: cos_sin_cache rows ([cos | sin]) must be even and at most head_size {head_size}, got {rotary_dim}"
            )
        if not isinstance(is_neox, bool):
            raise TypeError(f"{OP}: is_neox must be a bool, got {type(is_neox).__name__}")
        require_same_device(OP, query=query, positions=positions, key=key, cos_sin_cache=cos_sin_cache)
        # a key that is (or overlaps) the query would be rotated twice
        require_disjoint(OP, "query", query, {"key": key, "positions": positions, "cos_sin_cache": cos_sin_cache})
        if key is not None:
            require_disjoint(OP, "key", key, {"positions": positions, "cos_sin_cache": cos_sin_cache})
        if check_positions:
            _check_positions_in_range(positions, cos_sin_cache.shape[0])
        tensors = (positions, query, key, cos_sin_cache)
    else:
        n_tokens, rotary_dim = positions.shape[0], cos_sin_cache.shape[1]
        num_q_heads, q_token_stride, q_head_stride = _layout(query, head_size)
        num_k_heads, k_token_stride, k_head_stride = (0, 0, 0) if key is None else _layout(key, head_size)
        tensors = (query,)

    if not use_triton(OP, *tensors):
        return reference.rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)
    if n_tokens == 0:
        return query, key
    if config is None:
        plan = _cached_plan(head_size, n_tokens, num_q_heads, num_k_heads, rotary_dim, is_neox)
    else:
        plan = _rope_plan(num_q_heads, num_k_heads, rotary_dim, is_neox,
                          explicit_config(OP, config, head_size=head_size, tokens=n_tokens))  # fmt: skip
    grid = (-(-n_tokens // plan.tokens_per_program), -(-(num_q_heads + num_k_heads) // plan.heads_per_program))
    plan.launch(grid, positions, query, query if key is None else key, cos_sin_cache, n_tokens, q_token_stride,
                q_head_stride, k_token_stride, k_head_stride, cos_sin_cache.stride(0))  # fmt: skip
    return query, key
