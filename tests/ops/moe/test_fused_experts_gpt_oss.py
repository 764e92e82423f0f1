"""fused_experts with gpt-oss's experts against a token-by-token float64
oracle written here the way HF transformers' GptOssExperts computes them:
weights in HF's layout (gate_up_proj [E, H, 2I] with gate and up
interleaved along the last dim, down_proj [E, I, H]), biases after each
GEMM, the clamped SwiGLU, the routing weight on the biased output.
Float (bf16, fp16, fp32) and W8A8-INT8 experts; inputs drawn so that both
clamps bite (gate above the limit, up beyond +-limit)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import DEVICE, seeds

import kunlun_triton
from kunlun_triton.ops import fused_experts
from kunlun_triton.testing import assert_close

ALPHA, LIMIT = 1.702, 7.0


def hf_gated(gate_up):
    """HF's GptOssExperts._apply_gate in float64."""
    gate, up = gate_up[..., ::2], gate_up[..., 1::2]
    gate = gate.clamp(max=LIMIT)
    up = up.clamp(-LIMIT, LIMIT)
    return (up + 1) * gate * torch.sigmoid(gate * ALPHA)


def quantize_rows(x):
    """Per-row symmetric int8: scale = max|x| / 127, q = round(x / scale)."""
    x = x.double()
    absmax = x.abs().amax(-1, keepdim=True).clamp(min=1e-10)
    return torch.round(x * (127.0 / absmax)).to(torch.int8), absmax / 127


def oracle(x, hf, ids, weights, int8=None, on_input=False):
    """out[t] = sum_k w (down(gated(x gate_up + b1)) + b2), rounded where the
    op stores: the gated row and each choice's output in x's dtype.
    int8 = (gate_up_q, s13, down_q, s2): the W8A8 codes in HF's layout."""
    dtype, out = x.dtype, torch.zeros(x.shape, dtype=torch.float64)
    for t in range(x.shape[0]):
        for k in range(ids.shape[1]):
            e, w = int(ids[t, k]), float(weights[t, k])
            if int8 is None:
                gate_up = x[t].double() @ hf["gate_up_proj"][e].double()
            else:
                xq, xs = quantize_rows(x[t : t + 1].float())
                gate_up = (xq[0].long() @ int8[0][e].long()).double() * float(xs) * int8[1][e].double()
            gate_up = gate_up + hf["gate_up_proj_bias"][e].double()
            if on_input:
                gate_up = gate_up * w
            h = hf_gated(gate_up).to(dtype).double()
            if int8 is None:
                y = h @ hf["down_proj"][e].double()
            else:
                hq, hs = quantize_rows(h[None])
                y = (hq[0].long() @ int8[2][e].long()).double() * float(hs) * int8[3][e].double()
            y = y + hf["down_proj_bias"][e].double()
            out[t] += (y * (1.0 if on_input else w)).to(dtype).double()
    return out.to(dtype)


def hf_experts(experts, hidden, inter, gen, dtype):
    """Random gpt-oss experts in HF's layout, scaled so gate_up spreads to
    about +-3 LIMIT (both clamps active) and biases far from zero."""
    return {
        "gate_up_proj": (torch.randn(experts, hidden, 2 * inter, generator=gen) * 9 / hidden**0.5).to(dtype),
        "gate_up_proj_bias": (torch.randn(experts, 2 * inter, generator=gen) * 3).to(dtype),
        "down_proj": (torch.randn(experts, inter, hidden, generator=gen) / (4 * inter**0.5)).to(dtype),
        "down_proj_bias": (torch.randn(experts, hidden, generator=gen)).to(dtype),
    }


def sglang_layout(hf):
    """SGLang's w13 [E, 2I, H] (interleaved rows kept), w2 [E, H, I], b1, b2."""
    return dict(w13=hf["gate_up_proj"].transpose(1, 2).contiguous().to(DEVICE),
                w2=hf["down_proj"].transpose(1, 2).contiguous().to(DEVICE),
                b1=hf["gate_up_proj_bias"].contiguous().to(DEVICE), b2=hf["down_proj_bias"].contiguous().to(DEVICE))  # fmt: skip


