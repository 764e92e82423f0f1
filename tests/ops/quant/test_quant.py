"""W8A8-INT8 ops against plain torch: `per_token_quant_int8` bitwise (q) and to
the ulp (scales), `int8_scaled_mm`'s int32 accumulators bit for bit against an
int64 product (both formulations, K not a multiple of the tile, M = 1), its
scaled output within one rounding of the fp32 reference, bad inputs."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from strategies import DEVICE

from kunlun_triton.ops.quant import int8_scaled_mm, int32_accumulators, per_token_quant_int8, reference
from kunlun_triton.testing import assert_close

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _int8(gen, *shape, extremes=False):
    t = torch.randint(-128, 128, shape, generator=gen, dtype=torch.int8)
    if extremes and t.numel():  # the largest products (-128 * -128) all along a row
        t.view(-1)[: max(1, t.numel() // 4)] = -128
    return t.to(DEVICE)


# ---------------------------------------------------------------- per_token_quant_int8


@given(rows=st.integers(1, 9), d=st.sampled_from((1, 13, 96, 127, 200, 700)), dtype=st.sampled_from(DTYPES),
       block_cols=st.sampled_from((None, 32, 64)), seed=st.integers(0, 2**16))  # fmt: skip
def test_per_token_quant_matches_torch(rows, d, dtype, block_cols, seed):
    """Bitwise q (ties to even included: bf16 inputs hit x * 127 / absmax = k + 1/2
    often), scales to the ulp, an all-zero row (the 1e-10 floor), rows wider
    than the tile (two passes)."""
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, d, generator=gen) * 10 ** torch.empty(rows, 1).uniform_(-3, 3, generator=gen)).to(dtype)
    x[rows // 2] = 0
    x = x.to(DEVICE)
    config = None if block_cols is None else {"BLOCK_COLS": block_cols, "ROWS_PER_PROGRAM": 2}
    q, scale = per_token_quant_int8(x, config=config)
    ref_q, ref_scale = reference.per_token_quant_int8(x)
    assert q.dtype == torch.int8 and scale.dtype == torch.float32 and scale.shape == (rows, 1)
    assert torch.equal(q, ref_q)
    assert torch.equal(scale, ref_scale)  # the same fp32 division


def test_per_token_quant_rounds_ties_to_even_and_keeps_leading_dims():
    # absmax 127: x * 127 / absmax = x, so the halves are ties
    row = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, 127.0], device=DEVICE)
    q, scale = per_token_quant_int8(torch.stack([row, -row]).reshape(2, 1, 8))
    assert q.shape == (2, 1, 8) and scale.shape == (2, 1, 1)
    assert q[0, 0].tolist() == [0, 2, 2, 0, -2, -2, 126, 127]
    assert q[1, 0].tolist() == [0, -2, -2, 0, 2, 2, -126, -127]
    assert torch.equal(scale, torch.ones(2, 1, 1, device=DEVICE))


def test_per_token_quant_matches_sglang_definition_off_ties():
    """SGLang's kernel rounds halves away from zero (libdevice.round); off the
    ties the definitions agree: q = round(x * (127 / absmax)), scale = absmax / 127."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(6, 50, generator=gen).to(DEVICE)
    q, scale = per_token_quant_int8(x)
    absmax = x.abs().amax(-1, keepdim=True).clamp(min=1e-10)
    y = x * (torch.full_like(absmax, 127.0) / absmax)
    away = torch.sign(y) * torch.floor(y.abs() + 0.5)
    assert torch.equal(q.float(), away) or bool(((y.abs() % 1) == 0.5).any())
    assert torch.equal(scale, absmax / 127)


# ---------------------------------------------------------------- int8_scaled_mm


@given(m=st.sampled_from((1, 2, 7, 33)), n=st.sampled_from((1, 5, 40, 70)), k=st.sampled_from((1, 15, 64, 100, 300)),
       formulation=st.sampled_from(("dot", "sum")), transposed=st.booleans(), seed=st.integers(0, 2**16))  # fmt: skip
def test_int32_accumulators_are_exact(m, n, k, formulation, transposed, seed):
    """Bit for bit against an int64 product; K ragged against the 16/32-wide
    tiles; b contiguous or SGLang's transposed weight view."""
    gen = torch.Generator().manual_seed(seed)
    a = _int8(gen, m, k, extremes=True)
    b = _int8(gen, n, k, extremes=True).t() if transposed else _int8(gen, k, n, extremes=True)
    tiles = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32} if formulation == "dot" else \
        {"BLOCK_M": 4, "BLOCK_N": 8, "BLOCK_K": 16}  # fmt: skip
    acc = int32_accumulators(a, b, formulation=formulation, config=tiles)
    assert acc.dtype == torch.int32
    assert torch.equal(acc.cpu(), a.cpu().long() @ b.cpu().long())


@pytest.mark.parametrize("formulation", ["dot", "sum"])
def test_int32_accumulators_exact_at_the_float_limit(formulation):
    """K = 2048 of -128 * -128: 2**25 in total, a 1024-wide step sums 2**24
    (the most a float step may hold exactly): the split K keeps it exact."""
    a = torch.full((2, 2048), -128, dtype=torch.int8, device=DEVICE)
    b = torch.full((2048, 3), -128, dtype=torch.int8, device=DEVICE)
    b[0, 0] = 1  # an odd total: fp32 at 2**25 would drop it
    config = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 4096} if formulation == "dot" else \
        {"BLOCK_M": 1, "BLOCK_N": 1, "BLOCK_K": 4096}  # fmt: skip
    acc = int32_accumulators(a, b, formulation=formulation, config=config)
    assert torch.equal(acc.cpu(), a.cpu().long() @ b.cpu().long())


