"""``scripts/bench_serving.py`` end to end at the tiniest load: on this CPU
machine the baseline (plain SGLang) cannot run, so ``--ours-only``: our server
starts in development mode, ``sglang.bench_serving`` (random token ids, offline)
completes every request through our kernels, the server is stopped, and the
JSON summary carries the numbers. On a GPU the same script also runs SGLang's
Triton attention backend and compares."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_serving.py"
PROMPTS = 2


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_closed(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_bench_serving_ours_only(tiny_llama, tmp_path):
    port = _free_port()
    out = tmp_path / "summary.json"
    cmd = [sys.executable, str(SCRIPT), "--ours-only", "--model-path", tiny_llama, "--dtype", "float32",
           "--num-prompts", str(PROMPTS), "--random-input-len", "8", "--random-output-len", "4",
           "--warmup-requests", "0", "--port", str(port), "--start-timeout", "600", "--bench-timeout", "300",
           "--server-args", "--max-total-tokens 2048 --max-running-requests 4",
           "--workdir", str(tmp_path / "work"), "--output", str(out)]  # fmt: skip
    env = dict(os.environ, SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS="0")
    env.pop("SGLANG_PLATFORM", None)  # the script selects the platform for its server itself
    start = time.time()
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    summary = json.loads(out.read_text())
    ours = summary["ours"]
    assert ours["completed"] == PROMPTS
    assert ours["output_throughput"] > 0 and ours["request_throughput"] > 0
    assert ours["total_output_tokens"] == PROMPTS * 4
    assert ours["server"]["attention_backend"] == "kunlun_triton"
    assert ours["dispatch"]["ops"]["extend_attention"] == "triton"
    assert ours["dispatch"]["ops"]["decode_attention"] == "triton"
    assert summary["theirs"] is None and summary["ratio_output_throughput"] is None
    assert "output throughput (tok/s)" in proc.stdout and "baseline not run" in proc.stdout
    assert _port_closed(port), "the server was not stopped"
    print(f"bench_serving smoke: {time.time() - start:.0f} s")
