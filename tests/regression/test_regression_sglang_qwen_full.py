"""Qwen2.5-Coder-0.5B-Instruct, the regression suite's full form
(``KUNLUN_TRITON_REGRESSION=full``; not collected otherwise). Each engine
start is a minute or more on 2 cores.

- bf16: the bf16 checkpoint served in bf16, teacher-forced on the oracle's
  greedy tokens. The oracle is HF's forward in float32 on the same
  bf16-rounded weights (issue 39 item 7: HF's own bf16 forward moves with the
  CPU's bf16 matmul code path; the float32 one does not): top-1 equal at
  every step, top-5 logprobs within 0.2 nat (1.6 bf16 ulps of a logit in
  [16, 32); measured 0.130);
- sampling over the full 151,936-token vocabulary: top-k, top-p and min-p
  (each alone, temperature 1.5) on a prompt with a broad next-token
  distribution, 256 draws each against the distribution HF's own logits
  warpers give from HF's float32 logits: no token outside HF's support and a
  chi-square goodness of fit (tests/stats.py) with p > 1e-3 (fixed seeds);
- W8A8-INT8 (convert-weights --quantize w8a8-int8): teacher-forced top-1
  agreement with the float32 model and mean |logprob difference| held to the
  floors measured here;
- fp8 KV cache (no engine: HF's model with every attention layer through our
  store_kv + extend_attention, tools/kv_cache_accuracy.py): top-1 agreement
  and mean |logprob difference| against the bf16 pool held to floors
  measured here, e4m3 nearer than e5m2.
"""

from __future__ import annotations

import pytest
import torch
from stats import chi_square_p_value

from kunlun_triton.sglang_plugin.tools.regress import CASES, encode, teacher_forced

pytestmark = pytest.mark.regression

NAMES = ["english", "chinese", "code"]
BF16_NEW = 8
# nat. Measured 0.130 (top-1 equal at all 24 steps), above SmolLM2's 0.1: SGLang's bf16 logits sit on
# the bf16 grid, whose step is 0.125 for logits in [16, 32) (issue 39 item 7), so the bound is in
# those ulps: 1.6 of them. A truncating bf16 store moved SmolLM2's logprobs by 0.4.
BF16_ATOL = 0.2
SAMPLING_PROMPT = "Here is a list of random English nouns: apple, river, candle,"
DRAWS = 256
SAMPLING = {"top_k": {"top_k": 20}, "top_p": {"top_p": 0.8}, "min_p": {"min_p": 0.05}}
TEMPERATURE = 1.5
# measured: top-1 0.947 (126 / 133 teacher-forced steps), mean |logprob diff| 0.077 against float32;
# the floors allow about 13 more flips and twice the mean
W8A8_TOP1_FLOOR, W8A8_LOGPROB_CEILING = 0.85, 0.15
# (top-1 floor, mean |logprob diff| ceiling) against the bf16 pool, 63 positions, measured through the
# kernels (interpreter, CPU): e4m3 0.952 (60) / 0.172, e5m2 0.873 (55) / 0.344; the bf16 pool vs HF's
# own attention 0.937 / 0.027. Margins as SmolLM2's: about 6 more flips of 63, 1.5x the mean.
FP8_BOUNDS = {"fp8_e4m3": (0.85, 0.26), "fp8_e5m2": (0.75, 0.52)}


@pytest.fixture(scope="module")
def qwen_bf16():
    from kunlun_triton.tools.models import fetch

    return str(fetch("qwen2.5-0.5b", "bf16", progress=False))


def test_bf16_teacher_forced_against_float32_on_the_bf16_weights(qwen_bf16, engines):
    from conftest import HFOracle

    oracle = HFOracle(qwen_bf16, dtype=torch.float32)  # the bf16 weights, computed in float32
    prompts = [encode(oracle.tokenizer, CASES[n]) for n in NAMES]
    forced = [oracle.greedy(p, BF16_NEW)[0] for p in prompts]
    engine = engines.get(qwen_bf16, dtype="bfloat16", page_size=1)
    worst = 0.0
    for name, p, f, steps in zip(NAMES, prompts, forced, teacher_forced(engine, prompts, forced)):
        lp = oracle.logprobs(p + f)[len(p) - 1:len(p) - 1 + len(f)]
        for i, top in enumerate(steps):
            assert top[0][0] == int(lp[i].argmax()), (name, i)
            worst = max(worst, max(abs(logprob - float(lp[i][tid])) for tid, logprob in top))
    print(f"\nQwen2.5-0.5B bf16 teacher-forced vs HF float32 on the bf16 weights: worst |dlogprob| {worst:.4f}")
    assert worst <= BF16_ATOL, worst


