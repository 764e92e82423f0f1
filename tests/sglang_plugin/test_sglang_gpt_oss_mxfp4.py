"""gpt-oss with its experts in MXFP4 (gpt-oss's checkpoint layout, written by the
tests' quantizer `kt_mxfp4`) served on the kunlun platform: the experts stay 4-bit
and fused_experts decodes them in its GEMM loops (layers/mxfp4.py). The oracle is
HF transformers loading the same checkpoint with ``Mxfp4Config(dequantize=True)``,
run in float32.

SGLang serves MXFP4 gpt-oss in bf16 whatever --dtype says; on the kunlun platform an
explicit --dtype stays (platform/model_rules.py: our kernels decode MXFP4 into any
compute dtype), so it is served in float32 here and greedy tokens equal HF's exactly:
one by one, batched, and a second turn from the radix cache."""

from __future__ import annotations

import os

import pytest
from kt_models_table import check_or_write_row, kernels_since, op_calls, refusals
from kt_sglang_support import output_ids

NEW = 4


@pytest.fixture(scope="module")
def mxfp4_model(tiny_model, tmp_path_factory):
    import torch
    from conftest import HFOracle
    from kt_mxfp4 import write_mxfp4_checkpoint
    from transformers import AutoModelForCausalLM, Mxfp4Config

    path = write_mxfp4_checkpoint(tiny_model("gpt_oss"), tmp_path_factory.mktemp("gpt-oss-mxfp4"))
    hf = HFOracle(tiny_model("gpt_oss"))  # its tokenizer
    hf.model = AutoModelForCausalLM.from_pretrained(
        path, quantization_config=Mxfp4Config(dequantize=True), dtype=torch.float32
    ).eval().float()  # the dequantized experts load as bf16 (MXFP4 values are exact there)
    return path, hf


def test_the_quantizer_writes_what_hf_and_our_dequantizer_read(mxfp4_model, tiny_model):
    """The checkpoint's blocks and scales, dequantized by ops.moe.dequantize_mxfp4,
    are HF's dequantized experts exactly, and each value is within half the largest
    e2m1 step (2) times its group's scale of the float weight it quantized."""
    import torch
    from safetensors.torch import load_file

    from kunlun_triton.ops.moe import dequantize_mxfp4

    path, hf = mxfp4_model
    tensors = load_file(str(path / "model.safetensors"))
    floats = load_file(os.path.join(tiny_model("gpt_oss"), "model.safetensors"))
    for layer, module in enumerate(hf.model.model.layers):
        for proj in ("gate_up_proj", "down_proj"):
            prefix = f"model.layers.{layer}.mlp.experts.{proj}"
            blocks, scales = tensors[f"{prefix}_blocks"], tensors[f"{prefix}_scales"]
            ours = dequantize_mxfp4(blocks, scales, torch.float32)  # [E, N, K]
            assert torch.equal(ours.transpose(-1, -2), getattr(module.mlp.experts, proj).float()), prefix
            bound = torch.exp2(scales.float() - 127).repeat_interleave(32, dim=-1)
            assert ((ours - floats[prefix].transpose(-1, -2)).abs() <= bound).all(), prefix


def test_mxfp4_checkpoint_equals_hf_dequantized(mxfp4_model, engines):
    from kunlun_triton.sglang_plugin.report import engine_dispatch_report

    path, hf = mxfp4_model
    texts = ["The radix cache shares the prefix of prompts that begin with the same tokens and",
             "Hello, how are you today?", "Once upon a time there was a little model that learned to count:",
             "Attention reads keys and values from a paged cache;", "The weather is sunny, the sky is blue,"]  # fmt: skip
    prompts = [hf.encode(t) for t in texts]
    expected = [hf.greedy(p, NEW) for p in prompts]
    engine = engines.get(path, dtype="float32")
    assert engine.server_args.dtype == "float32"  # SGLang's gpt-oss override alone would serve bfloat16
    before = op_calls(engine_dispatch_report(engine)[0]["ops"])
    greedy = {"max_new_tokens": NEW, "temperature": 0.0, "ignore_eos": True}
    assert [output_ids(engine.generate(input_ids=p, sampling_params=greedy)) for p in prompts[:2]] == expected[:2]
    assert [output_ids(o) for o in engine.generate(input_ids=prompts, sampling_params=greedy)] == expected
    turn = prompts[0] + expected[0] + hf.encode(" and then")
    out = engine.generate(input_ids=turn, sampling_params=greedy)
    assert out["meta_info"]["cached_tokens"] >= len(prompts[0])
    assert output_ids(out) == hf.greedy(turn, NEW)
    ops = engine_dispatch_report(engine)[0]["ops"]
    assert set(ops["fused_experts"]["calls"]) == {"triton"}, ops.get("fused_experts")
    check_or_write_row({
        "architecture": "GptOssForCausalLM, MXFP4",
        "served": "2 layers, TP 1, float32 (`--dtype float32`; bf16 by default), the checkpoint's MXFP4 experts",
        "oracle": "HF transformers, the same checkpoint dequantized (`Mxfp4Config(dequantize=True)`), float32",
        "ops": kernels_since(ops, before), "refused": refusals(str(path), moe=True)})  # fmt: skip
