"""sglang.Engine on the kunlun platform with a tiny random Llama: greedy output
equals HF transformers token for token, through the radix cache (shared
prefixes, multi-turn chat), chunked prefill, page_size > 1 and a batch of
mixed lengths; seeded sampling repeats; every hot op ran on our Triton kernels.

One engine for the module, shared with the matrix's Llama row (engine start is about a
minute on a small CPU).
"""

from __future__ import annotations

import pytest

from kt_sglang_support import output_ids

CHUNK = 16  # chunked prefill smaller than the long prompt below
PAGE = 4
NEW = 6


@pytest.fixture(scope="module")
def engine(tiny_llama, engines):
    # the options of the matrix's Llama row (test_sglang_engine_matrix.py): one engine for both
    return engines.get(tiny_llama, tp_size=1, page_size=PAGE, chunked_prefill_size=CHUNK)


def _greedy(max_new_tokens=NEW):
    return {"max_new_tokens": max_new_tokens, "temperature": 0.0, "ignore_eos": True}


def test_mixed_batch_with_shared_prefixes_matches_hf(engine, hf_llama):
    prefix = hf_llama.encode("The radix cache shares the prefix of prompts that begin with")
    prompts = [
        prefix + hf_llama.encode(" the same tokens."),
        prefix + hf_llama.encode(" a kernel"),
        hf_llama.encode("Hello"),
        hf_llama.encode("Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12"),
    ]
    expected = [hf_llama.greedy(p, NEW) for p in prompts]
    first = engine.generate(input_ids=prompts, sampling_params=_greedy())
    assert [output_ids(o) for o in first] == expected
    # Again: now the prompts hit the radix cache.
    again = engine.generate(input_ids=prompts, sampling_params=_greedy())
    assert [output_ids(o) for o in again] == expected
    assert sum(o["meta_info"].get("cached_tokens", 0) for o in again) >= len(prefix)


def test_chunked_prefill_longer_than_chunk(engine, hf_llama):
    long_prompt = hf_llama.encode(
        "Once upon a time there was a little model that learned to count: one two three four five six. "
        "Attention reads keys and values from a paged cache; each page holds a few tokens."
    )
    assert len(long_prompt) > 2 * CHUNK
    out = engine.generate(input_ids=long_prompt, sampling_params=_greedy(8))
    assert output_ids(out) == hf_llama.greedy(long_prompt, 8)


def test_multi_turn_chat_hits_cache(engine, hf_llama):
    messages = [{"role": "user", "content": "Hello, how are you today?"}]
    ids1 = hf_llama.chat_ids(messages)
    out1 = engine.generate(input_ids=ids1, sampling_params=_greedy())
    assert output_ids(out1) == hf_llama.greedy(ids1, NEW)
    messages += [
        {"role": "assistant", "content": hf_llama.tokenizer.decode(output_ids(out1))},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    ids2 = hf_llama.chat_ids(messages)
    out2 = engine.generate(input_ids=ids2, sampling_params=_greedy())
    assert output_ids(out2) == hf_llama.greedy(ids2, NEW)
    assert out2["meta_info"].get("cached_tokens", 0) > 0


def test_seeded_sampling_repeats(engine, hf_llama):
    prompt = hf_llama.encode("Tell me a story about a cat")
    params = {"max_new_tokens": 8, "temperature": 1.0, "top_p": 0.9, "top_k": 50, "ignore_eos": True}
    a = engine.generate(input_ids=prompt, sampling_params={**params, "sampling_seed": 1234})
    b = engine.generate(input_ids=[prompt, hf_llama.encode("Hello")],
                        sampling_params=[{**params, "sampling_seed": 1234}, {**params, "sampling_seed": 5}])
    assert output_ids(a) == output_ids(b[0])
    others = [output_ids(engine.generate(input_ids=prompt, sampling_params={**params, "sampling_seed": s}))
              for s in (1, 2, 3)]  # fmt: skip
    assert any(o != output_ids(a) for o in others), "different seeds never changed the sample"


def test_dispatch_report_shows_our_kernels(engine):
    from kunlun_triton.sglang_plugin.report import engine_dispatch_report

    reports = engine_dispatch_report(engine)
    assert list(reports) == [0]
    ops = reports[0]["ops"]
    assert reports[0]["target"] == "interpreter"
    for op in ("decode_attention", "extend_attention", "store_kv", "rms_norm", "fused_add_rms_norm",
               "silu_and_mul", "rotary_embedding", "greedy", "sample"):  # fmt: skip
        assert op in ops, f"{op} never ran: {sorted(ops)}"
        assert ops[op]["impl"] == "triton" and set(ops[op]["calls"]) == {"triton"}, (op, ops[op])
