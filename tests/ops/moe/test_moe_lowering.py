"""Every MoE kernel lowers ahead of time for CUDA sm_90 and HIP gfx942, as
the op specs' ``kernels`` list them (the launchers' own constexprs): both
formulations, both alignment paths, non-power-of-two sizes, fp16 and bf16.
Small tiles keep the compiles quick; the model-sized tiles are compiled by
the README's register/spill measurement."""

import pytest
import torch

from kunlun_triton.ops.spec import all_specs
from kunlun_triton.testing import assert_lowers

SPECS = all_specs(("moe",))
DOT = {"formulation": "dot", "BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "num_warps": 4}
SUM = {"formulation": "sum", "BLOCK_M": 4, "BLOCK_N": 32, "BLOCK_K": 16}


@pytest.mark.parametrize("formulation", ["dot", "sum"])
def test_moe_kernels_lower(formulation):
    config = DOT if formulation == "dot" else SUM
    experts = SPECS["fused_experts"]
    if formulation == "dot":
        # decode: one-program alignment, ragged H and I, bf16, K > 1 (the sum kernel)
        kernels = experts.kernels({"tokens": 3, "num_experts": 60, "top_k": 4, "hidden_size": 1000,
                                   "intermediate_size": 300}, torch.bfloat16, config)  # fmt: skip
        kernels += SPECS["moe_topk"].kernels({"tokens": 4, "num_experts": 256, "top_k": 8, "scoring": "sigmoid",
                                              "bias": True, "groups": 8, "topk_group": 4, "scaling": 2.5},
                                             torch.bfloat16, {"ROWS_PER_PROGRAM": 4})  # fmt: skip
    else:
        # prefill: count / prefix / scatter alignment, K = 1 (down writes the output), fp16
        kernels = experts.kernels({"tokens": 512, "num_experts": 8, "top_k": 1, "hidden_size": 512,
                                   "intermediate_size": 256, "activation": "gelu"}, torch.float16, config)  # fmt: skip
        kernels += SPECS["moe_topk"].kernels({"tokens": 4, "num_experts": 60, "top_k": 4}, torch.float16,
                                             {"ROWS_PER_PROGRAM": 16})  # fmt: skip
    names = {k.kernel.split(":")[1] for k in kernels}
    assert "moe_gate_up_kernel" in names and "moe_down_kernel" in names and "moe_topk_kernel" in names
    assert_lowers(kernels)
