"""rms_norm and fused_add_rms_norm against a float64 oracle written here.

The oracle is the formula itself in float64, independent of both the kernel
and the module `kunlun_triton.ops.norm.reference` (checked too: it is the fallback path).
"""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import strategies
from strategies import DEVICE

import kunlun_triton
from kunlun_triton.ops import fused_add_rms_norm, rms_norm
from kunlun_triton.runtime import FLOAT_DTYPES, get_config
from kunlun_triton.ops.spec import planned_kernels
from kunlun_triton.testing import LOWERING_TARGETS, SHIPPED_TARGETS, aot_target, assert_close, assert_lowers, target_id


def oracle_rms_norm(x, weight, eps):
    x64 = x.double()
    y = x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * weight.double()
    return y.to(x.dtype)


def oracle_fused(x, residual, weight, eps):
    total = x.double() + residual.double()
    y = total / torch.sqrt(total.pow(2).mean(-1, keepdim=True) + eps) * weight.double()
    return y.to(x.dtype), total.to(residual.dtype)


def random_like_rows(rows, seed, strided):
    gen = torch.Generator().manual_seed(seed)
    pad = 3 if strided else 0
    base = torch.randn(rows.shape[0], rows.shape[1] + pad, generator=gen).to(rows.dtype).to(DEVICE)
    return base[:, : rows.shape[1]]


@given(x=strategies.row_tensors(), eps=st.sampled_from([1e-6, 1e-5]), seed=strategies.seeds())
def test_rms_norm_matches_oracle(x, eps, seed):
    weight = torch.randn(x.shape[1], generator=torch.Generator().manual_seed(seed)).to(x.dtype).to(DEVICE)
    kunlun_triton.reset_dispatch_report()
    out = rms_norm(x, weight, eps)
    assert kunlun_triton.dispatch_report()["rms_norm"]["impl"] == "triton"
    assert out.shape == x.shape and out.dtype == x.dtype
    assert_close(out, oracle_rms_norm(x, weight, eps))


@given(x=strategies.row_tensors(), seed=strategies.seeds(), strided_residual=st.booleans())
def test_fused_add_rms_norm_matches_oracle(x, seed, strided_residual):
    weight = torch.randn(x.shape[1], generator=torch.Generator().manual_seed(seed)).to(x.dtype).to(DEVICE)
    residual = random_like_rows(x, seed + 1, strided_residual)
    x_before = x.clone()
    expected_out, expected_residual = oracle_fused(x, residual, weight, 1e-6)

    out = fused_add_rms_norm(x, residual, weight, 1e-6)

    assert_close(out, expected_out, msg="normalised sum")
    assert_close(residual, expected_residual, msg="residual updated in place")
    assert torch.equal(x, x_before), "x must be untouched without out="


@pytest.mark.parametrize("width", [13, 96, 5120])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_named_widths_with_strided_rows(width, dtype):
    # The widths the issue names, always (hypothesis draws 5120 only now and then).
    x = random_like_rows(torch.empty(3, width, dtype=dtype), width, strided=True)
    residual = random_like_rows(torch.empty(3, width, dtype=dtype), width + 1, strided=True)
    weight = torch.randn(width).to(dtype).to(DEVICE)
    assert_close(rms_norm(x, weight), oracle_rms_norm(x, weight, 1e-6))
    expected_out, expected_residual = oracle_fused(x, residual, weight, 1e-6)
    assert_close(fused_add_rms_norm(x, residual, weight), expected_out)
    assert_close(residual, expected_residual)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_fused_add_rms_norm_out_aliasing_x_like_sgl_kernel(dtype):
    # sgl_kernel.fused_add_rmsnorm overwrites x with the output: out=x does that.
    x = torch.randn(2, 3, 96 + 8).to(dtype).to(DEVICE)[..., :96]
    residual = torch.randn(2, 3, 96).to(dtype).to(DEVICE)
    weight = torch.rand(96).to(dtype).to(DEVICE) + 0.5
    expected_out, expected_residual = oracle_fused(x, residual, weight, 1e-6)
    result = fused_add_rms_norm(x, residual, weight, out=x)
    assert result is x
    assert_close(x, expected_out)
    assert_close(residual, expected_residual)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_leading_dims_and_fp32_weight(dtype):
    x = torch.randn(2, 3, 5, 13).to(dtype).to(DEVICE)
    weight = torch.rand(13, device=DEVICE)  # fp32 weight with a low-precision input, as some checkpoints ship
    out = rms_norm(x, weight)
    assert out.shape == x.shape
    assert_close(out, oracle_rms_norm(x, weight, 1e-6))


