"""The FP8 KV codec (integer operations) against torch's float8 casts, bit for bit."""

import pytest
import torch
import triton
import triton.language as tl
from hypothesis import given
from hypothesis import strategies as st

from strategies import DEVICE

from kunlun_triton.ops.attention.fp8 import FP8_FORMATS, fp8_to_fp32, fp32_to_fp8

FP8_DTYPES = list(FP8_FORMATS)
SOURCE_DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@triton.jit
def _decode_kernel(src_ptr, dst_ptr, n, KV_FORMAT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, fp8_to_fp32(tl.load(src_ptr + offs, mask=mask, other=0), KV_FORMAT), mask=mask)


@triton.jit
def _encode_kernel(src_ptr, dst_ptr, n, KV_FORMAT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(src_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(dst_ptr + offs, fp32_to_fp8(x, KV_FORMAT), mask=mask)


def decode(codes: torch.Tensor, dtype, native: bool = False) -> torch.Tensor:
    """`native`: the KV_FORMAT attention reads with on a target converting
    fp8 itself (3 / 4); `fp8_to_fp32` (hidden values' screening) decodes it
    with the codec all the same."""
    out = torch.empty(codes.shape, dtype=torch.float32, device=codes.device)
    fmt = FP8_FORMATS[dtype] + (2 if native else 0)
    _decode_kernel[(triton.cdiv(codes.numel(), 256),)](codes, out, codes.numel(), fmt, 256)
    return out


def encode(x: torch.Tensor, dtype) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=torch.uint8, device=x.device)
    _encode_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), FP8_FORMATS[dtype], 256)
    return out


def torch_codes(x: torch.Tensor, dtype) -> torch.Tensor:
    return x.cpu().to(dtype).view(torch.uint8)


@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("dtype", FP8_DTYPES)
def test_decode_every_code_equals_torch(dtype, native):
    codes = torch.arange(256, dtype=torch.uint8)
    want = codes.view(dtype).float()
    got = decode(codes.to(DEVICE), dtype, native).cpu()
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    # bitwise on the rest: +-0 and every subnormal distinguished
    assert torch.equal(got[~nan].view(torch.int32), want[~nan].view(torch.int32))


@pytest.mark.parametrize("dtype", FP8_DTYPES)
def test_encode_of_every_decoded_code_round_trips(dtype):
    codes = torch.arange(256, dtype=torch.uint8)
    values = codes.view(dtype).float()
    assert torch.equal(encode(values.to(DEVICE), dtype).cpu(), torch_codes(values, dtype))


def _specials(src):
    fin = torch.finfo(src)
    vals = [0.0, -0.0, 448.0, 449.0, 464.0, 465.0, 479.9, 480.0, 57344.0, 61439.0, 61440.0, 65535.0,
            2.0**-6, 2.0**-7 * 1.5, 2.0**-9, 2.0**-10, 2.0**-10 * 1.0001, 2.0**-14, 2.0**-16, 2.0**-17,
            2.0**-17 * 1.01, 3 * 2.0**-18, fin.max, fin.tiny, float("inf"), float("nan")]
    t = torch.tensor(vals + [-v for v in vals], dtype=torch.float32)
    return t.to(src)


@pytest.mark.parametrize("dtype", FP8_DTYPES)
@pytest.mark.parametrize("src", SOURCE_DTYPES)
def test_encode_special_values_equal_torch(dtype, src):
    x = _specials(src)
    assert torch.equal(encode(x.to(DEVICE), dtype).cpu(), torch_codes(x, dtype)), x


@given(
    dtype=st.sampled_from(FP8_DTYPES),
    src=st.sampled_from(SOURCE_DTYPES),
    scale=st.sampled_from([1.0, 1e-3, 0.1, 8.0, 1000.0, 1e5]),
    bits=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_encode_random_values_equal_torch(dtype, src, scale, bits, seed):
    """Normal draws at scales that reach overflow and subnormals, and raw bit
    patterns (every exponent, NaNs with either sign, infinities)."""
    gen = torch.Generator().manual_seed(seed)
    if bits:
        width = torch.finfo(src).bits
        raw = torch.randint(-(2 ** (width - 1)), 2 ** (width - 1), (4096,), generator=gen, dtype=torch.int64)
        x = raw.to({32: torch.int32, 16: torch.int16}[width]).view(src)
    else:
        x = (torch.randn(4096, generator=gen) * scale).to(src)
    assert torch.equal(encode(x.to(DEVICE), dtype).cpu(), torch_codes(x, dtype))


@given(dtype=st.sampled_from(FP8_DTYPES), x=st.floats(width=32, allow_nan=True, allow_infinity=True))
def test_encode_single_floats_equal_torch(dtype, x):
    t = torch.tensor([x], dtype=torch.float32)
    assert torch.equal(encode(t.to(DEVICE), dtype).cpu(), torch_codes(t, dtype))
