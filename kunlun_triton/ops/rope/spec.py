"""Spec of `rotary_embedding` for doctor, bench and tune (see `ops.spec`).

Bytes are the ideal traffic: read and write the rotary part of every query
and key head, read one cos/sin row and one position per token.
"""

from __future__ import annotations

import itertools

import torch

from ...runtime import FLOAT_DTYPES
from ..spec import COUNT, FLAG, TILE, OpCase, OpSpec
from . import reference
from .ops import rotary_embedding


def cos_sin_cache(rotary_dim: int, max_position: int, base: float, dtype, device) -> torch.Tensor:
    """[max_position, rotary_dim] rows of [cos | sin], as SGLang's RotaryEmbedding builds them."""
    inv_freq = 1.0 / base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim)
    angles = torch.outer(torch.arange(max_position, dtype=torch.float32), inv_freq)
    return torch.cat([angles.cos(), angles.sin()], dim=-1).to(dtype).to(device)


# q and k slices of one qkv buffer, partial rotary dim (64 of 96), both layouts.
_DOCTOR_SHAPE = {"tokens": 7, "q_heads": 4, "kv_heads": 2, "head_dim": 96, "rotary_dim": 64, "neox": True}
DOCTOR = tuple((_DOCTOR_SHAPE, d) for d in FLOAT_DTYPES) + (
    ({**_DOCTOR_SHAPE, "neox": False}, torch.bfloat16),
)


def rotary_embedding_case(shape, dtype, device) -> OpCase:
    tokens, q_heads, kv_heads, head_dim = shape["tokens"], shape["q_heads"], shape["kv_heads"], shape["head_dim"]
    rotary_dim = shape.get("rotary_dim", head_dim)
    max_position = shape.get("max_position", 4096)
    gen = torch.Generator().manual_seed(tokens * 13 + head_dim)
    qkv = torch.randn(tokens, (q_heads + 2 * kv_heads) * head_dim, generator=gen).to(dtype).to(device)
    query, key, _ = qkv.split([q_heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    key = key.view(tokens, kv_heads, head_dim)
    positions = torch.randint(0, max_position, (tokens,), generator=gen).to(device)
    cache = cos_sin_cache(rotary_dim, max_position, shape.get("rope_theta", 10000.0), torch.float32, device)
    args = (positions, query, key, head_dim, cache, shape.get("neox", True))
    elt = torch.empty((), dtype=dtype).element_size()
    return OpCase(
        run=lambda config: rotary_embedding(*args, check=False, config=config),
        reference=lambda: reference.rotary_embedding(*args),
        dims={"head_size": head_dim, "tokens": tokens},
        bytes_moved=2 * tokens * (q_heads + kv_heads) * rotary_dim * elt + tokens * (rotary_dim * 4 + 8),
    )


def rotary_embedding_kernels(shape, dtype, config):
    """The launch of one call on meta tensors, planned for the active target."""
    from ...introspect.launches import meta_kernel_specs

    tokens, q_heads, kv_heads, head_dim = shape["tokens"], shape["q_heads"], shape["kv_heads"], shape["head_dim"]
    qkv = torch.empty(tokens, (q_heads + 2 * kv_heads) * head_dim, dtype=dtype, device="meta")
    query, key, _ = qkv.split([q_heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    key = key.view(tokens, kv_heads, head_dim)
    positions = torch.empty(tokens, dtype=torch.int64, device="meta")
    cache = torch.empty(shape.get("max_position", 4096), shape.get("rotary_dim", head_dim), dtype=torch.float32,
                        device="meta")  # fmt: skip
    return meta_kernel_specs(lambda: rotary_embedding(positions, query, key, head_dim, cache, shape.get("neox", True),
                                                      check_positions=False, config=config))  # fmt: skip


def bench_shapes(preset, quick: bool) -> list[dict]:
    q_heads, kv_heads = (4, 2) if quick else (preset.num_heads, preset.num_kv_heads)
    return [
        {"tokens": t, "q_heads": q_heads, "kv_heads": kv_heads, "head_dim": preset.head_dim, "rope_theta": preset.rope_theta}
        for t in ([16] if quick else [1, 64, 4096, 16384])
    ]


def tune_candidates(quick: bool) -> list[dict]:
    if quick:
        return [{"TOKENS_PER_PROGRAM": 4, "HEADS_PER_PROGRAM": 2}, {"TOKENS_PER_PROGRAM": 16, "HEADS_PER_PROGRAM": 8}]
    return [
        {"TOKENS_PER_PROGRAM": t, "HEADS_PER_PROGRAM": h, "num_warps": w}
        for t, h, w in itertools.product((1, 4, 16), (4, 16, 64), (2, 4))
    ]


def generation_shapes(preset, max_context: int, max_batch: int, step: int):
    """Every batch 1..max_batch, then two prefill token counts."""
    heads = {"q_heads": preset.num_heads, "kv_heads": preset.num_kv_heads, "head_dim": preset.head_dim}
    tokens = list(range(1, max_batch + 1)) + [1024, 8192]
    return ({"tokens": t, **heads, "rope_theta": preset.rope_theta} for t in tokens)


SPECS = [
    OpSpec("rotary_embedding", "rope", rotary_embedding_case, DOCTOR, bench_shapes, tune_candidates=tune_candidates,
           x_axis="tokens", kernels=rotary_embedding_kernels,
           config_keys={"TOKENS_PER_PROGRAM": TILE, "HEADS_PER_PROGRAM": COUNT, "HEAD_TILE": FLAG},
           function=rotary_embedding,
           lookup_dims=("head_size", "tokens"), generation_shapes=generation_shapes, graph_capture=True,
           batch_invariant=True, sglang_forward="RotaryEmbedding(+subclasses)"),
]  # fmt: skip
