"""Data-parallel attention on the kunlun platform: what cannot run is refused
at start naming the flag or variable (layers/dp_attention.py). The engine
test (tiny DeepSeek-V2 at --enable-dp-attention --dp-size 2 --tp-size 2
against HF) is not in this file yet: see docs/scale-out.md, "Data-parallel
attention"."""

from __future__ import annotations

from types import SimpleNamespace

import pytest


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
