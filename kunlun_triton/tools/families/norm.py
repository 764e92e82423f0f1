"""RMSNorm family for `kunlun-triton doctor` and `bench`: rms_norm, fused_add_rms_norm.

Bench bytes are the ideal traffic: rms_norm reads x and writes out (weight is
noise); fused_add_rms_norm reads x and residual and writes residual and out.
The issue's bar: >= 90% of the card's peak HBM bandwidth at hidden 4096-8192
and 4k-64k rows.
"""

from __future__ import annotations

import torch

from ...ops import fused_add_rms_norm, rms_norm
from ...reference import norm as reference
from ...runtime import run_dtype
from ..checks import BenchCase, OpCheck
from ..presets import shape_values
from ._lazy import LazyInputs

FAMILY = "norm"
DOCTOR_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _doctor_inputs(dtype, device):
    """Fresh inputs each call (fused_add_rms_norm writes its residual): strided rows, leading dims."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 96 + 8, generator=gen).to(dtype)[..., :96]
    residual = torch.randn(2, 3, 96, generator=gen).to(dtype)
    weight = torch.rand(96, generator=gen).to(dtype) + 0.5
    return x.to(device), residual.to(device), weight.to(device)


def doctor_checks(device) -> list[OpCheck]:
    checks = []
    for dtype in DOCTOR_DTYPES:

        def run_fused(dtype=dtype):
            x, residual, weight = _doctor_inputs(dtype, device)
            return fused_add_rms_norm(x, residual, weight), residual

        def reference_fused(dtype=dtype):
            x, residual, weight = _doctor_inputs(dtype, device)
            return reference.fused_add_rms_norm(x, residual, weight), residual

        x, _, weight = _doctor_inputs(dtype, device)
        checks.append(OpCheck("rms_norm", lambda x=x, w=weight: rms_norm(x, w),
                              lambda x=x, w=weight: reference.rms_norm(x, w), dtype=dtype))  # fmt: skip
        checks.append(OpCheck("fused_add_rms_norm", run_fused, reference_fused, dtype=dtype))
    return checks


def _hidden_sizes(preset, args) -> list[int]:
    if getattr(args, "quick", False):
        return [256]
    if "hidden_size" in (getattr(args, "shapes", None) or {}):
        return [preset.hidden_size]  # --shape hidden_size=... asked for exactly these
    return sorted({preset.hidden_size, 4096, 8192})


def bench_cases(preset, args):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = run_dtype(torch.bfloat16)
    elt = torch.empty((), dtype=dtype).element_size()
    rows_list = shape_values(args, "rows", [64] if getattr(args, "quick", False) else [4096, 16384, 65536])
    for hidden in _hidden_sizes(preset, args):
        for rows in rows_list:

            def make(rows=rows, hidden=hidden):
                x = torch.randn(rows, hidden, device=device, dtype=dtype)
                return x, torch.randn_like(x), torch.rand(hidden, device=device, dtype=dtype) + 0.5

            inputs = LazyInputs(make)
            params = {"hidden_size": hidden, "rows": rows, "dtype": str(dtype).replace("torch.", "")}
            yield BenchCase(
                FAMILY, "rms_norm", params,
                {"triton": lambda i=inputs: rms_norm(i.get()[0], i.get()[2]),
                 "torch": lambda i=inputs: reference.rms_norm(i.get()[0], i.get()[2])},
                bytes_moved=2 * rows * hidden * elt + hidden * elt, x_axis="rows",
            )  # fmt: skip
            fused_inputs = LazyInputs(make)
            yield BenchCase(
                FAMILY, "fused_add_rms_norm", dict(params),
                {"triton": lambda i=fused_inputs: fused_add_rms_norm(*i.get()),
                 "torch": lambda i=fused_inputs: reference.fused_add_rms_norm(*i.get())},
                bytes_moved=4 * rows * hidden * elt + hidden * elt, x_axis="rows",
            )  # fmt: skip


# ---- `kunlun-triton tune` hook (added by the tools engineer, issue 7) ----
# The ops look their config up by hidden_size (ops/norm.py `_launch_shape`),
# so each task is one hidden size; each candidate runs through the public op
# (`_tuning.checked_thunk`), and one whose output disagrees with the
# reference is rejected before it is timed.


def tune_space(preset, args):
    import triton

    from ...ops.norm import MAX_TILE_ELEMENTS
    from ...testing import assert_close
    from ._tuning import checked_thunk, device, grid, with_warps

    quick = getattr(args, "quick", False)
    dtype = run_dtype(torch.bfloat16)
    rows = shape_values(args, "rows", [64] if quick else [16384])[0]
    candidates = with_warps(grid(ROWS_PER_PROGRAM=(1, 4) if quick else (1, 2, 4, 8, 16)), quick)

    def make_thunk(op, hidden, config):
        if config["ROWS_PER_PROGRAM"] * triton.next_power_of_2(hidden) > MAX_TILE_ELEMENTS:
            # the op would clamp it: the config timed would not be this one
            raise ValueError(f"tile {config['ROWS_PER_PROGRAM']} x {hidden} over MAX_TILE_ELEMENTS")
        x = torch.randn(rows, hidden, device=device(), dtype=dtype)
        residual, weight = torch.randn_like(x), torch.rand(hidden, device=x.device, dtype=dtype) + 0.5
        if op == "rms_norm":
            expected = reference.rms_norm(x, weight)
            return checked_thunk(rms_norm, op, config, lambda: rms_norm(x, weight),
                                 lambda out: assert_close(out, expected, msg=f"{op} with {config}"))  # fmt: skip
        summed = residual.clone()
        expected = reference.fused_add_rms_norm(x, summed, weight)

        def check(out):  # the first call (this check) adds into the original residual; timed calls keep adding
            assert_close(out, expected, msg=f"{op} with {config}")
            assert_close(residual, summed, msg=f"{op} residual with {config}")

        return checked_thunk(fused_add_rms_norm, op, config, lambda: fused_add_rms_norm(x, residual, weight), check)

    return [
        (op, {"hidden_size": hidden}, lambda config, op=op, hidden=hidden: make_thunk(op, hidden, config), candidates)
        for op in ("rms_norm", "fused_add_rms_norm")
        for hidden in _hidden_sizes(preset, args)
    ]
