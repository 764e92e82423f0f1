#!/usr/bin/env bash
# The main job, from a fresh clone: sets up .venv and runs `kunlun-triton doctor`
# (detected target, and every op checked against its torch reference).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-venv.sh
setup_venv test
exec "$VENV/bin/kunlun-triton" doctor "$@"
