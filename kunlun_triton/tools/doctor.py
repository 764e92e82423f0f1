"""`kunlun-triton doctor`: what this machine runs, and is every op right?

Prints the detected target and why, the device count, the torch, Triton,
SGLang and Python it found and whether each is inside the supported window
(``kunlun_triton/sglang_plugin/platform/versions.py``; reading it imports no SGLang),
then for every op (each spec's doctor inputs, see
`kunlun_triton.ops.spec`) and the KV allocator: which implementation ran,
the error against its torch reference on a small input, and the time per
call. Exits 1 when a check is wrong or raises.
"""

from __future__ import annotations

import platform
import traceback

import torch

from ..runtime import current_target, dispatch_report, dtype_name, reset_dispatch_report
from . import allocator_bench
from .checks import OpCheck, doctor_checks, select_specs
from .timing import time_call


def all_checks(names=None, device: str | None = None) -> list[OpCheck]:
    """The doctor checks of the named op families or ops (all when none),
    then the allocator's (when all, or ``allocator`` is named)."""
    device = device or current_target().device_type
    names = list(names or [])
    checks = doctor_checks(select_specs(names, ("allocator",)), device)
    if not names or "allocator" in names:
        checks += allocator_bench.doctor_checks(device)
    return checks


def run_check(check: OpCheck, repeat: int) -> dict:
    row = {"op": check.op, "dtype": dtype_name(check.dtype)}
    try:
        out = check.run()
        err, ok = check.compare(out, check.reference())
        timing = time_call(check.run, warmup=1, repeat=repeat)
        impl = dispatch_report().get(check.op, {}).get("impl", "-")
        row.update(impl=impl, max_error=err, ok=ok, time_us=timing.median_s * 1e6)
    except Exception as exc:  # a doctor reports, it does not crash on the first bad op
        row.update(impl="error", max_error=None, ok=False, time_us=None, error=f"{type(exc).__name__}: {exc}")
        row["traceback"] = traceback.format_exc()
    return row


def version_lines() -> list[str]:
    """torch, Triton, SGLang and Python: the version found, and whether it is
    inside the supported window (a vendor build is named as it reports itself)."""
    import triton

    from ..sglang_plugin.platform import versions

    found = {
        "torch": torch.__version__,
        "triton": triton.__version__,
        "sglang": versions.installed_version("sglang"),
        "python": platform.python_version(),
    }
    lines = []
    for name, got in found.items():
        window = versions.window_text(name)
        if got is None:
            verdict = f"not installed (the plugin supports {window})"
        else:
            inside = "inside" if versions.in_window(name, got) else "OUTSIDE"
            verdict = f"{got} ({inside} the window {window})"
        if name == "python":
            verdict += f" on {platform.machine()}"
        lines.append(f"{name + ':':<14}{verdict}")
    return lines


def header_lines() -> list[str]:
    import kunlun_triton

    target = current_target()
    return [
        f"target:       {target.name} ({target.arch or 'unknown arch'})",
        f"why:          {target.reason}",
        f"device:       {target.device_type} x {kunlun_triton.device_count()}",
        *version_lines(),
    ]


def doctor(names=None, repeat: int = 3, verbose: bool = False) -> int:
    """Print the checks of the named op families or ops (all when none);
    exit status 1 when one is wrong or raises. Unknown names: ValueError."""
    checks = all_checks(names)
    for line in header_lines():
        print(line)
    reset_dispatch_report()
    rows = []
    for check in checks:
        rows.append(run_check(check, repeat))
        r = rows[-1]
        err = "-" if r["max_error"] is None else f"{r['max_error']:.2e}"
        t = "-" if r["time_us"] is None else f"{r['time_us']:.0f} us"
        status = "ok" if r["ok"] else "WRONG"
        print(f"  {r['op']:<28} {r['dtype']:<9} {r['impl']:<7} max_err {err:<9} {t:>12}  {status}")
        if "error" in r:
            print(f"    {r['error']}")
            if verbose:
                print(r["traceback"])
    bad = [r["op"] for r in rows if not r["ok"]]
    fallbacks = sorted({r["op"] for r in rows if r["impl"] == "torch"})
    raised = sorted({r["op"] for r in rows if r["impl"] == "error"})
    print(f"\n{len(rows) - len(bad)}/{len(rows)} op checks ok", end="")
    if fallbacks:
        print(f"; torch fallback: {', '.join(fallbacks)}")
    elif raised:
        print(f"; raised before a result: {', '.join(raised)}")  # not "all on the Triton path"
    else:
        print("; all on the Triton path")
    if bad:
        print(f"WRONG: {', '.join(bad)}")
    return 1 if bad or not rows else 0
