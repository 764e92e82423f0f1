"""GGUF tensor data to float32, written from ggml's block layouts
(ggml-common.h / ggml-quants.c ``dequantize_row_*``), exact in float32.

Every value is computed with the same float32 operations, in the same order,
as ggml's C reference, so the result is bitwise llama.cpp's own (tested
against ``gguf.quants.dequantize``, the gguf package's numpy port of it):

- ``Q8_0``  (32 values, 34 bytes):  y = d * q,         q int8
- ``Q4_0``  (32, 18):               y = d * (q - 8),   q the 4-bit nibbles (low 16, then high 16)
- ``Q4_1``  (32, 20):               y = d * q + m
- ``Q5_0``  (32, 22):               y = d * (q - 16),  q = nibble | bit e of the 32-bit qh << 4
- ``Q5_1``  (32, 24):               y = d * q + m
- ``Q4_K``  (256, 144): 8 sub-blocks of 32 with 6-bit scale s and min m:
                                    y = (d * s) * q - (dmin * m)
- ``Q5_K``  (256, 176): as Q4_K with a fifth bit from qh
- ``Q6_K``  (256, 210): 16 sub-blocks of 16, int8 scale s: y = (d * s) * (q - 32), q 6-bit
- ``F32``, ``F16``, ``BF16``: widened exactly.

d, dmin and m are fp16 in the file. Any other type is refused by name
(`UNSUPPORTED`), before anything is written.
"""

from __future__ import annotations

import numpy as np

# type name -> (values per block, bytes per block)
BLOCKS = {
    "F32": (1, 4), "F16": (1, 2), "BF16": (1, 2),
    "Q8_0": (32, 34), "Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22), "Q5_1": (32, 24),
    "Q4_K": (256, 144), "Q5_K": (256, 176), "Q6_K": (256, 210),
}  # fmt: skip
SUPPORTED = tuple(BLOCKS)


class UnsupportedType(ValueError):
    """A GGUF tensor type this module does not dequantize."""


def _half(b: np.ndarray) -> np.ndarray:
    """fp16 fields (the last axis holds 2 bytes each) as float32 column(s)."""
    return np.ascontiguousarray(b).view(np.float16).astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """[n, k] bytes -> [n, 2k]: the k low nibbles, then the k high nibbles (the order ggml stores)."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _q8_0(b):
    return _half(b[:, :2]) * b[:, 2:].view(np.int8).astype(np.float32)


def _q4_0(b):
    return _half(b[:, :2]) * (_nibbles(b[:, 2:]).astype(np.int8) - 8).astype(np.float32)


def _q4_1(b):
    return _half(b[:, :2]) * _nibbles(b[:, 4:]).astype(np.float32) + _half(b[:, 2:4])


def _fifth_bits(qh: np.ndarray) -> np.ndarray:
    """[n, 4] bytes of a little-endian uint32 -> [n, 32]: bit e of it, times 16."""
    bits = np.unpackbits(qh, axis=-1, bitorder="little")  # byte 0's bits first: bit e at index e
    return bits * np.uint8(16)


def _q5_0(b):
    q = (_nibbles(b[:, 6:]) | _fifth_bits(b[:, 2:6])).astype(np.int8) - 16
    return _half(b[:, :2]) * q.astype(np.float32)


def _q5_1(b):
    q = _nibbles(b[:, 8:]) | _fifth_bits(b[:, 4:8])
    return _half(b[:, :2]) * q.astype(np.float32) + _half(b[:, 2:4])


def _k_scales(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 12 scale bytes of a Q4_K/Q5_K block -> 8 six-bit scales and 8 six-bit mins
    (ggml's get_scale_min_k4): sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scales)
    and 4-7 (mins); sub-blocks 4-7 in the nibbles of bytes 8-11, topped by the two
    high bits of bytes 0-3 (scales) and 4-7 (mins)."""
    lo, mid, hi = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    scale = np.concatenate([lo & 63, (hi & 0x0F) | ((lo >> 6) << 4)], axis=-1)
    mins = np.concatenate([mid & 63, (hi >> 4) | ((mid >> 6) << 4)], axis=-1)
    return scale.astype(np.float32), mins.astype(np.float32)


