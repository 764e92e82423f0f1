"""Specs of the linear-attention ops for doctor, bench, tune and inspect
(see `ops.spec`).

Shapes name a ragged batch by its request lengths (``lengths``, a tuple) or a
decode batch (``batch``); model dims default to Qwen3-Next-80B-A3B's gated
delta net (16 key heads, 32 value heads, head dims 128, conv kernel 4: conv
channels 2 x 16 x 128 + 32 x 128 = 8192). Bytes are the floor: inputs read
once, outputs written once, each request's states read once and written once.
"""

from __future__ import annotations

import torch

from ...runtime.config_keys import TILE, choice
from ..spec import OpCase, OpSpec
from . import reference
from .conv import causal_conv1d, causal_conv1d_update

QWEN3_NEXT = {"key_heads": 16, "value_heads": 32, "key_dim": 128, "value_dim": 128, "width": 4}
CONV_DIM = 2 * 16 * 128 + 32 * 128


def _gen(shape) -> torch.Generator:
    return torch.Generator().manual_seed(hash(tuple(sorted((k, str(v)) for k, v in shape.items()))) % 2**31)


def _elt(dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _starts(lengths, device):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)


# ---- causal conv1d ----

def _conv_inputs(shape, dtype, device, tokens: int):
    dim, width = shape.get("dim", CONV_DIM), shape.get("width", 4)
    requests = len(shape["lengths"]) if "lengths" in shape else shape["batch"]
    gen = _gen(shape)
    x = torch.randn(tokens, dim, generator=gen).to(dtype).to(device)
    weight = (torch.randn(dim, width, generator=gen) * 0.5).to(dtype).to(device)
    bias = torch.randn(dim, generator=gen).to(dtype).to(device)
    states = torch.randn(requests + 1, dim, width - 1, generator=gen).to(dtype).to(device)
    slots = torch.arange(requests, 0, -1, dtype=torch.int32, device=device)  # not the identity
    return x, weight, bias, states, slots


def causal_conv1d_case(shape, dtype, device) -> OpCase:
    lengths = tuple(shape["lengths"])
    x, weight, bias, states, slots = _conv_inputs(shape, dtype, device, sum(lengths))
    starts = _starts(lengths, device)
    init = torch.tensor([i % 2 == 0 for i in range(len(lengths))], device=device)

    def run(config):
        s = states.clone()
        return causal_conv1d(x, weight, bias, s, starts, slots, init, max_len=max(lengths), check=False,
                             config=config), s  # fmt: skip

    def ref():
        s = states.clone()
        return reference.causal_conv1d(x, weight, bias, s, starts, slots, init), s

    dim, width = weight.shape
    moved = (2 * x.numel() + 2 * len(lengths) * dim * (width - 1)) * _elt(dtype)
    return OpCase(run=run, reference=ref, dims={"dim": dim}, bytes_moved=moved,
                  call=lambda: causal_conv1d(x, weight, bias, states, starts, slots, init, max_len=max(lengths),
                                             check=False))  # fmt: skip


def causal_conv1d_update_case(shape, dtype, device) -> OpCase:
    x, weight, bias, states, slots = _conv_inputs(shape, dtype, device, shape["batch"])

    def run(config):
        s = states.clone()
        return causal_conv1d_update(x, s, weight, bias, slots, check=False, config=config), s

    def ref():
        s = states.clone()
        return reference.causal_conv1d_update(x, s, weight, bias, slots), s

    dim, width = weight.shape
    moved = (2 * x.numel() + 2 * shape["batch"] * dim * (width - 1)) * _elt(dtype)
    return OpCase(run=run, reference=ref, dims={"dim": dim}, bytes_moved=moved,
                  call=lambda: causal_conv1d_update(x, states, weight, bias, slots, check=False))  # fmt: skip


