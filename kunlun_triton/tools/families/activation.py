"""Gated activation family for `kunlun-triton doctor` and `bench`: silu_and_mul, gelu_and_mul.

Bench bytes are the ideal traffic: read [rows, 2 * d], write [rows, d].
"""

from __future__ import annotations

import torch

from ...ops import gelu_and_mul, silu_and_mul
from ...reference import activation as reference
from ...runtime import run_dtype
from ..checks import BenchCase, OpCheck
from ..presets import shape_values
from ._lazy import LazyInputs

FAMILY = "activation"
DOCTOR_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _doctor_input(dtype, device):
    # strided rows, leading dims, a non-power-of-two half width, values reaching the saturated ends
    gen = torch.Generator().manual_seed(0)
    return (3 * torch.randn(2, 5, 2 * 96 + 6, generator=gen)).to(dtype).to(device)[..., : 2 * 96]


def doctor_checks(device) -> list[OpCheck]:
    checks = []
    for dtype in DOCTOR_DTYPES:
        x = _doctor_input(dtype, device)
        checks.append(OpCheck("silu_and_mul", lambda x=x: silu_and_mul(x),
                              lambda x=x: reference.silu_and_mul(x), dtype=dtype))  # fmt: skip
        checks.append(OpCheck("gelu_and_mul", lambda x=x: gelu_and_mul(x),
                              lambda x=x: reference.gelu_and_mul(x), dtype=dtype))  # fmt: skip
    x = _doctor_input(torch.float32, device)
    checks.append(OpCheck("gelu_and_mul", lambda: gelu_and_mul(x, "tanh"), lambda: reference.gelu_and_mul(x, "tanh")))
    return checks


def bench_cases(preset, args):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = run_dtype(torch.bfloat16)
    elt = torch.empty((), dtype=dtype).element_size()
    quick = getattr(args, "quick", False)
    d = 256 if quick else preset.intermediate_size
    for rows in shape_values(args, "rows", [64] if quick else [4096, 16384, 65536]):
        inputs = LazyInputs(lambda rows=rows: torch.randn(rows, 2 * d, device=device, dtype=dtype))
        params = {"intermediate_size": d, "rows": rows, "dtype": str(dtype).replace("torch.", "")}
        moved = 3 * rows * d * elt
        yield BenchCase(
            FAMILY, "silu_and_mul", params,
            {"triton": lambda i=inputs: silu_and_mul(i.get()),
             "torch": lambda i=inputs: reference.silu_and_mul(i.get())},
            bytes_moved=moved, x_axis="rows",
        )  # fmt: skip
        yield BenchCase(
            FAMILY, "gelu_and_mul", dict(params),
            {"triton": lambda i=inputs: gelu_and_mul(i.get()),
             "torch": lambda i=inputs: reference.gelu_and_mul(i.get())},
            bytes_moved=moved, x_axis="rows",
        )  # fmt: skip


# ---- `kunlun-triton tune` hook ----
# The ops look their config up by (hidden_size = d, rows): one task per row
# count. Candidates run through the public op (`_tuning.checked_thunk`).


def tune_space(preset, args):
    from ...testing import assert_close
    from ._tuning import checked_thunk, device, grid, with_warps

    quick = getattr(args, "quick", False)
    dtype = run_dtype(torch.bfloat16)
    d = 256 if quick else preset.intermediate_size
    if quick:
        candidates = grid(ROWS_PER_PROGRAM=(1, 16), BLOCK_COLS=(256,))
    else:  # tiles of at most 16k values
        candidates = grid(lambda c: c["ROWS_PER_PROGRAM"] * c["BLOCK_COLS"] <= 16384,
                          ROWS_PER_PROGRAM=(1, 2, 4, 8), BLOCK_COLS=(512, 1024, 2048, 4096))
    candidates = with_warps(candidates, quick)
    ops = {"silu_and_mul": (silu_and_mul, reference.silu_and_mul),
           "gelu_and_mul": (gelu_and_mul, reference.gelu_and_mul)}  # fmt: skip

    def make_thunk(op, rows, config):
        fn, ref = ops[op]
        x = torch.randn(rows, 2 * d, device=device(), dtype=dtype)
        return checked_thunk(fn, op, config, lambda: fn(x),
                             lambda out: assert_close(out, ref(x), msg=f"{op} with {config}"))  # fmt: skip

    return [
        (op, {"hidden_size": d, "rows": rows}, lambda config, op=op, rows=rows: make_thunk(op, rows, config), candidates)
        for op in ops
        for rows in shape_values(args, "rows", [64] if quick else [16, 1024, 16384])
    ]
