#!/usr/bin/env bash
# The whole test suite, from a fresh clone: sets up .venv, runs pytest.
# Kernels run under the Triton interpreter when no accelerator is present.
# KUNLUN_TRITON_STRICT_SKIPS=1 turns any skipped test into a failure, so a
# suite that cannot run is reported, not hidden. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-venv.sh
setup_venv test
log "running tests"
export KUNLUN_TRITON_STRICT_SKIPS=${KUNLUN_TRITON_STRICT_SKIPS:-1}
exec "$VENV/bin/python" -m pytest -m "not sglang" "$@"
