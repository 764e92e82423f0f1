"""silu_and_mul and gelu_and_mul against float64 oracles written here."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import strategies
from strategies import DEVICE

import kunlun_triton
from kunlun_triton.ops import gelu_and_mul, silu_and_mul
from kunlun_triton.runtime import FLOAT_DTYPES, get_config
from kunlun_triton.ops.spec import planned_kernels
from kunlun_triton.testing import LOWERING_TARGETS, SHIPPED_TARGETS, aot_target, assert_close, assert_lowers, target_id


def oracle(x, activation):
    d = x.shape[-1] // 2
    gate, up = x[..., :d].double(), x[..., d:].double()
    if activation == "silu":
        act = gate / (1.0 + torch.exp(-gate))
    elif activation == "none":
        act = 0.5 * gate * (1.0 + torch.erf(gate / math.sqrt(2.0)))
    else:
        act = 0.5 * gate * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (gate + 0.044715 * gate**3)))
    return (act * up).to(x.dtype)


def run(x, activation, config=None):
    if activation == "silu":
        return silu_and_mul(x, config=config)
    return gelu_and_mul(x, approximate=activation, config=config)


OP_NAME = {"silu": "silu_and_mul", "none": "gelu_and_mul", "tanh": "gelu_and_mul"}
ACTIVATIONS = ["silu", "none", "tanh"]


@given(
    half=strategies.widths(max_width=160),
    dtype=strategies.float_dtypes(),
    activation=st.sampled_from(ACTIVATIONS),
    data=st.data(),
)
def test_matches_oracle(half, dtype, activation, data):
    x = data.draw(strategies.row_tensors(width=2 * half, dtype=dtype))
    x = x * 3  # reach the saturating ends of the activations
    kunlun_triton.reset_dispatch_report()
    out = run(x, activation)
    assert kunlun_triton.dispatch_report()[OP_NAME[activation]]["impl"] == "triton"
    assert out.shape == (x.shape[0], half) and out.dtype == dtype
    assert_close(out, oracle(x, activation))


@pytest.mark.parametrize("half", [13, 96, 5120])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_named_widths_leading_dims_strided(half, dtype):
    base = (torch.randn(2, 3, 2 * half + 6) * 3).to(dtype).to(DEVICE)
    x = base[..., : 2 * half]
    for activation in ACTIVATIONS:
        out = run(x, activation)
        assert out.shape == (2, 3, half)
        assert_close(out, oracle(x, activation), msg=activation)


def test_extreme_values_stay_finite():
    # exp(-g) overflows fp32 for g < -88; the kernel must not turn that into NaN.
    x = torch.tensor([[-1e4, -100.0, -20.0, 0.0, 20.0, 100.0, 1e4, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]], device=DEVICE)
    for activation in ACTIVATIONS:
        out = run(x, activation)
        assert torch.isfinite(out).all(), activation
        assert_close(out, oracle(x, activation), msg=activation)


def test_many_rows_ragged_tiles():
    x = torch.randn(37, 2 * 1500, device=DEVICE)
    assert_close(silu_and_mul(x), oracle(x, "silu"))


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_reference_fallback_path(activation, monkeypatch):
    monkeypatch.setenv("KUNLUN_TRITON_BACKEND", "torch")
    kunlun_triton.reset_dispatch_report()
    x = torch.randn(3, 2 * 96).to(torch.bfloat16).to(DEVICE)
    assert_close(run(x, activation), oracle(x, activation))
    assert kunlun_triton.dispatch_report()[OP_NAME[activation]]["impl"] == "torch"


BAD_INPUTS = [
    ("x", TypeError, lambda: silu_and_mul([1.0, 2.0])),
    ("x", TypeError, lambda: silu_and_mul(torch.ones(2, 4, dtype=torch.int64, device=DEVICE))),
    ("x", ValueError, lambda: silu_and_mul(torch.randn(2, 5, device=DEVICE))),
    ("x", ValueError, lambda: silu_and_mul(torch.randn(8, 2, device=DEVICE).t())),
    ("x", ValueError, lambda: gelu_and_mul(torch.tensor(1.0, device=DEVICE))),
    ("approximate", ValueError, lambda: gelu_and_mul(torch.randn(2, 4, device=DEVICE), approximate="erf")),
]


@pytest.mark.parametrize("name,error,call", BAD_INPUTS, ids=[f"{i}-{b[0]}" for i, b in enumerate(BAD_INPUTS)])
def test_bad_inputs_name_the_argument(name, error, call):
    with pytest.raises(error, match=name):
        call()


@pytest.mark.lowering
def test_kernels_lower_for_cuda_and_hip():
    """As the launchers plan them for each target (`OpSpec.kernels`)."""
    specs = []
    for target in LOWERING_TARGETS:
        for dtype in (torch.float16, torch.bfloat16):
            planned = planned_kernels("silu_and_mul", {"rows": 4, "d": 14336}, dtype, target)
            for approximate in ("none", "tanh"):
                shape = {"rows": 300, "d": 96, "strided": True, "approximate": approximate}
                planned += planned_kernels("gelu_and_mul", shape, dtype, target)
            specs += [(k, aot_target(target)) for k in planned]
    assert_lowers(specs)


@pytest.mark.parametrize("target", SHIPPED_TARGETS, ids=target_id)
def test_shipped_configs_of_every_target(target):
    for rows, half in ((1, 5120), (70, 96), (9, 2500)):
        x = torch.randn(rows, 2 * half).half().to(DEVICE)
        for activation in ACTIVATIONS:
            config = get_config(OP_NAME[activation], target=target, hidden_size=half, rows=rows)
            assert_close(run(x, activation, config), oracle(x, activation), msg=f"{activation} {rows}x{half}")
