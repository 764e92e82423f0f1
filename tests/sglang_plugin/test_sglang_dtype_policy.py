"""The dtype policy of the kunlun platform, without starting an engine: a
model asking for bf16 on a target whose bf16 is incomplete (the Kunlun
profile) runs in fp16 and says so; explicit non-bf16 choices and targets with
complete bf16 are left alone.

The Kunlun case runs in a fresh process with ``KUNLUN_TRITON_TARGET=kunlun``
and goes through SGLang's own call site (``handle_platform_defaults`` in
``sglang/srt/arg_groups/platform_hook.py``, which resolves ``current_platform``
through our entry point) on a stand-in for ``ServerArgs``: SGLang passes
objects that are not its records straight to the platform hook.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

PROBE = r"""
import json, sys, types
from sglang.srt.arg_groups.platform_hook import handle_platform_defaults
from sglang.srt.platforms import current_platform

def args(dtype, model_path):
    return types.SimpleNamespace(
        dtype=dtype, model_path=model_path, attention_backend=None, sampling_backend=None,
        cuda_graph_config=None, disable_cuda_graph=False, disable_custom_all_reduce=False,
        _raw_input={"dtype": dtype, "model_path": model_path},
    )

out = {"platform": type(current_platform).__name__}
for name, dtype, model in [("auto_bf16_model", "auto", sys.argv[1]), ("explicit_bf16", "bfloat16", sys.argv[2]),
                           ("explicit_fp32", "float32", sys.argv[1]), ("auto_fp16_model", "auto", sys.argv[2])]:
    a = args(dtype, model)
    print(f"--- {name}", file=sys.stderr, flush=True)
    handle_platform_defaults(a)
    out[name] = {"dtype": a.dtype, "attention_backend": a.attention_backend}
print(json.dumps(out))
"""


def _model_dir(tmp_path, name, torch_dtype):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "torch_dtype": torch_dtype}))
    return str(d)


def test_bf16_model_runs_in_fp16_on_kunlun_with_a_warning(tmp_path):
    bf16 = _model_dir(tmp_path, "bf16", "bfloat16")
    fp16 = _model_dir(tmp_path, "fp16", "float16")
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "KUNLUN_TRITON_SGLANG_DEV")}
    env.update(SGLANG_PLATFORM="kunlun", KUNLUN_TRITON_TARGET="kunlun")
    done = subprocess.run([sys.executable, "-c", PROBE, bf16, fp16], env=env, capture_output=True, text=True,
                          timeout=600, cwd="/")  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["platform"] == "KunlunPlatform"
    assert result["auto_bf16_model"] == {"dtype": "float16", "attention_backend": "kunlun_triton"}
    assert result["explicit_bf16"]["dtype"] == "float16"
    assert result["explicit_fp32"]["dtype"] == "float32"
    assert result["auto_fp16_model"]["dtype"] == "auto"
    # One warning for each of the two bf16 requests, none for the others.
    sections = dict(s.split("\n", 1) if "\n" in s else (s, "") for s in done.stderr.split("--- ")[1:])
    warning = "bf16 is incomplete on target kunlun; running the model in float16"
    assert warning in sections["auto_bf16_model"] and warning in sections["explicit_bf16"]
    assert warning not in sections["explicit_fp32"] and warning not in sections["auto_fp16_model"]


def test_targets_with_complete_bf16_keep_it(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from kunlun_triton.runtime import detect_target, run_dtype
    from kunlun_triton.sglang_plugin.platform.defaults import apply_dtype_policy

    bf16 = _model_dir(tmp_path, "bf16", "bfloat16")
    try:
        for target in ("cuda", "hip", "interpreter"):
            monkeypatch.setenv("KUNLUN_TRITON_TARGET", target)
            detect_target.cache_clear()
            assert run_dtype(torch.bfloat16) == torch.bfloat16, target
            for dtype in ("auto", "bfloat16"):
                args = SimpleNamespace(dtype=dtype, model_path=bf16)
                apply_dtype_policy(args)
                assert args.dtype == dtype, (target, dtype)
    finally:
        monkeypatch.undo()
        detect_target.cache_clear()
