"""``--kv-cache-dtype fp8_e4m3`` end to end on the kunlun platform (tiny Llama,
fp32 model, chunked prefill and pages so later chunks and decode read the
fp8 cache): greedy tokens with our Triton kernels (integer fp8 encode in
store_kv, integer decode in the attention loops) equal the same engine on
our torch references (torch's float8 casts), and agree with the fp32 cache
on most tokens.

The Triton engine also records its row of docs/models.md's supported-models
table (`kt_models_table`; ``KUNLUN_TRITON_UPDATE_README=1`` writes it).

Two engine starts (about a minute each on 2 cores)."""

from __future__ import annotations

import os

from kt_models_table import check_or_write_row, kernels_since, refusals
from kt_sglang_support import output_ids, start_engine

NEW = 8


def _greedy_tokens(path, prompts, backend, **options):
    """(greedy tokens, the scheduler's dispatch report) of a fresh engine on `backend`."""
    from kunlun_triton.sglang_plugin.report import engine_dispatch_report

    saved = os.environ.get("KUNLUN_TRITON_BACKEND")
    os.environ["KUNLUN_TRITON_BACKEND"] = backend  # the scheduler process inherits it
    try:
        engine = start_engine(path, page_size=4, chunked_prefill_size=16, **options)
        try:
            outs = engine.generate(input_ids=prompts, sampling_params={"max_new_tokens": NEW, "temperature": 0.0,
                                                                        "ignore_eos": True})  # fmt: skip
            return [output_ids(o) for o in outs], engine_dispatch_report(engine)[0]["ops"]
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
    ours, ops = _greedy_tokens(tiny_llama, prompts, "triton", kv_cache_dtype="fp8_e4m3")
    reference, _ = _greedy_tokens(tiny_llama, prompts, "torch", kv_cache_dtype="fp8_e4m3")
    assert ours == reference
    for name in ("store_kv", "extend_attention", "decode_attention"):
        assert set(ops[name]["calls"]) == {"triton"}, (name, ops.get(name))
    # and the fp8 cache is still the model: most greedy tokens as HF's fp32 run
    full = [hf_llama.greedy(p, NEW) for p in prompts]
    same = sum(a == b for got, want in zip(ours, full) for a, b in zip(got, want))
    assert same >= 0.5 * NEW * len(prompts), (ours, full)
    check_or_write_row({
        "architecture": "LlamaForCausalLM, KV cache fp8_e4m3",
        "served": "2 layers, TP 1, fp32, `--kv-cache-dtype fp8_e4m3`, pages of 4 + chunked prefill",
        "oracle": "the same engine on our torch references (torch's float8 casts)",
        "ops": kernels_since(ops, {}), "refused": refusals(tiny_llama, moe=False)})  # fmt: skip