def _hf_distribution(hf, ids, params):
    """HF's sampling distribution (float64) for the next token: its own warpers on its logits."""
    from transformers.generation.logits_process import (MinPLogitsWarper, TemperatureLogitsWarper,
                                                        TopKLogitsWarper, TopPLogitsWarper)

    with torch.no_grad():
        logits = hf.model(torch.tensor([ids])).logits[:, -1].double()
    scores = TemperatureLogitsWarper(TEMPERATURE)(None, logits)
    warper = {"top_k": lambda v: TopKLogitsWarper(v), "top_p": lambda v: TopPLogitsWarper(v),
              "min_p": lambda v: MinPLogitsWarper(v)}  # fmt: skip
    for key, value in params.items():
        scores = warper[key](value)(None, scores)
    return torch.softmax(scores, dim=-1)[0]


@pytest.mark.parametrize("kind", list(SAMPLING))
def test_sampling_over_the_full_vocabulary_matches_hf(qwen, hf_qwen, engines, kind):
    ids = hf_qwen.tokenizer(SAMPLING_PROMPT)["input_ids"]
    probs = _hf_distribution(hf_qwen, ids, SAMPLING[kind])
    assert probs.numel() == 151936 and 5 <= int((probs > 0).sum()) < probs.numel()
    engine = engines.get(qwen, page_size=1, max_running_requests=DRAWS, max_total_tokens=16384)
    params = [{"max_new_tokens": 1, "temperature": TEMPERATURE, "sampling_seed": 1000 + i, **SAMPLING[kind]}
              for i in range(DRAWS)]
    outs = engine.generate(input_ids=[ids] * DRAWS, sampling_params=params)
    drawn = torch.tensor([o["output_ids"][0] for o in outs])
    outside = [int(t) for t in drawn if probs[t] == 0]
    assert not outside, f"{kind}: drew tokens HF's distribution excludes: {outside[:10]}"
    counts = torch.bincount(drawn, minlength=probs.numel())
    p = chi_square_p_value(counts, probs)
    print(f"\n{kind}: {len(set(drawn.tolist()))} distinct tokens of {int((probs > 0).sum())} allowed, p = {p:.3g}")
    assert p > 1e-3, (kind, p)


def _teacher_forced_all(engine, prompts):
    outs = engine.generate(input_ids=prompts, sampling_params={"max_new_tokens": 1, "temperature": 0.0},
                           return_logprob=True, logprob_start_len=0, top_logprobs_num=1)  # fmt: skip
    return [([x[0][1] for x in o["meta_info"]["input_top_logprobs"][1:]],
             [x[0] for x in o["meta_info"]["input_token_logprobs"][1:]]) for o in outs]  # fmt: skip


def test_w8a8_int8_floor(qwen, hf_qwen, engines, tmp_path_factory):
    from kunlun_triton.tools.convert_weights import convert

    out = tmp_path_factory.mktemp("w8a8") / "qwen-w8a8"
    convert(qwen, out, dtype="fp16", quantize="w8a8-int8", progress=False)  # SGLang: w8a8_int8 in fp16/bf16 only
    prompts = [encode(hf_qwen.tokenizer, CASES[n]) + hf_qwen.greedy(encode(hf_qwen.tokenizer, CASES[n]), 8)[0]
               for n in NAMES]
    engine = engines.get(str(out), dtype="float16", quantization="w8a8_int8", page_size=1, disable_radix_cache=True)
    ours = _teacher_forced_all(engine, prompts)
    same = total = 0
    diffs = []
    for p, (top, lps) in zip(prompts, ours):
        ref = hf_qwen.logprobs(p)[:-1]
        same += sum(int(a == int(b)) for a, b in zip(top, ref.argmax(-1)))
        total += len(top)
        diffs += [abs(lp - float(ref[i][p[i + 1]])) for i, lp in enumerate(lps)]
    top1, mean = same / total, sum(diffs) / len(diffs)
    print(f"\nQwen2.5-0.5B W8A8-INT8 vs float32: top-1 {top1:.3f} ({same}/{total}), mean |dlogprob| {mean:.3f}")
    assert top1 >= W8A8_TOP1_FLOOR and mean <= W8A8_LOGPROB_CEILING


def test_fp8_kv_cache_floor(qwen_bf16, monkeypatch):
    from kunlun_triton.tools import kv_cache_accuracy as acc

    monkeypatch.setenv("KUNLUN_TRITON_BACKEND", "triton")
    model, tokenizer = acc.load(qwen_bf16)
    ids = acc.text_ids(tokenizer, 64)
    lps = acc.forwards(model, ids)
    results = {label: acc.agreement(label, lps[label], lps["model"], ids) for label in FP8_BOUNDS}
    for label, r in results.items():
        print(f"\nQwen2.5-0.5B {label} vs bf16 pool: top-1 {r.top1:.3f}, mean |dlogprob| {r.mean_abs_logprob_diff:.3f}")
    for label, r in results.items():
        floor, ceiling = FP8_BOUNDS[label]
        assert r.top1 >= floor and r.mean_abs_logprob_diff <= ceiling, r
        assert r.mean_abs_logprob_diff > 0
    assert results["fp8_e4m3"].mean_abs_logprob_diff < results["fp8_e5m2"].mean_abs_logprob_diff
