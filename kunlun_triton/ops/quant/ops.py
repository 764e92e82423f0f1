"""W8A8-INT8 ops: `per_token_quant_int8` and `int8_scaled_mm` (see `kernels`).

Same contracts as SGLang 0.5.23's ``per_token_quant_int8`` (x [..., D] ->
q int8 [..., D], scale fp32 [..., 1]) and ``sgl_kernel.int8_scaled_mm``
(a int8 [M, K], b int8 [K, N] of any strides: SGLang hands the transposed
[N, K] weight, scale_a fp32 [M, 1], scale_b fp32 [N, 1] or [N], bias [N]
in out_dtype). `int32_accumulators` exposes the GEMM's raw int32 result.
"""

from __future__ import annotations

import torch
import triton

from ...runtime import capabilities, launch_options, plan_cache, use_triton
from ...runtime.dtypes import FLOAT_DTYPES, dtype_names
from ..launch import KernelLaunch, constexpr_args, run_keywords
from ..row_tiles import TilePlan, row_tile_plan
from ..spec import explicit_config, lookup_config
from ..validation import as_rows, checked_mode, power_of_two_at_most, require_choice, require_same, \
    require_same_device, require_tensor  # fmt: skip
from . import kernels, reference

QUANT_OP = "per_token_quant_int8"
MM_OP = "int8_scaled_mm"
INT8 = (torch.int8,)
FORMULATIONS = ("dot", "sum")
DOT_INT8, DOT_FP16, SUM = 0, 1, 2  # kernels.int8_tile_product's FORMULATION
MAX_EXACT_BLOCK_K = 1024  # 1024 * 128 * 128 = 2**24: a float step of more could round
SUM_TILE_CAP = 32768  # sum formulation: BLOCK_M x BLOCK_K x BLOCK_N fp32 products per step


# ---------------------------------------------------------------- per_token_quant_int8


def _quant_plan(d: int, config: dict) -> TilePlan:
    return row_tile_plan(kernels.per_token_quant_int8_kernel, d, config, D=d)


@plan_cache
def _cached_quant_plan(d: int, rows: int) -> TilePlan:
    return _quant_plan(d, lookup_config(QUANT_OP, hidden_size=d, rows=rows))


