"""gpt-oss on the kunlun platform beyond its matrix row (test_sglang_engine_matrix.py:
one batch, then the same prompts through the radix cache): each prompt alone and
second turns, against HF transformers' eager float32 (gpt-oss's HF default).

The tiny checkpoint (tiny_model.py, arch gpt_oss): 2 layers, a sliding window of 8
then full attention, learned sinks drawn in [-4, 4], 4 experts (top 2) with biases,
interleaved gate/up rows and the clamped SwiGLU. The first test proves the oracle
sees each of them (HF without it gives other tokens for these prompts), so the
equalities after it are evidence that our kernels serve them. Same engine options
as the matrix row: the engine is shared (`engines`)."""

from __future__ import annotations

import pytest
from kt_sglang_support import output_ids

CHUNK, NEW = 16, 4
OPTIONS = {"tp_size": 1, "chunked_prefill_size": CHUNK}  # test_sglang_engine_matrix.engine_options(gpt_oss)


def _greedy(n=NEW):
    return {"max_new_tokens": n, "temperature": 0.0, "ignore_eos": True}


@pytest.fixture(scope="module")
def gpt_oss(tiny_model):
    from conftest import HFOracle

    path = tiny_model("gpt_oss")
    hf = HFOracle(path)
    assert hf.model.config._attn_implementation == "eager"  # sinks in HF's reference path
    prefix = hf.encode("The radix cache shares the prefix of prompts that begin with")
    prompts = [prefix + hf.encode(" the same tokens."), prefix + hf.encode(" a kernel"),
               hf.encode("Once upon a time there was a little model that learned to count: one two three.")]  # fmt: skip
    assert len(prefix) > hf.model.config.sliding_window  # the window crosses the cached prefix
    return path, hf, prompts


def test_sinks_window_and_clamp_each_change_hf_tokens(gpt_oss):
    import torch
    from conftest import HFOracle

    path, hf, prompts = gpt_oss
    expected = [hf.greedy(p, NEW) for p in prompts]
    no_sinks = HFOracle(path)
    with torch.no_grad():
        for layer in no_sinks.model.model.layers:
            layer.self_attn.sinks.fill_(float("-inf"))
    variants = {"no sinks": no_sinks, "no window": HFOracle(path, layer_types=["full_attention"] * 2),
                "no clamp": HFOracle(path, swiglu_limit=1e9)}  # fmt: skip
    for name, oracle in variants.items():
        assert [oracle.greedy(p, NEW) for p in prompts] != expected, f"{name}: the checkpoint does not exercise it"


def test_each_prompt_alone_and_second_turns_equal_hf(gpt_oss, engines):
    from kunlun_triton.sglang_plugin.report import engine_dispatch_report

    path, hf, prompts = gpt_oss
    engine = engines.get(path, **OPTIONS)
    for prompt in prompts:
        out = engine.generate(input_ids=prompt, sampling_params=_greedy())
        assert output_ids(out) == hf.greedy(prompt, NEW)
    # Second turns: the first turn (prompt + its answer) is in the radix cache; the
    # new tokens attend through the window to cached positions only.
    for prompt in prompts[:2]:
        first = output_ids(engine.generate(input_ids=prompt, sampling_params=_greedy()))
        turn = prompt + first + hf.encode(" and then the next one")
        out = engine.generate(input_ids=turn, sampling_params=_greedy())
        assert out["meta_info"]["cached_tokens"] >= len(prompt)
        assert output_ids(out) == hf.greedy(turn, NEW)
    ops = engine_dispatch_report(engine)[0]["ops"]
    for name in ("extend_attention", "decode_attention", "moe_topk", "fused_experts"):
        assert set(ops[name]["calls"]) == {"triton"}, (name, ops.get(name))
