"""tools/gguf/dequant.py against the gguf package's own dequantization
(``gguf.quants.dequantize``, llama.cpp's numpy port of its C reference):
bitwise equal in float32 for every type it supports, on random blocks (every
bit pattern of the quantized values and scales, finite fp16 block scales)."""

from __future__ import annotations

import numpy as np
import pytest

import gguf
from kunlun_triton.tools.gguf.dequant import BLOCKS, SUPPORTED, UnsupportedType, dequantize

Q = gguf.GGMLQuantizationType
# byte offsets of the fp16 scale fields (d, dmin / m) in each block: random bytes there could be inf/nan
HALF_FIELDS = {"Q8_0": (0,), "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q4_K": (0, 2),
               "Q5_K": (0, 2), "Q6_K": (208,)}  # fmt: skip


def random_blocks(type_name: str, rows: int, row_values: int, seed: int = 0) -> np.ndarray:
    per_block, nbytes = BLOCKS[type_name]
    rng = np.random.default_rng(seed)
    if type_name == "F32":
        return rng.standard_normal((rows, row_values)).astype(np.float32)
    if type_name == "F16":
        return rng.standard_normal((rows, row_values)).astype(np.float16)
    n_blocks = rows * row_values // per_block
    blocks = rng.integers(0, 256, (n_blocks, nbytes), dtype=np.uint8)
    if type_name == "BF16":
        values = rng.standard_normal(n_blocks).astype(np.float32)
        blocks = (values.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(n_blocks, 2)
    for offset in HALF_FIELDS.get(type_name, ()):
        scale = (rng.standard_normal(n_blocks) * 0.01).astype(np.float16)
        blocks[:, offset:offset + 2] = scale.view(np.uint8).reshape(n_blocks, 2)
    return blocks.reshape(rows, -1)


@pytest.mark.parametrize("type_name", SUPPORTED)
def test_bitwise_equal_to_gguf_quants(type_name):
    rows, row_values = 6, 512
    raw = random_blocks(type_name, rows, row_values)
    want = gguf.quants.dequantize(raw, Q[type_name]).astype(np.float32).reshape(-1)
    got = dequantize(raw, type_name, rows * row_values)
    assert got.dtype == np.float32 and got.shape == (rows * row_values,)
    assert np.isfinite(want).all()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), type_name
    assert got.flags.writeable


def test_the_file_types_all_supported_and_others_refused():
    # the Qwen2.5-Coder-0.5B Q4_K_M file's types (tests/regression checks the file itself)
    assert {"Q4_K", "Q5_0", "Q6_K", "Q8_0", "F32"} <= set(SUPPORTED)
    with pytest.raises(UnsupportedType, match="Q2_K"):
        dequantize(np.zeros(84, np.uint8), "Q2_K", 256)
    with pytest.raises(ValueError, match="Q8_0: 33 bytes for 32 values"):
        dequantize(np.zeros(33, np.uint8), "Q8_0", 32)
