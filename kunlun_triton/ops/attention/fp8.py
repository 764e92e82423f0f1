"""FP8 KV-cache codec written with integer operations (no FP8 type, no FP8 hardware).

A KV pool in ``torch.float8_e4m3fn`` or ``torch.float8_e5m2`` (SGLang's
``--kv-cache-dtype fp8_e4m3 | fp8_e5m2``) is handed to the kernels as its
bytes (a ``uint8`` view); `KV_FORMAT` (a constexpr: 0 = the pool is in the
compute dtype, 1 = e4m3fn, 2 = e5m2) picks the codec at compile time, so
the bf16/fp16 kernels compile exactly as before. Where the target converts
fp8 itself (`runtime.capabilities.native_fp8`: CUDA sm_89+) the attention
plans read with `NATIVE_E4M3` / `NATIVE_E5M2` instead: the loaded bytes
bitcast to Triton's fp8 type and cast, exact as the codec (DESIGN.md:
"identical results"): sm_90 decode e4m3 867 -> 432 instructions per 32-key
tile (SGLang's, an fp8 x fp8 dot of q cast to fp8: 389), extend 1121 -> 642
(SGLang 736); store_kv keeps the codec's encoding (torch's rounding rules).

Decode (byte b -> fp32, exact), through an fp16 made of the byte's bits and
one fp16 -> fp32 conversion (exact, subnormals included, on every target):

    e5m2:   fp16_bits = b << 8                                 (the fp16's high byte)
    e4m3fn: fp16_bits = (b & 0x80) << 8 | (b & 0x7f) << 7,  value = 256 * fp16
            (sign, exponent and mantissa in fp16's fields: bias 15 instead of 7,
            so normals and subnormals alike come out 2**-8 times the value;
            the same as fp32 bits s << 31 | (e + 120) << 23 | m << 20 for
            normals and m * 2**-9 for subnormals)
            b & 0x7f = 0x7f: NaN                               (no infinities)

Encode (fp32 x -> byte), torch's CPU casts bit for bit: round to nearest
even on the integer bits (a = |x|'s bits; normals keep the top 3 (e4m3) or
2 (e5m2) mantissa bits and re-bias, values below the smallest normal are
round(|x| * 2**9) (e4m3) or round(|x| * 2**16) (e5m2) computed by shifting
the 24-bit significand), then torch's special cases: e4m3fn saturates at
+-448 (0x7e, infinities included), e5m2 overflows to +-inf (0x7c), NaN stays
NaN (0x7f with the input's sign).
"""

import torch
import triton
import triton.language as tl

from ...runtime import FLOAT_DTYPES
from ...runtime.capabilities import capabilities, native_fp8

FP8_FORMATS = {torch.float8_e4m3fn: 1, torch.float8_e5m2: 2}  # KV_FORMAT constexpr; 0: not fp8
NATIVE_E4M3, NATIVE_E5M2 = 3, 4  # KV_FORMAT: the same bytes, converted by the target (`read_format`)
KV_POOL_DTYPES = FLOAT_DTYPES + tuple(FP8_FORMATS)


def kv_format(dtype) -> int:
    """The KV_FORMAT constexpr of a pool dtype (0 for the compute dtypes)."""
    return FP8_FORMATS.get(dtype, 0)


def read_format(fmt: int, native: bool) -> int:
    """The KV_FORMAT attention reads a pool of format `fmt` with: the
    target's own conversion where it has one (`native`), else the codec."""
    return {1: NATIVE_E4M3, 2: NATIVE_E5M2}.get(fmt, fmt) if native else fmt


def read_constexprs(fmt: int, runtime_unit: bool) -> dict:
    """KV_FORMAT, FP8_RUNTIME_UNIT and FP8_NAN_ARITH of an attention kernel
    reading a pool of format `fmt` on the current target: its own fp8
    conversion where it has one (`native_fp8`), else the codec, to which the
    config's run-time unit (`runtime_unit`) and the target's NaN decoding
    (`capabilities().fp8_nan_by_arithmetic`) alone apply."""
    fmt = read_format(fmt, native_fp8())
    codec = fmt in FP8_FORMATS.values()  # else the pool is read as it is, or converted by the target
    return {"KV_FORMAT": fmt, "FP8_RUNTIME_UNIT": codec and runtime_unit,
            "FP8_NAN_ARITH": codec and capabilities().fp8_nan_by_arithmetic}  # fmt: skip


def kernel_view(buffer: torch.Tensor) -> torch.Tensor:
    """An fp8 pool as the bytes the kernels read and write; others as they are."""
    return buffer.view(torch.uint8) if buffer.dtype in FP8_FORMATS else buffer


