"""Data-parallel attention on the kunlun platform: a tiny DeepSeek-V2 (MLA,
a shared expert, 8 routed experts, group-limited routing) at
``--enable-dp-attention --dp-size 2 --tp-size 2`` over two CPU processes
(gloo) gives HF transformers' eager float32 greedy tokens one by one (the
other rank idle), batched (ranks of different batch sizes) and on
radix-cache second turns; each rank runs our MLA attention and MoE, and the
gathers and scatters around the experts go through our communicator. What
cannot run is refused at start naming the flag or variable
(layers/dp_attention.py).

CI's quick form adds ``--ep-size 2`` (each rank 4 of the 8 routed experts,
the shared expert on both; SGLang then gathers and scatters with the uneven
``all_gatherv`` / ``reduce_scatterv``); DP attention with the experts
tensor-parallel (the padded ``all_gather_into_tensor`` and
``reduce_scatter_tensor``) is the slow form (``KUNLUN_TRITON_SLOW=1``). The
engine runs in a process of its own (kt_scale_out.serve_in_process; held by
pytest it hung, docs/scale-out.md)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kt_scale_out import CHUNK, check_reports, compare_served, expectations, serve_in_process

DP_ATTENTION = dict(tp_size=2, dp_size=2, enable_dp_attention=True, chunked_prefill_size=CHUNK)
OPS = ("moe_topk", "fused_experts", "extend_attention", "decode_attention")


@pytest.mark.parametrize("ep_size", [2, pytest.param(1, marks=pytest.mark.slow)])
def test_deepseek_v2_dp_attention_equals_hf_and_every_rank_runs_our_ops(tiny_model, ep_size):
    from conftest import HFOracle

    path = tiny_model("deepseek_v2")
    prefix, asked, expected = expectations(HFOracle(path))
    result = serve_in_process(path, {**DP_ATTENTION, "ep_size": ep_size}, asked)
    compare_served(result, prefix, expected)
    check_reports(result["reports"], 2, OPS, collectives=("all_gather", "reduce_scatter"))


@pytest.mark.parametrize("flag", ["enable_two_batch_overlap", "enable_single_batch_overlap"])
def test_overlap_with_dp_attention_is_refused_naming_the_flag(flag):
    from kunlun_triton.sglang_plugin.layers import dp_attention

    args = SimpleNamespace(enable_dp_attention=True, **{flag: True})
    with pytest.raises(dp_attention.UnsupportedDPAttention, match="--" + flag.replace("_", "-")):
        dp_attention.check_server_args(args)
    dp_attention.check_server_args(SimpleNamespace(enable_dp_attention=True))
    dp_attention.check_server_args(SimpleNamespace(enable_dp_attention=False, **{flag: True}))


def test_cuda_gather_variants_are_refused_naming_the_variable(monkeypatch):
    from kunlun_triton.sglang_plugin.layers import dp_attention

    monkeypatch.setenv("SGLANG_DP_USE_GATHERV", "1")
    with pytest.raises(dp_attention.UnsupportedDPAttention, match="SGLANG_DP_USE_GATHERV"):
        dp_attention.check_server_args(SimpleNamespace(enable_dp_attention=True))
