"""`kunlun-triton doctor`: what this machine runs, and is every op right?

Prints the detected target and why, the device count, torch and Triton
versions, then for every op: which implementation ran, the max error against
its torch reference on a small input, and the time per call. Exits 1 when an
op is wrong or raises.
"""

from __future__ import annotations

import platform
import traceback

import torch

from ..runtime import current_target, dispatch_report, reset_dispatch_report
from ..testing.tolerances import max_abs_error, tolerance
from .checks import OpCheck
from .families import family_modules
from .timing import time_call


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def compare(check: OpCheck, out, ref) -> tuple[float, bool]:
    if check.compare is not None:
        return check.compare(out, ref)
    atol, rtol = tolerance(check.dtype)
    atol = check.atol if check.atol is not None else atol
    rtol = check.rtol if check.rtol is not None else rtol
    err, ok = 0.0, True
    for a, b in zip(_as_tuple(out), _as_tuple(ref)):
        err = max(err, max_abs_error(a, b))
        ok = ok and a.shape == b.shape and torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol, equal_nan=True)
    return err, ok


def run_check(check: OpCheck, repeat: int) -> dict:
    row = {"op": check.op, "dtype": str(check.dtype).replace("torch.", "")}
    try:
        out = check.run()
        err, ok = compare(check, out, check.reference())
        timing = time_call(check.run, warmup=1, repeat=repeat)
        impl = dispatch_report().get(check.op, {}).get("impl", "?")
        row.update(impl=impl, max_error=err, ok=ok, time_us=timing.median_s * 1e6)
    except Exception as exc:  # a doctor reports, it does not crash on the first bad op
        row.update(impl="error", max_error=None, ok=False, time_us=None, error=f"{type(exc).__name__}: {exc}")
        row["traceback"] = traceback.format_exc()
    return row


def header_lines() -> list[str]:
    import triton

    import kunlun_triton

    target = current_target()
    return [
        f"target:       {target.name} ({target.arch or 'unknown arch'})",
        f"why:          {target.reason}",
        f"device:       {target.device_type} x {kunlun_triton.device_count()}",
        f"torch:        {torch.__version__}",
        f"triton:       {triton.__version__}",
        f"python:       {platform.python_version()} on {platform.machine()}",
    ]


def doctor(families=None, repeat: int = 3, verbose: bool = False) -> int:
    for line in header_lines():
        print(line)
    reset_dispatch_report()
    device = current_target().device_type
    modules = family_modules()
    rows = []
    for name in families or sorted(modules):
        for check in modules[name].doctor_checks(device):
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
    print(f"\n{len(rows) - len(bad)}/{len(rows)} op checks ok", end="")
    print(f"; torch fallback: {', '.join(fallbacks)}" if fallbacks else "; all on the Triton path")
    if bad:
        print(f"WRONG: {', '.join(bad)}")
    return 1 if bad or not rows else 0
