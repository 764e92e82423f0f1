"""Gated activations for MLPs: `silu_and_mul` and `gelu_and_mul`.

Same contract as SGLang's SiluAndMul / GeluAndMul: x is [..., 2 * d] holding
[gate | up]; the result is act(gate) * up, shape [..., d], x's dtype.
"""

from __future__ import annotations

import torch
import triton

from ...runtime import get_config, launch_options, use_triton
from ..validation import as_rows, power_of_two_at_most, require_choice, require_tensor
from . import kernels, reference

SILU, GELU, GELU_TANH = 0, 1, 2
GELU_APPROXIMATIONS = {"none": GELU, "tanh": GELU_TANH}


def _check_input(op: str, x) -> None:
    require_tensor(op, "x", x, min_ndim=1)
    if x.shape[-1] % 2:
        raise ValueError(f"{op}: x's last dim must be even ([gate | up]), got {x.shape[-1]}")


def _act_and_mul(op: str, x: torch.Tensor, activation: int, config: dict | None) -> torch.Tensor:
    d = x.shape[-1] // 2
    x_rows = as_rows(op, "x", x)
    out = torch.empty((*x.shape[:-1], d), dtype=x.dtype, device=x.device)
    out_rows = out.view(-1, d)
    n_rows = x_rows.shape[0]
    if n_rows == 0 or d == 0:
        return out
    config = get_config(op, hidden_size=d, rows=n_rows) if config is None else config
    block_cols = min(triton.next_power_of_2(d), power_of_two_at_most(config.get("BLOCK_COLS", 1024)))
    rows_per_program = power_of_two_at_most(config.get("ROWS_PER_PROGRAM", 1))
    grid = (triton.cdiv(n_rows, rows_per_program), triton.cdiv(d, block_cols))
    kernels.act_and_mul_kernel[grid](
        x_rows, out_rows, n_rows, x_rows.stride(0), out_rows.stride(0),
        D=d, BLOCK_COLS=block_cols, ROWS_PER_PROGRAM=rows_per_program, ACTIVATION=activation,
        **launch_options(config),
    )  # fmt: skip
    return out


def silu_and_mul(x: torch.Tensor, *, config: dict | None = None) -> torch.Tensor:
    """silu(x[..., :d]) * x[..., d:] for x of shape [..., 2 * d]; fp32 inside."""
    _check_input("silu_and_mul", x)
    if not use_triton("silu_and_mul", x):
        return reference.silu_and_mul(x)
    return _act_and_mul("silu_and_mul", x, SILU, config)


def gelu_and_mul(x: torch.Tensor, approximate: str = "none", *, config: dict | None = None) -> torch.Tensor:
    """gelu(x[..., :d], approximate) * x[..., d:]; approximate is "none" (erf) or "tanh"."""
    _check_input("gelu_and_mul", x)
    require_choice("gelu_and_mul", "approximate", approximate, tuple(GELU_APPROXIMATIONS))
    if not use_triton("gelu_and_mul", x):
        return reference.gelu_and_mul(x, approximate)
    return _act_and_mul("gelu_and_mul", x, GELU_APPROXIMATIONS[approximate], config)
