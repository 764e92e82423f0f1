"""RMSNorm kernels (plain and fused with the residual add).

    y = x / sqrt(mean(x**2) + eps) * w

(the mean taken of (x / max|x|)**2, so any finite fp32 row is normalised
without overflow or underflow: see `_normalize`).

Each program normalises a tile of ROWS_PER_PROGRAM rows at once, the whole
row width in one block (BLOCK_COLS = next power of two >= N_COLS): one read
of every input element and one write of every output element, which is all a
bandwidth-bound op can do. Several rows per program amortise the per-program
launch cost (about 0.6-0.9 us on Kunlun) and, for narrow rows, give each
program enough bytes in flight. The row width is a constexpr so Kunlun's
compiler can emit block DMA; row count and row strides are runtime values.

Masked lanes must read as zero (they enter the sum of squares): loads go
through `masked_load`, which uses ``other=`` where the target honours it
and ``tl.where`` on Kunlun (LOAD_IGNORES_OTHER). All arithmetic is fp32.
"""

import triton
import triton.language as tl

from ..loads import masked_load


@triton.jit
def _row_tile(pid, n_rows, ROWS_PER_PROGRAM: tl.constexpr, N_COLS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    """Row indices [R, 1], column indices [1, C] and the in-bounds mask [R, C]."""
    rows = pid * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)[:, None]
    cols = tl.arange(0, BLOCK_COLS)[None, :]
    mask = (rows < n_rows) & (cols < N_COLS)
    return rows.to(tl.int64), cols, mask


# max|x| is floored at 2**-100 (the scale 1 / max|x| capped at 2**100) so that a zero
# or subnormal row keeps a finite scale, with no division by zero, and sqrt(eps) *
# scale stays finite for any eps below ~7e16.
MIN_PEAK = tl.constexpr(2.0**-100)


@triton.jit
def _normalize(total, weight_ptr, cols, mask, eps, N_COLS: tl.constexpr):
    """total / sqrt(mean(total**2) + eps) * weight in fp32, right across fp32's range.

    ``x * x`` overflows above |x| ~ 1.8e19 and vanishes below ~1e-23, so the
    squares are taken of x * s with s = 1 / max(max|x|, MIN_PEAK):
    t = rms(x * s) lies in [1 / sqrt(N), 1] for any row that is not zero, and
    rms(x) = t / s. With e = sqrt(eps) * s, the hypot

        1 / sqrt(rms(x)**2 + eps) = (s / max(t, e)) / sqrt(1 + (min(t, e) / max(t, e))**2)

    never squares anything above 1. A zero row gives 0 (eps > 0) or NaN
    (eps = 0, 0 / 0 as in the formula). Cost: one max-reduction, one
    multiply per element and a few scalars per row.
    """
    scale = 1.0 / tl.maximum(tl.max(tl.abs(total), axis=1), MIN_PEAK)
    scaled = total * scale[:, None]
    t = tl.sqrt(tl.sum(scaled * scaled, axis=1) / N_COLS)
    e = tl.sqrt(eps) * scale
    big = tl.maximum(t, e)
    inv_big = 1.0 / big
    ratio = tl.minimum(t, e) * inv_big
    inv_rms = scale * inv_big * tl.rsqrt(1.0 + ratio * ratio)
    weight = tl.load(weight_ptr + cols, mask=cols < N_COLS).to(tl.float32)  # masked lanes never stored
    return total * inv_rms[:, None] * weight


@triton.jit(do_not_specialize=["n_rows"])
def rms_norm_kernel(
    x_ptr,
    weight_ptr,
    out_ptr,
    n_rows,
    x_row_stride,
    out_row_stride,
    eps,
    N_COLS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    ROWS_PER_PROGRAM: tl.constexpr,
    LOAD_IGNORES_OTHER: tl.constexpr,
):
    """out[r] = rms_norm(x[r]) * weight for ROWS_PER_PROGRAM rows."""
    rows, cols, mask = _row_tile(tl.program_id(0), n_rows, ROWS_PER_PROGRAM, N_COLS, BLOCK_COLS)
    x = masked_load(x_ptr + rows * x_row_stride + cols, mask, 0.0, LOAD_IGNORES_OTHER).to(tl.float32)
    y = _normalize(x, weight_ptr, cols, mask, eps, N_COLS)
    tl.store(out_ptr + rows * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["n_rows"])
def fused_add_rms_norm_kernel(
    x_ptr,
    residual_ptr,
    weight_ptr,
    out_ptr,
    n_rows,
    x_row_stride,
    residual_row_stride,
    out_row_stride,
    eps,
    N_COLS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    ROWS_PER_PROGRAM: tl.constexpr,
    LOAD_IGNORES_OTHER: tl.constexpr,
):
    """residual[r] = x[r] + residual[r] (in place); out[r] = rms_norm(that sum) * weight.

    The sum is normalised in fp32 before it is rounded to the residual's
    dtype (as sgl_kernel / flashinfer do). Every element of a row is loaded
    before any store, so `out` may alias `x` (SGLang's CUDA path overwrites x).
    """
    rows, cols, mask = _row_tile(tl.program_id(0), n_rows, ROWS_PER_PROGRAM, N_COLS, BLOCK_COLS)
    x = masked_load(x_ptr + rows * x_row_stride + cols, mask, 0.0, LOAD_IGNORES_OTHER).to(tl.float32)
    residual_ptrs = residual_ptr + rows * residual_row_stride + cols
    residual = masked_load(residual_ptrs, mask, 0.0, LOAD_IGNORES_OTHER).to(tl.float32)
    total = x + residual
    tl.store(residual_ptrs, total.to(residual_ptr.dtype.element_ty), mask=mask)
    y = _normalize(total, weight_ptr, cols, mask, eps, N_COLS)
    tl.store(out_ptr + rows * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["n_rows"])
def gated_rms_norm_kernel(
    x_ptr,
    z_ptr,
    weight_ptr,
    out_ptr,
    n_rows,
    x_row_stride,
    z_row_stride,
    out_row_stride,
    eps,
    N_COLS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    ROWS_PER_PROGRAM: tl.constexpr,
    LOAD_IGNORES_OTHER: tl.constexpr,
):
    """out[r] = rms_norm(x[r]) * weight * silu(z[r]), all in fp32, rounded once
    (the gated RMSNorm of gated-delta-net layers, FLA's ``RMSNormGated`` with
    norm_before_gate: silu(z) = z * sigmoid(z))."""
    rows, cols, mask = _row_tile(tl.program_id(0), n_rows, ROWS_PER_PROGRAM, N_COLS, BLOCK_COLS)
    x = masked_load(x_ptr + rows * x_row_stride + cols, mask, 0.0, LOAD_IGNORES_OTHER).to(tl.float32)
    z = tl.load(z_ptr + rows * z_row_stride + cols, mask=mask).to(tl.float32)  # masked lanes never stored
    y = _normalize(x, weight_ptr, cols, mask, eps, N_COLS) * (z / (1.0 + tl.exp(-z)))
    tl.store(out_ptr + rows * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
