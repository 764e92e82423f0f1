"""Test session set-up: interpreter on CPU-only machines, the Triton path
forced, hypothesis profiles.

TRITON_INTERPRET must be set before any kernel module is imported (Triton
decides at decoration time), hence at conftest import.

``KUNLUN_TRITON_BACKEND=triton``: an op whose kernel cannot run raises
instead of falling back to its torch reference, so a kernel test never
compares the reference with itself (with ``KUNLUN_TRITON_TARGET=torch`` the
kernel tests fail). Tests of the fallback itself set the variable back.
Kernel tests put their tensors on the target's device (`device` fixture,
`strategies.DEVICE`).
"""

import os

import pytest
import torch

if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
    os.environ["TRITON_INTERPRET"] = "1"
os.environ.setdefault("KUNLUN_TRITON_BACKEND", "triton")

from hypothesis import HealthCheck, settings  # noqa: E402

# The interpreter is slow: few examples, no deadline. CI derandomizes so a
# red run is reproducible; locally, HYPOTHESIS_PROFILE=explore searches more.
settings.register_profile(
    "default",
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("ci", parent=settings.get_profile("default"), derandomize=True, print_blob=True)
settings.register_profile("explore", parent=settings.get_profile("default"), max_examples=200)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "default"))


# Tests that need SGLang live in files named *sglang* (marked `sglang` below)
# or carry @pytest.mark.sglang. Without SGLang those files are not even
# collected, unless KUNLUN_TRITON_REQUIRE_SGLANG=1 (CI's sglang stage), where
# a missing SGLang is an import error, never a skip.
def _sglang_importable() -> bool:
    import importlib.util

    return importlib.util.find_spec("sglang") is not None


collect_ignore_glob = []
if not _sglang_importable() and os.environ.get("KUNLUN_TRITON_REQUIRE_SGLANG") != "1":
    collect_ignore_glob = ["*sglang*"]
elif _sglang_importable():
    # SGLang resolves its platform once per process, at first use: the tests
    # that drive SGLang on our platform need the choice made before any test
    # module (a baseline comparison, say) imports SGLang.
    os.environ.setdefault("SGLANG_PLATFORM", "kunlun")


@pytest.fixture
def device() -> str:
    """The torch device the active target's kernels run on."""
    from kunlun_triton.runtime import current_target

    return current_target().device_type


def pytest_configure(config):
    config.addinivalue_line("markers", "sglang: needs SGLang installed (run in the sglang environment)")
    config.addinivalue_line(
        "markers",
        "lowering: compiles kernels ahead of time; the sglang stage runs these again on SGLang's Triton "
        '(scripts/test.sh: -m "sglang or lowering")',
    )
    config.addinivalue_line(
        "markers", "regression: the fixed-model suite in tests/regression (KUNLUN_TRITON_REGRESSION=full: all of it)"
    )
    config.addinivalue_line(
        "markers",
        "sglang_window: the oldest SGLang of the window next to the newest (CI stage sglang-window, "
        "KUNLUN_TRITON_OLD_SGLANG)",
    )
    config.addinivalue_line(
        "markers",
        "slow: engine tests past CI's budget (each model family keeps a quick form in CI); deselected, not "
        "skipped, unless KUNLUN_TRITON_SLOW=1 (README, Tests)",
    )


def _left_out_files() -> list:
    """The test files `collect_ignore_glob` leaves out (no SGLang here)."""
    from pathlib import Path

    if not collect_ignore_glob:
        return []
    tests = Path(__file__).parent
    return sorted(p for p in tests.rglob("test_*.py") if "sglang" in p.name or "sglang" in p.parent.name)


def pytest_terminal_summary(terminalreporter):
    """Say what a plain run without SGLang did not collect, and why."""
    left_out = _left_out_files()
    if left_out:
        terminalreporter.write_line(
            f"kunlun-triton: {len(left_out)} test files need SGLang, which does not import here, and were not "
            "collected (the sglang stage runs them: KUNLUN_TRITON_TEST_STAGES=sglang bash scripts/test.sh)"
        )


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "sglang" in item.path.name or "sglang" in item.path.parent.name:
            item.add_marker(pytest.mark.sglang)
        if item.path.parent.name == "regression":
            item.add_marker(pytest.mark.regression)
    if os.environ.get("KUNLUN_TRITON_SLOW") != "1":
        slow = [item for item in items if item.get_closest_marker("slow")]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if not item.get_closest_marker("slow")]


def pytest_runtest_makereport(item, call):
    """With KUNLUN_TRITON_STRICT_SKIPS=1 (CI), a skip is a failure: a suite
    that cannot run must say so, not pass quietly."""
    if os.environ.get("KUNLUN_TRITON_STRICT_SKIPS") != "1" or call.excinfo is None:
        return None
    if call.excinfo.errisinstance(pytest.skip.Exception):
        from _pytest.reports import TestReport

        report = TestReport.from_item_and_call(item, call)
        report.outcome = "failed"
        report.longrepr = f"skipped under KUNLUN_TRITON_STRICT_SKIPS=1: {call.excinfo.value}"
        return report
    return None