def _conv_kernels(update: bool):
    def kernels(shape, dtype, config):
        from ...introspect.launches import meta_kernel_specs

        dim, width = shape.get("dim", CONV_DIM), shape.get("width", 4)
        meta = lambda *s, dtype=dtype: torch.empty(s, dtype=dtype, device="meta")  # noqa: E731
        weight, bias = meta(dim, width), meta(dim)
        if update:
            batch = shape["batch"]
            states = meta(batch + 1, dim, width - 1)
            slots = meta(batch, dtype=torch.int32)
            return meta_kernel_specs(lambda: causal_conv1d_update(meta(batch, dim), states, weight, bias, slots,
                                                                  check=False, config=config))  # fmt: skip
        lengths = tuple(shape["lengths"])
        n = len(lengths)
        states = meta(n + 1, dim, width - 1)
        return meta_kernel_specs(lambda: causal_conv1d(
            meta(sum(lengths), dim), weight, bias, states, meta(n + 1, dtype=torch.int32), meta(n, dtype=torch.int32),
            meta(n, dtype=torch.bool), max_len=max(lengths), check=False, config=config))  # fmt: skip

    return kernels


PREFILL_LENGTHS = ((1,), (7,), (64,), (65, 3), (512,), (1000, 17, 300), (4096,), (8192,))


def prefill_generation_shapes(preset, max_context: int, max_batch: int, step: int):
    """Prefill batches from one token to 8k, ragged or not (model dims fixed: Qwen3-Next's)."""
    return ({"lengths": lengths} for lengths in PREFILL_LENGTHS + tuple((n,) for n in range(2, 300, 37)))


def decode_generation_shapes(preset, max_context: int, max_batch: int, step: int):
    return ({"batch": b} for b in range(1, max_batch + 1))


def _conv_bench(update: bool):
    def shapes(preset, quick: bool) -> list[dict]:
        if update:
            return [{"batch": b} for b in ((2,) if quick else (1, 16, 64, 256))]
        return [{"lengths": lengths} for lengths in (((5, 3),) if quick else ((512,), (4096,), (1000, 17, 300)))]

    return shapes


def conv_tune_candidates(quick: bool) -> list[dict]:
    blocks = (128, 256) if quick else (128, 256, 512)
    return [{"BLOCK_D": d, "BLOCK_T": t} for d in blocks for t in ((32, 64) if quick else (16, 32, 64, 128))]


def conv_update_tune_candidates(quick: bool) -> list[dict]:
    return [{"BLOCK_D": d} for d in ((128, 256) if quick else (64, 128, 256, 512, 1024))]


CONV_KEYS = {"BLOCK_D": TILE, "BLOCK_T": TILE}
_DOCTOR_CONV = (({"lengths": (5, 1, 3), "dim": 40, "width": 4}, torch.float32),
                ({"lengths": (2, 6), "dim": 24, "width": 3}, torch.bfloat16))  # fmt: skip
_DOCTOR_UPDATE = (({"batch": 3, "dim": 40, "width": 4}, torch.float32),
                  ({"batch": 2, "dim": 24, "width": 4}, torch.bfloat16))  # fmt: skip

SPECS = [
    OpSpec("causal_conv1d", "linear_attention", causal_conv1d_case, _DOCTOR_CONV, _conv_bench(False),
           tune_candidates=conv_tune_candidates, x_axis="lengths", kernels=_conv_kernels(False), config_keys=CONV_KEYS,
           function=causal_conv1d, lookup_dims=("dim",), generation_shapes=prefill_generation_shapes),
    OpSpec("causal_conv1d_update", "linear_attention", causal_conv1d_update_case, _DOCTOR_UPDATE,
           _conv_bench(True), tune_candidates=conv_update_tune_candidates, x_axis="batch",
           kernels=_conv_kernels(True), config_keys={"BLOCK_D": TILE}, function=causal_conv1d_update,
           lookup_dims=("dim",), generation_shapes=decode_generation_shapes, graph_capture=True),
]  # fmt: skip
