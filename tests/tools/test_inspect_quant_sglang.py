"""`kunlun-triton inspect int8_scaled_mm --compare sglang` (sm_90, Llama-3-8B's
MLP up projection, K = 4096, N = 14336): our int8 GEMM beside SGLang 0.5.23's
int8 Triton kernel (``fused_moe_kernel`` with ``use_int8_w8a8`` and
per-channel scales) at the same tiles and launch options. Instruction counts
are properties of the code and the compiler, not timings: pinned here."""

import pytest
import torch

from kunlun_triton.runtime import Target
from kunlun_triton.tools.inspect_kernels import inspect_ops, resolve_preset

SM90 = Target("cuda", "sm_90", "meta", "test")


@pytest.mark.parametrize("m", [1, 4096])
def test_int8_gemm_main_loop_costs_no_more_than_sglangs(m):
    report = inspect_ops(["int8_scaled_mm"], SM90, resolve_preset("llama-3-8b"), torch.bfloat16,
                         overrides={"m": [m]}, compare=("sglang",))  # fmt: skip
    rows = report["ops"]["int8_scaled_mm"]["kernels"]
    ours = next(k for k in rows if k["impl"] == "ours")
    theirs = next(k for k in rows if k["impl"] == "sglang")
    assert theirs["kernel"] == "fused_moe_kernel"
    for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
        assert theirs["constexprs"][f"BLOCK_SIZE_{key[6:]}"] == ours["constexprs"][key]
    assert ours["spill_bytes"] == theirs["spill_bytes"] == 0
    assert ours["sass_per_item"] <= theirs["sass_per_item"], (ours, theirs)
    assert ours["regs"] <= theirs["regs"]
