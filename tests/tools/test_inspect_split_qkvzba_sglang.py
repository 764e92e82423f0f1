"""gdn_split_qkvzba against SGLang 0.5.23's ``fused_qkvzba_split_reshape_cat``
(Qwen3-Next's layout) and ``fused_qkvzba_split_reshape_cat_contiguous``
(Qwen3.5's), compiled for sm_90 at Qwen3-Next-80B-A3B's dims (16 key heads,
32 value heads, head dims 128, bf16), each planned by its own launcher
(``kunlun-triton inspect gdn_split_qkvzba --compare sglang``): a copy, so
the cost is instructions and registers (the bytes are the same: each element
read once, written once). Ours executes no more warp-instructions a token at
a decode batch of 1 and at a 512-token prefill, spills nothing, keeps SGLang's
occupancy, and compiles once over a generation (docs/linear-attention-cost.md)."""

import pytest
import torch

from kunlun_triton.runtime import Target
from kunlun_triton.tools.inspect_kernels import inspect_ops, resolve_preset

SM90 = Target("cuda", "sm_90", "meta", "test")
LAYOUTS = {"interleaved": "fused_qkvzba_split_reshape_cat_kernel",
           "contiguous": "fused_qkvzba_split_reshape_cat_contiguous_kernel"}  # fmt: skip


@pytest.fixture(scope="module", params=[1, 512], ids=["decode_batch_1", "prefill_512"])
def report(request):
    return inspect_ops(["gdn_split_qkvzba"], SM90, resolve_preset("llama-3-8b"), torch.bfloat16, batch=request.param,
                       overrides={"layout": list(LAYOUTS)}, compare=("sglang",), compilations=True)  # fmt: skip


@pytest.mark.parametrize("layout", LAYOUTS)
def test_no_worse_than_sglangs_split(report, layout):
    entry = report["ops"][f"gdn_split_qkvzba[layout={layout}]"]
    (ours,) = [k for k in entry["kernels"] if k["impl"] == "ours"]
    (theirs,) = [k for k in entry["kernels"] if k["impl"] == "sglang"]
    assert (ours["kernel"], theirs["kernel"]) == ("split_qkvzba_kernel", LAYOUTS[layout])
    assert "error" not in ours and "error" not in theirs, (ours, theirs)
    assert ours["spill_bytes"] == 0 and ours["occupancy"] >= theirs["occupancy"], (ours, theirs)
    per_token = entry["sass_per_token"]
    assert per_token["ours"] <= per_token["sglang"], per_token
    assert entry["compilations"]["ours"] == {"split_qkvzba_kernel": 1}, entry["compilations"]
