"""Where a launcher's host time goes: its own Python against its launches.

    env -u TRITON_INTERPRET PYTHONPATH=$PWD python scripts/launcher_split.py
    env -u TRITON_INTERPRET PYTHONPATH=$PWD python scripts/launcher_split.py --ops sample,greedy

Each op's bench call at batch 8 (attention: 1024 cached tokens; fused_experts
at qwen3-30b-a3b's experts), planned for cuda sm_90 on CPU tensors, is timed
as `kunlun-triton inspect --launcher-us` times it with Triton's binder counted
(`inspect_kernels.launcher_overhead`: the launch stubbed below the binder,
``torch.empty((8, 4096))`` timed alongside as the speed-free yardstick), then
again with every bound launch (`ops.launch.KernelLaunch`, `LaunchSequence`) a
no-op, which leaves the launcher's own Python (checks, allocations, plan
lookup, views). Prints both as ratios to the yardstick and the launches'
share as the difference. Issue 24's host target, 20 us at the build
machine's slow speed (3.6-4.1 us per ``torch.empty``), is a whole-call ratio
of about 5.
"""

from __future__ import annotations

import argparse

import torch

from kunlun_triton.ops import launch
from kunlun_triton.ops.spec import all_specs
from kunlun_triton.tools.inspect_kernels import launcher_overhead, op_shape, parse_target
from kunlun_triton.tools.presets import DEFAULT_PRESET, MODEL_PRESETS

# Every op SGLang reaches through the install table (the specs say which: `OpSpec.sglang_forward`, `OpSpec.sglang`).
DEFAULT_OPS = ",".join(name for name, spec in all_specs().items() if spec.sglang_forward or spec.sglang)


class _LaunchesOff:
    """Every bound launch a no-op while inside."""

    def __enter__(self):
        self.saved = launch.KernelLaunch.__call__, launch.LaunchSequence.__call__
        launch.KernelLaunch.__call__ = launch.LaunchSequence.__call__ = lambda self, *args: None

    def __exit__(self, *exc):
        launch.KernelLaunch.__call__, launch.LaunchSequence.__call__ = self.saved


def _ratio(name, spec, target, shape) -> float:
    us = launcher_overhead(name, spec, target, shape, torch.bfloat16, below_binder=True)
    return us["ours"] / us["torch.empty"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", default=DEFAULT_OPS, help="comma-separated op names")
    args = parser.parse_args()
    target, specs = parse_target("cuda"), all_specs()
    print(f"{'op (batch 8)':22s} {'whole':>6s} {'Python':>7s} {'launches':>9s}  (ratios to torch.empty((8, 4096)))")
    for name in args.ops.split(","):
        preset = MODEL_PRESETS["qwen3-30b-a3b" if specs[name].family == "moe" else DEFAULT_PRESET]  # an MoE model
        shape = op_shape(specs[name], preset, 8, 1024 if "attention" in name else None, None)
        whole = _ratio(name, specs[name], target, shape)
        with _LaunchesOff():
            python = _ratio(name, specs[name], target, shape)
        print(f"{name:22s} {whole:6.2f} {python:7.2f} {whole - python:9.2f}")


if __name__ == "__main__":
    main()
