# Sourced by scripts/run.sh and scripts/test.sh: make (or reuse) a virtual
# environment in $VENV (default .venv) with this package and the given extras.
#   setup_venv "test"                          -> pip install -e ".[test]"
#   setup_venv "sglang,test" pinned-by-extras  -> the extras pin torch themselves
# torch: a vendor build already importable by python3 (Kunlun's torch, a
# ROCm build) is reused through --system-site-packages; on a machine with an
# NVIDIA driver pip takes its default CUDA build; otherwise the CPU wheel
# torch==2.13.0, never a multi-GB CUDA download.
set -euo pipefail

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

setup_venv() {
  local extras=$1 torch_from=${2:-}
  if [ ! -x "$VENV/bin/python" ]; then
    if "$PYTHON" -c "import torch, triton" 2>/dev/null; then
      log "creating $VENV reusing the system's torch and triton"
      "$PYTHON" -m venv --system-site-packages "$VENV"
    else
      log "creating $VENV"
      "$PYTHON" -m venv "$VENV"
    fi
  fi
  local pip=("$VENV/bin/python" -m pip install --progress-bar off --disable-pip-version-check)
  if [ "$torch_from" != pinned-by-extras ] && ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    if command -v nvidia-smi >/dev/null && nvidia-smi >/dev/null 2>&1; then
      log "installing torch (CUDA build: an NVIDIA driver answers)"
      "${pip[@]}" torch
    else
      log "installing torch==2.13.0 (CPU build)"
      "${pip[@]}" torch==2.13.0
    fi
  fi
  log "installing kunlun-triton[$extras]"
  local pick=()
  # KUNLUN_TRITON_SGLANG_VERSION picks a release of the supported window
  # (default: the newest, which the `sglang` extra lets pip choose).
  if [[ ",$extras," == *",sglang,"* && -n "${KUNLUN_TRITON_SGLANG_VERSION:-}" ]]; then
    pick=("sglang==$KUNLUN_TRITON_SGLANG_VERSION")
  fi
  "${pip[@]}" -e ".[$extras]" "${pick[@]}"
}
