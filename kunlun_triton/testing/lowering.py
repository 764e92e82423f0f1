"""`assert_lowers`: a test's proof that kernels compile ahead of time for
CUDA sm_90 and HIP gfx942 with no device (`kunlun_triton.introspect.aot`)."""

from __future__ import annotations

from ..introspect.aot import AOT_TARGETS, compile_ahead_of_time


def assert_lowers(specs, targets=tuple(AOT_TARGETS)) -> None:
    """Compile all specs and raise one AssertionError listing every failure."""
    failures = [
        f"{r['spec'].label} on {r['target']}: {r['error']}"
        for r in compile_ahead_of_time(specs, targets)
        if not r["ok"]
    ]
    if failures:
        raise AssertionError("kernels failed to lower:\n" + "\n".join(failures))
