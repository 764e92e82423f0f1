"""Every MoE kernel lowers ahead of time for CUDA sm_90 and HIP gfx942, as
the op specs' ``kernels`` list them (the launchers' own constexprs): both
formulations, both alignment paths, non-power-of-two sizes, fp16 and bf16.
Small tiles keep the compiles quick; the model-sized tiles are compiled by
docs/moe.md's register/spill measurement."""

import pytest
import torch

from kunlun_triton.ops.spec import all_specs
from kunlun_triton.testing import assert_lowers

# Run again in the sglang stage, on the Triton SGLang brings (scripts/test.sh).
pytestmark = pytest.mark.lowering

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


QWEN3_DECODE = {"tokens": 1, "num_experts": 128, "top_k": 8, "hidden_size": 2048, "intermediate_size": 768}


def test_inspect_compiles_what_the_launcher_launches():
    """`inspect` plans fused_experts from a real launcher call: the config's
    launch options and the 16-divisibility a launch specialises on travel
    with each kernel (without them the W13 kernel compiled at 225 registers
    with scalar loads, where a real launch takes ~60)."""
    from kunlun_triton.ops.spec import planned_kernels
    from kunlun_triton.runtime import Target, get_config

    sm90 = Target("cuda", "sm_90", "cuda", "test")
    specs = {s.name: s for s in planned_kernels("fused_experts", QWEN3_DECODE, torch.bfloat16, sm90)}
    config = get_config("fused_experts", target=sm90, tokens=1, num_experts=128, top_k=8, hidden_size=2048,
                        intermediate_size=768)  # fmt: skip
    for name in ("moe_gate_up_kernel", "moe_down_kernel"):
        assert specs[name].options == {k: config[k] for k in ("num_warps", "num_stages")}
        assert {"x_ptr", "inter_ptr"} & set(specs[name].attrs) and "w_stride_e" in specs[name].attrs
    assert specs["moe_gate_up_kernel"].constexprs["BLOCK_K"] == config["BLOCK_K"]


def test_decode_alignment_kernel_fits_in_registers():
    """E = 128, T K = 8 (Qwen3-30B-A3B decode) on sm_90: no spill and at most
    96 registers (the 64-wide tiles with an unrolled expert loop took 255
    registers and spilled 40 bytes)."""
    from kunlun_triton.ops.spec import planned_kernels
    from kunlun_triton.runtime import Target
    from kunlun_triton.introspect import compile_ahead_of_time
    from kunlun_triton.introspect.sass import kernel_cost

    specs = planned_kernels("fused_experts", QWEN3_DECODE, torch.bfloat16, Target("cuda", "sm_90", "cuda", "test"))
    single = [s for s in specs if s.name == "moe_align_single_kernel"]
    (result,) = compile_ahead_of_time(single, targets=("cuda",), artifacts=True)
    cost = kernel_cost(result)
    assert cost["spill_bytes"] == 0 and cost["regs"] <= 96, cost


GPT_OSS = {"num_experts": 32, "top_k": 4, "hidden_size": 2880, "intermediate_size": 2880, "gpt_oss": True}
VARIANTS = [  # gpt-oss's constexpr variants: float / W8A8 / MXFP4 experts with its epilogue, decode and prefill
    ({**GPT_OSS, "tokens": 1}, DOT),
    ({**GPT_OSS, "tokens": 512}, SUM),
    ({**GPT_OSS, "tokens": 1, "int8": True}, DOT),
    ({**GPT_OSS, "tokens": 1, "mxfp4": True}, DOT),
    ({**GPT_OSS, "tokens": 512, "mxfp4": True}, SUM),
    ({**GPT_OSS, "tokens": 1, "mxfp4": True}, {**DOT, "BLOCK_K": 64, "BLOCK_M": 16, "BLOCK_N": 64}),
]


@pytest.mark.parametrize("shape, config", VARIANTS, ids=lambda v: "-".join(f"{k}" for k, x in v.items() if x is True)
                         if "gpt_oss" in v else v.get("formulation"))  # fmt: skip
def test_gpt_oss_variants_lower_without_spills(shape, config):
    """The expert GEMMs with gpt-oss's options (biases, interleaved rows,
    clamped SwiGLU; float, int8, MXFP4 weights) and the topk_softmax router
    compile for sm_90 and gfx942 with no spilled register."""
    from kunlun_triton.introspect import compile_ahead_of_time
    from kunlun_triton.introspect.sass import kernel_cost

    kernels = [k for k in SPECS["fused_experts"].kernels(shape, torch.bfloat16, config)
               if k.kernel.endswith(("moe_gate_up_kernel", "moe_down_kernel"))]  # fmt: skip
    assert {k.constexprs["MXFP4"] for k in kernels} == {bool(shape.get("mxfp4"))}
    gate_up = next(k for k in kernels if k.kernel.endswith("moe_gate_up_kernel"))
    assert gate_up.constexprs["ACTIVATION"] == 3 and gate_up.constexprs["INTERLEAVED"] and gate_up.constexprs["HAS_BIAS"]
    kernels += SPECS["moe_topk"].kernels({"tokens": 4, "num_experts": 32, "top_k": 4, "scoring": "topk_softmax"},
                                         torch.bfloat16, {"ROWS_PER_PROGRAM": 4})  # fmt: skip
    results = compile_ahead_of_time(kernels, artifacts=True)
    for r in results:
        assert r["ok"], f"{r['spec'].label} on {r['target']}: {r.get('error')}"
        cost = kernel_cost(r)
        assert cost["spill_bytes"] == 0, f"{r['spec'].label} on {r['target']}: {cost}"
