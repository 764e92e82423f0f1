"""DeepSeek-V2 (MLA, MoE) with EAGLE, MTP-style (docs/speculative.md): a tiny
random DeepSeek-V2 target and a random DeepSeek NextN draft layer built
locally (kt_speculative.build_nextn_draft: ``DeepseekV3ForCausalLMNextN``,
SGLang's MTP head), ``--speculative-algorithm NEXTN`` (SGLang's alias of
EAGLE), a tree (topk 2) verified with its mask on our MLA path.

Why it needs the platform: SGLang 0.5.23's
``DeepseekV2ForCausalLM.set_embed_and_head`` (the EAGLE worker sharing the
target's embedding and head with the draft) calls ``torch.cuda.synchronize()``
unconditionally, which has no driver to call on the CPU; the platform's hook
(sglang_plugin/speculative/draft_models.py) asks the platform instead. One engine.
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest

NEW = 8
CHUNK = 16


def _holder():
    """A stand-in with the two weights set_embed_and_head swaps (module attributes as in the model)."""
    import torch

    model = SimpleNamespace(embed_tokens=torch.nn.Embedding(4, 2))
    return SimpleNamespace(model=model, lm_head=torch.nn.Linear(2, 4, bias=False))


def test_sglangs_set_embed_and_head_calls_cuda_and_the_hook_does_not():
    import torch
    from sglang.srt.models.deepseek_v2 import DeepseekV2ForCausalLM

    from kunlun_triton.sglang_plugin.speculative.draft_models import set_embed_and_head_on_platform

    assert not torch.cuda.is_available()  # the development machine this test describes
    original = inspect.unwrap(DeepseekV2ForCausalLM.set_embed_and_head)  # SGLang's own, not our hook
    assert "torch.cuda.synchronize()" in inspect.getsource(original)
    embed, head = torch.nn.Parameter(torch.randn(4, 2)), torch.nn.Parameter(torch.randn(4, 2))
    with pytest.raises((RuntimeError, AssertionError), match="NVIDIA driver|CUDA"):
        original(_holder(), embed, head)
    holder = _holder()
    set_embed_and_head_on_platform(original, holder, embed, head)
    assert holder.model.embed_tokens.weight is embed and holder.lm_head.weight is head


@pytest.fixture(scope="module")
def deepseek(tiny_model):
    from conftest import HFOracle

    path = tiny_model("deepseek_v2")
    return path, HFOracle(path)


def test_deepseek_v2_with_an_mtp_draft_is_lossless_on_our_mla_backend(deepseek, engines, model_root):
    from kt_sglang_support import output_ids
    from kt_speculative import build_nextn_draft

    from kunlun_triton.sglang_plugin.report import engine_dispatch_report

    path, hf = deepseek
    draft = build_nextn_draft(path, f"{model_root}/tiny-deepseek_v2-nextn")
    engine = engines.get(path, page_size=1, chunked_prefill_size=CHUNK, speculative_algorithm="NEXTN",
                         speculative_draft_model_path=draft, speculative_num_steps=2, speculative_eagle_topk=2,
                         speculative_num_draft_tokens=4)  # fmt: skip
    greedy = {"max_new_tokens": NEW, "temperature": 0.0, "ignore_eos": True}
    prefix = hf.encode("The radix cache shares the prefix of prompts that begin with")
    long = hf.encode("Once upon a time there was a little model that learned to count: one two three four five six. "
                     "Attention reads keys and values from a paged cache; each page holds a few tokens.")  # fmt: skip
    assert len(long) > 2 * CHUNK
    prompts = [prefix + hf.encode(" the same tokens."), long]
    outs = engine.generate(input_ids=prompts, sampling_params=greedy)
    assert [output_ids(o) for o in outs] == [hf.greedy(p, NEW) for p in prompts]
    shared = prefix + hf.encode(" a kernel")
    again = engine.generate(input_ids=shared, sampling_params=greedy)
    assert output_ids(again) == hf.greedy(shared, NEW)
    assert again["meta_info"].get("cached_tokens", 0) >= len(prefix) - 1 > 0  # a radix hit
    outs.append(again)

    report = engine_dispatch_report(engine)[0]
    for name, entry in report["ops"].items():  # every op on Triton
        assert entry["impl"] == "triton" and set(entry["calls"]) == {"triton"}, (name, entry)
    phases = report["speculative"]
    assert phases["target_verify"]["ops"]["extend_attention(custom_mask)"] > 0  # MLA, the tree's mask
    assert phases["draft_extend"]["ops"]["extend_attention"] > 0  # the MTP layer's own MLA cache
    assert phases["draft_decode"]["ops"]["decode_attention"] > 0
    assert report["ops"]["fused_experts"]["calls"]["triton"] > 0  # the MTP layer and the target's MoE
    verify = sum(o["meta_info"]["spec_verify_ct"] for o in outs)
    tokens = sum(o["meta_info"]["completion_tokens"] for o in outs)
    assert verify > 0
    assert report["accept"]["verify_steps"] == verify and report["accept"]["completion_tokens"] == tokens
    assert report["accept"]["accept_length"] == pytest.approx(tokens / verify) and tokens / verify >= 1.0
