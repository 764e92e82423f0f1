"""``--quantization w8a8_int8`` served end to end on the kunlun platform
(development mode: CPU, Triton interpreter), from checkpoints written by
``convert-weights --quantize w8a8-int8``:

- SmolLM2-135M-Instruct (the bf16 checkpoint ``kunlun-triton models fetch
  smollm2 --dtype bf16`` makes, or ``KUNLUN_TRITON_SMOLLM2_BF16``): teacher-forced top-1 agreement
  with the bf16 model (HF transformers, fp32) and the mean |logprob
  difference| held to the floors measured (docs/quantization.md), and greedy
  tokens equal to HF's model with its linear layers replaced by our torch
  references (`ops.quant.reference`: the same int8 weights, per-token
  activation quantization); the linear layers ran our int8 kernels.
- a tiny Qwen3-MoE: its int8 experts ran fused_experts(use_int8_w8a8) on our
  kernels, teacher-forced top-1 agreement with the float model above a floor.

Both engines also record their rows of docs/models.md's supported-models
table (`kt_models_table`; ``KUNLUN_TRITON_UPDATE_README=1`` writes them).

Short on purpose (two prompts, few tokens): an engine start is minutes on 2 cores.
"""

from __future__ import annotations

import os

import pytest
import torch

from kt_models_table import check_or_write_row, kernels_since, op_calls, refusals
from kt_sglang_support import output_ids

LLAMA = '{"architectures": ["LlamaForCausalLM"]}'  # the converted checkpoint's config.json names none
TEXTS = ["The capital of France is Paris. It is known for the Eiffel Tower, built in 1889.",
         "def add(a, b):\n    return a + b\n\nprint(add(2, 3))  # prints 5"]  # fmt: skip
NEW = 6
# Measured on this machine (docs/quantization.md), with margin.
SMOLLM2_TOP1_FLOOR, SMOLLM2_LOGPROB_CEILING = 0.75, 0.30  # measured 0.86, 0.159 (engine, these texts)
TINY_MOE_TOP1_FLOOR = 0.8  # measured 0.943 (mean |logprob diff| 0.120)
ENGINE = dict(dtype="float16", quantization="w8a8_int8", watchdog_timeout=3600, disable_radix_cache=True)


def quantize(src, out):
    from kunlun_triton.tools.convert_weights import convert

    if not os.path.exists(out):
        convert(src, out, dtype="fp16", quantize="w8a8-int8", progress=False)
    return str(out)


def teacher_forced(engine, prompts):
    """Per prompt: (top-1 token ids, logprobs of the actual next tokens) at every position."""
    outs = engine.generate(input_ids=prompts, sampling_params={"max_new_tokens": 1, "temperature": 0.0},
                           return_logprob=True, logprob_start_len=0, top_logprobs_num=1)  # fmt: skip
    result = []
    for o in outs:
        info = o["meta_info"]
        result.append(([x[0][1] for x in info["input_top_logprobs"][1:]],
                       [x[0] for x in info["input_token_logprobs"][1:]]))  # fmt: skip
    return result


def hf_teacher_forced(model, prompts):
    result = []
    for p in prompts:
        ids = torch.tensor([p])
        with torch.no_grad():
            logp = model(ids).logits.float().log_softmax(-1)[0, :-1]
        result.append((logp.argmax(-1).tolist(), logp.gather(1, ids[0, 1:, None])[:, 0].tolist()))
    return result


def agreement(ours, ref):
    same = total = 0
    diffs = []
    for (top, lp), (rtop, rlp) in zip(ours, ref):
        same += sum(int(a == b) for a, b in zip(top, rtop))
        total += len(rtop)
        diffs += [abs(a - b) for a, b in zip(lp, rlp)]
    return same / total, sum(diffs) / len(diffs)


class W8A8Linear(torch.nn.Module):
    """A linear layer from the converted checkpoint's int8 weight and scale,
    computed by our torch references (per-token activation quantization)."""

    def __init__(self, weight, scale):
        super().__init__()
        self.weight_q, self.scale = weight, scale

    def forward(self, x):
        from kunlun_triton.ops.quant import reference

        rows = x.reshape(-1, x.shape[-1])
        q, s = reference.per_token_quant_int8(rows)
        return reference.int8_scaled_mm(q, self.weight_q.t(), s, self.scale, x.dtype).view(*x.shape[:-1], -1)


def hf_w8a8(src, quantized):
    from safetensors.torch import load_file
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    state = load_file(os.path.join(quantized, "model.safetensors"))
    for name, module in list(model.named_modules()):
        if isinstance(module, torch.nn.Linear) and name + ".weight_scale" in state:
            parent, attr = name.rsplit(".", 1)
            linear = W8A8Linear(state[name + ".weight"], state[name + ".weight_scale"])
            setattr(model.get_submodule(parent), attr, linear)
    return model


def hf_greedy(model, prompt, n):
    ids = torch.tensor([prompt])
    with torch.no_grad():
        return model.generate(ids, max_new_tokens=n, do_sample=False)[0, len(prompt):].tolist()


