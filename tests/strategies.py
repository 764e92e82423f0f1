"""Hypothesis strategies for the kernel tests: shapes, dtypes, strided rows,
paged KV layouts. Every tensor they build lives on `DEVICE`, the active
target's device (the CPU under the interpreter, the GPU on a GPU machine).

Sizes are small on purpose: tests run under the Triton interpreter on CPU.
Widths always include the non-power-of-two cases that break tiling (13, 96,
and a model-sized 5120 drawn rarely).
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from kunlun_triton.runtime import FLOAT_DTYPES, current_target
from kunlun_triton.testing.paged import decode_batch, extend_batch

DEVICE = current_target().device_type
AWKWARD_WIDTHS = (1, 13, 64, 96, 127, 128, 200)
PAGE_SIZES = (1, 16, 64, 128)
HEAD_DIMS = (13, 64, 80, 96, 128, 256)
# (kv_heads, group): MHA, GQA, an odd group, MQA
HEAD_LAYOUTS = ((2, 1), (2, 4), (1, 3), (1, 8))


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
    base = torch.randn(rows, width + pad, generator=gen, dtype=torch.float32).to(dtype).to(DEVICE)
    return base[:, :width]


def seeds():
    return st.integers(0, 2**31 - 1)


# ---- paged attention layouts (`kunlun_triton.testing.paged`) ----


def page_sizes():
    return st.sampled_from(PAGE_SIZES)


def head_layouts():
    """(kv_heads, group) pairs: MHA, GQA, odd group, MQA."""
    return st.sampled_from(HEAD_LAYOUTS)


def ragged_lengths(max_batch: int = 4, max_len: int = 40, min_len: int = 0):
    return st.lists(st.integers(min_len, max_len), min_size=1, max_size=max_batch)


@st.composite
def _common(draw, dtype, head_dim, max_len):
    kv_heads, group = draw(head_layouts())
    return dict(
        dtype=draw(st.sampled_from(FLOAT_DTYPES)) if dtype is None else dtype,
        head_dim=draw(st.sampled_from(HEAD_DIMS)) if head_dim is None else head_dim,
        kv_heads=kv_heads,
        q_heads=kv_heads * group,
        page_size=draw(page_sizes()),
        seed=draw(st.integers(0, 2**31 - 1)),
        logit_cap=draw(st.sampled_from([0.0, 0.0, 5.0])),
        sliding_window=draw(st.sampled_from([None, None, draw(st.integers(1, max_len))])),
        shared_prefix_pages=draw(st.sampled_from([0, 0, 1])),
        device=DEVICE,
    )


@st.composite
def decode_cases(draw, dtype=None, head_dim=None, max_batch: int = 4, max_len: int = 40):
    """A decode batch: ragged context lengths (0 allowed), scrambled paged slots."""
    kw = draw(_common(dtype, head_dim, max_len))
    lens = draw(ragged_lengths(max_batch, max_len))
    return decode_batch(lens, **kw)


@st.composite
def extend_cases(draw, dtype=None, head_dim=None, max_batch: int = 3, max_prefix: int = 40, max_extend: int = 24):
    """An extend batch: ragged prefixes (0 allowed) and extends (0 allowed)."""
    kw = draw(_common(dtype, head_dim, max_prefix + max_extend))
    prefix = draw(ragged_lengths(max_batch, max_prefix))
    extend = draw(st.lists(st.integers(0, max_extend), min_size=len(prefix), max_size=len(prefix)))
    return extend_batch(prefix, extend, **kw)
