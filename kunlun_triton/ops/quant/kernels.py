"""W8A8-INT8 kernels: per-token activation quantization and the int8 GEMM.

per_token_quant_int8 (SGLang 0.5.23's ``int8_kernel.per_token_quant_int8``):

    absmax[r] = max(max_c |x[r, c]|, 1e-10)
    scale[r]  = absmax[r] / 127                                  (fp32)
    q[r, c]   = round_half_even(x[r, c] * (127 / absmax[r]))     (int8)

SGLang rounds with CUDA's ``libdevice.round`` (halves away from zero), which
runs on CUDA and HIP only; here the rounding is written with ``tl.floor``
and integer parity, so it lowers everywhere, and ties go to even as
``torch.round`` does (a tie needs x * 127 / absmax exactly k + 1/2).

int8_scaled_mm (``sgl_kernel.int8_scaled_mm``):

    acc[m, n] = sum_k a[m, k] * b[k, n]                          (exact int32)
    out[m, n] = acc[m, n] * scale_a[m] * scale_b[n] (+ bias[n])  (fp32, one rounding)

The accumulator is exact on every target. ``tl.dot`` on int8 operands into
int32 where the target has it (``capabilities().dot_int8``); ``tl.dot`` on
fp16 copies of the tiles where it has only float dots (int8 values and
their products are exact in fp16/fp32, a BLOCK_K <= 1024 step sums to at
most 1024 * 128 * 128 = 2**24, still exact, then joins the int32
accumulator); and the ``sum`` formulation (Kunlun's: no ``tl.dot``), the
[BLOCK_M, BLOCK_K, BLOCK_N] broadcast product in fp32 reduced over K per
step, exact by the same bound. Scales and bias are applied once in the
epilogue: weights stay int8 in memory, never dequantized.
"""

import triton
import triton.language as tl

from ..loads import masked_load

ABSMAX_FLOOR = tl.constexpr(1e-10)  # SGLang's: an all-zero row gets scale 1e-10 / 127, q = 0


@triton.jit
def _round_half_even(y):
    """torch.round for |y| < 2**23: floor, then up past a half or at a half to an even."""
    f = tl.floor(y)
    d = y - f  # exact for |y| < 2**23
    odd = (f.to(tl.int32) & 1) == 1
    return tl.where((d > 0.5) | ((d == 0.5) & odd), f + 1.0, f)


@triton.jit(do_not_specialize=["n_rows"])
def per_token_quant_int8_kernel(
    x_ptr,
    q_ptr,
    scale_ptr,
    n_rows,
    x_row_stride,
    q_row_stride,
    D: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    ROWS_PER_PROGRAM: tl.constexpr,
    LOAD_IGNORES_OTHER: tl.constexpr,
):
    """q and scale of ROWS_PER_PROGRAM rows; a row wider than BLOCK_COLS is
    read twice (its absmax, then its quantization), a narrower one once."""
    rows = tl.program_id(0) * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)
    row_ok = rows < n_rows
    rows = tl.where(row_ok, rows, 0).to(tl.int64)  # in bounds; never stored
    cols = tl.arange(0, BLOCK_COLS)[None, :]
    x_ptrs = x_ptr + rows[:, None] * x_row_stride + cols
    if D <= BLOCK_COLS:
        x = masked_load(x_ptrs, cols < D, 0.0, LOAD_IGNORES_OTHER).to(tl.float32)
        absmax = tl.maximum(tl.max(tl.abs(x), axis=1), ABSMAX_FLOOR)
        q = _round_half_even(x * (127.0 / absmax)[:, None])
        tl.store(q_ptr + rows[:, None] * q_row_stride + cols, q.to(tl.int8), mask=row_ok[:, None] & (cols < D))
    else:
        absmax = tl.full([ROWS_PER_PROGRAM], ABSMAX_FLOOR, tl.float32)
        for c0 in range(0, D, BLOCK_COLS):
            x = masked_load(x_ptrs + c0, cols < D - c0, 0.0, LOAD_IGNORES_OTHER).to(tl.float32)
            absmax = tl.maximum(absmax, tl.max(tl.abs(x), axis=1))
        inv = (127.0 / absmax)[:, None]
        for c0 in range(0, D, BLOCK_COLS):
            x = masked_load(x_ptrs + c0, cols < D - c0, 0.0, LOAD_IGNORES_OTHER).to(tl.float32)
            q = _round_half_even(x * inv)
            q_ptrs = q_ptr + rows[:, None] * q_row_stride + c0 + cols
            tl.store(q_ptrs, q.to(tl.int8), mask=row_ok[:, None] & (cols < D - c0))
    tl.store(scale_ptr + rows, absmax / 127.0, mask=row_ok)


