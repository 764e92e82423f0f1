"""Mixture-of-experts models on the kunlun platform: a tiny Qwen3-MoE
(softmax routing, norm_topk_prob) and a tiny Mixtral give HF transformers'
greedy tokens through the radix cache and chunked prefill, with the router
on `moe_topk` and the experts on `fused_experts` (Triton, every call), on
one rank and on two (each rank holding half of every expert's width).

CI time: one engine per model (a start is about a minute on 2 cores), so
the tensor-parallel sizes are split between them: Qwen3-MoE on 2 ranks
(sharded experts, 24 columns per rank), Mixtral on 1."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from kt_sglang_support import output_ids, start_engine

CHUNK = 16  # chunked prefill smaller than the long prompt below
NEW = 4  # few decode steps: the interpreter makes each one slow
CASES = [("qwen3_moe", 2), ("mixtral", 1)]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-tp{c[1]}")
def moe(request):
    arch, tp_size = request.param
    path = request.getfixturevalue(f"tiny_{arch}")
    if tp_size > 1:
        # Both ranks share the 2 CPU cores of a small machine; bind each to core 0.
        os.environ.setdefault("SGLANG_CPU_OMP_THREADS_BIND", "|".join(["0"] * tp_size))
    engine = start_engine(path, tp_size=tp_size, chunked_prefill_size=CHUNK)
    yield SimpleNamespace(engine=engine, hf=request.getfixturevalue(f"hf_{arch}"), tp_size=tp_size)
    engine.shutdown()


def _greedy(max_new_tokens=NEW):
    return {"max_new_tokens": max_new_tokens, "temperature": 0.0, "ignore_eos": True}


def test_greedy_matches_hf_through_radix_cache_and_chunked_prefill(moe):
    hf = moe.hf
    prefix = hf.encode("The radix cache shares the prefix of prompts that begin with")
    prompts = [
        prefix + hf.encode(" the same tokens."),
        prefix + hf.encode(" a kernel"),
        hf.encode("Once upon a time there was a little model that learned to count: one two three four five six. "
                  "Attention reads keys and values from a paged cache; each page holds a few tokens."),  # fmt: skip
    ]
    assert len(prompts[2]) > 2 * CHUNK
    expected = [hf.greedy(p, NEW) for p in prompts]
    first = moe.engine.generate(input_ids=prompts, sampling_params=_greedy())
    assert [output_ids(o) for o in first] == expected
    again = moe.engine.generate(input_ids=prompts[:2], sampling_params=_greedy())  # radix-cache hits
    assert [output_ids(o) for o in again] == expected[:2]
    assert sum(o["meta_info"].get("cached_tokens", 0) for o in again) >= 2 * len(prefix)


def test_dispatch_report_shows_the_moe_ops_on_triton(moe):
    from kunlun_triton.sglang_plugin.report import engine_dispatch_report

    moe.engine.generate(input_ids=moe.hf.encode("Hello, how are you today?"), sampling_params=_greedy(1))
    reports = engine_dispatch_report(moe.engine)
    assert sorted(reports) == list(range(moe.tp_size))
    for rank, rep in reports.items():
        ops = rep["ops"]
        for op in ("moe_topk", "fused_experts"):
            assert op in ops, f"rank {rank}: {op} never ran: {sorted(ops)}"
            assert ops[op]["impl"] == "triton" and set(ops[op]["calls"]) == {"triton"}, (rank, op, ops[op])
        # one router and one experts call per layer (2 layers) per forward, prefill and decode alike
        assert ops["moe_topk"]["calls"]["triton"] == ops["fused_experts"]["calls"]["triton"] >= 2 * 2
