"""moe_topk against a float64 oracle written here (SGLang's routing maths,
ties to the lower expert id), on logits drawn from coarse grids so that
scores are either exactly tied or far apart."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import strategies
from strategies import DEVICE

import kunlun_triton
from kunlun_triton.ops import moe_topk
from kunlun_triton.runtime import FLOAT_DTYPES
from kunlun_triton.testing import SHIPPED_TARGETS, assert_close, target_id

NEAR = 1e-5  # choices this close but not equal may legitimately order either way in fp32


def oracle(logits, top_k, scoring="softmax", renormalize=True, correction_bias=None, num_expert_group=None,
           topk_group=None, routed_scaling_factor=None):  # fmt: skip
    """(weights, ids, near_tie rows) in float64, one token at a time."""
    x = logits.double().cpu()
    tokens, experts = x.shape
    weights = torch.zeros(tokens, top_k, dtype=torch.float64)
    ids = torch.zeros(tokens, top_k, dtype=torch.int64)
    near_tie = torch.zeros(tokens, dtype=torch.bool)
    for t in range(tokens):
        scores = torch.softmax(x[t], 0) if scoring == "softmax" else torch.sigmoid(x[t])
        choice = scores + (0 if correction_bias is None else correction_bias.double().cpu())
        candidates = list(range(experts))
        if num_expert_group:
            size = experts // num_expert_group
            group_score = []
            for g in range(num_expert_group):
                members = sorted(choice[g * size : (g + 1) * size].tolist(), reverse=True)
                group_score.append(members[0] + members[1] if correction_bias is not None else members[0])
            kept = sorted(range(num_expert_group), key=lambda g: (-group_score[g], g))[:topk_group]
            candidates = [e for e in candidates if e // size in kept]
            # a group's score sums two choices: an exact tie in float64 need not be one in fp32
            near_tie[t] |= _near_tie(group_score, exact_too=correction_bias is not None)
        near_tie[t] |= _near_tie([choice[e].item() for e in candidates])
        picked = sorted(candidates, key=lambda e: (-choice[e].item(), e))[:top_k]
        ids[t] = torch.tensor(picked)
        w = scores[picked]
        if renormalize:
            w = w / (w.sum() + 1e-20)
        weights[t] = w * (routed_scaling_factor or 1.0)
    return weights, ids, near_tie


def _near_tie(values, exact_too=False) -> bool:
    v = sorted(values, reverse=True)
    return any((0 < a - b or exact_too) and a - b < NEAR for a, b in zip(v, v[1:]))


def _check(logits, top_k, kwargs):
    kunlun_triton.reset_dispatch_report()
    weights, ids = moe_topk(logits, top_k, **kwargs)
    assert kunlun_triton.dispatch_report()["moe_topk"]["impl"] == "triton"
    assert weights.dtype == torch.float32 and ids.dtype == torch.int32
    assert weights.shape == ids.shape == (logits.shape[0], top_k)
    expected_w, expected_ids, near = oracle(logits, top_k, **kwargs)
    sure = ~near
    assert torch.equal(ids.cpu()[sure].long(), expected_ids[sure]), (ids, expected_ids)
    assert_close(weights.cpu()[sure].double(), expected_w[sure], dtype=torch.float32, atol=1e-6, rtol=1e-5)


@given(case=strategies.router_logits())
def test_matches_oracle(case):
    _check(*case)


def test_all_equal_logits_pick_the_lowest_ids():
    logits = torch.zeros(3, 10, device=DEVICE)
    weights, ids = moe_topk(logits, 4)
    assert ids.tolist() == [[0, 1, 2, 3]] * 3
    assert_close(weights, torch.full((3, 4), 0.25, device=DEVICE))


def test_deepseek_v3_grouped_routing():
    """256 experts in 8 groups, the best 4 groups (sum of each group's top-2
    biased scores), 8 experts, sigmoid scores, renormalised and scaled."""
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randint(-12, 13, (9, 256), generator=gen).float() / 4).to(torch.bfloat16).to(DEVICE)
    bias = (torch.randint(-4, 5, (256,), generator=gen).float() / 16).to(DEVICE)
    kwargs = dict(scoring="sigmoid", correction_bias=bias, num_expert_group=8, topk_group=4,
                  routed_scaling_factor=2.5)  # fmt: skip
    _check(logits, 8, kwargs)
    weights, _ = moe_topk(logits, 8, **kwargs)
    assert_close(weights.sum(-1), torch.full((9,), 2.5, device=DEVICE))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_many_tokens_cross_program_boundaries(dtype):
    gen = torch.Generator().manual_seed(1)
    logits = (torch.randint(-8, 9, (300, 8), generator=gen).float() / 4).to(dtype).to(DEVICE)
    _check(logits, 2, {})


def test_strided_logits_rows():
    base = (torch.arange(6 * 20, dtype=torch.float32).reshape(6, 20) % 7 / 4).to(DEVICE)
    _check(base[:, :16], 3, {"scoring": "sigmoid"})


def test_empty_batch():
    weights, ids = moe_topk(torch.empty(0, 8, device=DEVICE), 2)
    assert weights.shape == ids.shape == (0, 2)


@pytest.mark.parametrize("target", SHIPPED_TARGETS, ids=target_id)
def test_shipped_configs_of_every_target(target):
    from kunlun_triton.runtime import get_config

    gen = torch.Generator().manual_seed(2)
    logits = (torch.randint(-8, 9, (37, 60), generator=gen).float() / 4).to(DEVICE)
    config = get_config("moe_topk", target=target, num_experts=60)
    weights, ids = moe_topk(logits, 6, config=config)
    expected_w, expected_ids, near = oracle(logits, 6)
    assert torch.equal(ids.cpu()[~near].long(), expected_ids[~near])


def test_reference_fallback_matches_the_oracle(monkeypatch):
    monkeypatch.setenv("KUNLUN_TRITON_BACKEND", "torch")
    kunlun_triton.reset_dispatch_report()
    gen = torch.Generator().manual_seed(3)
    logits = (torch.randint(-8, 9, (11, 16), generator=gen).float() / 4).to(DEVICE)
    kwargs = dict(scoring="sigmoid", correction_bias=torch.linspace(-0.2, 0.2, 16, device=DEVICE),
                  num_expert_group=4, topk_group=2, routed_scaling_factor=1.5)  # fmt: skip
    weights, ids = moe_topk(logits, 4, **kwargs)
    assert kunlun_triton.dispatch_report()["moe_topk"]["impl"] == "torch"
    expected_w, expected_ids, near = oracle(logits, 4, **kwargs)
    assert not near.any()
    assert torch.equal(ids.cpu().long(), expected_ids)
    assert_close(weights.cpu().double(), expected_w, dtype=torch.float32, atol=1e-6, rtol=1e-5)


def gpt_oss_oracle(x, router_weight, router_bias, top_k):
    """gpt-oss's router (HF transformers' GptOssTopKRouter) in float64: the
    router linear layer adds its bias to the logits, the top-k of those
    logits are the experts, their weights the softmax over the k chosen
    logits only. Returns (logits, weights, ids)."""
    logits = x.double() @ router_weight.double().t() + router_bias.double()
    top, ids = torch.sort(logits, dim=-1, descending=True, stable=True)
    top, ids = top[:, :top_k], ids[:, :top_k]
    return logits, torch.softmax(top, dim=-1), ids


@settings(max_examples=30, deadline=None)
@given(experts=st.sampled_from([4, 8, 32, 128]), top_k=st.integers(1, 4), tokens=st.integers(1, 40), seed=strategies.seeds(),
       spread=st.sampled_from([0.5, 4.0, 40.0]))
def test_gpt_oss_routing(experts, top_k, tokens, seed, spread):
    """gpt-oss routing is moe_topk(logits, k, scoring="topk_softmax") on the
    biased router logits. Distinct logits from a wide range (spread 40: a
    softmax over all E underflows for all but the best few experts and ties
    the rest; choosing on the logits must not)."""
    top_k = min(top_k, experts)
    gen = torch.Generator().manual_seed(seed)
    hidden = 16
    x = torch.randn(tokens, hidden, generator=gen)
    router_weight = torch.randn(experts, hidden, generator=gen) * spread / hidden**0.5
    router_bias = torch.randn(experts, generator=gen) * spread
    logits, expected_w, expected_ids = gpt_oss_oracle(x, router_weight, router_bias, top_k)
    gaps = logits.sort(dim=-1, descending=True).values.diff(dim=-1).abs()
    sure = (gaps[:, :top_k].min(dim=-1).values > 1e-4) if experts > top_k else torch.ones(tokens, dtype=torch.bool)
    kunlun_triton.reset_dispatch_report()
    weights, ids = moe_topk(logits.float().to(DEVICE), top_k, scoring="topk_softmax")
    assert kunlun_triton.dispatch_report()["moe_topk"]["impl"] == "triton"
    assert torch.equal(ids.cpu()[sure].long(), expected_ids[sure])
    assert_close(weights.cpu()[sure].double(), expected_w[sure], dtype=torch.float32, atol=1e-6, rtol=1e-5)
    # SGLang's gpt-oss TopK (softmax, renormalize=True) is the same routing where no score underflows
    if spread < 4:
        weights, ids = moe_topk(logits.float().to(DEVICE), top_k, renormalize=True)
        assert torch.equal(ids.cpu()[sure].long(), expected_ids[sure])
        assert_close(weights.cpu()[sure].double(), expected_w[sure], dtype=torch.float32, atol=1e-6, rtol=1e-5)


def test_gpt_oss_routing_orders_experts_whose_softmax_underflows():
    """Logits 200 apart: softmax over all E gives the two losers 0 each (a
    tie, lower id first); the logits still say expert 2 beats expert 0."""
    logits = torch.tensor([[-300.0, 0.0, -100.0, 1.0]], device=DEVICE)
    weights, ids = moe_topk(logits, 3, scoring="topk_softmax")
    assert ids.tolist() == [[3, 1, 2]]
    expected = torch.softmax(torch.tensor([1.0, 0.0, -100.0], dtype=torch.float64), 0)
    assert_close(weights.cpu().double()[0], expected, dtype=torch.float32, atol=1e-30, rtol=1e-5)
    assert float(weights[0, 2]) > 0  # exp(-101) / (1 + e^-1) is a normal fp32 number


@pytest.mark.parametrize("kwargs", [dict(renormalize=False), dict(correction_bias=torch.zeros(8)),
                                    dict(num_expert_group=2, topk_group=1)])  # fmt: skip
def test_gpt_oss_routing_refuses_options_it_does_not_have(kwargs):
    kwargs = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    with pytest.raises(ValueError, match="moe_topk: scoring='topk_softmax'"):
        moe_topk(torch.zeros(2, 8, device=DEVICE), 2, scoring="topk_softmax", **kwargs)
