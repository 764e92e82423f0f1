"""Final-logit soft-capping, in place: x <- cap * tanh(x / cap).

with `ops.tanh.soft_cap` (exp-based, no overflow for any logit, a series for
tiny x / cap so any finite cap is exact to a few ulp; huge caps give x). Elementwise: each program rewrites a
[ROWS_PER_PROGRAM, BLOCK_COLS] tile of the [rows, vocab] logits (several rows
to amortise Kunlun's per-program launch cost, constexpr tile sizes). One read
and one write per logit, the minimum; maths in fp32, one rounding.
"""

import triton
import triton.language as tl

from ..loads import masked_load
from ..tanh import soft_cap


@triton.jit(do_not_specialize=["n_rows", "n_cols", "cap"])
def logit_softcap_kernel(
    x_ptr,
    n_rows,
    n_cols,
    row_stride,
    cap,
    BLOCK_COLS: tl.constexpr,
    ROWS_PER_PROGRAM: tl.constexpr,
    LOAD_IGNORES_OTHER: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)[:, None]
    cols = tl.program_id(1) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)[None, :]
    mask = (rows < n_rows) & (cols < n_cols)
    ptrs = x_ptr + rows.to(tl.int64) * row_stride + cols
    x = masked_load(ptrs, mask, 0.0, LOAD_IGNORES_OTHER).to(tl.float32)
    y = soft_cap(x, cap)
    tl.store(ptrs, y.to(x_ptr.dtype.element_ty), mask=mask)
