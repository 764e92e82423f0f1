"""What the attention launchers share: the formulation a call uses (and how
its tl.dot operands are typed), padded tile sizes, and the KV pool checks."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from ...runtime import capabilities
from ..validation import require_number, require_same, require_tensor

FORMULATIONS = ("dot", "sum")


@dataclass(frozen=True)
class Formulation:
    use_dot: bool
    dot_fp32: bool  # upcast dot operands to fp32 (fp32 inputs; bf16 where bf16 dot is wrong)

    @property
    def name(self) -> str:
        return "dot" if self.use_dot else "sum"


def choose_formulation(op: str, dtype: torch.dtype, config: dict, override: str | None) -> Formulation:
    """``tl.dot`` or ``tl.sum`` of broadcast products: the call's `override`,
    else the config's ``formulation``, else dot where the target has it (the
    Kunlun compiler breaks on ``tl.dot -> softmax -> tl.dot``)."""
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


def window_constexpr(op: str, sliding_window) -> int:
    """SGLang's sliding_window_size (window_left): None, 0 or -1 disables."""
    if sliding_window is None:
        return 0
    window = require_number(op, "sliding_window", sliding_window, minimum=-1, integer=True)
    return max(window, 0)


def check_kv_pool(op: str, q_heads: int, head_dim: int, k_buffer, v_buffer, q_name: str) -> int:
    """Pool shape rules shared by decode and extend ([slots, kv_heads, dim]);
    returns the GQA group size."""
    require_tensor(op, "k_buffer", k_buffer, ndim=3)
    require_tensor(op, "v_buffer", v_buffer, ndim=3)
    require_same(op, "slot counts and kv head counts of the pools",
                 k_buffer=tuple(k_buffer.shape[:2]), v_buffer=tuple(v_buffer.shape[:2]))  # fmt: skip
    require_same(op, "head dims of the query and the key pool", **{q_name: head_dim, "k_buffer": k_buffer.shape[2]})
    kv_heads = k_buffer.shape[1]
    if kv_heads == 0 or q_heads % kv_heads:
        raise ValueError(f"{op}: {q_name} has {q_heads} heads, not a multiple of the pool's {kv_heads} kv heads")
    return q_heads // kv_heads
