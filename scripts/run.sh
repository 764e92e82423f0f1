#!/usr/bin/env bash
# The main job from a fresh clone: sets up .venv-sglang (SGLang 0.5.23 and this
# package; about 6 minutes and 11 GB the first time), builds a tiny random model
# if absent, and generates text through SGLang on the kunlun platform (on a
# machine without a Kunlun card: development mode, CPU + Triton interpreter),
# printing the text and which kernel ran for each op.
# Extra arguments go to scripts/sglang_generate.py (--help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-venv.sh
VENV=.venv-sglang
setup_venv sglang pinned-by-extras
log "generating text through SGLang on the kunlun platform"
exec "$VENV/bin/python" scripts/sglang_generate.py "$@"
