"""Bad inputs raise errors naming the op and the argument, before anything runs."""

import pytest
import torch

from strategies import DEVICE

from kunlun_triton.ops import fused_experts, moe_topk

L = torch.randn(4, 8, device=DEVICE)
X = torch.randn(3, 16, device=DEVICE)
W13 = torch.randn(4, 10, 16, device=DEVICE)
W2 = torch.randn(4, 16, 5, device=DEVICE)
TW = torch.rand(3, 2, device=DEVICE)
TI = torch.tensor([[0, 1], [2, 3], [1, 0]], dtype=torch.int32, device=DEVICE)

TOPK_BAD = [
    ("router_logits", TypeError, lambda: moe_topk(L.to(torch.int32), 2)),
    ("router_logits", ValueError, lambda: moe_topk(L[0], 2)),
    ("top_k", ValueError, lambda: moe_topk(L, 0)),
    ("top_k", ValueError, lambda: moe_topk(L, 9)),
    ("top_k", TypeError, lambda: moe_topk(L, 2.0)),
    ("scoring", ValueError, lambda: moe_topk(L, 2, scoring="sqrtsoftplus")),
    ("correction_bias", ValueError, lambda: moe_topk(L, 2, correction_bias=torch.zeros(7, device=DEVICE))),
    ("num_expert_group and topk_group", ValueError, lambda: moe_topk(L, 2, num_expert_group=2)),
    ("num_expert_group", ValueError, lambda: moe_topk(L, 2, num_expert_group=3, topk_group=1)),
    ("topk_group", ValueError, lambda: moe_topk(L, 2, num_expert_group=4, topk_group=5)),
    ("top_k = 3 exceeds", ValueError, lambda: moe_topk(L, 3, num_expert_group=4, topk_group=1)),
    ("groups of 1 expert", ValueError,
     lambda: moe_topk(L, 2, num_expert_group=8, topk_group=2, correction_bias=torch.zeros(8, device=DEVICE))),
    ("routed_scaling_factor", ValueError, lambda: moe_topk(L, 2, routed_scaling_factor=0.0)),
    ("routed_scaling_factor", ValueError, lambda: moe_topk(L, 2, routed_scaling_factor=float("nan"))),
    ("NaN", ValueError, lambda: moe_topk(torch.tensor([[0.0, float("nan")]], device=DEVICE), 1)),
    ("correction_bias on meta", ValueError, lambda: moe_topk(L, 2, correction_bias=torch.zeros(8, device="meta"))),
]

EXPERTS_BAD = [
    ("hidden_states", TypeError, lambda: fused_experts(X.to(torch.int64), W13, W2, TW, TI)),
    ("hidden_states", ValueError, lambda: fused_experts(X[0], W13, W2, TW, TI)),
    ("w13", ValueError, lambda: fused_experts(X, W13[:, :9], W2, TW, TI)),
    ("w13", ValueError, lambda: fused_experts(X, W13[..., :15], W2, TW, TI)),
    ("w2", ValueError, lambda: fused_experts(X, W13, W2[..., :4], TW, TI)),
    ("dtypes", ValueError, lambda: fused_experts(X, W13.half(), W2, TW, TI)),
    ("topk_ids", TypeError, lambda: fused_experts(X, W13, W2, TW, TI.float())),
    ("shapes of topk_weights and topk_ids", ValueError, lambda: fused_experts(X, W13, W2, TW[:, :1], TI)),
    ("topk_ids has 2 rows", ValueError, lambda: fused_experts(X, W13, W2, TW[:2], TI[:2])),
    ("topk_ids holds expert id 5", ValueError, lambda: fused_experts(X, W13, W2, TW, TI + 2)),
    ("topk_ids holds expert id -1", ValueError, lambda: fused_experts(X, W13, W2, TW, TI - 1)),
    ("activation", ValueError, lambda: fused_experts(X, W13, W2, TW, TI, activation="relu2")),
    ("formulation", ValueError, lambda: fused_experts(X, W13, W2, TW, TI, formulation="mma")),
    ("w2 on meta", ValueError, lambda: fused_experts(X, W13, W2.to("meta"), TW, TI)),
    ("hidden_states", ValueError, lambda: fused_experts(torch.randn(16, 3, device=DEVICE).t(), W13, W2, TW, TI)),
    ("out has dtype", TypeError, lambda: fused_experts(X, W13, W2, TW, TI, out=X.to(torch.int32))),
    ("shapes of out", ValueError, lambda: fused_experts(X, W13, W2, TW, TI, out=X[:2])),
    ("dtypes of out", ValueError, lambda: fused_experts(X, W13, W2, TW, TI, out=X.half())),
    ("out on meta", ValueError, lambda: fused_experts(X, W13, W2, TW, TI, out=X.to("meta"))),
]


@pytest.mark.parametrize("what,error,call", TOPK_BAD + EXPERTS_BAD,
                         ids=[f"{i}-{b[0]}" for i, b in enumerate(TOPK_BAD + EXPERTS_BAD)])  # fmt: skip
def test_bad_inputs_name_the_op_and_argument(what, error, call):
    op = "moe_topk" if (what, error, call) in TOPK_BAD else "fused_experts"
    with pytest.raises(error, match=what) as info:
        call()
    assert str(info.value).startswith(op + ":"), str(info.value)


def test_unchecked_calls_skip_the_value_checks():
    # check=False: no sync; an out-of-range id is simply dropped (see test_fused_experts)
    fused_experts(X, W13, W2, TW, TI + 2, check=False)
    moe_topk(torch.tensor([[0.0, float("nan")]], device=DEVICE), 1, check=False)