@pytest.fixture(scope="module")
def smollm2(smollm2_bf16, tmp_path_factory, engines):
    from transformers import AutoTokenizer

    bf16 = smollm2_bf16
    path = quantize(bf16, tmp_path_factory.mktemp("w8a8") / "smollm2-w8a8")
    tokenizer = AutoTokenizer.from_pretrained(bf16)
    prompts = [tokenizer.encode(t) for t in TEXTS]
    engine = engines.get(path, json_model_override_args=LLAMA, **ENGINE)
    return bf16, path, prompts, engine


def test_smollm2_w8a8_agrees_with_the_bf16_model(smollm2):
    from transformers import LlamaForCausalLM

    bf16, path, prompts, engine = smollm2
    ours = teacher_forced(engine, prompts)
    ref = hf_teacher_forced(LlamaForCausalLM.from_pretrained(bf16, dtype=torch.float32).eval(), prompts)
    top1, mean_abs = agreement(ours, ref)
    print(f"SmolLM2 W8A8 vs bf16: top-1 agreement {top1:.4f}, mean |logprob diff| {mean_abs:.4f}")
    assert top1 >= SMOLLM2_TOP1_FLOOR and mean_abs <= SMOLLM2_LOGPROB_CEILING, (top1, mean_abs)


def test_smollm2_w8a8_greedy_equals_our_torch_references(smollm2):
    from kunlun_triton.sglang_plugin.report import engine_dispatch_report

    bf16, path, prompts, engine = smollm2
    before = op_calls(engine_dispatch_report(engine)[0]["ops"])
    out = engine.generate(input_ids=prompts, sampling_params={"max_new_tokens": NEW, "temperature": 0.0,
                                                               "ignore_eos": True})  # fmt: skip
    model = hf_w8a8(bf16, path)
    assert [output_ids(o) for o in out] == [hf_greedy(model, p, NEW) for p in prompts]
    ops = engine_dispatch_report(engine)[0]["ops"]
    for name in ("per_token_quant_int8", "int8_scaled_mm"):
        assert set(ops[name]["calls"]) == {"triton"}, (name, ops.get(name))
    check_or_write_row({
        "architecture": "LlamaForCausalLM, W8A8-INT8",
        "served": "SmolLM2-135M-Instruct (30 layers), TP 1, fp16, `--quantization w8a8_int8`",
        "oracle": "HF transformers, its linear layers on our int8 torch references (the same int8 weights)",
        "ops": kernels_since(ops, before), "refused": refusals(path, moe=False)})  # fmt: skip


def _tiny_moe_int8(tiny_model, tmp_path_factory, engines, **options):
    """The tiny Qwen3-MoE's W8A8 checkpoint served with `options`: teacher-forced
    top-1 agreement with HF's float model above the floor, the int8 ops on
    Triton on every rank; (engine, rank 0's op calls before the prompts, its report after)."""
    from conftest import HFOracle

    from kunlun_triton.sglang_plugin.report import engine_dispatch_report

    src = tiny_model("qwen3_moe")
    path = quantize(src, tmp_path_factory.mktemp("w8a8") / "qwen3-moe-w8a8")
    hf = HFOracle(src)
    prompts = [hf.encode(t) for t in TEXTS]
    engine = engines.get(path, **ENGINE, **options)
    before = op_calls(engine_dispatch_report(engine)[0]["ops"])
    top1, mean_abs = agreement(teacher_forced(engine, prompts), hf_teacher_forced(hf.model, prompts))
    print(f"tiny Qwen3-MoE W8A8 {options} vs float: top-1 agreement {top1:.4f}, mean |logprob diff| {mean_abs:.4f}")
    assert top1 >= TINY_MOE_TOP1_FLOOR, (top1, mean_abs)
    reports = engine_dispatch_report(engine)
    assert sorted(reports) == list(range(options.get("tp_size", 1)))
    for rep in reports.values():
        for name in ("fused_experts", "per_token_quant_int8", "int8_scaled_mm"):
            assert set(rep["ops"][name]["calls"]) == {"triton"}, (name, rep["ops"].get(name))
    return path, before, reports[0]["ops"]


@pytest.mark.slow
def test_tiny_moe_int8_experts_at_ep2(tiny_model, tmp_path_factory, engines):
    """Expert parallelism with int8 experts: each of two ranks holds 4 of the 8
    experts, the -1 ids of the other rank's experts add nothing (W8A8Int8MoEMethod's hook)."""
    _tiny_moe_int8(tiny_model, tmp_path_factory, engines, tp_size=2, ep_size=2)
    engines.close()


def test_tiny_moe_int8_experts_run_our_kernels(tiny_model, tmp_path_factory, engines):
    path, before, ops = _tiny_moe_int8(tiny_model, tmp_path_factory, engines)
    check_or_write_row({
        "architecture": "Qwen3MoeForCausalLM, W8A8-INT8",
        "served": "2 layers, TP 1, fp16, `--quantization w8a8_int8` (experts and linear layers)",
        "oracle": f"- (not compared greedily: teacher-forced top-1 agreement with HF transformers on the float "
                  f"model >= {TINY_MOE_TOP1_FLOOR})",
        "ops": kernels_since(ops, before), "refused": refusals(path, moe=True)})  # fmt: skip
