"""Helpers of the scale-out engine tests (expert parallelism, DP attention):
greedy tokens against HF one by one, batched and on radix-cache second
turns, and every rank's dispatch report (imported by name: tests/ is not a package)."""

from __future__ import annotations

from kt_sglang_support import output_ids

NEW = 4
CHUNK = 16
COMM = "kunlun_triton.comm"


def greedy(n=NEW):
    return {"max_new_tokens": n, "temperature": 0.0, "ignore_eos": True}


def prompts(hf):
    prefix = hf.encode("The radix cache shares the prefix of prompts that begin with")
    long = hf.encode("Once upon a time there was a little model that learned to count: one two three four five six. "
                     "Attention reads keys and values from a paged cache; each page holds a few tokens.")  # fmt: skip
    assert len(long) > 2 * CHUNK
    return prefix, [prefix + hf.encode(" the same tokens."), prefix + hf.encode(" a kernel"), long]


def expectations(hf):
    """(prefix, prompts, HF's greedy tokens), computed before the engine starts:
    an engine's idle ranks poll and starve the oracle's threads on 2 cores."""
    prefix, asked = prompts(hf)
    return prefix, asked, [hf.greedy(p, NEW) for p in asked]


def serve_and_compare(engine, prefix, asked, expected):
    """One by one (with DP attention the other rank idles), batched (ranks of
    different batch sizes), then radix-cache second turns: all equal HF."""
    alone = [output_ids(engine.generate(input_ids=p, sampling_params=greedy())) for p in asked[:2]]
    assert alone == expected[:2], "one by one"
    batched = engine.generate(input_ids=asked, sampling_params=greedy())
    assert [output_ids(o) for o in batched] == expected, "batched"
    again = engine.generate(input_ids=asked[:2], sampling_params=greedy())  # radix-cache hits
    assert [output_ids(o) for o in again] == expected[:2], "radix second turn"
    assert sum(o["meta_info"].get("cached_tokens", 0) for o in again) >= 2 * len(prefix)


def check_reports(engine, ranks, ops, collectives=("all_reduce",)):
    """Every rank (a process of its own) ran `ops` on Triton and `collectives` through our communicator."""
    from kunlun_triton.sglang_plugin.report import engine_dispatch_report

    reports = engine_dispatch_report(engine)
    assert sorted(reports) == list(range(ranks)) and len({rep["pid"] for rep in reports.values()}) == ranks
    for rank, rep in reports.items():
        seen = rep["ops"]
        for name in ops:
            assert set(seen.get(name, {}).get("calls", {})) == {"triton"}, (rank, name, seen.get(name))
        for name in collectives:
            assert set(seen.get(name, {}).get("calls", {})) == {COMM}, (rank, name, seen.get(name))
        assert seen["moe_topk"]["calls"]["triton"] == seen["fused_experts"]["calls"]["triton"] > 0
    return reports