@given(
    exponent=st.floats(-30, 30),
    eps=st.sampled_from([0.0, 1e-6]),
    width=st.sampled_from([1, 7, 64, 200]),
    backend=st.sampled_from(["triton", "torch"]),
    seed=strategies.seeds(),
)
def test_any_fp32_magnitude_normalises_right(exponent, eps, width, backend, seed):
    """Rows scaled by 1e-30..1e30: x * x would overflow to inf (output 0) or
    underflow to 0 (output inf with eps = 0) in plain fp32 maths."""
    gen = torch.Generator().manual_seed(seed)
    scale = 10.0**exponent
    x = (torch.randn(3, width, generator=gen, dtype=torch.float64) * scale).float().to(DEVICE)
    residual = (torch.randn(3, width, generator=gen, dtype=torch.float64) * scale).float().to(DEVICE)
    weight = torch.randn(width, generator=gen).to(DEVICE)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KUNLUN_TRITON_BACKEND", backend)
        out = rms_norm(x, weight, eps)
        expected_out, expected_residual = oracle_fused(x, residual, weight, eps)
        fused = fused_add_rms_norm(x, residual, weight, eps)
    assert torch.isfinite(out).all() and torch.isfinite(fused).all()
    assert_close(out, oracle_rms_norm(x, weight, eps))
    assert_close(fused, expected_out)
    assert_close(residual, expected_residual)


def test_many_rows_cross_program_boundaries():
    # More rows than any ROWS_PER_PROGRAM tile, with a ragged last tile.
    x = torch.randn(67, 40, device=DEVICE)
    weight = torch.randn(40, device=DEVICE)
    assert_close(rms_norm(x, weight), oracle_rms_norm(x, weight, 1e-6))


def test_empty_rows():
    x = torch.randn(0, 32, device=DEVICE)
    assert rms_norm(x, torch.ones(32, device=DEVICE)).shape == (0, 32)
    residual = torch.randn(0, 32, device=DEVICE)
    assert fused_add_rms_norm(x, residual, torch.ones(32, device=DEVICE)).shape == (0, 32)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_reference_fallback_path(dtype, monkeypatch):
    monkeypatch.setenv("KUNLUN_TRITON_BACKEND", "torch")
    kunlun_triton.reset_dispatch_report()
    x = torch.randn(4, 5120 + 4).to(dtype).to(DEVICE)[:, :5120]
    residual, weight = torch.randn(4, 5120).to(dtype).to(DEVICE), torch.randn(5120).to(dtype).to(DEVICE)
    assert_close(rms_norm(x, weight), oracle_rms_norm(x, weight, 1e-6))
    expected_out, expected_residual = oracle_fused(x, residual, weight, 1e-6)
    assert_close(fused_add_rms_norm(x, residual, weight), expected_out)
    assert_close(residual, expected_residual)
    report = kunlun_triton.dispatch_report()
    assert report["rms_norm"]["impl"] == report["fused_add_rms_norm"]["impl"] == "torch"


