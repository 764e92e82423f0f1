"""A tiny random Qwen2 (GQA, tied embeddings, qkv bias) on the kunlun platform:
greedy output equals HF transformers with one rank and with tensor
parallelism over two CPU processes (gloo), heads split across the ranks, and
with two ranks the model's all-reduce (row-parallel linears, vocab-parallel
embedding) and all-gather (vocab-parallel logits) ran through our
communicator, as each scheduler's dispatch report shows.

One engine per tp_size for the module (engine start is about a minute); the tp1 one is
shared with the matrix's Qwen2 row."""

from __future__ import annotations

import pytest
from kt_sglang_support import output_ids

NEW = 6
COMM = "kunlun_triton.comm"


def _prompts(hf):
    return [
        hf.encode("Hello, how are you today?"),
        hf.encode("The weather is sunny, the sky is blue"),
        hf.encode("Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"),
    ]


@pytest.fixture(scope="module", params=[1, 2], ids=lambda n: f"tp{n}")
def engine(request, tiny_qwen2, engines):
    tp_size = request.param
    # tp1: the options of the matrix's Qwen2 row (test_sglang_engine_matrix.py), one engine for both
    eng = engines.get(tiny_qwen2, tp_size=tp_size, chunked_prefill_size=16)
    eng.kt_tp_size = tp_size
    return eng


@pytest.fixture(scope="module")
def expected(hf_qwen2):
    return [hf_qwen2.greedy(p, NEW) for p in _prompts(hf_qwen2)]


def test_qwen2_greedy_matches_hf(engine, hf_qwen2, expected):
    outs = engine.generate(
        input_ids=_prompts(hf_qwen2), sampling_params={"max_new_tokens": NEW, "temperature": 0.0, "ignore_eos": True}
    )
    assert [output_ids(o) for o in outs] == expected


def test_dispatch_report_per_rank(engine, hf_qwen2):
    from kunlun_triton.sglang_plugin.report import engine_dispatch_report

    # Self-contained: a short generation (prefill + decode) before reading.
    engine.generate(input_ids=_prompts(hf_qwen2)[0], sampling_params={"max_new_tokens": 2, "temperature": 0.0})
    reports = engine_dispatch_report(engine)
    assert sorted(reports) == list(range(engine.kt_tp_size))
    assert len({rep["pid"] for rep in reports.values()}) == engine.kt_tp_size  # one process per rank
    for rep in reports.values():
        ops = rep["ops"]
        assert ops["decode_attention"]["impl"] == "triton"
        if engine.kt_tp_size == 1:
            # A single rank has nothing to reduce: SGLang skips the collective.
            assert "all_reduce" not in ops
            continue
        for op in ("all_reduce", "all_gather"):
            assert op in ops, f"{op} never went through our communicator: {sorted(ops)}"
            assert set(ops[op]["calls"]) == {COMM}, (op, ops[op])
            assert ops[op]["reason"].startswith("TPCommunicator on SGLang group"), ops[op]
        # Two all-reduces per layer and one for the embedding, every forward:
        # far more than the all-gathers (one per forward, the logits).
        assert ops["all_reduce"]["calls"][COMM] > ops["all_gather"]["calls"][COMM] > 0
