"""`kunlun-triton bench`: time every implementation of each case side by side.

Cases come from the op specs (`kunlun_triton.ops.spec`: each op's bench
shapes for the model preset) and the allocator's serving trace; this runs
them and returns one row per (case, impl) with time, GB/s, fraction of peak
and the ratios against the case's baseline (the torch reference) and against
SGLang's kernel where one is importable, all measured in the same run.
`report` turns the rows into a table, JSON, CSV and a plot.
"""

from __future__ import annotations

import sys
import traceback

from . import allocator_bench
from .arguments import USAGE_ERROR, environment_problem, ignored_flags, output_dir_problem
from .checks import BenchCase, bench_cases, select_specs, unused_keys_message, unused_shape_keys
from .presets import MODEL_PRESETS, PRESET_FIELDS, peak_bandwidth_gbps, presets_for
from .report import ProgressBar, text_table, write_outputs
from .timing import time_call

# Impls every other impl of a case is compared with, when the case has them.
COMPARED_WITH = ("torch", "sglang")
EXTRA_FAMILIES = ("allocator",)


def sglang_baselines() -> dict:
    """``{op: {"sglang": fn(case) -> thunk}}`` from SGLang's own kernels, or
    ``{}`` where SGLang is absent or does not import: the bench then simply
    has no ``sglang`` column."""
    import importlib.util

    if importlib.util.find_spec("sglang") is None:
        return {}
    try:
        from ..sglang_plugin.tools.baselines import bench_baselines

        return bench_baselines()
    except Exception:  # an SGLang that does not import is treated as absent
        return {}


def collect_cases(names, preset_name: str, args) -> list[BenchCase]:
    """The cases of `names` (family or op names; empty: all) for the preset,
    with ``args.shapes`` (from ``--shape``) applied: preset fields replace the
    preset's, other keys replace the values a case's shape sweeps. A key
    that changes no selected case, or a value of the wrong kind, is a
    ValueError."""
    from ..runtime import current_target

    names = list(names or [])
    specs = select_specs(names, EXTRA_FAMILIES)
    shapes = getattr(args, "shapes", None) or {}
    sweep = {k: v for k, v in shapes.items() if k not in PRESET_FIELDS}
    quick = bool(getattr(args, "quick", False))
    with_allocator = not names or "allocator" in names
    unused = unused_shape_keys(specs, MODEL_PRESETS[preset_name], quick, shapes, lambda s: s.bench_shapes,
                               allocator_bench.SWEPT_KEYS if with_allocator else ())
    if unused:
        raise ValueError(unused_keys_message(unused, quick))
    device = current_target().device_type
    baselines = sglang_baselines()
    cases, seen = [], set()
    for preset in presets_for(MODEL_PRESETS[preset_name], shapes):
        for case in bench_cases(specs, preset, quick, sweep, device, baselines):
            key = (case.op, repr(sorted(case.params.items())))
            if key not in seen:  # a case that reads no overridden preset field repeats per variant
                seen.add(key)
                cases.append(case)
    if with_allocator:
        cases += allocator_bench.bench_cases(quick, sweep, device)
    return cases


def _time_impl(fn, warmup, repeat) -> tuple[object, str | None]:
    try:
        return time_call(fn, warmup=warmup, repeat=repeat), None
    except Exception as exc:  # one broken impl must not end the run
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0][:200]


def run_case(case: BenchCase, warmup: int, repeat: int, peak_gbps: float | None) -> list[dict]:
    rows = []
    try:
        impls, bytes_moved, flops = case.build()
    except Exception as exc:  # one broken case must not end the run
        error = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        return [{"family": case.family, "op": case.op, **case.params, "impl": "-", "time_us": None, "error": error}]
    for impl, fn in impls.items():
        timing, error = _time_impl(fn, warmup, repeat)
        row = {"family": case.family, "op": case.op, **case.params, "impl": impl}
        if timing is None:
            row.update(time_us=None, gbps=None, peak_fraction=None, clock=None, error=error)
        else:
            gbps = bytes_moved / timing.median_s / 1e9 if bytes_moved else None
            row.update(
                time_us=timing.median_s * 1e6,
                gbps=gbps,
                peak_fraction=gbps / peak_gbps if gbps and peak_gbps else None,
                clock=timing.clock,
            )
            if flops:  # compute-bound ops (MoE prefill) say how close to the tensor-core peak
                row["tflops"] = flops / timing.median_s / 1e12
        row["x_axis"] = case.x_axis
        rows.append(row)
    for other in dict.fromkeys((case.baseline, *COMPARED_WITH)):
        base = next((r for r in rows if r["impl"] == other and r["time_us"]), None)
        if other not in impls:
            continue
        for r in rows:
            r["speedup_vs_" + other] = base["time_us"] / r["time_us"] if base and r["time_us"] else None
    return rows