@triton.jit
def int8_tile_product(a, b, acc, FORMULATION: tl.constexpr):
    """acc (int32 [M, N]) + a (int8 [M, K]) @ b (int8 [K, N]), exactly.

    FORMULATION 0: tl.dot on int8 into int32; 1: tl.dot on fp16 copies (exact
    per step for K <= 1024); 2: fp32 broadcast product summed over K (no dot)."""
    if FORMULATION == 0:
        return tl.dot(a, b, acc)
    elif FORMULATION == 1:
        return acc + tl.dot(a.to(tl.float16), b.to(tl.float16)).to(tl.int32)
    else:
        return acc + tl.sum(a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :], axis=1).to(tl.int32)


@triton.jit(do_not_specialize=["m"])  # m follows the batch: one compile for all
def scaled_mm_kernel(
    a_ptr,
    b_ptr,
    scale_a_ptr,
    scale_b_ptr,
    bias_ptr,
    out_ptr,
    m,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_om,
    N: tl.constexpr,
    K: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    FORMULATION: tl.constexpr,
    LOAD_IGNORES_OTHER: tl.constexpr,
    ACC_ONLY: tl.constexpr,
):
    """out tile [BLOCK_M, BLOCK_N] = scale_a * scale_b * (a @ b) (+ bias).

    Rows and columns past the edge load row m % m / column n % N (in
    bounds, never stored), so only the last K step of a ragged K is masked.
    ACC_ONLY stores the int32 accumulator itself (the exactness tests)."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (rm % m).to(tl.int64)[:, None] * stride_am + k[None, :] * stride_ak
    b_ptrs = b_ptr + (rn % N).to(tl.int64)[None, :] * stride_bn + k[:, None] * stride_bk
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.int32)
    # Whole tiles unmasked; a ragged K's last step alone is masked (a mask in
    # the loop cost the ragged case 255 registers and spills on sm_90).
    for _ in range(0, K // BLOCK_K):
        acc = int8_tile_product(tl.load(a_ptrs), tl.load(b_ptrs), acc, FORMULATION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if K % BLOCK_K != 0:
        k_ok = k < K % BLOCK_K
        a = masked_load(a_ptrs, k_ok[None, :], 0, LOAD_IGNORES_OTHER)
        b = masked_load(b_ptrs, k_ok[:, None], 0, LOAD_IGNORES_OTHER)
        acc = int8_tile_product(a, b, acc, FORMULATION)
    mask = (rm < m)[:, None] & (rn < N)[None, :]
    out_ptrs = out_ptr + rm.to(tl.int64)[:, None] * stride_om + rn[None, :]
    if ACC_ONLY:
        tl.store(out_ptrs, acc, mask=mask)
    else:
        sa = tl.load(scale_a_ptr + rm % m)
        sb = tl.load(scale_b_ptr + rn % N)
        y = acc.to(tl.float32) * sa[:, None] * sb[None, :]
        if HAS_BIAS:
            y += tl.load(bias_ptr + rn % N).to(tl.float32)[None, :]
        tl.store(out_ptrs, y.to(out_ptr.dtype.element_ty), mask=mask)
