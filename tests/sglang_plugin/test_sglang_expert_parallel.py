"""Expert parallelism on the kunlun platform: a tiny random Qwen3-MoE (8
experts, top 2) at ``--tp-size 2 --ep-size 2`` over two CPU processes
(gloo), SGLang's standard dispatcher (``--moe-a2a-backend none``): each rank
holds 4 of the 8 experts, maps the router's ids through SGLang's one expert
map (-1 for the other rank's experts) and runs our moe_topk and
fused_experts; the ranks' partial sums meet in the all-reduce through our
communicator. Greedy tokens equal HF transformers eager float32 one by one,
batched, and on radix-cache second turns: a rank that computed all experts,
or left a -1 slot's garbage in, would double or corrupt the sum.

CI's quick form is this module's one engine (about a minute to start on 2
cores); top-1 routing at EP 2 (a token whose only expert is remote) is the
slow test below (`KUNLUN_TRITON_SLOW=1`)."""

from __future__ import annotations

import json
import shutil

import pytest
from kt_sglang_support import output_ids

NEW = 4
CHUNK = 16
COMM = "kunlun_triton.comm"
EP_OPTIONS = dict(tp_size=2, ep_size=2, chunked_prefill_size=CHUNK)


def _greedy(n=NEW):
    return {"max_new_tokens": n, "temperature": 0.0, "ignore_eos": True}


def _prompts(hf):
    prefix = hf.encode("The radix cache shares the prefix of prompts that begin with")
    long = hf.encode("Once upon a time there was a little model that learned to count: one two three four five six. "
                     "Attention reads keys and values from a paged cache; each page holds a few tokens.")  # fmt: skip
    assert len(long) > 2 * CHUNK
    return prefix, [prefix + hf.encode(" the same tokens."), prefix + hf.encode(" a kernel"), long]


def _serve_and_compare(engine, hf):
    prefix, prompts = _prompts(hf)
    expected = [hf.greedy(p, NEW) for p in prompts]
    alone = [output_ids(engine.generate(input_ids=p, sampling_params=_greedy())) for p in prompts[:2]]
    assert alone == expected[:2], "one by one"
    batched = engine.generate(input_ids=prompts, sampling_params=_greedy())
    assert [output_ids(o) for o in batched] == expected, "batched"
    again = engine.generate(input_ids=prompts[:2], sampling_params=_greedy())  # radix-cache hits
    assert [output_ids(o) for o in again] == expected[:2], "radix second turn"
    assert sum(o["meta_info"].get("cached_tokens", 0) for o in again) >= 2 * len(prefix)


def _check_reports(engine):
    from kunlun_triton.sglang_plugin.report import engine_dispatch_report

    reports = engine_dispatch_report(engine)
    assert sorted(reports) == [0, 1] and len({rep["pid"] for rep in reports.values()}) == 2
    for rank, rep in reports.items():
        ops = rep["ops"]
        for name in ("moe_topk", "fused_experts", "extend_attention", "decode_attention"):
            assert set(ops.get(name, {}).get("calls", {})) == {"triton"}, (rank, name, ops.get(name))
        # one router and one experts call per MoE layer (2) and forward, on every rank
        assert ops["moe_topk"]["calls"]["triton"] == ops["fused_experts"]["calls"]["triton"] >= 4
        assert set(ops["all_reduce"]["calls"]) == {COMM}, (rank, ops["all_reduce"])


def test_qwen3_moe_ep2_equals_hf_and_every_rank_runs_our_ops(tiny_qwen3_moe, hf_qwen3_moe, engines):
    engine = engines.get(tiny_qwen3_moe, **EP_OPTIONS)
    _serve_and_compare(engine, hf_qwen3_moe)
    _check_reports(engine)


@pytest.mark.slow
def test_qwen3_moe_top1_ep2_zeroes_the_other_ranks_experts(tiny_qwen3_moe, tmp_path, engines):
    """Top-1 routing: a token whose one expert lives on the other rank must
    add exactly zero here (fused_experts' K = 1 path with ids_may_be_invalid)."""
    from conftest import HFOracle

    path = tmp_path / "tiny-qwen3_moe-top1"
    shutil.copytree(tiny_qwen3_moe, path)
    config = json.loads((path / "config.json").read_text())
    config["num_experts_per_tok"] = 1
    (path / "config.json").write_text(json.dumps(config))
    engine = engines.get(path, **EP_OPTIONS)
    _serve_and_compare(engine, HFOracle(str(path)))
    _check_reports(engine)
    engines.close()


def test_a2a_backends_are_refused_naming_the_flag():
    from types import SimpleNamespace

    from kunlun_triton.sglang_plugin.layers import moe

    args = SimpleNamespace(ep_size=2, moe_a2a_backend="deepep", moe_runner_backend="auto")
    with pytest.raises(moe.UnsupportedMoE, match="--moe-a2a-backend deepep"):
        moe.check_server_args(args)
    moe.check_server_args(SimpleNamespace(ep_size=2, moe_a2a_backend="none", moe_runner_backend="auto"))

