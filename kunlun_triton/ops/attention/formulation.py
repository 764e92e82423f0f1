"""Which attention formulation a call uses, and how its tl.dot operands are typed."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from ...runtime import capabilities

FORMULATIONS = ("dot", "sum")


@dataclass(frozen=True)
class Formulation:
    use_dot: bool
    dot_fp32: bool  # upcast dot operands to fp32 (fp32 inputs; bf16 where bf16 dot is wrong)

    @property
    def name(self) -> str:
        return "dot" if self.use_dot else "sum"


def choose_formulation(op: str, dtype: torch.dtype, config: dict, override: str | None) -> Formulation:
    caps = capabilities()
    name = override or config.get("formulation") or ("dot" if caps.has_dot else "sum")
    if name not in FORMULATIONS:
        raise ValueError(f"{op}: formulation must be one of {FORMULATIONS}, got {name!r}")
    use_dot = name == "dot"
    dot_fp32 = use_dot and (dtype == torch.float32 or (dtype == torch.bfloat16 and not caps.dot_bf16))
    return Formulation(use_dot, dot_fp32)


def dim_block(size: int, form: Formulation) -> int:
    """Padded power-of-two tile for a head dim (tl.dot needs at least 16)."""
    block = triton.next_power_of_2(max(size, 1))
    return max(block, 16) if form.use_dot else block


def window_constexpr(sliding_window) -> int:
    """SGLang's sliding_window_size (window_left); 0 disables."""
    if sliding_window is None or sliding_window <= 0:
        return 0
    return int(sliding_window)