@given(m=st.sampled_from((1, 3, 20)), n=st.sampled_from((8, 33)), k=st.sampled_from((16, 72)),
       dtype=st.sampled_from(DTYPES), bias=st.booleans(), formulation=st.sampled_from(("dot", "sum")),
       seed=st.integers(0, 2**16))  # fmt: skip
def test_int8_scaled_mm_matches_torch(m, n, k, dtype, bias, formulation, seed):
    """Quantized the way serving quantizes (per token, per output channel);
    the output within one rounding to out_dtype of the fp32 reference."""
    gen = torch.Generator().manual_seed(seed)
    a, scale_a = reference.per_token_quant_int8(torch.randn(m, k, generator=gen))
    w_q, scale_b = reference.per_token_quant_int8(torch.randn(n, k, generator=gen) / k**0.5)
    b = w_q.t()
    bias_t = torch.randn(n, generator=gen).to(dtype).to(DEVICE) if bias else None
    args = (a.to(DEVICE), b.to(DEVICE), scale_a.to(DEVICE), scale_b.view(-1).to(DEVICE), dtype, bias_t)
    out = int8_scaled_mm(*args, formulation=formulation)
    assert out.dtype == dtype and out.shape == (m, n)
    assert_close(out, reference.int8_scaled_mm(*args), dtype=dtype)


def test_int8_scaled_mm_close_to_the_float_gemm():
    """The point of it all: x @ W.T through per-token/per-channel int8 stays
    within int8's resolution of the float product (a statistical oracle)."""
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(16, 256, generator=gen), torch.randn(64, 256, generator=gen) / 16
    xq, sx = per_token_quant_int8(x.to(DEVICE))
    wq, sw = per_token_quant_int8(w.to(DEVICE))
    out = int8_scaled_mm(xq, wq.t(), sx, sw, torch.float32).cpu()
    exact = x @ w.t()
    assert float((out - exact).norm() / exact.norm()) < 0.02


def test_empty_shapes():
    a = torch.zeros(0, 8, dtype=torch.int8, device=DEVICE)
    b = torch.zeros(8, 4, dtype=torch.int8, device=DEVICE)
    out = int8_scaled_mm(a, b, torch.ones(0, 1, device=DEVICE), torch.ones(4, 1, device=DEVICE), torch.float16)
    assert out.shape == (0, 4)
    q, s = per_token_quant_int8(torch.zeros(0, 8, device=DEVICE))
    assert q.shape == (0, 8) and s.shape == (0, 1)


# ---------------------------------------------------------------- bad input

A = torch.zeros(3, 8, dtype=torch.int8, device=DEVICE)
B = torch.zeros(8, 5, dtype=torch.int8, device=DEVICE)
SA, SB = torch.ones(3, 1, device=DEVICE), torch.ones(5, 1, device=DEVICE)

BAD = [
    ("per_token_quant_int8: x", TypeError, lambda: per_token_quant_int8(A)),
    ("per_token_quant_int8: x", ValueError, lambda: per_token_quant_int8(torch.zeros(4, 6, device=DEVICE).t())),
    ("int8_scaled_mm: a", TypeError, lambda: int8_scaled_mm(A.float(), B, SA, SB, torch.float16)),
    ("int8_scaled_mm: b", TypeError, lambda: int8_scaled_mm(A, B.half(), SA, SB, torch.float16)),
    ("int8_scaled_mm: a", ValueError, lambda: int8_scaled_mm(A[0], B, SA, SB, torch.float16)),
    ("K", ValueError, lambda: int8_scaled_mm(A, B[:7], SA, SB, torch.float16)),
    ("int8_scaled_mm: out_dtype", TypeError, lambda: int8_scaled_mm(A, B, SA, SB, torch.int32)),
    ("int8_scaled_mm: scale_a", ValueError, lambda: int8_scaled_mm(A, B, SA[:2], SB, torch.float16)),
    ("int8_scaled_mm: scale_a", TypeError, lambda: int8_scaled_mm(A, B, SA.half(), SB, torch.float16)),
    ("int8_scaled_mm: scale_b", ValueError, lambda: int8_scaled_mm(A, B, SA, torch.ones(5, 2, device=DEVICE),
                                                                   torch.float16)),
    ("int8_scaled_mm: bias", TypeError, lambda: int8_scaled_mm(A, B, SA, SB, torch.float16,
                                                              torch.zeros(5, device=DEVICE))),
    ("bias's length", ValueError, lambda: int8_scaled_mm(A, B, SA, SB, torch.float32, torch.zeros(4, device=DEVICE))),
    ("int8_scaled_mm: formulation", ValueError, lambda: int8_scaled_mm(A, B, SA, SB, torch.float16,
                                                                       formulation="mma")),
    ("one device", ValueError, lambda: int8_scaled_mm(A, B, SA, torch.ones(5, 1, device="meta"), torch.float16)),
]


@pytest.mark.parametrize("needle, error, call", BAD, ids=[f"{i}-{b[0]}" for i, b in enumerate(BAD)])
def test_bad_input_names_op_and_argument(needle, error, call):
    before = [t.clone() for t in (A, B, SA, SB)]
    with pytest.raises(error, match=needle):
        call()
    assert all(torch.equal(x, y) for x, y in zip(before, (A, B, SA, SB)))
