"""Gated activations: out = act(gate) * up, with x = [gate | up] on the last dim.

    silu(g)        = g * sigmoid(g) = g / (1 + exp(-g))
    gelu(g)        = 0.5 * g * (1 + erf(g / sqrt(2)))
    gelu_tanh(g)   = 0.5 * g * (1 + tanh(sqrt(2 / pi) * (g + 0.044715 * g**3)))

Elementwise, so the grid tiles both axes: each program takes a
[ROWS_PER_PROGRAM, BLOCK_COLS] tile of the output (several rows, to amortise
Kunlun's ~0.6-0.9 us per-program launch cost; BLOCK_COLS columns of the
constexpr width D, so the compiler sees fixed sizes). It reads 2 values and
writes 1 per output element, the minimum. Maths in fp32, one rounding.
Masked lanes are never stored; loads still go through `masked_load`
(``other=`` where the target honours it, ``tl.where`` on Kunlun) so no
lane ever computes on whatever memory held.
"""

import triton
import triton.language as tl

from ..loads import masked_load
from ..tanh import tanh

SQRT_HALF = tl.constexpr(0.7071067811865476)
SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)  # Triton kernels read only constexpr globals


@triton.jit
def _sigmoid(z):
    # exp of a non-positive number only, so nothing overflows for any z.
    e = tl.exp(-tl.abs(z))
    return tl.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


@triton.jit
def _activation(gate, ACTIVATION: tl.constexpr):
    """ACTIVATION: 0 = silu, 1 = exact (erf) gelu, 2 = tanh-approximated gelu."""
    if ACTIVATION == 0:
        return gate * _sigmoid(gate)
    elif ACTIVATION == 1:
        return 0.5 * gate * (1.0 + tl.erf(gate * SQRT_HALF))
    else:
        inner = SQRT_2_OVER_PI * (gate + 0.044715 * gate * gate * gate)
        return 0.5 * gate * (1.0 + tanh(inner))


@triton.jit(do_not_specialize=["n_rows"])
def act_and_mul_kernel(
    x_ptr,
    out_ptr,
    n_rows,
    x_row_stride,
    out_row_stride,
    D: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    ROWS_PER_PROGRAM: tl.constexpr,
    ACTIVATION: tl.constexpr,
    LOAD_IGNORES_OTHER: tl.constexpr,
):
    """out[r, c] = act(x[r, c]) * x[r, D + c] for a tile of rows and columns."""
    rows = tl.program_id(0) * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)[:, None]
    cols = tl.program_id(1) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)[None, :]
    mask = (rows < n_rows) & (cols < D)
    rows = rows.to(tl.int64)
    gate_ptrs = x_ptr + rows * x_row_stride + cols
    gate = masked_load(gate_ptrs, mask, 0.0, LOAD_IGNORES_OTHER).to(tl.float32)
    up = masked_load(gate_ptrs + D, mask, 0.0, LOAD_IGNORES_OTHER).to(tl.float32)
    y = _activation(gate, ACTIVATION) * up
    tl.store(out_ptr + rows * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
