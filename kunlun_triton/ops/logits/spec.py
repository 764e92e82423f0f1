"""Spec of `logit_softcap` for doctor, bench and tune (see `ops.spec`).

Bytes are the ideal traffic: read and write [rows, vocab] once.
"""

from __future__ import annotations

import itertools

import torch

from ...runtime import FLOAT_DTYPES
from ..spec import TILE, OpCase, OpSpec
from . import ops, reference

CAP = 30.0  # Gemma-2's final_logit_softcapping
# Strided rows (a slice of a wider buffer), a vocabulary that is no power of two, saturated values.
_DOCTOR_SHAPE = {"rows": 5, "vocab": 1000, "strided": True}
DOCTOR = tuple((_DOCTOR_SHAPE, d) for d in FLOAT_DTYPES)


def _input(shape, dtype, device):
    rows, vocab = shape["rows"], shape["vocab"]
    gen = torch.Generator().manual_seed(rows * 31 + vocab)
    pad = 7 if shape.get("strided") else 0
    return (60 * torch.randn(rows, vocab + pad, generator=gen)).to(dtype).to(device)[:, :vocab]


def make_case(shape, dtype, device) -> OpCase:
    base = _input(shape, dtype, device)
    work = base.clone()
    elt = torch.empty((), dtype=dtype).element_size()
    return OpCase(
        run=lambda config: ops.logit_softcap(base.clone(), CAP, check=False, config=config),
        reference=lambda: reference.logit_softcap(base.clone(), CAP),
        dims={"vocab_size": shape["vocab"], "rows": shape["rows"]},
        bytes_moved=2 * base.numel() * elt,
        call=lambda: ops.logit_softcap(work, CAP, check=False),
    )


def kernels(shape, dtype, config):
    """The launch of one call on meta tensors, planned for the active target."""
    from ...introspect.launches import meta_kernel_specs

    pad = 7 if shape.get("strided") else 0
    x = torch.empty(shape["rows"], shape["vocab"] + pad, dtype=dtype, device="meta")[:, : shape["vocab"]]
    return meta_kernel_specs(lambda: ops.logit_softcap(x, CAP, config=config))


def bench_shapes(preset, quick: bool) -> list[dict]:
    vocab = 4096 if quick else 256000  # Gemma-2's vocabulary
    return [{"rows": r, "vocab": vocab} for r in ([4] if quick else [1, 64, 256])]


def tune_candidates(quick: bool) -> list[dict]:
    if quick:
        return [{"ROWS_PER_PROGRAM": r, "BLOCK_COLS": 1024} for r in (1, 4)]
    pairs = itertools.product((1, 2, 4), (1024, 2048, 4096, 8192))
    return [{"ROWS_PER_PROGRAM": r, "BLOCK_COLS": c} for r, c in pairs if r * c <= 16384]


SPECS = [
    OpSpec("logit_softcap", "logits", make_case, DOCTOR, bench_shapes, bench_dtype=torch.float32,
           tune_candidates=tune_candidates, x_axis="rows", kernels=kernels, function=ops.logit_softcap,
           lookup_dims=("vocab_size", "rows"), config_keys={"ROWS_PER_PROGRAM": TILE, "BLOCK_COLS": TILE},
           sglang=("final-logit soft-capping",)),
]  # fmt: skip
