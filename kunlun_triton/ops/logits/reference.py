"""Pure-torch final-logit soft-capping: the oracle for the kernel and the CPU
fallback (SGLang's CPU path: cap * tanh(x / cap), here in place, fp32 inside)."""

from __future__ import annotations

import torch


def logit_softcap(logits: torch.Tensor, cap: float) -> torch.Tensor:
    logits.copy_((cap * torch.tanh(logits.float() / cap)).to(logits.dtype))
    return logits
