"""`kunlun-triton inspect`: plans an op's kernels for a target, compiles them
ahead of time and reports their cost (the comparison with SGLang's kernels
is in test_inspect_sglang.py)."""

import json

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
    ],
)
def test_inspect_refuses_bad_requests(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err
