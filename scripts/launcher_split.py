"""Where a launcher's host time goes: its own Python against its launches.

    env -u TRITON_INTERPRET PYTHONPATH=$PWD python scripts/launcher_split.py
    env -u TRITON_INTERPRET PYTHONPATH=$PWD python scripts/launcher_split.py --ops sample,greedy --rounds 9

Each op's bench case at batch 8 (attention: 1024 cached tokens; fused_experts
at qwen3-30b-a3b's experts), planned for cuda sm_90 on CPU tensors with the
driver's launch stubbed below Triton's binder (`introspect.launches`), is
timed three ways in interleaved rounds: the whole call; the call with every
bound launch (`ops.launch.KernelLaunch`, `LaunchSequence`) a no-op, which
leaves the launcher's own Python (checks, allocations, plan lookup, views);
and ``torch.empty((8, 4096))``, the speed-free yardstick. Prints the median
per-round ratio of each to the yardstick, and the launches' share as the
difference. Issue 24's host target, 20 us at the build machine's slow
speed (3.6-4.1 us per ``torch.empty``), is a whole-call ratio of about 5.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from kunlun_triton.introspect.launches import stubbed_below_binder
from kunlun_triton.ops import launch
from kunlun_triton.ops.spec import all_specs
from kunlun_triton.runtime import Target, targeting
from kunlun_triton.tools.inspect_kernels import op_shape, parse_target
from kunlun_triton.tools.presets import DEFAULT_PRESET, MODEL_PRESETS

DEFAULT_OPS = ("sample,fused_experts,extend_attention,decode_attention,greedy,silu_and_mul,rms_norm,"
               "fused_add_rms_norm,rotary_embedding,store_kv,moe_topk,top_p_renorm_probs,logit_softcap")  # fmt: skip
CALLS = 2000  # per timing: long enough for thread_time's resolution


def _calls(names: list[str]) -> dict:
    specs = all_specs()
    calls = {}
    for name in names:
        preset = MODEL_PRESETS["qwen3-30b-a3b" if name == "fused_experts" else DEFAULT_PRESET]
        shape = op_shape(specs[name], preset, 8, 1024 if "attention" in name else None, None)
        case = specs[name].make_case(shape, torch.bfloat16, "cpu")
        calls[name] = case.call or (lambda case=case: case.run(None))
    return calls


def _timed(call) -> float:
    start = time.thread_time()
    for _ in range(CALLS):
        call()
    return (time.thread_time() - start) / CALLS * 1e6


class _LaunchesOff:
    """Every bound launch a no-op while inside."""

    def __enter__(self):
        self.saved = launch.KernelLaunch.__call__, launch.LaunchSequence.__call__
        launch.KernelLaunch.__call__ = launch.LaunchSequence.__call__ = lambda self, *args: None

    def __exit__(self, *exc):
        launch.KernelLaunch.__call__, launch.LaunchSequence.__call__ = self.saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", default=DEFAULT_OPS, help="comma-separated op names")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    names = args.ops.split(",")
    cuda = parse_target("cuda")
    with targeting(Target(cuda.name, cuda.arch, "cpu", cuda.reason)):
        calls = _calls(names)
        yardstick = lambda: torch.empty((8, 4096), dtype=torch.bfloat16)  # noqa: E731
        whole = {name: [] for name in names}
        python = {name: [] for name in names}
        base = []
        with stubbed_below_binder():
            for call in calls.values():  # compile (stubbed) and warm every path first
                for _ in range(300):
                    call()
            for _ in range(args.rounds):
                base.append(_timed(yardstick))
                for name in names:
                    whole[name].append(_timed(calls[name]))
                with _LaunchesOff():
                    for name in names:
                        python[name].append(_timed(calls[name]))
    ratio = lambda times: statistics.median(t / b for t, b in zip(times, base))  # noqa: E731
    print(f"torch.empty((8, 4096)): median {statistics.median(base):.2f} us over {args.rounds} rounds")
    print(f"{'op (batch 8)':22s} {'whole':>6s} {'Python':>7s} {'launches':>9s}  (ratios to torch.empty)")
    for name in names:
        w, p = ratio(whole[name]), ratio(python[name])
        print(f"{name:22s} {w:6.2f} {p:7.2f} {w - p:9.2f}")


if __name__ == "__main__":
    main()
