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
from kt_scale_out import CHUNK, check_reports, expectations, serve_and_compare

EP_OPTIONS = dict(tp_size=2, ep_size=2, chunked_prefill_size=CHUNK)
OPS = ("moe_topk", "fused_experts", "extend_attention", "decode_attention")


def test_qwen3_moe_ep2_equals_hf_and_every_rank_runs_our_ops(tiny_qwen3_moe, hf_qwen3_moe, engines):
    expected = expectations(hf_qwen3_moe)
    engine = engines.get(tiny_qwen3_moe, **EP_OPTIONS)
    serve_and_compare(engine, *expected)
    check_reports(engine, 2, OPS)


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
    expected = expectations(HFOracle(str(path)))
    engine = engines.get(path, **EP_OPTIONS)
    serve_and_compare(engine, *expected)
    check_reports(engine, 2, OPS)
    engines.close()


def test_a2a_backends_are_refused_naming_the_flag():
    from types import SimpleNamespace

    from kunlun_triton.sglang_plugin.layers import moe

    args = SimpleNamespace(ep_size=2, moe_a2a_backend="deepep", moe_runner_backend="auto")
    with pytest.raises(moe.UnsupportedMoE, match="--moe-a2a-backend deepep"):
        moe.check_server_args(args)
    moe.check_server_args(SimpleNamespace(ep_size=2, moe_a2a_backend="none", moe_runner_backend="auto"))

