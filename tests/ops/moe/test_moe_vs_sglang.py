"""The MoE ops against SGLang 0.5.23's own torch code for the same job:
``fused_topk_torch_native``, ``grouped_topk`` and ``biased_grouped_topk_impl``
for routing, ``moe_forward_native`` for the experts. Sizes are small (the
kernels run in the interpreter); logits sit on a grid far from ties (SGLang's
torch.topk breaks ties its own way)."""

from types import SimpleNamespace

import pytest
import torch

from strategies import DEVICE

from kunlun_triton.ops import fused_experts, moe_topk
from kunlun_triton.testing import assert_close


def _logits(tokens, experts, seed):
    gen = torch.Generator().manual_seed(seed)
    # distinct values per row: a random permutation of a spread-out grid
    rows = [torch.randperm(experts, generator=gen).float() * 0.37 - experts * 0.15 for _ in range(tokens)]
    return torch.stack(rows)


def _same_choice(ours, theirs):
    """Per token, the same experts with the same weights (SGLang's order may differ)."""
    (w, ids), (tw, tids) = ours, theirs
    order, torder = ids.long().sort(-1), tids.long().sort(-1)
    assert torch.equal(order.values.cpu(), torder.values.cpu())
    assert_close(w.gather(1, order.indices).cpu(), tw.float().gather(1, torder.indices).cpu(), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("scoring", ["softmax", "sigmoid"])
@pytest.mark.parametrize("bias", [False, True])
def test_routing_matches_sglang_fused_topk_native(scoring, bias):
    from sglang.srt.layers.moe.topk import fused_topk_torch_native

    logits = _logits(7, 16, 1)
    correction = torch.linspace(-0.3, 0.3, 16) if bias else None
    theirs = fused_topk_torch_native(logits, logits, 4, True, correction_bias=correction, scoring_func=scoring)
    ours = moe_topk(logits.to(DEVICE), 4, scoring=scoring,
                    correction_bias=None if correction is None else correction.to(DEVICE))  # fmt: skip
    _same_choice(ours, theirs)


def test_grouped_routing_matches_sglang():
    """DeepSeek-style grouped top-k: without a bias (group max, softmax) and
    with one (sum of the group's top 2 biased sigmoid scores), scaled."""
    from sglang.srt.layers.moe.topk import biased_grouped_topk_impl, grouped_topk_gpu

    grouped_topk = getattr(grouped_topk_gpu, "_torchdynamo_orig_callable", grouped_topk_gpu)  # no inductor on CPU
    logits = _logits(6, 32, 2)
    theirs = grouped_topk(logits, logits, 4, True, num_expert_group=8, topk_group=3)
    _same_choice(moe_topk(logits.to(DEVICE), 4, num_expert_group=8, topk_group=3), theirs)

    bias = torch.linspace(0.2, -0.2, 32)
    theirs = biased_grouped_topk_impl(logits, logits, bias, 6, True, num_expert_group=8, topk_group=4,
                                      routed_scaling_factor=2.5, apply_routed_scaling_factor_on_output=True)  # fmt: skip
    ours = moe_topk(logits.to(DEVICE), 6, scoring="sigmoid", correction_bias=bias.to(DEVICE), num_expert_group=8,
                    topk_group=4, routed_scaling_factor=2.5)  # fmt: skip
    _same_choice(ours, theirs)


@pytest.mark.parametrize("activation,ours", [("silu", "silu"), ("gelu", "gelu_tanh")])
def test_experts_match_sglang_moe_forward_native(activation, ours):
    """(SGLang's native path computes "gelu" with GeluAndMul(), whose default
    is the tanh approximation; its Triton runner's "gelu" is exact erf, which
    our "gelu" follows and test_fused_experts checks.)"""
    from sglang.srt.layers.moe.fused_moe_native import moe_forward_native
    from sglang.srt.layers.moe.moe_runner import MoeRunnerConfig

    gen = torch.Generator().manual_seed(3)
    tokens, experts, top_k, hidden, inter = 11, 6, 2, 40, 24
    x = torch.randn(tokens, hidden, generator=gen)
    layer = SimpleNamespace(num_experts=experts, w13_weight=torch.randn(experts, 2 * inter, hidden, generator=gen) / 7,
                            w2_weight=torch.randn(experts, hidden, inter, generator=gen) / 5)  # fmt: skip
    weights, ids = moe_topk(_logits(tokens, experts, 4).to(DEVICE), top_k)
    theirs = moe_forward_native(layer, x, (weights.cpu(), ids.cpu(), None), MoeRunnerConfig(activation=activation))
    ours = fused_experts(x.to(DEVICE), layer.w13_weight.to(DEVICE), layer.w2_weight.to(DEVICE), weights, ids,
                         activation=ours)  # fmt: skip
    assert_close(ours.cpu(), theirs, scale=2)


def test_sglang_fused_moe_kernel_specs_lower_at_our_block_sizes(monkeypatch):
    """The AOT specs of SGLang's fused_moe_kernel that `inspect` and
    its table in docs/moe.md compare ours with are valid: they compile for sm_90
    at the block sizes our W13 and W2 kernels use. (The compiling child
    must not select our platform: its development mode would turn SGLang's
    kernels into interpreted functions as SGLang imports.)"""
    monkeypatch.delenv("SGLANG_PLATFORM", raising=False)
    from kunlun_triton.sglang_plugin.tools.baselines.moe import fused_experts_kernel_baselines
    from kunlun_triton.testing import assert_lowers

    shape = {"tokens": 64, "num_experts": 8, "top_k": 2, "hidden_size": 256, "intermediate_size": 96}
    specs = fused_experts_kernel_baselines(shape, torch.bfloat16, {"formulation": "dot", "BLOCK_M": 16,
                                                                    "BLOCK_N": 32, "BLOCK_K": 64})  # fmt: skip
    up, down = specs["moe_gate_up_kernel"], specs["moe_down_kernel"]
    assert (up.constexprs["BLOCK_SIZE_N"], down.constexprs["BLOCK_SIZE_N"]) == (64, 32)
    assert not up.constexprs["MUL_ROUTED_WEIGHT"] and down.constexprs["MUL_ROUTED_WEIGHT"]
    assert_lowers([up, down], targets=("cuda",))