X = torch.randn(4, 8, device=DEVICE)
W = torch.randn(8, device=DEVICE)
BAD_INPUTS = [
    ("x", TypeError, lambda: rms_norm(X.cpu().numpy(), W)),
    ("x", TypeError, lambda: rms_norm(X.to(torch.int32), W)),
    ("x", ValueError, lambda: rms_norm(torch.randn(8, 4, device=DEVICE).t(), W[:4].clone())),
    ("x", ValueError, lambda: rms_norm(torch.tensor(1.0, device=DEVICE), W)),
    ("weight", ValueError, lambda: rms_norm(X, torch.randn(7, device=DEVICE))),
    ("weight", ValueError, lambda: rms_norm(X, torch.randn(2, 8, device=DEVICE))),
    ("weight", TypeError, lambda: rms_norm(X, torch.ones(8, dtype=torch.int64, device=DEVICE))),
    ("eps", ValueError, lambda: rms_norm(X, W, eps=-1.0)),
    ("eps", ValueError, lambda: rms_norm(X, W, eps=float("nan"))),
    ("eps", TypeError, lambda: rms_norm(X, W, eps="1e-6")),
    ("residual", ValueError, lambda: fused_add_rms_norm(X, torch.randn(4, 9, device=DEVICE), W)),
    ("residual", TypeError, lambda: fused_add_rms_norm(X, torch.randn(4, 8, device=DEVICE).half(), W)),
    ("residual", ValueError, lambda: fused_add_rms_norm(X, torch.randn(8, 4, device=DEVICE).t(), W)),
    ("residual", ValueError, lambda: fused_add_rms_norm(X, torch.randn(8, device=DEVICE).expand(4, 8), W)),
    ("out", ValueError, lambda: fused_add_rms_norm(X, torch.randn(4, 8, device=DEVICE), W, out=torch.empty(4, 7, device=DEVICE))),
    ("weight", TypeError, lambda: fused_add_rms_norm(X, torch.randn(4, 8, device=DEVICE), W.tolist())),
    ("x", ValueError, lambda: rms_norm(torch.empty(1, 65537, device=DEVICE), torch.empty(65537, device=DEVICE))),
]


@pytest.mark.parametrize("name,error,call", BAD_INPUTS, ids=[f"{i}-{b[0]}" for i, b in enumerate(BAD_INPUTS)])
def test_bad_inputs_name_the_argument(name, error, call):
    with pytest.raises(error, match=name):
        call()


def test_device_mismatch_names_the_argument():
    with pytest.raises(ValueError, match="weight on meta"):
        rms_norm(X, torch.empty(8, device="meta"))


def test_bad_input_leaves_residual_untouched():
    residual = torch.randn(4, 8, device=DEVICE)
    before = residual.clone()
    with pytest.raises(ValueError):
        fused_add_rms_norm(X, residual, torch.randn(9, device=DEVICE))
    assert torch.equal(residual, before)


@pytest.mark.lowering
def test_norm_kernels_lower_for_cuda_and_hip():
    """As the launchers plan them for each target (`OpSpec.kernels`): a wide
    strided row in fp16 and bf16, narrow rows several per program."""
    specs = []
    for target in LOWERING_TARGETS:
        for dtype in (torch.float16, torch.bfloat16):
            specs += [(k, aot_target(target)) for k in
                      planned_kernels("rms_norm", {"rows": 9, "hidden_size": 5120, "strided": True}, dtype, target)
                      + planned_kernels("fused_add_rms_norm", {"rows": 70, "hidden_size": 96}, dtype, target)]  # fmt: skip
    assert_lowers(specs)


@pytest.mark.parametrize("target", SHIPPED_TARGETS, ids=target_id)
def test_shipped_configs_of_every_target(target):
    for width in (13, 96, 1500, 5120):
        x = random_like_rows(torch.empty(37, width, dtype=torch.float16), width, strided=True)
        residual = random_like_rows(torch.empty(37, width, dtype=torch.float16), width + 1, strided=False)
        weight = torch.randn(width).half().to(DEVICE)
        plain = get_config("rms_norm", target=target, hidden_size=width)
        fused = get_config("fused_add_rms_norm", target=target, hidden_size=width)
        assert_close(rms_norm(x, weight, config=plain), oracle_rms_norm(x, weight, 1e-6), msg=f"rms_norm {width}")
        expected_out, expected_residual = oracle_fused(x, residual, weight, 1e-6)
        assert_close(fused_add_rms_norm(x, residual, weight, config=fused), expected_out, msg=f"fused {width}")
        assert_close(residual, expected_residual)
