"""logit_softcap (final-logit soft-capping, in place) against a float64 oracle written here."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import strategies
from strategies import DEVICE

import kunlun_triton
from kunlun_triton.ops import logit_softcap
from kunlun_triton.ops.spec import planned_kernels
from kunlun_triton.runtime import FLOAT_DTYPES, get_config
from kunlun_triton.testing import LOWERING_TARGETS, SHIPPED_TARGETS, aot_target, assert_close, assert_lowers, target_id


def oracle(x, cap):
    return (cap * torch.tanh(x.double() / cap)).to(x.dtype)


@given(vocab=strategies.widths(max_width=300), dtype=strategies.float_dtypes(),
       cap=st.sampled_from([1.0, 3.0, 30.0, 50.0]), data=st.data())  # fmt: skip
def test_matches_oracle_in_place(vocab, dtype, cap, data):
    x = data.draw(strategies.row_tensors(width=vocab, dtype=dtype)) * (2 * cap)  # reach saturation
    expected = oracle(x, cap)
    kunlun_triton.reset_dispatch_report()
    out = logit_softcap(x, cap)
    assert kunlun_triton.dispatch_report()["logit_softcap"]["impl"] == "triton"
    assert out is x
    assert_close(x, expected)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_strided_rows_leading_dims_and_padding_untouched(dtype):
    base = (torch.randn(2, 3, 1000 + 9) * 80).to(dtype).to(DEVICE)
    padding = base[..., 1000:].clone()
    x = base[..., :1000]
    expected = oracle(x, 30.0)
    logit_softcap(x, 30.0)
    assert_close(x, expected)
    assert torch.equal(base[..., 1000:], padding), "wrote outside the logits"


def test_extreme_values_stay_finite_and_bounded():
    x = torch.tensor([[-1e30, -1e4, -30.0, -1e-6, 0.0, 1e-6, 30.0, 1e4, 1e30]], device=DEVICE)
    expected = oracle(x, 30.0)
    logit_softcap(x, 30.0)
    assert torch.isfinite(x).all() and (x.abs() <= 30.0).all()
    assert_close(x, expected)


def test_reference_fallback_path(monkeypatch):
    monkeypatch.setenv("KUNLUN_TRITON_BACKEND", "torch")
    kunlun_triton.reset_dispatch_report()
    x = (torch.randn(3, 257) * 50).to(torch.bfloat16).to(DEVICE)
    expected = oracle(x, 30.0)
    logit_softcap(x, 30.0)
    assert_close(x, expected)
    assert kunlun_triton.dispatch_report()["logit_softcap"]["impl"] == "torch"


BAD_INPUTS = [
    ("logits", TypeError, lambda: logit_softcap([1.0, 2.0], 30.0)),
    ("logits", TypeError, lambda: logit_softcap(torch.ones(2, 4, dtype=torch.int64, device=DEVICE), 30.0)),
    ("logits", ValueError, lambda: logit_softcap(torch.randn(8, 2, device=DEVICE).t(), 30.0)),
    ("logits", ValueError, lambda: logit_softcap(torch.randn(4, 1, device=DEVICE).expand(4, 3).t(), 30.0)),
    ("cap", ValueError, lambda: logit_softcap(torch.randn(2, 4, device=DEVICE), 0.0)),
    ("cap", ValueError, lambda: logit_softcap(torch.randn(2, 4, device=DEVICE), float("nan"))),
    ("cap", TypeError, lambda: logit_softcap(torch.randn(2, 4, device=DEVICE), None)),
]


@pytest.mark.parametrize("name,error,call", BAD_INPUTS, ids=[f"{i}-{b[0]}" for i, b in enumerate(BAD_INPUTS)])
def test_bad_inputs_name_the_argument_and_change_nothing(name, error, call):
    with pytest.raises(error, match=name):
        call()


def test_failed_call_leaves_logits_unchanged():
    x = torch.randn(2, 4, device=DEVICE)
    before = x.clone()
    with pytest.raises(ValueError, match="cap"):
        logit_softcap(x, -1.0)
    assert torch.equal(x, before)


@pytest.mark.lowering
def test_kernels_lower_for_cuda_and_hip():
    """As the launchers plan them for each target (`OpSpec.kernels`), at Gemma-2's vocabulary."""
    specs = []
    for target in LOWERING_TARGETS:
        for dtype in (torch.float32, torch.bfloat16):
            for shape in ({"rows": 1, "vocab": 256000}, {"rows": 300, "vocab": 1000, "strided": True}):
                specs += [(k, aot_target(target)) for k in planned_kernels("logit_softcap", shape, dtype, target)]
    assert_lowers(specs)


@pytest.mark.parametrize("target", SHIPPED_TARGETS, ids=target_id)
def test_shipped_configs_of_every_target(target):
    for rows, vocab in ((1, 5000), (70, 96), (9, 2500)):
        x = (torch.randn(rows, vocab) * 40).half().to(DEVICE)
        expected = oracle(x, 30.0)
        config = get_config("logit_softcap", target=target, vocab_size=vocab, rows=rows)
        logit_softcap(x, 30.0, config=config)
        assert_close(x, expected, msg=f"{rows}x{vocab}")


CAPS = [1e-3, 0.5, 30.0, 1e5, 1e8, 1e20, 1e30, 1e38]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("cap", CAPS, ids=lambda c: f"cap{c:g}")
def test_any_finite_cap_is_within_tolerance(cap, dtype):
    """The issue-25 fuzz: (1 - e) / (1 + e) with e = exp(-2|x / cap|) lost every
    digit for tiny x / cap (-11.26 came back -14.90 at 1e8, 0 at 1e30). Logits
    from a few units to 1e4, straddling the series / exp branch switch."""
    gen = torch.Generator().manual_seed(7)
    x = (torch.randn(4, 333, generator=gen) * torch.logspace(-3, 4, 333)).to(dtype).to(DEVICE)
    x[0, :3] = torch.tensor([-11.26, 0.0, cap * 0.125 if cap * 0.125 < 1e4 else 1.0])
    expected = oracle(x, cap)
    logit_softcap(x, cap)
    assert_close(x, expected)
    if cap >= 1e20:  # x / cap < 1e-16: cap * tanh(x / cap) is x to fp32's last bit
        assert torch.equal(x, expected)


def test_empty_logits_of_any_rank_are_a_no_op():
    for shape in [(0,), (3, 0), (0, 5), (2, 0, 4)]:
        x = torch.zeros(shape, device=DEVICE)
        assert logit_softcap(x, 30.0) is x and x.shape == shape
