"""RMSNorm ops: `rms_norm`, `fused_add_rms_norm` (SGLang's in-place residual add)
and `gated_rms_norm` (gated-delta-net layers' ``rms_norm(x) * silu(z)``).

SGLang semantics (sglang/srt/layers/layernorm.py, RMSNorm):
- ``forward_native(x, residual)``: sum = fp32(x) + fp32(residual); residual
  becomes sum rounded to the input dtype; the output is the *fp32* sum
  normalised, times weight, rounded once.
- ``forward_cuda`` calls sgl_kernel's ``fused_add_rmsnorm(x, residual, w, eps)``,
  which writes the sum into ``residual`` and the normalised output into ``x``,
  both in place, and returns ``(x, residual)``.

We write the sum into ``residual`` in place and return the normalised sum in a
new tensor; ``x`` is left untouched unless the caller passes ``out=x``, which
reproduces sgl_kernel exactly (safe: the kernel reads a row whole before it
writes it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...runtime import capabilities, launch_options, plan_cache, use_triton
from ..spec import explicit_config, lookup_config
from ..launch import KernelLaunch, constexpr_args, run_keywords
from ..validation import (
    as_rows,
    checked_mode,
    power_of_two_at_most,
    require_number,
    require_same,
    require_same_device,
    require_tensor,
)
from . import kernels, reference

# One program holds whole rows in one tile; wider rows would need a looped
# kernel, which no model in our presets needs (largest hidden size: 16384).
MAX_ROW_WIDTH = 65536
# Cap on a program's tile (rows x padded width) so wide rows never ask for
# more registers/local memory than a single row already needs.
MAX_TILE_ELEMENTS = 65536


def _check_common(op: str, x, weight, eps) -> float:
    require_tensor(op, "x", x, min_ndim=1)
    require_tensor(op, "weight", weight, ndim=1)
    if weight.shape[0] != x.shape[-1]:
        raise ValueError(f"{op}: weight has {weight.shape[0]} elements but x rows are {x.shape[-1]} wide")
    if x.shape[-1] > MAX_ROW_WIDTH:
        raise ValueError(f"{op}: x rows are {x.shape[-1]} wide; at most {MAX_ROW_WIDTH} are supported")
    return require_number(op, "eps", eps, minimum=0.0)


_KERNELS = {"rms_norm": kernels.rms_norm_kernel, "fused_add_rms_norm": kernels.fused_add_rms_norm_kernel,
            "gated_rms_norm": kernels.gated_rms_norm_kernel}  # fmt: skip


@dataclass(frozen=True)
class RowPlan:
    rows_per_program: int
    launch: KernelLaunch  # the kernel, its constexprs and options (`ops.launch`)
    # FIT_ROWS (the interpreter's config only): a call with fewer rows than
    # the tile takes a tile of those rows rounded up to a power of two (the
    # interpreter's numpy works on every padding row; it compiles nothing, so
    # a tile per row count costs it nothing; compiled targets keep one tile)
    fit_rows: bool = False


def _row_plan(op: str, width: int, config: dict) -> RowPlan:
    block_cols = 1 << max(width - 1, 0).bit_length()  # the row padded to a power of two
    rows = power_of_two_at_most(config["ROWS_PER_PROGRAM"])  # defaults: autotune_configs/default.yaml
    rows = max(1, min(rows, MAX_TILE_ELEMENTS // block_cols))
    kernel = _KERNELS[op]
    constexprs = constexpr_args(kernel, N_COLS=width, BLOCK_COLS=block_cols, ROWS_PER_PROGRAM=rows,
                                LOAD_IGNORES_OTHER=capabilities().load_ignores_other)  # fmt: skip
    return RowPlan(rows, KernelLaunch(kernel, constexprs, run_keywords(launch_options(config))), bool(config["FIT_ROWS"]))


@plan_cache
def _cached_plan(op: str, width: int) -> RowPlan:
    return _row_plan(op, width, lookup_config(op, hidden_size=width))


@plan_cache
def _fitted_plan(op: str, width: int, rows: int) -> RowPlan:
    return _row_plan(op, width, {**lookup_config(op, hidden_size=width), "ROWS_PER_PROGRAM": rows})


def _launch(op: str, x_rows, residual_rows, weight, out_rows, eps: float, config) -> None:
    """One launch of `op`'s kernel over rows `x_rows` [n, width] (the plan cached
    per op and width unless `config` is explicit)."""
    n_rows, width = x_rows.shape
    if n_rows == 0:
        return
    plan = _cached_plan(op, width) if config is None else \
        _row_plan(op, width, explicit_config(op, config, hidden_size=width))  # fmt: skip
    if plan.fit_rows and n_rows < plan.rows_per_program and config is None:
        plan = _fitted_plan(op, width, 1 << (n_rows - 1).bit_length())
    grid = (-(-n_rows // plan.rows_per_program),)
    if op == "gated_rms_norm":  # residual_rows: the gate z
        plan.launch(grid, x_rows, residual_rows, weight, out_rows, n_rows, x_rows.stride(0), residual_rows.stride(0),
                    out_rows.stride(0), eps)  # fmt: skip
    elif residual_rows is None:
        plan.launch(grid, x_rows, weight, out_rows, n_rows, x_rows.stride(0), out_rows.stride(0), eps)
    else:
        plan.launch(grid, x_rows, residual_rows, weight, out_rows, n_rows, x_rows.stride(0), residual_rows.stride(0),
                    out_rows.stride(0), eps)  # fmt: skip


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, check: bool = True,
             config: dict | None = None) -> torch.Tensor:  # fmt: skip
    """RMSNorm over the last dim: ``x / sqrt(mean(x**2) + eps) * weight``, fp32 inside.

    x: [..., hidden] (rows may be strided; last dim contiguous); weight: [hidden].
    Returns a new contiguous tensor of x's shape and dtype. `config`: an
    explicit launch config (default: looked up in ``autotune_configs/``).
    ``check=False`` (or ``KUNLUN_TRITON_CHECK=0``) skips the input checks:
    a weight shorter than the rows is then read past its end.
    """
    op = "rms_norm"
    if checked_mode(check):
        eps = _check_common(op, x, weight, eps)
        require_same_device(op, x=x, weight=weight)
        tensors = (x, weight)
    else:
        tensors = (x,)
    if not use_triton(op, *tensors):
        return reference.rms_norm(x, weight, eps)
    x_rows = as_rows(op, "x", x)
    out = x.new_empty(*x.shape)  # (torch.empty(x.shape, dtype=, device=): 2.5x the cost)
    out_rows = out if x_rows is x else out.view(-1, x.shape[-1])
    _launch(op, x_rows, None, weight, out_rows, eps, config)
    return out


def fused_add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    out: torch.Tensor | None = None,
    *,
    check: bool = True,
    config: dict | None = None,
) -> torch.Tensor:
    """``residual += x`` in place, then return RMSNorm of that sum (fp32 inside).

    The normalised value is computed from the fp32 sum before it is rounded
    into ``residual``, like SGLang. x and residual: [..., hidden], same shape
    and dtype, rows may be strided. The result goes to a new tensor, or to
    ``out`` (which may be ``x`` itself, as sgl_kernel does) and is returned.
    ``check=False`` (or ``KUNLUN_TRITON_CHECK=0``) skips the input checks.
    """
    op = "fused_add_rms_norm"
    if checked_mode(check):
        eps = _check_common(op, x, weight, eps)
        require_tensor(op, "residual", residual)
        require_same(op, "x's and residual's shapes", x=tuple(x.shape), residual=tuple(residual.shape))
        if residual.dtype != x.dtype:
            raise TypeError(f"{op}: residual has dtype {residual.dtype} but x has {x.dtype}")
        if out is not None:
            require_tensor(op, "out", out)
            require_same(op, "out's and x's shapes and dtypes", out=(tuple(out.shape), out.dtype), x=(tuple(x.shape), x.dtype))
        require_same_device(op, x=x, residual=residual, weight=weight, out=out)
        tensors = (x, residual, weight)
    else:
        tensors = (x,)
    residual_rows = as_rows(op, "residual", residual, writable=True)
    out_rows = None if out is None else as_rows(op, "out", out, writable=True)
    if not use_triton(op, *tensors):
        return reference.fused_add_rms_norm(x, residual, weight, eps, out=out)
    if out is None:
        out = x.new_empty(*x.shape)
        out_rows = out if out.dim() == 2 else out.view(-1, x.shape[-1])
    _launch(op, as_rows(op, "x", x), residual_rows, weight, out_rows, eps, config)
    return out


def gated_rms_norm(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                   group_size: int | None = None, *, check: bool = True,
                   config: dict | None = None) -> torch.Tensor:  # fmt: skip
    """``rms_norm(x) * weight * silu(z)`` over the last dim, fp32 inside, one rounding.

    Qwen3-Next's gated RMSNorm (SGLang's FLA ``RMSNormGated``, norm_before_gate,
    group_size None): x and z [..., width] of one shape and dtype (rows may be
    strided; SGLang hands [tokens x value heads, head_dim]); weight [width].
    group_size: None or the width (one group a row; SGLang's layers use None).
    Returns a new tensor of x's shape and dtype.
    """
    op = "gated_rms_norm"
    if checked_mode(check):
        eps = _check_common(op, x, weight, eps)
        require_tensor(op, "z", z)
        require_same(op, "x's and z's shapes and dtypes", x=(tuple(x.shape), x.dtype), z=(tuple(z.shape), z.dtype))
        if group_size is not None and group_size != x.shape[-1]:
            raise ValueError(f"{op}: group_size must be None or the row width {x.shape[-1]}, got {group_size}")
        require_same_device(op, x=x, z=z, weight=weight)
        tensors = (x, z, weight)
    else:
        tensors = (x,)
    if not use_triton(op, *tensors):
        return reference.gated_rms_norm(x, z, weight, eps)
    x_rows, z_rows = as_rows(op, "x", x), as_rows(op, "z", z)
    out = x.new_empty(*x.shape)
    _launch(op, x_rows, z_rows, weight, out if out.dim() == 2 else out.view(-1, x.shape[-1]), eps, config)
    return out
