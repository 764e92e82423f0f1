"""Pure-torch gated activations: the oracle for the kernels and the CPU fallback.

x = [gate | up] on the last dim (SGLang's SiluAndMul / GeluAndMul layout);
maths in fp32, one cast at the end (as sgl_kernel does).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _split(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    d = x.shape[-1] // 2
    return x[..., :d].float(), x[..., d:].float()


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    gate, up = _split(x)
    return (F.silu(gate) * up).to(x.dtype)


def gelu_and_mul(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    gate, up = _split(x)
    return (F.gelu(gate, approximate=approximate) * up).to(x.dtype)
