"""Hypothesis strategies for kernel tests (shapes, dtypes, strided rows).

Sizes are small on purpose: tests run under the Triton interpreter on CPU.
Widths always include the non-power-of-two cases that break tiling (13, 96,
and a model-sized 5120 drawn rarely).
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
AWKWARD_WIDTHS = (1, 13, 64, 96, 127, 128, 200)


def float_dtypes():
    return st.sampled_from(FLOAT_DTYPES)


def widths(max_width: int = 256, include_large: bool = True):
    """Row widths: awkward small ones, any in range, and now and then 5120."""
    small = st.one_of(st.sampled_from([w for w in AWKWARD_WIDTHS if w <= max_width]), st.integers(1, max_width))
    return st.one_of(small, st.just(5120)) if include_large else small


def row_counts(max_rows: int = 9):
    return st.integers(1, max_rows)


@st.composite
def row_tensors(draw, width=None, dtype=None, max_rows: int = 9, strided=None):
    """A 2-D ``[rows, width]`` tensor whose rows may be strided (a view into a
    wider buffer: last dim contiguous, row stride > width), as ops see when
    they are handed a slice of a fused projection."""
    rows = draw(row_counts(max_rows))
    width = draw(widths()) if width is None else width
    dtype = draw(float_dtypes()) if dtype is None else dtype
    strided = draw(st.booleans()) if strided is None else strided
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    pad = draw(st.integers(1, 7)) if strided else 0
    base = torch.randn(rows, width + pad, generator=gen, dtype=torch.float32).to(dtype)
    return base[:, :width]


def seeds():
    return st.integers(0, 2**31 - 1)