def run_bench(cases, warmup=3, repeat=10, peak_gbps=None, progress=None) -> list[dict]:
    """Run every case; `progress(i, n, case)` is called before case i and
    ``progress(n, n, None)`` at the end."""
    peak = peak_bandwidth_gbps(override=peak_gbps)
    rows = []
    for i, case in enumerate(cases):
        if progress:
            progress(i, len(cases), case)
        rows.extend(run_case(case, warmup, repeat, peak))
    if progress:
        progress(len(cases), len(cases), None)
    return rows


def format_table(rows: list[dict]) -> str:
    return text_table(rows)


def _case_label(case) -> str:
    params = ",".join(f"{k}={v}" for k, v in case.params.items())
    return f"{case.family}.{case.op} {params}"


_bar: ProgressBar | None = None


def print_progress(i, n, case) -> None:
    """A progress bar on stderr (the `progress` callback of `run_bench`)."""
    global _bar
    if i == 0 or _bar is None:
        _bar = ProgressBar(n)
    _bar.update(i, _case_label(case) if case is not None else "done")
    if case is None:
        _bar.close()


def run_meta(args, peak) -> dict:
    import platform

    import torch
    import triton

    from ..runtime import current_target
    from .presets import device_name

    target = current_target()
    return {
        "target": target.name,
        "arch": target.arch,
        "device": device_name(),
        "peak_gbps": peak,
        "preset": getattr(args, "preset", None),
        "shapes": getattr(args, "shapes", None) or {},
        "quick": bool(getattr(args, "quick", False)),
        "warmup": getattr(args, "warmup", None),
        "repeat": getattr(args, "repeat", None),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
    }


_RUN_FLAGS = {"--warmup": "warmup", "--repeat": "repeat", "--peak-gbps": "peak_gbps", "--output": "output",
              "--metric": "metric"}


def _usage_problem(args) -> str | None:
    """Flags the chosen mode would ignore, or an environment the run cannot use."""
    if getattr(args, "peak_table", False):
        return ignored_flags(args, "--peak-table (it prints the table and runs nothing)",
                             {"FAMILY/OP": "family", "--quick": "quick", "--shape": "shape", "--list": "list",
                              **_RUN_FLAGS})  # fmt: skip
    if getattr(args, "list", False):
        problem = ignored_flags(args, "--list (it runs nothing)", _RUN_FLAGS)
    else:
        problem = None if getattr(args, "output", None) else ignored_flags(
            args, "bench without --output (no plot)", {"--metric": "metric"})
    return problem or output_dir_problem("--output", getattr(args, "output", None)) or environment_problem()


def main_from_args(args) -> int:
    """What ``kunlun-triton bench`` does with its parsed arguments: exit
    status 0 when every impl ran, 1 when one raised (the table says which),
    2 for a bad command line or environment (one line, nothing run)."""
    from .presets import parse_shapes, peak_table

    problem = _usage_problem(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return USAGE_ERROR
    if getattr(args, "peak_table", False):
        print(peak_table())
        return 0
    args.warmup = 3 if getattr(args, "warmup", None) is None else args.warmup
    args.repeat = 10 if getattr(args, "repeat", None) is None else args.repeat
    args.metric = getattr(args, "metric", None) or "auto"
    try:
        args.shapes = parse_shapes(getattr(args, "shape", None))
        cases = collect_cases(args.family, args.preset, args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    if getattr(args, "list", False):
        for case in cases:
            print(_case_label(case))
        return 0
    if not cases:
        print("no bench cases (no op family offers any for this selection)", file=sys.stderr)
        return 1
    peak = peak_bandwidth_gbps(override=args.peak_gbps)
    try:
        rows = run_bench(cases, warmup=args.warmup, repeat=args.repeat, peak_gbps=peak, progress=print_progress)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    meta = run_meta(args, peak)
    print(f"# {meta['device']} ({meta['target']} {meta['arch']}), peak "
          f"{'%.0f GB/s' % peak if peak else 'unknown (--peak-gbps)'}, preset {meta['preset']}")
    print(format_table(rows))
    if getattr(args, "output", None):
        try:
            written = write_outputs(rows, args.output, meta, metric=getattr(args, "metric", "auto"))
        except Exception:
            traceback.print_exc()
            return 1
        print("wrote " + ", ".join(str(p) for p in written.values()), file=sys.stderr)
    failed = [r for r in rows if r.get("error")]
    if failed:
        print(f"error: {len(failed)} of {len(rows)} impl(s) raised; see the error column", file=sys.stderr)
        return 1
    return 0
