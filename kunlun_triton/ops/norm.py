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

from ..kernels import norm as kernels
from ..reference import norm as reference
from ..runtime import get_config, launch_options, use_triton
from ._row_inputs import as_rows, check_row_width, check_same_device, check_tensor, power_of_two_at_most

# Cap on a program's tile (rows x padded width) so wide rows never ask for
# more registers/local memory than a single row already needs.
MAX_TILE_ELEMENTS = 65536


def _check_weight(weight, width: int) -> None:
    check_tensor(weight, "weight", max_dim=1)
    if weight.shape[0] != width:
        raise ValueError(f"weight has {weight.shape[0]} elements but x rows are {width} wide")


def _check_eps(eps) -> float:
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or eps < 0:
        raise ValueError(f"eps must be a non-negative number, got {eps!r}")
    return float(eps)


def _check_out(out, x: torch.Tensor) -> None:
    check_tensor(out, "out")
    if out.shape != x.shape or out.dtype != x.dtype:
        raise ValueError(
            f"out must have x's shape {tuple(x.shape)} and dtype {x.dtype}, got {tuple(out.shape)} {out.dtype}"
        )


def _launch_shape(op: str, width: int) -> tuple[dict, int, int]:
    """(config, BLOCK_COLS, ROWS_PER_PROGRAM) for rows `width` wide."""
    config = get_config(op, hidden_size=width)
    block_cols = triton.next_power_of_2(width)
    rows = power_of_two_at_most(config.get("ROWS_PER_PROGRAM", 1))
    rows = max(1, min(rows, MAX_TILE_ELEMENTS // block_cols))
    return config, block_cols, rows


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim: ``x / sqrt(mean(x**2) + eps) * weight``, fp32 inside.

    x: [..., hidden] (rows may be strided; last dim contiguous); weight: [hidden].
    Returns a new contiguous tensor of x's shape and dtype.
    """
    check_tensor(x, "x")
    _check_weight(weight, x.shape[-1])
    check_row_width(x.shape[-1], "x")
    check_same_device(x=x, weight=weight)
    eps = _check_eps(eps)
    if not use_triton("rms_norm", x, weight):
        return reference.rms_norm(x, weight, eps)

    x_rows = as_rows(x, "x")
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    out_rows = out.view(-1, x.shape[-1])
    n_rows, width = x_rows.shape
    if n_rows == 0:
        return out
    config, block_cols, rows_per_program = _launch_shape("rms_norm", width)
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
) -> torch.Tensor:
    """``residual += x`` in place, then return RMSNorm of that sum (fp32 inside).

    The normalised value is computed from the fp32 sum before it is rounded
    into ``residual``, like SGLang. x and residual: [..., hidden], same shape
    and dtype, rows may be strided. The result goes to a new tensor, or to
    ``out`` (which may be ``x`` itself, as sgl_kernel does) and is returned.
    """
    check_tensor(x, "x")
    check_tensor(residual, "residual")
    if residual.shape != x.shape:
        raise ValueError(f"residual has shape {tuple(residual.shape)} but x has {tuple(x.shape)}")
    if residual.dtype != x.dtype:
        raise TypeError(f"residual has dtype {residual.dtype} but x has {x.dtype}")
    _check_weight(weight, x.shape[-1])
    check_row_width(x.shape[-1], "x")
    if out is not None:
        _check_out(out, x)
    check_same_device(x=x, residual=residual, weight=weight, out=out)
    eps = _check_eps(eps)
    residual_rows = as_rows(residual, "residual", writable=True)
    out_rows = None if out is None else as_rows(out, "out", writable=True)
    if not use_triton("fused_add_rms_norm", x, residual, weight):
        return reference.fused_add_rms_norm(x, residual, weight, eps, out=out)

    x_rows = as_rows(x, "x")
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        out_rows = out.view(-1, x.shape[-1])
    n_rows, width = x_rows.shape
    if n_rows == 0:
        return out
    config, block_cols, rows_per_program = _launch_shape("fused_add_rms_norm", width)
    grid = (triton.cdiv(n_rows, rows_per_program),)
    kernels.fused_add_rms_norm_kernel[grid](
        x_rows, residual_rows, weight, out_rows, n_rows,
        x_rows.stride(0), residual_rows.stride(0), out_rows.stride(0), eps,
        N_COLS=width, BLOCK_COLS=block_cols, ROWS_PER_PROGRAM=rows_per_program,
        **launch_options(config),
    )  # fmt: skip
    return out
