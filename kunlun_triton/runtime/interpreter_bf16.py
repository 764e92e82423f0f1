"""Make the Triton interpreter round to bf16 as devices do: to nearest even.

Triton's interpreter (3.8 and 3.9) casts fp32 -> bf16 by dropping the low
16 bits (``InterpreterBuilder.cast_impl`` calls ``_convert_float(...,
rounding_mode=None)``): every interpreted bf16 store rounds toward zero,
where CUDA, HIP and Kunlun round to nearest even. The bias is half a bf16 ulp
per store, always toward zero; a per-op tolerance of one ulp hides it, 30
residual updates of a real model do not (SmolLM2-135M's bf16 first token
changed). Its explicit ``fp_downcast_rounding="rtne"`` path is wrong too: it
rounds halves up and lets a mantissa carry spill into the sign bit's
neighbours without renormalising.

`round_bf16_to_nearest_even()` replaces the builder's casts that produce or
consume bf16 with exact numpy bit arithmetic, torch's (and the devices')
rounding: ``bits = (u + 0x7fff + ((u >> 16) & 1)) >> 16`` on the fp32 bits
``u``, NaN kept NaN (quiet, sign kept), overflow to inf, subnormals rounded
the same way (bf16 has fp32's exponent range). Other sources reach bf16
through fp32, as the interpreter already does for fp16 <-> bf16. Only the
interpreter module changes: compiled targets never see this, and no kernel
pays a per-target cost. Installed by `kunlun_triton.runtime.detect_target`
when it selects the interpreter (tests, serving, tools alike); idempotent.

Measured (SmolLM2-135M-Instruct, bf16, "What is the capital of France?"):
see docs/dev-mode-speed.md.
"""

from __future__ import annotations

import numpy as np


def f32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """fp32 values -> bf16 bit patterns (uint16), round to nearest even."""
    u = np.asarray(values, dtype=np.float32).view(np.uint32)
    rounded = ((u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16)).astype(np.uint16)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    if nan.any():  # keep NaN a (quiet) NaN: the add above could carry it into inf
        rounded = np.where(nan, ((u >> np.uint32(16)) | np.uint32(0x40)).astype(np.uint16), rounded)
    return rounded


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16) -> fp32 values (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def round_bf16_to_nearest_even() -> bool:
    """Patch the interpreter's casts; False where this Triton's interpreter
    does not have the expected shape (then nothing is changed)."""
    try:
        from triton.runtime import interpreter
    except Exception:
        return False
    builder_cls = getattr(interpreter, "InterpreterBuilder", None)
    handle_cls = getattr(interpreter, "TensorHandle", None)
    get_np_dtype = getattr(interpreter, "_get_np_dtype", None)
    if builder_cls is None or handle_cls is None or get_np_dtype is None:
        return False
    if getattr(builder_cls, "_kunlun_bf16_rtne", False):
        return True
    tl = interpreter.tl
    bf16, fp32 = tl.bfloat16, tl.float32
    real_cast = builder_cls.cast_impl
    real_fp_to_fp = builder_cls.create_fp_to_fp
    rtz = getattr(getattr(getattr(interpreter, "_ir", None), "ROUNDING_MODE", None), "RTZ", None)

    def to_f32(src):
        if src.dtype.scalar == bf16:
            return bf16_bits_to_f32(src.data)
        return src.data.astype(np.float32)

    def cast_impl(self, src, dst_type):
        src_t, dst_t = src.dtype.scalar, dst_type.scalar
        if dst_t == bf16 and src_t != bf16:
            return handle_cls(f32_to_bf16_bits(to_f32(src)), bf16)
        if src_t == bf16 and dst_t != bf16:
            data = bf16_bits_to_f32(src.data)
            return handle_cls(data if dst_t == fp32 else data.astype(get_np_dtype(dst_type)), dst_t)
        return real_cast(self, src, dst_type)

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        if dst_type.scalar == bf16 and src.dtype.scalar == fp32:
            if rtz is not None and rounding_mode == rtz:  # asked for truncation: keep it
                bits = np.asarray(src.data, dtype=np.float32).view(np.uint32) >> np.uint32(16)
                return handle_cls(bits.astype(np.uint16), bf16)
            return cast_impl(self, src, dst_type)
        return real_fp_to_fp(self, src, dst_type, rounding_mode)

    builder_cls.cast_impl = cast_impl
    builder_cls.create_fp_to_fp = create_fp_to_fp
    builder_cls._kunlun_bf16_rtne = True
    return True
