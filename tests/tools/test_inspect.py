"""`kunlun-triton inspect`: plans an op's kernels for a target, compiles them
ahead of time and reports their cost (the comparison with SGLang's kernels
is in test_inspect_sglang.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kunlun_triton.cli import main

KEYS = {"impl", "kernel", "regs", "spill_bytes", "smem_bytes", "num_warps", "sass_total", "sass_loop", "items_per_loop"}


def test_inspect_reports_every_planned_kernel(tmp_path, capsys):
    out = tmp_path / "report.json"
    code = main(["inspect", "decode_attention", "rms_norm", "--target", "cuda:sm_90", "--preset", "llama3-8b",
                 "--batch", "4", "--context", "300", "--traffic", "--json", str(out)])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    report = json.loads(out.read_text())
    kernels = {k["kernel"]: k for k in report["kernels"]}
    assert set(kernels) == {"decode_partial_kernel", "decode_merge_kernel", "rms_norm_kernel"}
    for row in report["kernels"]:
        assert KEYS <= set(row), row
        assert row["impl"] == "ours" and row["regs"] > 0 and row["sass_total"] > 0 and row["spill_bytes"] == 0
    partial = kernels["decode_partial_kernel"]
    assert partial["items_per_loop"] == partial["constexprs"]["BLOCK_N"] and partial["sass_loop"] > 0
    assert report["ops"]["decode_attention"]["shape"]["batch"] == 4
    assert report["ops"]["decode_attention"]["shape"]["context_len"] == 300
    assert report["ops"]["decode_attention"]["bytes_per_call"]["ours"] > 4 * 300 * 8 * 256 * 2  # K and V at least
    assert "decode_partial_kernel" in capsys.readouterr().out


def test_inspect_plans_for_the_target_asked(tmp_path):
    """HIP's plan (its config, 64-wide waves) compiles to AMDGCN; Kunlun's
    (tl.sum formulation, where after masked loads) on sm_90 as a proxy."""
    reports = {}
    for target in ("hip:gfx942", "kunlun:p800"):
        out = tmp_path / f"{target.split(':')[0]}.json"
        assert main(["inspect", "extend_attention", "--target", target, "--batch", "1", "--context", "64",
                     "--shape", "extend_len=32", "--json", str(out)]) == 0  # fmt: skip
        reports[target] = json.loads(out.read_text())
    hip, kunlun = (reports[t]["kernels"][0] for t in ("hip:gfx942", "kunlun:p800"))
    assert reports["hip:gfx942"]["compiled_for"] == "hip" and hip["constexprs"]["USE_DOT"] is True
    assert reports["kunlun:p800"]["compiled_for"] == "cuda"
    assert kunlun["constexprs"]["USE_DOT"] is False and kunlun["constexprs"]["LOAD_IGNORES_OTHER"] is True
    assert kunlun["spill_bytes"] == 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["inspect", "no_such_op"], "unknown op"),
        (["inspect", "rms_norm", "--target", "tpu:v5"], "--target 'tpu:v5'"),
        (["inspect", "rms_norm", "--preset", "gpt-5"], "unknown preset"),
        (["inspect", "decode_attention", "--batch", "0"], "--batch must be >= 1"),
        (["inspect", "decode_attention", "--no-compile", "--shape", "kv_dtype=int4"],
         "--shape kv_dtype=int4: expected one of auto, fp8_e4m3, fp8_e5m2"),
        (["inspect", "store_kv", "--no-compile", "--shape", "kv_dtype=fp8"],
         "--shape kv_dtype=fp8: expected one of auto, fp8_e4m3, fp8_e5m2"),
        (["inspect", "rms_norm", "--shape", "kv_dtype=fp8_e4m3"],
         "--shape kv_dtype: no such key in the shape of rms_norm"),
    ],
)
def test_inspect_refuses_bad_requests(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def _report(tmp_path, capsys, argv):
    out = tmp_path / "report.json"
    assert main(["inspect", *argv, "--json", str(out)]) == 0, capsys.readouterr().err
    return json.loads(out.read_text())


def test_inspect_kv_dtype_moves_the_fp8_pool(tmp_path, capsys):
    """docs/fp8-kv-cache.md's command (``--shape kv_dtype=...``) at its shape,
    llama-3-8b at 64 x 4096: an fp8 pool moves each cached K and V value in
    one byte instead of bf16's two, the rest of the call (slot ids, q, the
    split partials, o) unchanged; extend re-reads the prefix once per row
    tile, so it saves a whole number of the prefix's fp8 bytes."""
    argv = ["decode_attention", "extend_attention", "--target", "cuda:sm_90", "--preset", "llama-3-8b", "--dtype",
            "bf16", "--batch", "64", "--context", "4096", "--traffic", "--no-compile"]  # fmt: skip
    reports = {kv: _report(tmp_path, capsys, [*argv, "--shape", f"kv_dtype={kv}"])
               for kv in ("auto", "fp8_e4m3", "fp8_e5m2")}  # fmt: skip
    assert "kv_dtype=fp8_e4m3" in capsys.readouterr().out
    kv_values = 64 * 4096 * 8 * (128 + 128)  # requests x keys x kv heads x (K + V) per layer
    decode = {kv: r["ops"]["decode_attention"]["bytes_per_call"]["ours"] for kv, r in reports.items()}
    extend = {kv: r["ops"]["extend_attention"]["bytes_per_call"]["ours"] for kv, r in reports.items()}
    for kv in ("fp8_e4m3", "fp8_e5m2"):
        assert all(r["ops"][op]["shape"]["kv_dtype"] == kv for r in [reports[kv]] for op in r["ops"])
        assert decode["auto"] - decode[kv] == kv_values  # 2 bytes -> 1 per cached value
        assert 0.5 < decode[kv] / decode["auto"] <= 0.55, decode  # the docs' target
        saved = extend["auto"] - extend[kv]
        assert saved > 0 and saved % kv_values == 0, extend
    assert decode["auto"] > 2 * kv_values