@triton.jit
def fp8_half(raw, KV_FORMAT: tl.constexpr, NAN_ARITH: tl.constexpr = False):
    """Bytes (uint8) -> an fp16 made of their bits: e5m2's value (the fp16's
    high byte), or 2**-8 times e4m3fn's (its sign, exponent and mantissa
    moved into the fp16's fields, bias 15 instead of 7: subnormals too).
    Codes 0x7f / 0xff are e4m3fn's NaN: a compare and select, or with
    NAN_ARITH (`capabilities().fp8_nan_by_arithmetic`) fp16 exponent 31 by
    integer arithmetic: (magnitude + 1) & 0x80 is 0x80 for magnitude 0x7f
    alone, and 0x80 * 0xf8 = 0x7c00 (the exponent's bits; measured against
    a shift by 7 to 0x4000, the one bit 0x3f80 lacks: gfx942 MLA decode one
    VGPR spilled on Triton 3.8)."""
    if KV_FORMAT == 2:
        return (raw.to(tl.uint16) << 8).to(tl.float16, bitcast=True)
    else:
        b = raw.to(tl.uint16)
        magnitude = b & 0x7F
        if NAN_ARITH:
            nan_exponent = ((magnitude + 1) & 0x80) * 0xF8
            return (((b & 0x80) << 8) | (magnitude << 7) | nan_exponent).to(tl.float16, bitcast=True)
        else:
            half = (((b & 0x80) << 8) | (magnitude << 7)).to(tl.float16, bitcast=True)
            return tl.where(magnitude == 0x7F, float("nan"), half)


@triton.jit
def fp8_to_fp32(raw, KV_FORMAT: tl.constexpr):
    """Bytes (uint8) -> their fp32 values, exactly (module docstring): the
    fp16 of `fp8_half` converted (one exact instruction that handles
    subnormals on every target: fp16 subnormals are never flushed), times
    256 for e4m3fn (exact). The formats read natively elsewhere (3, 4) are
    decoded by the codec here too: the same values, NaN and inf codes
    included on every target (the interpreter's fp8 cast has none)."""
    if KV_FORMAT == 2 or KV_FORMAT == 4:
        return fp8_half(raw, 2).to(tl.float32)
    else:
        return fp8_half(raw, 1).to(tl.float32) * 256.0


@triton.jit
def fp8_unit(scale, KV_FORMAT: tl.constexpr, RUN_TIME: tl.constexpr):
    """What `fp8_half`'s fp16 is multiplied by to make the value: 256 for
    e4m3fn, 1 for e5m2. A constant, or with RUN_TIME (``FP8_RUNTIME_UNIT``
    in the op's config) a run-time value made from `scale` (scale * 0 is not
    folded: it is NaN for an infinite scale). Where the decode lands depends
    on it: with a constant, Triton moves it past the tile's layout
    conversion into the dot operand's layout (sm_90 MLA decode: 248
    registers, no spills; a run-time unit 255 and 480 bytes of spills); with
    a run-time unit it stays where the tile is loaded (gfx942 MLA decode:
    300 VGPRs and no spills, against 512 and 848 bytes, MLA's V, the
    transposed K tile, then converted in registers; sm_90 MLA extend 61
    instructions a key against 89)."""
    if RUN_TIME:
        return scale * 0.0 + (256.0 if KV_FORMAT == 1 else 1.0)
    else:
        return 256.0 if KV_FORMAT == 1 else 1.0


@triton.jit
def kv_values(raw, unit, like, KV_FORMAT: tl.constexpr, NAN_ARITH: tl.constexpr, USE_DOT: tl.constexpr,
              DOT_FP32: tl.constexpr):  # fmt: skip
    """A loaded K/V tile as the attention loop consumes it: unchanged for a
    pool in the compute dtype (KV_FORMAT 0: no code at all); else the bytes'
    values, UNSCALED (`unit`: `fp8_unit`; NAN_ARITH: `fp8_half`), in `like`'s dtype where tl.dot
    takes the tile in the compute dtype, else fp32. Every fp8 value is exact
    in fp16 / bf16, so the downcast truncates (rtz: no rounding or NaN test,
    which gfx942 has no instruction for: its bf16 rounding compares and
    selects each value, and their 64-lane masks spilled scalar registers in
    MLA extend); the pool's scales multiply the scores and the weights
    instead (`pool_scores_scale`, `tiles.online_softmax_update`), [M, N]
    values a tile instead of [N, D]."""
    if KV_FORMAT == 0:
        return raw
    elif KV_FORMAT >= 3:  # NATIVE_E4M3 / NATIVE_E5M2: the target's conversion, exact, no unit
        fp8 = raw.to(tl.float8e4nv if KV_FORMAT == 3 else tl.float8e5, bitcast=True)
        if USE_DOT and not DOT_FP32:
            # through fp16 (exact): sm_90 decode e4m3 432 instructions a 32-key tile, 126 registers;
            # fp8 -> bf16 directly 442 and 8 bytes spilled at 128 (Triton 3.9)
            return fp8.to(tl.float16).to(like.dtype)
        else:
            return fp8.to(tl.float32)
    else:
        x = fp8_half(raw, KV_FORMAT, NAN_ARITH).to(tl.float32) * unit
        if USE_DOT and not DOT_FP32:
            return x.to(like.dtype, fp_downcast_rounding="rtz")
        else:
            return x