def per_token_quant_int8(x: torch.Tensor, *, check: bool = True,
                         config: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(x_q int8 [..., D], scale fp32 [..., 1]) with scale = max(max|x|, 1e-10) / 127
    per row and x_q = round_half_even(x * (127 / absmax)). x: fp32/fp16/bf16,
    contiguous in its last dim. ``check=False`` skips the input checks."""
    if checked_mode(check):
        require_tensor(QUANT_OP, "x", x, min_ndim=1)
    if not use_triton(QUANT_OP, x):
        return reference.per_token_quant_int8(x)
    d = x.shape[-1]
    rows = as_rows(QUANT_OP, "x", x)
    q = torch.empty(x.shape, dtype=torch.int8, device=x.device)
    scale = torch.empty(*x.shape[:-1], 1, dtype=torch.float32, device=x.device)
    n = rows.shape[0]
    if n == 0:
        return q, scale
    rows_bucket = 1 << (n - 1).bit_length()
    plan = _cached_quant_plan(d, rows_bucket) if config is None else \
        _quant_plan(d, explicit_config(QUANT_OP, config, hidden_size=d, rows=rows_bucket))  # fmt: skip
    plan.launch((-(-n // plan.rows_per_program),), rows, q, scale, n, rows.stride(0), d)
    return q, scale


# ---------------------------------------------------------------- int8_scaled_mm


class _MMPlan:
    """Tiles, constexprs and launch keywords of a shape class."""

    def __init__(self, m_bucket, n, k, has_bias, acc_only, formulation, config, caps=None):
        caps = caps or capabilities()
        name = formulation or config.get("formulation") or ("dot" if caps.has_dot else "sum")
        require_choice(MM_OP, "formulation", name, FORMULATIONS)
        use_dot = name == "dot"
        self.formulation = (DOT_INT8 if caps.dot_int8 else DOT_FP16) if use_dot else SUM
        low = 16 if use_dot else 1  # tl.dot's smallest tile

        def tile(key, size):
            padded = triton.next_power_of_2(max(size, 1))
            return max(low, min(power_of_two_at_most(int(config[key])), padded))

        # BLOCK_M/N/K: autotune_configs/default.yaml (their one home)
        bm, bn, bk = tile("BLOCK_M", m_bucket), tile("BLOCK_N", n), tile("BLOCK_K", k)
        bk = min(bk, MAX_EXACT_BLOCK_K)
        if not use_dot:  # the [M, K, N] product of one step stays small
            while bm * bk * bn > SUM_TILE_CAP and bk > 1:
                bk //= 2
        self.block_m, self.block_n, self.block_k = bm, bn, bk
        constexprs = constexpr_args(kernels.scaled_mm_kernel, N=n, K=k, HAS_BIAS=has_bias, BLOCK_M=bm, BLOCK_N=bn,
                                    BLOCK_K=bk, FORMULATION=self.formulation, LOAD_IGNORES_OTHER=caps.load_ignores_other,
                                    ACC_ONLY=acc_only)  # fmt: skip
        self.launch = KernelLaunch(kernels.scaled_mm_kernel, constexprs, run_keywords(launch_options(config)))


@plan_cache
def _mm_plan(m_bucket, n, k, has_bias, acc_only, formulation, config=None) -> _MMPlan:
    config = lookup_config(MM_OP, m=m_bucket, n=n, k=k) if config is None else \
        explicit_config(MM_OP, config, m=m_bucket, n=n, k=k)  # fmt: skip
    return _MMPlan(m_bucket, n, k, has_bias, acc_only, formulation, config)


def _check_operands(op, a, b, formulation):
    require_tensor(op, "a", a, dtypes=INT8, ndim=2, last_dim_contiguous=False)
    require_tensor(op, "b", b, dtypes=INT8, ndim=2, last_dim_contiguous=False)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"{op}: a is {tuple(a.shape)} and b is {tuple(b.shape)}: a's K (dim 1) must equal "
                         f"b's K (dim 0)")  # fmt: skip
    if formulation is not None:
        require_choice(op, "formulation", formulation, FORMULATIONS)


def _check_scale(name, t, size):
    require_tensor(MM_OP, name, t, dtypes=(torch.float32,), min_ndim=1, max_ndim=2)
    if t.numel() != size or (t.dim() == 2 and t.shape[1] != 1) or not t.is_contiguous():
        raise ValueError(f"{MM_OP}: {name} must be a contiguous fp32 [{size}, 1] or [{size}] tensor, got shape "
                         f"{tuple(t.shape)} with strides {t.stride()}")  # fmt: skip


def _launch(a, b, scale_a, scale_b, bias, out, acc_only, formulation, config):
    m, k = a.shape
    n = b.shape[1]
    args = (1 << max(m - 1, 0).bit_length(), n, k, bias is not None, acc_only, formulation)
    plan = _mm_plan(*args) if config is None else _mm_plan.uncached(*args, config)
    grid = (-(-m // plan.block_m), -(-n // plan.block_n))
    (a0, a1), (b0, b1) = a.stride(), b.stride()  # (one call per tensor: half the cost of two stride(i))
    plan.launch(grid, a, b, scale_a, scale_b, bias, out, m, a0, a1, b0, b1, out.stride(0))
    return out


def int8_scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                   out_dtype: torch.dtype, bias: torch.Tensor | None = None, *, check: bool = True,
                   formulation: str | None = None, config: dict | None = None) -> torch.Tensor:  # fmt: skip
    """out [M, N] out_dtype = (a @ b, exact in int32) * scale_a[m] * scale_b[n] (+ bias[n]).

    a int8 [M, K], b int8 [K, N] (any strides), scale_a fp32 [M, 1] or [M],
    scale_b fp32 [N, 1] or [N], bias [N] in out_dtype or None; out_dtype
    fp32, fp16 or bf16. `formulation` ("dot" | "sum") overrides the config's."""
    if checked_mode(check):
        _check_operands(MM_OP, a, b, formulation)
        m, n = a.shape[0], b.shape[1]
        if out_dtype not in FLOAT_DTYPES:
            raise TypeError(f"{MM_OP}: out_dtype is {out_dtype}; expected one of {dtype_names(FLOAT_DTYPES)}")
        _check_scale("scale_a", scale_a, m)
        _check_scale("scale_b", scale_b, n)
        if bias is not None:
            require_tensor(MM_OP, "bias", bias, dtypes=(out_dtype,), ndim=1)
            require_same(MM_OP, "bias's length and N", bias=bias.shape[0], N=n)
        require_same_device(MM_OP, a=a, b=b, scale_a=scale_a, scale_b=scale_b, bias=bias)
    if not use_triton(MM_OP, a, b, scale_a, scale_b):
        return reference.int8_scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)
    out = torch.empty(a.shape[0], b.shape[1], dtype=out_dtype, device=a.device)
    if out.numel() == 0:
        return out
    return _launch(a, b, scale_a, scale_b, bias, out, False, formulation, config)


def int32_accumulators(a: torch.Tensor, b: torch.Tensor, *, formulation: str | None = None,
                       config: dict | None = None) -> torch.Tensor:  # fmt: skip
    """The int32 [M, N] = a @ b that `int8_scaled_mm` scales, from the same
    kernel and plan (its epilogue stores the accumulator instead)."""
    _check_operands(MM_OP, a, b, formulation)
    if not use_triton(MM_OP, a, b):
        return reference.int32_accumulators(a, b)
    out = torch.empty(a.shape[0], b.shape[1], dtype=torch.int32, device=a.device)
    if out.numel() == 0:
        return out
    return _launch(a, b, a, a, None, out, True, formulation, config)
