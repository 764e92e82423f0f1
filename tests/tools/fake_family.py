"""A stand-in op family for the tools' tests: torch-only, tiny, deterministic
in what it yields (times are whatever the machine measures)."""

from __future__ import annotations

import types

import torch

from kunlun_triton.tools.checks import BenchCase
from kunlun_triton.tools.presets import shape_values


def _scale_cases(preset, args):
    for batch in shape_values(args, "batch", [1, 4] if getattr(args, "quick", False) else [1, 16, 256]):
        for dtype in ("fp32", "fp16"):
            x = torch.randn(batch, preset.hidden_size, dtype=getattr(torch, {"fp32": "float32", "fp16": "float16"}[dtype]))
            yield BenchCase(
                family="fake",
                op="scale",
                params={"batch": batch, "hidden_size": preset.hidden_size, "dtype": dtype},
                impls={"torch": lambda x=x: x * 2.0, "triton": lambda x=x: torch.mul(x, 2.0)},
                bytes_moved=2 * x.numel() * x.element_size(),
                x_axis="batch",
            )


def _broken_cases(preset, args):
    def boom():
        raise RuntimeError("kernel exploded")

    yield BenchCase(
        family="fake",
        op="broken",
        params={"n": 8},
        impls={"torch": lambda: torch.zeros(8), "triton": boom},
        bytes_moved=64,
    )


def make_module(name="fake", with_broken=False):
    module = types.ModuleType(f"fake_family_{name}")

    def bench_cases(preset, args):
        yield from _scale_cases(preset, args)
        if with_broken:
            yield from _broken_cases(preset, args)

    module.bench_cases = bench_cases
    module.doctor_checks = lambda device: []
    return module