@triton.jit
def pool_scores_scale(sm_scale, k_scale, KV_FORMAT: tl.constexpr):
    """The scale of the scores of keys from the pool: an fp8 pool's K tiles
    are decoded unscaled (`kv_values`), so its k_scale goes here, once."""
    if KV_FORMAT == 0:
        return sm_scale
    else:
        return sm_scale * k_scale


@triton.jit
def _round_significand(a, SHIFT_BASE: tl.constexpr):
    """|x| / (the smallest fp8 subnormal) rounded to nearest even, for |x|
    (bits `a`) below the smallest fp8 normal: |x| = m * 2**(e - 150) with m
    the 24-bit significand, so the code is m >> (SHIFT_BASE - e) rounded
    (SHIFT_BASE = 150 - 9 for e4m3, 150 - 16 for e5m2). Shifts are clamped
    to [1, 25]: past 25 less than half the lowest code is left (0), and the
    lanes of larger values (shift < 1) are discarded by the caller."""
    e = a >> 23
    m = (a & 0x7FFFFF) | 0x800000
    shift = tl.minimum(tl.maximum(SHIFT_BASE - e, 1), 25)
    q = m >> shift
    rem = m - (q << shift)
    half = 1 << (shift - 1)
    up = (rem > half) | ((rem == half) & ((q & 1) == 1))
    return q + up.to(tl.int32)


@triton.jit
def fp32_to_fp8(x, KV_FORMAT: tl.constexpr):
    """fp32 values -> fp8 bytes (uint8) as torch's CPU casts (module docstring)."""
    bits = x.to(tl.int32, bitcast=True)
    sign = (bits >> 24) & 0x80
    a = bits & 0x7FFFFFFF
    if KV_FORMAT == 2:
        # normals: keep 2 mantissa bits, round to nearest even, re-bias 127 -> 15
        normal = ((a + 0xFFFFF + ((a >> 21) & 1)) >> 21) - (112 << 2)
        code = tl.where(a < (113 << 23), _round_significand(a, 134), tl.minimum(normal, 0x7C))
    else:
        # normals: keep 3 mantissa bits, round to nearest even, re-bias 127 -> 7
        normal = ((a + 0x7FFFF + ((a >> 20) & 1)) >> 20) - (120 << 3)
        code = tl.where(a < (121 << 23), _round_significand(a, 141), tl.minimum(normal, 0x7E))
    code = tl.where(a > 0x7F800000, 0x7F, code)
    return (code | sign).to(tl.uint8)


@triton.jit
def encode_values(x, scale, KV_FORMAT: tl.constexpr):
    """Values to store into a pool: unchanged for a pool in the compute dtype,
    else fp8 bytes of x / scale (x in fp32, divided with IEEE rounding)."""
    if KV_FORMAT == 0:
        return x
    else:
        return fp32_to_fp8(tl.div_rn(x.to(tl.float32), scale), KV_FORMAT)


# ---- host side: what the launchers share --------------------------------


def check_pool_dtypes(op: str, compute_dtype, k_buffer, v_buffer) -> None:
    """A KV pool holds the compute dtype or fp8, K and V alike."""
    if k_buffer.dtype != v_buffer.dtype or (k_buffer.dtype != compute_dtype and k_buffer.dtype not in FP8_FORMATS):
        raise ValueError(f"{op}: k_buffer ({k_buffer.dtype}) and v_buffer ({v_buffer.dtype}) must both be the "
                         f"compute dtype ({compute_dtype}) or both one fp8 dtype (float8_e4m3fn, float8_e5m2)")


def check_kv_scales(op: str, pool_dtype, k_scale, v_scale) -> tuple[float, float]:
    """(k_scale, v_scale) as the kernels take them: positive finite numbers
    (None: 1.0, SGLang's value when the checkpoint has no scales). A scale
    other than 1 is refused for a pool in the compute dtype (it would be
    silently ignored)."""
    from ..validation import require_number

    scales = []
    for name, scale in (("k_scale", k_scale), ("v_scale", v_scale)):
        scale = 1.0 if scale is None else require_number(op, name, scale, above=0.0)
        if scale != 1.0 and pool_dtype not in FP8_FORMATS:
            raise ValueError(f"{op}: {name}={scale} applies to an fp8 KV pool only; the pool is {pool_dtype}")
        scales.append(scale)
    return scales[0], scales[1]