def draw_case(experts, top_k, tokens, hidden, inter, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    hf = hf_experts(experts, hidden, inter, gen, dtype)
    x = torch.randn(tokens, hidden, generator=gen).to(dtype)
    ids = torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(tokens)]).int()
    weights = torch.softmax(torch.randn(tokens, top_k, generator=gen), -1)
    return hf, x, ids, weights


def assert_clamps_bite(x, hf, ids):
    gate_up = torch.stack([x[t].double() @ hf["gate_up_proj"][int(e)].double() + hf["gate_up_proj_bias"][int(e)].double()
                           for t in range(x.shape[0]) for e in ids[t]])  # fmt: skip
    assert bool((gate_up[:, ::2] > LIMIT).any()) and bool((gate_up[:, 1::2] > LIMIT).any())
    assert bool((gate_up[:, 1::2] < -LIMIT).any())


def run(x, layout, ids, weights, **kw):
    kunlun_triton.reset_dispatch_report()
    out = fused_experts(x.to(DEVICE), layout["w13"], layout["w2"], weights.to(DEVICE), ids.to(DEVICE), b1=layout["b1"],
                        b2=layout["b2"], gemm1_alpha=ALPHA, gemm1_limit=LIMIT, **kw).cpu()  # fmt: skip
    assert kunlun_triton.dispatch_report()["fused_experts"]["impl"] == "triton"
    return out


@settings(max_examples=25, deadline=None)
@given(experts=st.sampled_from([1, 3, 4, 8]), top_k=st.integers(1, 4), tokens=st.integers(1, 20), seed=seeds(),
       dtype=st.sampled_from([torch.bfloat16, torch.float16, torch.float32]), hidden=st.sampled_from([16, 40, 64]),
       inter=st.sampled_from([8, 24, 32]), on_input=st.sampled_from([False, False, True]),
       formulation=st.sampled_from(["dot", "sum", None]))  # fmt: skip
def test_gpt_oss_float_experts_match_hf_maths(experts, top_k, tokens, seed, dtype, hidden, inter, on_input, formulation):
    top_k = min(top_k, experts)
    hf, x, ids, weights = draw_case(experts, top_k, tokens, hidden, inter, dtype, seed)
    out = run(x, sglang_layout(hf), ids, weights, apply_router_weight_on_input=on_input, formulation=formulation)
    assert out.dtype == dtype
    assert_close(out, oracle(x, hf, ids, weights, on_input=on_input), scale=3)


def test_both_clamps_bite_and_the_answer_is_not_plain_silu():
    """The drawn experts exercise both clamps; the fused answer matches the
    clamped oracle and differs from SGLang's plain gated silu on the
    de-interleaved weights (so the options are really applied)."""
    hf, x, ids, weights = draw_case(4, 2, 12, 64, 32, torch.float32, seed=11)
    assert_clamps_bite(x, hf, ids)
    layout = sglang_layout(hf)
    out = run(x, layout, ids, weights)
    assert_close(out, oracle(x, hf, ids, weights))
    plain = fused_experts(x.to(DEVICE), torch.cat([layout["w13"][:, 0::2], layout["w13"][:, 1::2]], 1), layout["w2"],
                          weights.to(DEVICE), ids.to(DEVICE), b1=layout["b1"], b2=layout["b2"]).cpu()  # fmt: skip
    assert float((plain - out).abs().max()) > 1.0


def test_non_interleaved_rows_with_alpha():
    """gate_up_interleaved=False (SGLang's swiglu_no_interleaved_with_alpha_and_limit): [gate; up] rows."""
    hf, x, ids, weights = draw_case(3, 2, 7, 40, 24, torch.float32, seed=5)
    layout = sglang_layout(hf)
    w13 = layout["w13"]
    layout.update(w13=torch.cat([w13[:, 0::2], w13[:, 1::2]], 1).contiguous(),
                  b1=torch.cat([layout["b1"][:, 0::2], layout["b1"][:, 1::2]], 1).contiguous())  # fmt: skip
    assert_close(run(x, layout, ids, weights, gate_up_interleaved=False), oracle(x, hf, ids, weights))


