"""Rotary embedding family for `kunlun-triton doctor` and `bench`: rotary_embedding.

Bench bytes are the ideal traffic: read and write the rotary part of every
query and key head, read one cos/sin row and one position per token.
"""

from __future__ import annotations

import torch

from ...ops import rotary_embedding
from ...reference import rope as reference
from ...runtime import run_dtype
from ..checks import BenchCase, OpCheck
from ..presets import shape_values
from ._lazy import LazyInputs

FAMILY = "rope"
DOCTOR_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def cos_sin_cache(rotary_dim: int, max_position: int, base: float, dtype, device) -> torch.Tensor:
    """[max_position, rotary_dim] rows of [cos | sin], as SGLang's RotaryEmbedding builds them."""
    inv_freq = 1.0 / base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim)
    angles = torch.outer(torch.arange(max_position, dtype=torch.float32), inv_freq)
    return torch.cat([angles.cos(), angles.sin()], dim=-1).to(dtype).to(device)


def _doctor_case(dtype, device, is_neox):
    """Fresh q/k each call (the op rotates in place): q and k slices of one qkv
    buffer, partial rotary dim (64 of 96)."""
    gen = torch.Generator().manual_seed(0)
    head_size, q_heads, kv_heads, tokens = 96, 4, 2, 7
    qkv = torch.randn(tokens, (q_heads + 2 * kv_heads) * head_size, generator=gen).to(dtype).to(device)
    query, key, _ = qkv.split([q_heads * head_size, kv_heads * head_size, kv_heads * head_size], dim=-1)
    positions = torch.randint(0, 128, (tokens,), generator=gen).to(device)
    cache = cos_sin_cache(64, 128, 10000.0, dtype, device)
    return positions, query, key.view(tokens, kv_heads, head_size), head_size, cache, is_neox


def doctor_checks(device) -> list[OpCheck]:
    checks = []
    for dtype, is_neox in [(d, True) for d in DOCTOR_DTYPES] + [(torch.bfloat16, False)]:

        def run(dtype=dtype, is_neox=is_neox):
            return rotary_embedding(*_doctor_case(dtype, device, is_neox))

        def ref(dtype=dtype, is_neox=is_neox):
            return reference.rotary_embedding(*_doctor_case(dtype, device, is_neox))

        checks.append(OpCheck("rotary_embedding", run, ref, dtype=dtype))
    return checks


def bench_cases(preset, args):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = run_dtype(torch.bfloat16)
    elt = torch.empty((), dtype=dtype).element_size()
    quick = getattr(args, "quick", False)
    head_size = preset.head_dim
    q_heads, kv_heads = (4, 2) if quick else (preset.num_heads, preset.num_kv_heads)
    max_position = 4096
    for tokens in shape_values(args, "tokens", [16] if quick else [1, 64, 4096, 16384]):

        def make(tokens=tokens):
            qkv = torch.randn(tokens, (q_heads + 2 * kv_heads) * head_size, device=device, dtype=dtype)
            query, key, _ = qkv.split([q_heads * head_size, kv_heads * head_size, kv_heads * head_size], dim=-1)
            positions = torch.randint(0, max_position, (tokens,), device=device)
            cache = cos_sin_cache(head_size, max_position, preset.rope_theta, torch.float32, device)
            return positions, query, key, head_size, cache, True

        inputs = LazyInputs(make)
        moved = 2 * tokens * (q_heads + kv_heads) * head_size * elt + tokens * (head_size * 4 + 8)
        yield BenchCase(
            FAMILY, "rotary_embedding",
            {"tokens": tokens, "heads": f"{q_heads}/{kv_heads}", "head_dim": head_size,
             "dtype": str(dtype).replace("torch.", "")},
            {"triton": lambda i=inputs: rotary_embedding(*i.get(), check_positions=False),
             "torch": lambda i=inputs: reference.rotary_embedding(*i.get())},
            bytes_moved=moved, x_axis="tokens",
        )  # fmt: skip


# ---- `kunlun-triton tune` hook ----
# The op looks its config up by (head_size, tokens): one task per token
# count. The op rotates in place, so the check runs on copies.


def tune_space(preset, args):
    from ...testing import assert_close
    from ._tuning import checked_thunk, device, grid, with_warps

    quick = getattr(args, "quick", False)
    dtype = run_dtype(torch.bfloat16)
    head_size = preset.head_dim
    q_heads, kv_heads = (4, 2) if quick else (preset.num_heads, preset.num_kv_heads)
    max_position = 4096
    if quick:
        candidates = [{"TOKENS_PER_PROGRAM": 4, "HEADS_PER_PROGRAM": 2}, {"TOKENS_PER_PROGRAM": 16, "HEADS_PER_PROGRAM": 8}]
    else:
        candidates = grid(TOKENS_PER_PROGRAM=(1, 4, 16), HEADS_PER_PROGRAM=(4, 16, 64))
    candidates = with_warps(candidates, quick, warps=(2, 4))

    def make_thunk(tokens, config):
        dev = device()
        qkv = torch.randn(tokens, (q_heads + 2 * kv_heads) * head_size, device=dev, dtype=dtype)
        query, key, _ = qkv.split([q_heads * head_size, kv_heads * head_size, kv_heads * head_size], dim=-1)
        positions = torch.randint(0, max_position, (tokens,), device=dev)
        cache = cos_sin_cache(head_size, max_position, preset.rope_theta, torch.float32, dev)
        expected = reference.rotary_embedding(positions, query.clone(), key.clone(), head_size, cache, True)

        def check(out):  # the first call rotates the fresh inputs; timed calls keep rotating
            for got, want, name in zip(out, expected, ("query", "key")):
                assert_close(got, want, msg=f"rotary_embedding {name} with {config}")

        return checked_thunk(
            rotary_embedding, "rotary_embedding", config,
            lambda: rotary_embedding(positions, query, key, head_size, cache, True, check_positions=False), check,
        )  # fmt: skip

    return [
        ("rotary_embedding", {"head_size": head_size, "tokens": tokens},
         lambda config, tokens=tokens: make_thunk(tokens, config), candidates)
        for tokens in shape_values(args, "tokens", [16] if quick else [1, 64, 4096, 16384])
    ]  # fmt: skip
