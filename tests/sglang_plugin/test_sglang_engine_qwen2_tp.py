"""A tiny random Qwen2 (GQA, tied embeddings, qkv bias) on the kunlun platform:
greedy output equals HF transformers with one rank and with tensor
parallelism over two CPU processes (gloo), heads split across the ranks."""

from __future__ import annotations

import os

import pytest
from kt_sglang_support import output_ids, start_engine

NEW = 6


def _prompts(hf):
    return [
        hf.encode("Hello, how are you today?"),
        hf.encode("The weather is sunny, the sky is blue"),
        hf.encode("Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"),
    ]


@pytest.mark.parametrize("tp_size", [1, 2])
def test_qwen2_greedy_matches_hf(tiny_qwen2, hf_qwen2, tp_size):
    if tp_size > 1:
        os.environ.setdefault("SGLANG_CPU_OMP_THREADS_BIND", "|".join(["0"] * tp_size))
    prompts = _prompts(hf_qwen2)
    expected = [hf_qwen2.greedy(p, NEW) for p in prompts]
    engine = start_engine(tiny_qwen2, tp_size=tp_size)
    try:
        outs = engine.generate(input_ids=prompts, sampling_params={"max_new_tokens": NEW, "temperature": 0.0, "ignore_eos": True})
        assert [output_ids(o) for o in outs] == expected
        from kunlun_triton.sglang_plugin.report import engine_dispatch_report

        reports = engine_dispatch_report(engine)
        assert sorted(reports) == list(range(tp_size))
        for rep in reports.values():
            assert rep["ops"]["decode_attention"]["impl"] == "triton"
    finally:
        engine.shutdown()
