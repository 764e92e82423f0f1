"""``--kv-cache-dtype fp8_e4m3`` end to end on the kunlun platform (tiny Llama,
fp32 model, chunked prefill and pages so later chunks and decode read the
fp8 cache): greedy tokens with our Triton kernels (integer fp8 encode in
store_kv, integer decode in the attention loops) equal the same engine on
our torch references (torch's float8 casts), and agree with the fp32 cache
on most tokens.

Two engine starts (about a minute each on 2 cores)."""

from __future__ import annotations

import os

import pytest

from kt_sglang_support import output_ids, start_engine

NEW = 8


def _greedy_tokens(path, prompts, backend, **options):
    saved = os.environ.get("KUNLUN_TRITON_BACKEND")
    os.environ["KUNLUN_TRITON_BACKEND"] = backend  # the scheduler process inherits it
    try:
        engine = start_engine(path, page_size=4, chunked_prefill_size=16, **options)
        try:
            outs = engine.generate(input_ids=prompts, sampling_params={"max_new_tokens": NEW, "temperature": 0.0,
                                                                        "ignore_eos": True})  # fmt: skip
            return [output_ids(o) for o in outs]
        finally:
            engine.shutdown()
    finally:
        if saved is None:
            os.environ.pop("KUNLUN_TRITON_BACKEND", None)
        else:
            os.environ["KUNLUN_TRITON_BACKEND"] = saved


def test_fp8_e4m3_kv_cache_greedy_equals_torch_reference_path(tiny_llama, hf_llama):
    prompts = [
        hf_llama.encode("Once upon a time there was a little model that learned to count: one two three four five "
                        "six seven eight. Attention reads keys and values from a paged cache."),
        hf_llama.encode("Hello"),
    ]  # fmt: skip
    assert len(prompts[0]) > 2 * 16  # several prefill chunks: later ones read earlier ones from the fp8 cache
    ours = _greedy_tokens(tiny_llama, prompts, "triton", kv_cache_dtype="fp8_e4m3")
    reference = _greedy_tokens(tiny_llama, prompts, "torch", kv_cache_dtype="fp8_e4m3")
    assert ours == reference
    # and the fp8 cache is still the model: most greedy tokens as HF's fp32 run
    full = [hf_llama.greedy(p, NEW) for p in prompts]
    same = sum(a == b for got, want in zip(ours, full) for a, b in zip(got, want))
    assert same >= 0.5 * NEW * len(prompts), (ours, full)