def test_limit_only_clamp():
    """gemm1_limit without gemm1_alpha: SGLang's min(silu(g), limit) * clamp(u, -limit, limit) on [gate; up] rows."""
    hf, x, ids, weights = draw_case(3, 2, 9, 32, 16, torch.float32, seed=3)
    layout = sglang_layout(hf)
    out = fused_experts(x.to(DEVICE), layout["w13"], layout["w2"], weights.to(DEVICE), ids.to(DEVICE),
                        gemm1_limit=LIMIT).cpu()  # fmt: skip
    expected = torch.zeros(x.shape, dtype=torch.float64)
    for t in range(x.shape[0]):
        for k in range(2):
            e, w = int(ids[t, k]), float(weights[t, k])
            gate_up = hf["gate_up_proj"][e].double().t() @ x[t].double()
            gate, up = gate_up[:16], gate_up[16:]
            h = (torch.nn.functional.silu(gate).clamp(max=LIMIT) * up.clamp(-LIMIT, LIMIT)).float().double()
            expected[t] += (hf["down_proj"][e].double().t() @ h * w).float().double()
    assert_close(out, expected.float())


@settings(max_examples=12, deadline=None)
@given(experts=st.sampled_from([2, 4, 8]), top_k=st.integers(1, 3), tokens=st.integers(1, 12), seed=seeds(),
       dtype=st.sampled_from([torch.bfloat16, torch.float32]), formulation=st.sampled_from(["dot", "sum", None]),
       on_input=st.sampled_from([False, True]))  # fmt: skip
def test_gpt_oss_int8_experts_match_hf_maths(experts, top_k, tokens, seed, dtype, formulation, on_input):
    """W8A8-INT8 experts (per-output-channel codes of HF's weights) with the
    same epilogue: within 3 ulps plus one int8 step of the output."""
    top_k = min(top_k, experts)
    hf, x, ids, weights = draw_case(experts, top_k, tokens, 64, 32, dtype, seed)
    gu_q, s13 = quantize_rows(hf["gate_up_proj"].transpose(1, 2).float())  # per output channel: rows of [E, 2I, H]
    dn_q, s2 = quantize_rows(hf["down_proj"].transpose(1, 2).float())
    layout = sglang_layout(hf)
    layout.update(w13=gu_q.contiguous().to(DEVICE), w2=dn_q.contiguous().to(DEVICE))
    out = run(x, layout, ids, weights, use_int8_w8a8=True, w13_scale=s13.float().to(DEVICE),
              w2_scale=s2.float().to(DEVICE), formulation=formulation, apply_router_weight_on_input=on_input)  # fmt: skip
    int8 = (gu_q.transpose(1, 2), s13[..., 0], dn_q.transpose(1, 2), s2[..., 0])
    expected = oracle(x, hf, ids, weights, int8=int8, on_input=on_input)
    step = float(expected.float().abs().max()) / 127
    assert_close(out, expected, scale=3, atol=step)


BAD = [
    ("gemm1_alpha needs gemm1_limit", dict(gemm1_alpha=1.702)),
    ("gemm1_alpha / gemm1_limit clamp SGLang's gated silu", dict(gemm1_alpha=1.702, gemm1_limit=7.0, activation="gelu")),
    ("gemm1_limit must be > 0", dict(gemm1_limit=-1.0)),
    ("b1 must be a contiguous", dict(b1=torch.zeros(4, 10))),
    ("b2 must be", dict(b2=torch.zeros(16, 4).t())),
    ("b1 has dtype", dict(b1=torch.zeros(4, 16, dtype=torch.int32))),
]


@pytest.mark.parametrize("needle, kwargs", BAD, ids=[b[0] for b in BAD])
def test_bad_gpt_oss_arguments(needle, kwargs):
    x = torch.randn(3, 16, device=DEVICE)
    out = torch.full_like(x, 5.0)
    kwargs = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    with pytest.raises((ValueError, TypeError), match=f"fused_experts: {needle}"):
        fused_experts(x, torch.zeros(4, 16, 16, device=DEVICE), torch.zeros(4, 16, 8, device=DEVICE),
                      torch.rand(3, 2, device=DEVICE), torch.tensor([[0, 1], [2, 3], [1, 0]], device=DEVICE), out=out,
                      **kwargs)  # fmt: skip
    assert bool((out == 5).all())
