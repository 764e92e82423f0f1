"""gpt-oss with W8A8-INT8 weights served on the kunlun platform: the checkpoint
written by ``convert-weights --dequantize-mxfp4 --quantize w8a8-int8`` from the
MXFP4 one (`kt_mxfp4`), its experts int8 with their biases (the platform's
create_weights hook) and the clamped SwiGLU, run by fused_experts(use_int8_w8a8).

Only the experts are int8: SGLang builds gpt-oss's attention without a quant
config, so the converter keeps it float (as gpt-oss's own checkpoints do). The
oracle is HF transformers' gpt-oss in float32 with each expert's two matmuls on
the converted checkpoint's int8 weights through our torch references
(`ops.quant.reference`: per-token activation quantization, int32 products, fp32
scales; the intermediate activations quantized per token, as SGLang's W8A8 MoE
does).

SGLang serves w8a8_int8 in fp16 or bf16 only: served in fp16, whose roundings
between the int8 GEMMs these prompts' greedy tokens do not turn (one by one,
batched, and a second turn from the radix cache)."""

from __future__ import annotations

import pytest
import torch
from kt_models_table import check_or_write_row, kernels_since, op_calls, refusals
from kt_sglang_support import output_ids

NEW = 4
ENGINE = dict(dtype="float16", quantization="w8a8_int8", chunked_prefill_size=16)  # SGLang: fp16 / bf16 only


def _int8_matmul(x, weight_q, scale, bias):
    """x [T, in] @ (int8 [in, out] * scale [1, out]) + bias, activations per token."""
    from kunlun_triton.ops.quant import reference

    q, s = reference.per_token_quant_int8(x)
    return reference.int8_scaled_mm(q, weight_q, s, scale, torch.float32, bias)


def int8_experts_forward(experts, state, prefix):
    """HF's GptOssExperts.forward with each expert's matmuls on the int8 references."""
    w13, s13 = state[f"{prefix}.gate_up_proj"], state[f"{prefix}.gate_up_proj_scale"]
    w2, s2 = state[f"{prefix}.down_proj"], state[f"{prefix}.down_proj_scale"]
    b13, b2 = state[f"{prefix}.gate_up_proj_bias"], state[f"{prefix}.down_proj_bias"]  # bf16 in MXFP4's source

    def forward(hidden_states, router_indices=None, routing_weights=None):
        out = torch.zeros_like(hidden_states)
        for e in range(experts.num_experts):
            top_k_pos, token_idx = torch.where(router_indices.t() == e)
            if token_idx.numel() == 0:
                continue
            gate_up = _int8_matmul(hidden_states[token_idx], w13[e], s13[e], b13[e])
            y = _int8_matmul(experts._apply_gate(gate_up), w2[e], s2[e], b2[e])
            out.index_add_(0, token_idx, y * routing_weights[token_idx, top_k_pos, None])
        return out

    return forward


def hf_w8a8(float_path, quantized):
    from conftest import HFOracle
    from safetensors.torch import load_file

    hf = HFOracle(float_path)
    state = load_file(str(quantized / "model.safetensors"))
    assert not any(name.endswith(".weight_scale") for name in state)  # attention kept float
    for i, layer in enumerate(hf.model.model.layers):
        layer.mlp.experts.forward = int8_experts_forward(layer.mlp.experts, state, f"model.layers.{i}.mlp.experts")
    return hf


@pytest.fixture(scope="module")
def w8a8_model(tiny_model, tmp_path_factory):
    from kt_mxfp4 import write_mxfp4_checkpoint

    from kunlun_triton.tools.convert_weights import convert

    root = tmp_path_factory.mktemp("gpt-oss-w8a8")
    mxfp4 = write_mxfp4_checkpoint(tiny_model("gpt_oss"), root / "mxfp4")
    out = root / "w8a8"
    convert(mxfp4, out, dtype="fp32", quantize="w8a8-int8", dequantize_mxfp4=True, progress=False)
    return out, hf_w8a8(tiny_model("gpt_oss"), out)


def test_w8a8_checkpoint_from_mxfp4_equals_hf_on_int8_references(w8a8_model, engines):
    from kunlun_triton.sglang_plugin.report import engine_dispatch_report

    path, hf = w8a8_model
    texts = ["The radix cache shares the prefix of prompts that begin with the same tokens and",
             "Hello, how are you today?", "Once upon a time there was a little model that learned to count:"]  # fmt: skip
    prompts = [hf.encode(t) for t in texts]
    expected = [hf.greedy(p, NEW) for p in prompts]
    engine = engines.get(path, **ENGINE)
    before = op_calls(engine_dispatch_report(engine)[0]["ops"])
    greedy = {"max_new_tokens": NEW, "temperature": 0.0, "ignore_eos": True}
    assert [output_ids(engine.generate(input_ids=p, sampling_params=greedy)) for p in prompts] == expected
    assert [output_ids(o) for o in engine.generate(input_ids=prompts, sampling_params=greedy)] == expected
    turn = prompts[0] + expected[0] + hf.encode(" and then")
    out = engine.generate(input_ids=turn, sampling_params=greedy)
    assert out["meta_info"]["cached_tokens"] >= len(prompts[0])
    assert output_ids(out) == hf.greedy(turn, NEW)
    ops = engine_dispatch_report(engine)[0]["ops"]
    for name in ("fused_experts", "moe_topk", "extend_attention", "decode_attention"):
        assert set(ops[name]["calls"]) == {"triton"}, (name, ops.get(name))
    check_or_write_row({
        "architecture": "GptOssForCausalLM, W8A8-INT8",
        "served": "2 layers, TP 1, fp16, `--quantization w8a8_int8`: int8 experts with biases, from the MXFP4 "
                  "checkpoint (`convert-weights --dequantize-mxfp4 --quantize w8a8-int8`)",
        "oracle": "HF transformers, float32, its experts on our int8 torch references (the same int8 weights; "
                  "attention float, as SGLang builds it)",
        "ops": kernels_since(ops, before), "refused": refusals(str(path), moe=True)})  # fmt: skip
