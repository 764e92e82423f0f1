#!/usr/bin/env bash
# One prepared run on a machine with one NVIDIA GPU (its own python3 with torch,
# Triton, pytest and hypothesis; no network, no SGLang):
#
#   bash scripts/gpu_check.sh OUT_DIR            # the run: under 8 minutes on an H200
#   bash scripts/gpu_check.sh --dry-run OUT_DIR  # list the steps, check imports (any machine)
#
# Steps: the machine and versions; the kernel test suite on the GPU with the
# Triton path forced; `kunlun-triton bench` of every op family at the
# Llama-3-8B and Qwen2.5-7B presets (warm-up, CUDA events); one summary table
# per op: GB/s, fraction of the card's peak, ratio to the torch reference
# (and to SGLang's kernels where SGLang imports). Installs nothing: the
# package runs from this checkout (PYTHONPATH). Each step has a time limit
# under an overall deadline of 8m50s, and writes its output as it goes, so a
# step that fails or times out leaves the others' results. OUT_DIR gets at
# most 8 flat files (what the device tool brings back): log.txt,
# summary.txt, summary.json, and <preset>.csv / <preset>.png per preset.
set -uo pipefail
cd "$(dirname "$0")/.."

DRY_RUN=0
if [ "${1:-}" = "--dry-run" ]; then DRY_RUN=1; shift; fi
OUT=${1:?usage: bash scripts/gpu_check.sh [--dry-run] OUT_DIR}
PYTHON=${PYTHON:-python3}
PRESETS=${KT_GPU_CHECK_PRESETS:-"llama-3-8b qwen2.5-7b"}
DEADLINE=$(( $(date +%s) + ${KT_GPU_CHECK_SECONDS:-530} ))
mkdir -p "$OUT"
WORK=$(mktemp -d)
LOG="$OUT/log.txt"
: > "$LOG"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export KUNLUN_TRITON_BACKEND=triton  # a kernel that cannot run fails, never falls back

say() { printf '\n==> %s\n' "$*" | tee -a "$LOG"; }

# step NAME SECONDS CMD...: run CMD with at most SECONDS (and never past the
# deadline), its output appended to the log; a failure is recorded, not fatal.
step() {
  local name=$1 budget=$2; shift 2
  local left=$(( DEADLINE - $(date +%s) - 15 ))
  (( budget > left )) && budget=$left
  say "$name (limit ${budget}s): $*"
  if (( DRY_RUN )); then return 0; fi
  if (( budget < 10 )); then say "skipped: the deadline is near"; return 0; fi
  timeout --kill-after=5 "$budget" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  say "$name: exit $rc$( ((rc == 124)) && echo ' (time limit)')"
}

FAMILIES=$("$PYTHON" -c "from kunlun_triton.ops.spec import FAMILIES; print(' '.join(FAMILIES))")
XDIST=()
"$PYTHON" -c "import xdist" 2>/dev/null && XDIST=(-n 8)

if (( DRY_RUN )); then
  say "dry run: imports and test collection"
  "$PYTHON" - <<'PY' 2>&1 | tee -a "$LOG" || exit 1
import hypothesis, matplotlib, pytest, torch, triton, yaml  # what the run needs besides the checkout
from kunlun_triton.ops import spec
from kunlun_triton.tools import bench, summary  # noqa: F401
specs = spec.all_specs()
print(f"torch {torch.__version__}, triton {triton.__version__}; {len(specs)} ops in {len(spec.FAMILIES)} families")
PY
  "$PYTHON" -m pytest --collect-only -q -p no:cacheprovider -m "not sglang" tests/ops > "$WORK/collect.txt" 2>&1 \
    || { cat "$WORK/collect.txt" | tee -a "$LOG"; exit 1; }
  tail -1 "$WORK/collect.txt" | tee -a "$LOG"
  for preset in $PRESETS; do
    "$PYTHON" -m kunlun_triton.cli bench $FAMILIES --preset "$preset" --list > "$WORK/list.txt" 2>&1 \
      || { cat "$WORK/list.txt" | tee -a "$LOG"; exit 1; }
    say "$preset: $(wc -l < "$WORK/list.txt") bench cases"
  done
fi

step "machine" 20 bash -c "nvidia-smi; $PYTHON -c 'import torch, triton; print(\"torch\", torch.__version__, \"triton\", triton.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else \"no GPU\")'"
step "kernel tests on the GPU" 250 "$PYTHON" -m pytest -q -p no:cacheprovider -m "not sglang" "${XDIST[@]}" tests/ops
for preset in $PRESETS; do
  step "bench $preset" 110 "$PYTHON" -m kunlun_triton.cli bench $FAMILIES --preset "$preset" \
    --warmup 3 --repeat 10 --output "$WORK/$preset"
  if (( ! DRY_RUN )); then
    [ -f "$WORK/$preset/results.csv" ] && cp "$WORK/$preset/results.csv" "$OUT/$preset.csv"
    [ -f "$WORK/$preset/plot.png" ] && cp "$WORK/$preset/plot.png" "$OUT/$preset.png"
  fi
done
RESULTS=()
for preset in $PRESETS; do RESULTS+=("$WORK/$preset/results.json"); done
step "summary" 20 bash -c "$PYTHON -m kunlun_triton.tools.summary '$OUT/summary.json' ${RESULTS[*]} | tee '$OUT/summary.txt'"
(( DRY_RUN )) && say "dry run done: the steps above would run in OUT_DIR=$OUT"
rm -rf "$WORK"
exit 0
