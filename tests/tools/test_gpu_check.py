"""scripts/gpu_check.sh: the dry run (what CI can check without a GPU), and
the summary table it ends with, on bench results whose numbers are known."""

import json
import os
import subprocess
import sys
from pathlib import Path

from kunlun_triton.tools.summary import summarize

ROOT = Path(__file__).resolve().parents[2]


def test_dry_run_lists_every_step_and_checks_imports(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(["bash", "scripts/gpu_check.sh", "--dry-run", str(tmp_path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    for step in ("machine", "kernel tests on the GPU", "bench llama-3-8b", "bench qwen2.5-7b", "summary"):
        assert f"==> {step} (limit" in done.stdout, step
    assert "tests collected" in done.stdout and "bench cases" in done.stdout
    assert "--preset llama-3-8b" in done.stdout and "KUNLUN_TRITON" not in done.stderr
    assert (tmp_path / "log.txt").read_text().count("==>") >= 6


def test_summary_aggregates_our_rows_per_op(tmp_path):
    rows = [
        {"family": "norm", "op": "rms_norm", "impl": "triton", "gbps": g, "peak_fraction": g / 4800,
         "speedup_vs_torch": r} for g, r in ((4000.0, 3.0), (4400.0, 5.0), (3000.0, 1.0))
    ] + [{"family": "norm", "op": "rms_norm", "impl": "torch", "gbps": 900.0}]  # fmt: skip
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"meta": {"preset": "llama-3-8b", "device": "H200", "peak_gbps": 4800}, "results": rows}))
    text, data = summarize([path])
    (op,) = data["ops"]
    assert (op["shapes"], op["gbps_median"], op["gbps_best"], op["vs_torch_median"]) == (3, 4000.0, 4400.0, 3.0)
    assert op["vs_sglang_median"] is None
    assert "rms_norm" in text and "83%" in text and "H200" in text
