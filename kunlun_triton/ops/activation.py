"""Gated activations for MLPs: `silu_and_mul` and `gelu_and_mul`.

Same contract as SGLang's SiluAndMul / GeluAndMul: x is [..., 2 * d] holding
[gate | up]; the result is act(gate) * up, shape [..., d], x's dtype.
"""

from __future__ import annotations

import torch
import triton

from ..kernels import activation as kernels
from ..reference import activation as reference
from ..runtime import get_config, launch_options, use_triton
from ._row_inputs import as_rows, check_tensor, power_of_two_at_most

SILU, GELU, GELU_TANH = 0, 1, 2
GELU_APPROXIMATIONS = {"none": GELU, "tanh": GELU_TANH}


def _check_input(x) -> int:
    check_tensor(x, "x")
    if x.shape[-1] % 2:
        raise ValueError(f"x's last dim must be even ([gate | up]), got {x.shape[-1]}")
    return x.shape[-1] // 2


def _act_and_mul(op: str, x: torch.Tensor, activation: int) -> torch.Tensor:
    d = x.shape[-1] // 2
    x_rows = as_rows(x, "x")
    out = torch.empty((*x.shape[:-1], d), dtype=x.dtype, device=x.device)
    out_rows = out.view(-1, d)
    n_rows = x_rows.shape[0]
    if n_rows == 0 or d == 0:
        return out
    config = get_config(op, hidden_size=d, rows=n_rows)
    block_cols = min(triton.next_power_of_2(d), power_of_two_at_most(config.get("BLOCK_COLS", 1024)))
    rows_per_program = power_of_two_at_most(config.get("ROWS_PER_PROGRAM", 1))
    grid = (triton.cdiv(n_rows, rows_per_program), triton.cdiv(d, block_cols))
    kernels.act_and_mul_kernel[grid](
        x_rows, out_rows, n_rows, x_rows.stride(0), out_rows.stride(0),
        D=d, BLOCK_COLS=block_cols, ROWS_PER_PROGRAM=rows_per_program, ACTIVATION=activation,
        **launch_options(config),
    )  # fmt: skip
    return out


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """silu(x[..., :d]) * x[..., d:] for x of shape [..., 2 * d]; fp32 inside."""
    _check_input(x)
    if not use_triton("silu_and_mul", x):
        return reference.silu_and_mul(x)
    return _act_and_mul("silu_and_mul", x, SILU)


def gelu_and_mul(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """gelu(x[..., :d], approximate) * x[..., d:]; approximate is "none" (erf) or "tanh"."""
    _check_input(x)
    if approximate not in GELU_APPROXIMATIONS:
        raise ValueError(f"approximate must be one of {sorted(GELU_APPROXIMATIONS)}, got {approximate!r}")
    if not use_triton("gelu_and_mul", x):
        return reference.gelu_and_mul(x, approximate)
    return _act_and_mul("gelu_and_mul", x, GELU_APPROXIMATIONS[approximate])
