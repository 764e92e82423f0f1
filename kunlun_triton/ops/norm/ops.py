"""RMSNorm ops: `rms_norm` and `fused_add_rms_norm` (SGLang's in-place residual add).

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

import torch
import triton

from ...runtime import get_config, launch_options, use_triton
from ..validation import as_rows, power_of_two_at_most, require_number, require_same, require_same_device, require_tensor
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


def _launch_shape(op: str, width: int, config: dict | None) -> tuple[dict, int, int]:
    """(config, BLOCK_COLS, ROWS_PER_PROGRAM) for rows `width` wide."""
    config = get_config(op, hidden_size=width) if config is None else config
    block_cols = triton.next_power_of_2(width)
    rows = power_of_two_at_most(config.get("ROWS_PER_PROGRAM", 1))
    rows = max(1, min(rows, MAX_TILE_ELEMENTS // block_cols))
    return config, block_cols, rows


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, config: dict | None = None) -> torch.Tensor:
    """RMSNorm over the last dim: ``x / sqrt(mean(x**2) + eps) * weight``, fp32 inside.

    x: [..., hidden] (rows may be strided; last dim contiguous); weight: [hidden].
    Returns a new contiguous tensor of x's shape and dtype. `config`: an
    explicit launch config (default: looked up in ``autotune_configs/``).
    """
    op = "rms_norm"
    eps = _check_common(op, x, weight, eps)
    require_same_device(op, x=x, weight=weight)
    if not use_triton(op, x, weight):
        return reference.rms_norm(x, weight, eps)

    x_rows = as_rows(op, "x", x)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    out_rows = out.view(-1, x.shape[-1])
    n_rows, width = x_rows.shape
    if n_rows == 0:
        return out
    config, block_cols, rows_per_program = _launch_shape(op, width, config)
    grid = (triton.cdiv(n_rows, rows_per_program),)
    kernels.rms_norm_kernel[grid](
        x_rows, weight, out_rows, n_rows, x_rows.stride(0), out_rows.stride(0), eps,
        N_COLS=width, BLOCK_COLS=block_cols, ROWS_PER_PROGRAM=rows_per_program,
        **launch_options(config),
    )  # fmt: skip
    return out


def fused_add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    out: torch.Tensor | None = None,
    *,
    config: dict | None = None,
) -> torch.Tensor:
    """``residual += x`` in place, then return RMSNorm of that sum (fp32 inside).

    The normalised value is computed from the fp32 sum before it is rounded
    into ``residual``, like SGLang. x and residual: [..., hidden], same shape
    and dtype, rows may be strided. The result goes to a new tensor, or to
    ``out`` (which may be ``x`` itself, as sgl_kernel does) and is returned.
    """
    op = "fused_add_rms_norm"
    eps = _check_common(op, x, weight, eps)
    require_tensor(op, "residual", residual)
    require_same(op, "x's and residual's shapes", x=tuple(x.shape), residual=tuple(residual.shape))
    if residual.dtype != x.dtype:
        raise TypeError(f"{op}: residual has dtype {residual.dtype} but x has {x.dtype}")
    if out is not None:
        require_tensor(op, "out", out)
        require_same(op, "out's and x's shapes and dtypes", out=(tuple(out.shape), out.dtype), x=(tuple(x.shape), x.dtype))
    require_same_device(op, x=x, residual=residual, weight=weight, out=out)
    residual_rows = as_rows(op, "residual", residual, writable=True)
    out_rows = None if out is None else as_rows(op, "out", out, writable=True)
    if not use_triton(op, x, residual, weight):
        return reference.fused_add_rms_norm(x, residual, weight, eps, out=out)

    x_rows = as_rows(op, "x", x)
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        out_rows = out.view(-1, x.shape[-1])
    n_rows, width = x_rows.shape
    if n_rows == 0:
        return out
    config, block_cols, rows_per_program = _launch_shape(op, width, config)
    grid = (triton.cdiv(n_rows, rows_per_program),)
    kernels.fused_add_rms_norm_kernel[grid](
        x_rows, residual_rows, weight, out_rows, n_rows,
        x_rows.stride(0), residual_rows.stride(0), out_rows.stride(0), eps,
        N_COLS=width, BLOCK_COLS=block_cols, ROWS_PER_PROGRAM=rows_per_program,
        **launch_options(config),
    )  # fmt: skip
    return out
