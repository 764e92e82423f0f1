"""Specs of the RMSNorm ops for doctor, bench and tune (see `ops.spec`).

Cases run the ops unchecked, as SGLang's layers call them. Bytes are the
ideal traffic: rms_norm reads x and writes out; fused_add_rms_norm
reads x and residual and writes residual and out (the weight is noise). The
target: >= 90% of the card's peak HBM bandwidth at hidden 4096-8192 and
4k-64k rows.
"""

from __future__ import annotations

import torch

from ...runtime import FLOAT_DTYPES
from ..spec import FLAG, TILE, OpCase, OpSpec
from . import reference
from .ops import MAX_TILE_ELEMENTS, fused_add_rms_norm, gated_rms_norm, rms_norm

DOCTOR = tuple(({"rows": 6, "hidden_size": 96, "strided": True}, d) for d in FLOAT_DTYPES)


def _inputs(shape, dtype, device):
    """x (rows strided when shape["strided"]), residual, weight; the same values every call."""
    rows, hidden = shape["rows"], shape["hidden_size"]
    gen = torch.Generator().manual_seed(rows * 7919 + hidden)
    pad = 8 if shape.get("strided") else 0
    x = torch.randn(rows, hidden + pad, generator=gen)[:, :hidden]
    residual = torch.randn(rows, hidden, generator=gen)
    weight = torch.rand(hidden, generator=gen) + 0.5
    return x.to(dtype).to(device), residual.to(dtype).to(device), weight.to(dtype).to(device)


def _bytes(shape, dtype, passes: int) -> int:
    elt = torch.empty((), dtype=dtype).element_size()
    return (passes * shape["rows"] + 1) * shape["hidden_size"] * elt


def rms_norm_case(shape, dtype, device) -> OpCase:
    x, _, weight = _inputs(shape, dtype, device)
    return OpCase(
        run=lambda config: rms_norm(x, weight, check=False, config=config),
        reference=lambda: reference.rms_norm(x, weight),
        dims={"hidden_size": shape["hidden_size"]},
        bytes_moved=_bytes(shape, dtype, 2),
    )


def fused_add_rms_norm_case(shape, dtype, device) -> OpCase:
    x, residual, weight = _inputs(shape, dtype, device)
    # Compared: the output and the residual after the in-place add.
    return OpCase(
        run=lambda config: (fused_add_rms_norm(x, residual, weight, check=False, config=config), residual),
        reference=lambda: (reference.fused_add_rms_norm(x, residual, weight), residual),
        dims={"hidden_size": shape["hidden_size"]},
        bytes_moved=_bytes(shape, dtype, 4),
    )


def gated_rms_norm_case(shape, dtype, device) -> OpCase:
    x, z, weight = _inputs(shape, dtype, device)
    return OpCase(
        run=lambda config: gated_rms_norm(x, z, weight, check=False, config=config),
        reference=lambda: reference.gated_rms_norm(x, z, weight),
        dims={"hidden_size": shape["hidden_size"]},
        bytes_moved=_bytes(shape, dtype, 3),
    )


def _gated_kernels(shape, dtype, config):
    from ...introspect.launches import meta_kernel_specs

    rows, hidden = shape["rows"], shape["hidden_size"]
    x, z = (torch.empty(rows, hidden, dtype=dtype, device="meta") for _ in range(2))
    weight = torch.empty(hidden, dtype=dtype, device="meta")
    return meta_kernel_specs(lambda: gated_rms_norm(x, z, weight, config=config))


def _kernels(fused: bool):
    def kernels(shape, dtype, config):
        """The launch of one call on meta tensors, planned for the active target."""
        from ...introspect.launches import meta_kernel_specs

        rows, hidden = shape["rows"], shape["hidden_size"]
        pad = 8 if shape.get("strided") else 0
        x = torch.empty(rows, hidden + pad, dtype=dtype, device="meta")[:, :hidden]
        weight = torch.empty(hidden, dtype=dtype, device="meta")
        if fused:
            residual = torch.empty(rows, hidden, dtype=dtype, device="meta")
            return meta_kernel_specs(lambda: fused_add_rms_norm(x, residual, weight, config=config))
        return meta_kernel_specs(lambda: rms_norm(x, weight, config=config))

    return kernels


def bench_shapes(preset, quick: bool) -> list[dict]:
    hidden_sizes = [256] if quick else sorted({preset.hidden_size, 4096, 8192})
    return [{"rows": r, "hidden_size": h} for h in hidden_sizes for r in ([64] if quick else [4096, 16384, 65536])]


def tune_candidates(quick: bool) -> list[dict]:
    return [{"ROWS_PER_PROGRAM": r} for r in ((1, 4) if quick else (1, 2, 4, 8, 16))]


def tune_keep(candidate, shape) -> bool:
    # the op clamps bigger tiles: the config timed would not be this one
    return candidate["ROWS_PER_PROGRAM"] * (1 << (shape["hidden_size"] - 1).bit_length()) <= MAX_TILE_ELEMENTS


def tune_shapes(preset, quick: bool) -> list[dict]:
    return [s for s in bench_shapes(preset, quick) if s["rows"] == (64 if quick else 16384)]


def generation_shapes(preset, max_context: int, max_batch: int, step: int):
    """Every batch 1..max_batch, then prefill token counts up to 8192."""
    rows = list(range(1, max_batch + 1)) + list(range(257, 8193, 97))
    return ({"rows": r, "hidden_size": preset.hidden_size} for r in rows)


# rows of a program's tile (tl.arange); FIT_ROWS: shrunk to a call's rows (ops.py)
CONFIG_KEYS = {"ROWS_PER_PROGRAM": TILE, "FIT_ROWS": FLAG}
# One row per program, a fixed reduction over the hidden dim: batch-invariant.
_REGISTRY = dict(lookup_dims=("hidden_size",), generation_shapes=generation_shapes, graph_capture=True,
                 batch_invariant=True, sglang_forward="RMSNorm")
SPECS = [
    OpSpec("rms_norm", "norm", rms_norm_case, DOCTOR, bench_shapes, tune_candidates=tune_candidates,
           tune_shapes=tune_shapes, tune_keep=tune_keep, x_axis="rows", kernels=_kernels(False),
           config_keys=CONFIG_KEYS, function=rms_norm, **_REGISTRY),
    OpSpec("fused_add_rms_norm", "norm", fused_add_rms_norm_case, DOCTOR, bench_shapes,
           tune_candidates=tune_candidates, tune_shapes=tune_shapes, tune_keep=tune_keep, x_axis="rows",
           kernels=_kernels(True), config_keys=CONFIG_KEYS, function=fused_add_rms_norm, **_REGISTRY),
    # Qwen3-Next's gated norm: rows of one value head (head_dim wide), tokens x value heads of them.
    OpSpec("gated_rms_norm", "norm", gated_rms_norm_case, DOCTOR, bench_shapes, tune_candidates=tune_candidates,
           tune_shapes=tune_shapes, tune_keep=tune_keep, x_axis="rows", kernels=_gated_kernels,
           config_keys=CONFIG_KEYS, function=gated_rms_norm, lookup_dims=("hidden_size",),
           generation_shapes=generation_shapes, graph_capture=True, sglang=("hybrid linear attention",)),
]  # fmt: skip