def _k_apply(b, q):
    """y = (d * scale) * q - (dmin * min), q [n, 8, 32]."""
    n = b.shape[0]
    scale, mins = _k_scales(b[:, 4:16])
    d1 = (_half(b[:, 0:2]) * scale)[:, :, None]
    m1 = (_half(b[:, 2:4]) * mins)[:, :, None]
    return (d1 * q.astype(np.float32) - m1).reshape(n, 256)


def _q4_k(b):
    n = b.shape[0]
    qs = b[:, 16:144].reshape(n, 4, 32)
    # chunk c of 64 values: sub-block 2c the low nibbles of its 32 bytes, 2c+1 the high ones
    q = np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(n, 8, 32)
    return _k_apply(b, q)


def _q5_k(b):
    n = b.shape[0]
    qh = b[:, 16:48][:, None, :]  # [n, 1, 32]: bit k of byte l is the fifth bit of sub-block k's value l
    qs = b[:, 48:176].reshape(n, 4, 32)
    q = np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(n, 8, 32)
    shifts = np.arange(8, dtype=np.uint8)[None, :, None]
    q = q + ((qh >> shifts) & 1) * np.uint8(16)
    return _k_apply(b, q)


def _q6_k(b):
    n = b.shape[0]
    ql = b[:, 0:128].reshape(n, 2, 2, 32)  # [half, low/high 32 bytes, l]
    qh = b[:, 128:192].reshape(n, 2, 1, 32)
    scale = b[:, 192:208].view(np.int8).astype(np.float32)  # [n, 16], one per 16 values
    d = _half(b[:, 208:210])
    # per half of 128 values, four runs of 32 (value l of run r):
    #   r0 = low nibble of ql[l]    | qh[l] bits 0-1;  r1 = low nibble of ql[32+l] | bits 2-3
    #   r2 = high nibble of ql[l]   | bits 4-5;        r3 = high nibble of ql[32+l] | bits 6-7
    low = np.concatenate([ql & 0x0F, ql >> 4], axis=2)  # [n, 2, 4, 32] in run order r0 r1 r2 r3
    shifts = (2 * np.arange(4, dtype=np.uint8))[None, None, :, None]
    q = (low | (((qh >> shifts) & 3) << 4)).astype(np.int8) - 32
    d1 = (d * scale)[:, :, None]  # [n, 16, 1]
    return (d1 * q.reshape(n, 16, 16).astype(np.float32)).reshape(n, 256)


_BLOCK_FUNCTIONS = {"Q8_0": _q8_0, "Q4_0": _q4_0, "Q4_1": _q4_1, "Q5_0": _q5_0, "Q5_1": _q5_1,
                    "Q4_K": _q4_k, "Q5_K": _q5_k, "Q6_K": _q6_k}  # fmt: skip


def dequantize(raw: np.ndarray, type_name: str, count: int) -> np.ndarray:
    """`count` float32 values (a new writable 1-D array) from the bytes of a GGUF
    tensor of type `type_name` (any dtype's view of them: the reader's memory map)."""
    if type_name not in BLOCKS:
        raise UnsupportedType(type_name)
    per_block, nbytes = BLOCKS[type_name]
    data = np.ascontiguousarray(raw).reshape(-1).view(np.uint8)
    if data.size * per_block != count * nbytes:
        raise ValueError(f"{type_name}: {data.size} bytes for {count} values (expected {count * nbytes // per_block})")
    if type_name == "F32":
        return data.view(np.float32).copy()
    if type_name == "F16":
        return data.view(np.float16).astype(np.float32)
    if type_name == "BF16":
        return (data.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    blocks = data.reshape(-1, nbytes)
    return _BLOCK_FUNCTIONS[type_name](blocks).reshape(-1)
