"""`kunlun-triton bench`: time every implementation of each case side by side.

Each family module (`tools/families/`) yields `BenchCase`s; this runs them
and returns one row per (case, impl) with time, GB/s, fraction of peak and
the ratio against the case's baseline in the same run.
"""

from __future__ import annotations

import sys

from .checks import BenchCase
from .families import family_modules
from .presets import MODEL_PRESETS, peak_bandwidth_gbps
from .timing import time_call


def collect_cases(families, preset_name: str, args) -> list[BenchCase]:
    modules = family_modules()
    unknown = [f for f in families if f not in modules]
    if unknown:
        raise SystemExit(f"unknown op family {unknown}; known: {', '.join(sorted(modules))}")
    preset = MODEL_PRESETS[preset_name]
    cases = []
    for name in families or sorted(modules):
        cases.extend(modules[name].bench_cases(preset, args))
    return cases


def run_case(case: BenchCase, warmup: int, repeat: int, peak_gbps: float | None) -> list[dict]:
    rows = []
    for impl, fn in case.impls.items():
        timing = time_call(fn, warmup=warmup, repeat=repeat)
        gbps = case.bytes_moved / timing.median_s / 1e9 if case.bytes_moved else None
        rows.append(
            {
                "family": case.family,
                "op": case.op,
                **case.params,
                "impl": impl,
                "time_us": timing.median_s * 1e6,
                "gbps": gbps,
                "peak_fraction": gbps / peak_gbps if gbps and peak_gbps else None,
                "clock": timing.clock,
            }
        )
    base = next((r for r in rows if r["impl"] == case.baseline), None)
    for r in rows:
        r["speedup_vs_" + case.baseline] = base["time_us"] / r["time_us"] if base else None
    return rows


def run_bench(cases, warmup=3, repeat=10, peak_gbps=None, progress=None) -> list[dict]:
    peak = peak_bandwidth_gbps(override=peak_gbps)
    rows = []
    for i, case in enumerate(cases):
        if progress:
            progress(i, len(cases), case)
        rows.extend(run_case(case, warmup, repeat, peak))
    return rows


def format_table(rows: list[dict]) -> str:
    if not rows:
        return "(no results)"
    columns = list(dict.fromkeys(k for r in rows for k in r))

    def cell(v):
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1e4 else f"{v:.0f}"
        return str(v)

    table = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(t[i]) for t in table)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(t, widths)) for t in table]
    return "\n".join(lines)


def print_progress(i, n, case) -> None:
    print(f"\r[{i + 1}/{n}] {case.family}.{case.op} {case.params}", end="", file=sys.stderr, flush=True)