def test_inspect_compiles_the_fp8_decode(tmp_path, capsys):
    """The fp8 pool reaches the compiled kernels: sm_90 machine code of
    decode's stage 1 reading e5m2 with sm_90's own conversion (KV_FORMAT 4),
    no spills, its main loop longer than the bf16 pool's by the conversion
    of the tile."""
    argv = ["decode_attention", "--target", "cuda:sm_90", "--batch", "4", "--context", "300"]
    rows = {kv: {k["kernel"]: k for k in _report(tmp_path, capsys, [*argv, "--shape", f"kv_dtype={kv}"])["kernels"]}
            for kv in ("auto", "fp8_e5m2")}  # fmt: skip
    fp8, bf16 = rows["fp8_e5m2"]["decode_partial_kernel"], rows["auto"]["decode_partial_kernel"]
    assert (fp8["constexprs"]["KV_FORMAT"], bf16["constexprs"]["KV_FORMAT"]) == (4, 0)
    assert fp8["spill_bytes"] == 0 and fp8["sass_loop"] > bf16["sass_loop"] > 0


def test_inspect_counts_the_fp8_pools_compilations(tmp_path, capsys, monkeypatch):
    """--compilations with ``--shape kv_dtype=fp8_e5m2`` plans every shape of
    the generation with the fp8 pool (generation shapes carry no kv_dtype of
    their own): each kernel that reads or writes the pool is planned with
    e5m2 (store_kv's codec, KV_FORMAT 2; decode with sm_90's conversion, 4),
    none with the model dtype's (0)."""
    from kunlun_triton.tools import compilations

    formats, count = set(), compilations.count_compilations

    def spy(plan, shapes, dtype):
        def planned(shape, dtype):
            specs = plan(shape, dtype)
            formats.update((s.name, s.constexprs["KV_FORMAT"]) for s in specs if "KV_FORMAT" in s.constexprs)
            return specs
        return count(planned, shapes, dtype)

    monkeypatch.setattr(compilations, "count_compilations", spy)
    report = _report(tmp_path, capsys, ["store_kv", "decode_attention", "--target", "cuda:sm_90", "--no-compile",
                                        "--compilations", "--shape", "kv_dtype=fp8_e5m2"])  # fmt: skip
    assert formats == {("store_kv_kernel", 2), ("decode_partial_kernel", 4)}, formats
    assert all(report["ops"][op]["compilations"]["ours"] for op in ("store_kv", "decode_attention"))


def test_inspect_times_the_fp8_launchers(tmp_path):
    """--launcher-us builds each op's case with the fp8 pool (store_kv
    writes into it, decode reads it with its scales) and times its launcher,
    at run() and below Triton's binder: compiled-mode kernels, so in a child
    without TRITON_INTERPRET (as test_launcher_binder.py)."""
    out = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2]) + os.pathsep + env.get("PYTHONPATH", "")
    argv = ["inspect", "store_kv", "decode_attention", "--batch", "2", "--context", "64", "--shape",
            "kv_dtype=fp8_e4m3", "--no-compile", "--launcher-us", "--json", str(out)]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "kunlun_triton.cli", *argv], capture_output=True, text=True,
                          env=env, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    for op in ("store_kv", "decode_attention"):
        assert report["ops"][op]["shape"]["kv_dtype"] == "fp8_e4m3"
        assert report["ops"][op]["launcher_us"]["ours"] > 0 and report["ops"][op]["launcher_us_binder"]["ours"] > 0
