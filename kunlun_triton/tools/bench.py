"""`kunlun-triton bench`: time every implementation of each case side by side.

Each family module (`tools/families/`) yields `BenchCase`s; this runs them
and returns one row per (case, impl) with time, GB/s, fraction of peak and
the ratios against the case's baseline (the torch reference) and against
SGLang's kernel where the family offers one, all measured in the same run.
`report` turns the rows into a table, JSON, CSV and a plot.
"""

from __future__ import annotations

import sys
import traceback

from . import families as _families
from .checks import BenchCase
from .presets import MODEL_PRESETS, PRESET_FIELDS, peak_bandwidth_gbps, presets_for
from .report import ProgressBar, text_table, write_outputs
from .timing import time_call

# Impls every other impl of a case is compared with, when the case has them.
COMPARED_WITH = ("torch", "sglang")


def _select(names, modules) -> tuple[list[str], list[str], set[str]]:
    """(modules to ask for cases, family names given, op names given)."""
    fams = [n for n in names if n in modules]
    ops = {n for n in names if n not in modules}
    return (sorted(modules) if ops or not fams else fams), fams, ops


def collect_cases(families, preset_name: str, args) -> list[BenchCase]:
    """The cases of `families` (family or op names; empty: all) for the
    preset, with ``args.shapes`` (from ``--shape``) applied: preset fields
    replace the preset's, other keys reach the families through
    `presets.shape_values` and also filter the cases whose params name them."""
    modules = _families.family_modules()
    names = list(families or [])
    selected, fams, ops = _select(names, modules)
    shapes = getattr(args, "shapes", None) or {}
    cases = []
    seen = set()
    for preset in presets_for(MODEL_PRESETS[preset_name], shapes):
        for name in selected:
            try:
                family_cases = list(modules[name].bench_cases(preset, args))
            except Exception as exc:  # one broken family must not hide the others' numbers
                print(f"warning: family {name}: bench_cases raised {type(exc).__name__}: {exc}", file=sys.stderr)
                continue
            for case in family_cases:
                # a case that reads no overridden preset field repeats per variant
                key = (case.family, case.op, tuple((k, str(v)) for k, v in case.params.items()))
                if key not in seen:
                    seen.add(key)
                    cases.append(case)
    if ops:
        known = {c.op for c in cases}
        unknown = sorted(ops - known)
        if unknown:
            raise SystemExit(
                f"unknown op family or op {unknown}; families: {', '.join(sorted(modules))}; "
                f"ops: {', '.join(sorted(known)) or '(none)'}"
            )
        cases = [c for c in cases if c.op in ops or c.family in fams]
    sweep = {k: v for k, v in shapes.items() if k not in PRESET_FIELDS}
    used = {k for c in cases for k in c.params}
    for key, values in sweep.items():
        if key in used:
            cases = [c for c in cases if key not in c.params or _value_in(c.params[key], values)]
        else:
            print(f"warning: --shape {key}=... matches no param of the selected cases", file=sys.stderr)
    return cases


def _value_in(value, values) -> bool:
    return any(value == v or str(value) == str(v) for v in values)


def _time_impl(fn, warmup, repeat) -> tuple[object, str | None]:
    try:
        return time_call(fn, warmup=warmup, repeat=repeat), None
    except Exception as exc:  # one broken impl must not end the run
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0][:200]


def run_case(case: BenchCase, warmup: int, repeat: int, peak_gbps: float | None) -> list[dict]:
    rows = []
    for impl, fn in case.impls.items():
        timing, error = _time_impl(fn, warmup, repeat)
        row = {"family": case.family, "op": case.op, **case.params, "impl": impl}
        if timing is None:
            row.update(time_us=None, gbps=None, peak_fraction=None, clock=None, error=error)
        else:
            gbps = case.bytes_moved / timing.median_s / 1e9 if case.bytes_moved else None
            row.update(
                time_us=timing.median_s * 1e6,
                gbps=gbps,
                peak_fraction=gbps / peak_gbps if gbps and peak_gbps else None,
                clock=timing.clock,
            )
        row["x_axis"] = case.x_axis
        rows.append(row)
    for other in dict.fromkeys((case.baseline, *COMPARED_WITH)):
        base = next((r for r in rows if r["impl"] == other and r["time_us"]), None)
        if other not in case.impls:
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


def main_from_args(args) -> int:
    """What ``kunlun-triton bench`` does with its parsed arguments."""
    from .presets import parse_shapes, peak_table

    if getattr(args, "peak_table", False):
        print(peak_table())
        return 0
    try:
        args.shapes = parse_shapes(getattr(args, "shape", None))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    cases = collect_cases(args.family, args.preset, args)
    if getattr(args, "list", False):
        for case in cases:
            print(f"{_case_label(case)}  impls: {', '.join(case.impls)}")
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
        print(f"{len(failed)} impl(s) raised; see the error column", file=sys.stderr)
    return 0
