"""MXFP4 (OCP microscaling, gpt-oss's expert weights) decoded with integer
operations, for the expert GEMMs on cards without FP4 (P800 has none).

Layout (gpt-oss checkpoints ``*_blocks`` / ``*_scales``, SGLang's
Mxfp4MoEMethod ``w13_weight`` / ``w13_weight_scale``): a weight [N, K] is
``blocks`` uint8 [N, K / 2] (the checkpoint's [N, K / 32, 16] flattened):
byte j holds element 2j in its low nibble and 2j + 1 in its high nibble;
``scales`` uint8 [N, K / 32], one e8m0 exponent per 32 consecutive
elements of a row. Element k of row n is

    e2m1(nibble) * 2 ** (scales[n, k // 32] - 127)

e2m1 nibble ``s e1 e0 m``: magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6} for the
codes c = ``e1 e0 m`` = 0..7. For c >= 2 the fp32 bits are
``(126 << 23) + (c << 22)`` (exponent 126 + (c >> 1), mantissa's top bit
c & 1: 1.0 = 2 << 22 past 0.5's bits, 6.0 = 7 << 22 past them); c = 1 is
0.5 = ``126 << 23`` and c = 0 is 0, i.e. ``c * (126 << 23)``; the sign
bit s goes to bit 31. No fp32 subnormal is ever formed (targets that flush
them stay exact).

e8m0 e: fp32 bits ``e << 23`` = 2 ** (e - 127) for e in 1..254; e = 0 is
2 ** -127, an fp32 subnormal (bits ``1 << 22``; gguf's and HF's decoders
agree); e = 255 is NaN (the OCP spec; HF's ldexp and gguf would give
2 ** 128 there, which no real checkpoint holds).

A decoded value times its scale is exact in bf16 and fp32 (2 significant
bits) while it stays in their range (e = 254 with |value| >= 2 overflows
to inf, as in gguf's decoder); in fp16 large or tiny scales round.
"""

import triton
import triton.language as tl

from .tiles import tile_matmul

MXFP4_BLOCK = 32  # elements per e8m0 scale
E2M1_HALF_BITS = tl.constexpr(126 << 23)  # fp32 bits of 0.5
E8M0_NAN = tl.constexpr(255)


@triton.jit
def e2m1_to_float(nibbles):
    """fp32 values of e2m1 codes (int32 in [0, 16)), by bit arithmetic."""
    c = nibbles & 7
    bits = tl.where(c >= 2, E2M1_HALF_BITS + (c << 22), c * E2M1_HALF_BITS)
    return (bits | ((nibbles & 8) << 28)).to(tl.float32, bitcast=True)


@triton.jit
def e8m0_to_float(e):
    """2 ** (e - 127) as fp32 for e8m0 exponents (int32 in [0, 256)); 255 -> NaN."""
    bits = tl.where(e == 0, 1 << 22, e << 23)
    bits = tl.where(e == E8M0_NAN, 0x7FC00000, bits)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def mxfp4_pair(packed, scale, dtype):
    """(even, odd) elements of a [16, N] tile of packed bytes (uint8, K along
    the rows) whose 32 elements per column share `scale` ([N] uint8), each
    decoded times 2 ** (scale - 127) and cast to `dtype` (exact in bf16)."""
    b = packed.to(tl.int32)
    s = e8m0_to_float(scale.to(tl.int32))[None, :]
    even = (e2m1_to_float(b & 15) * s).to(dtype)
    odd = (e2m1_to_float(b >> 4) * s).to(dtype)
    return even, odd


@triton.jit
def mxfp4_group_product(a_ptrs, w_ptrs, s_ptrs, acc, USE_DOT: tl.constexpr, DOT_FP32: tl.constexpr):
    """acc + a @ W over one 32-element scale group: a_ptrs [M, 16] point at
    the group's even activations (the odd ones follow each), w_ptrs [16, N]
    at its packed bytes (K along the rows), s_ptrs [N] at its scales. Two
    K = 16 products (even and odd elements), so no nibble interleave is
    ever materialised."""
    a_even = tl.load(a_ptrs)
    a_odd = tl.load(a_ptrs + 1)
    even, odd = mxfp4_pair(tl.load(w_ptrs), tl.load(s_ptrs), a_even.dtype)
    acc = tile_matmul(a_even, even, acc, USE_DOT, DOT_FP32)
    return tile_matmul(a_odd, odd, acc, USE_DOT, DOT_FP32)
