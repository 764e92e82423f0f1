"""Specs of the gated activations for doctor, bench and tune (see `ops.spec`).

Bytes are the ideal traffic: read [rows, 2 * d], write [rows, d].
"""

from __future__ import annotations

import itertools

import torch

from ...runtime import FLOAT_DTYPES
from ..spec import TILE, OpCase, OpSpec
from . import ops, reference

# Leading dims, strided rows, a non-power-of-two half width, values reaching the saturated ends.
_DOCTOR_SHAPE = {"lead": 2, "rows": 5, "d": 96, "strided": True}
DOCTOR = tuple((_DOCTOR_SHAPE, d) for d in FLOAT_DTYPES)
GELU_DOCTOR = DOCTOR + (({**_DOCTOR_SHAPE, "approximate": "tanh"}, torch.float32),)


def _input(shape, dtype, device):
    rows, d = shape["rows"], shape["d"]
    gen = torch.Generator().manual_seed(rows * 31 + d)
    pad = 6 if shape.get("strided") else 0
    # [rows, 2d] as SGLang's MLP hands it over; "lead" adds leading dims
    lead = (shape["lead"],) if "lead" in shape else ()
    x = 3 * torch.randn(*lead, rows, 2 * d + pad, generator=gen)
    return x.to(dtype).to(device)[..., : 2 * d]


def _case(name: str):
    def make(shape, dtype, device) -> OpCase:
        op, ref = getattr(ops, name), getattr(reference, name)
        x = _input(shape, dtype, device)
        kwargs = {"approximate": shape["approximate"]} if "approximate" in shape else {}
        elt = torch.empty((), dtype=dtype).element_size()
        rows = x.numel() // x.shape[-1]
        return OpCase(
            run=lambda config: op(x, **kwargs, check=False, config=config),
            reference=lambda: ref(x, **kwargs),
            dims={"hidden_size": shape["d"], "rows": rows},
            bytes_moved=3 * rows * shape["d"] * elt,
        )

    return make


def _kernels(name: str):
    def kernels(shape, dtype, config):
        """The launch of one call on meta tensors, planned for the active target."""
        from ...introspect.launches import meta_kernel_specs

        rows, d = shape["rows"], shape["d"]
        pad = 6 if shape.get("strided") else 0
        lead = (shape["lead"],) if "lead" in shape else ()  # as `_input`
        x = torch.empty(*lead, rows, 2 * d + pad, dtype=dtype, device="meta")[..., : 2 * d]
        kwargs = {"approximate": shape["approximate"]} if "approximate" in shape else {}
        return meta_kernel_specs(lambda: getattr(ops, name)(x, **kwargs, config=config))

    return kernels


def bench_shapes(preset, quick: bool) -> list[dict]:
    d = 256 if quick else preset.intermediate_size
    return [{"rows": r, "d": d} for r in ([64] if quick else [4096, 16384, 65536])]


def tune_candidates(quick: bool) -> list[dict]:
    if quick:
        return [{"ROWS_PER_PROGRAM": r, "BLOCK_COLS": 256} for r in (1, 16)]
    # tiles of at most 16k values
    pairs = itertools.product((1, 2, 4, 8), (512, 1024, 2048, 4096))
    return [{"ROWS_PER_PROGRAM": r, "BLOCK_COLS": c} for r, c in pairs if r * c <= 16384]


def tune_shapes(preset, quick: bool) -> list[dict]:
    d = 256 if quick else preset.intermediate_size
    return [{"rows": r, "d": d} for r in ([64] if quick else [16, 1024, 16384])]


def generation_shapes(preset, max_context: int, max_batch: int, step: int):
    """Every batch 1..max_batch, then prefill token counts up to 8192."""
    rows = list(range(1, max_batch + 1)) + list(range(257, 8193, 97))
    return ({"rows": r, "d": preset.intermediate_size} for r in rows)


# A program's output tile: ROWS_PER_PROGRAM x BLOCK_COLS (both tl.arange extents);
# each element depends on its own row only: batch-invariant.
_TUNE = dict(tune_candidates=tune_candidates, tune_shapes=tune_shapes, x_axis="rows",
             config_keys={"ROWS_PER_PROGRAM": TILE, "BLOCK_COLS": TILE}, lookup_dims=("hidden_size", "rows"),
             generation_shapes=generation_shapes, graph_capture=True, batch_invariant=True)
SPECS = [
    OpSpec("silu_and_mul", "activation", _case("silu_and_mul"), DOCTOR, bench_shapes, **_TUNE,
           kernels=_kernels("silu_and_mul"), function=ops.silu_and_mul, sglang_forward="SiluAndMul"),
    OpSpec("gelu_and_mul", "activation", _case("gelu_and_mul"), GELU_DOCTOR, bench_shapes, **_TUNE,
           kernels=_kernels("gelu_and_mul"), function=ops.gelu_and_mul, sglang_forward="GeluAndMul"),
]  # fmt: skip
