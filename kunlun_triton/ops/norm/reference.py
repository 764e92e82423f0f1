"""Pure-torch RMSNorm: the oracle for the kernels and the CPU fallback path.

Written the plain way (fp32 maths, one cast at the end), following SGLang's
``RMSNorm.forward_native``.
"""

from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(mean(x**2, last dim) + eps) * weight, computed in fp32, in x's dtype."""
    x32 = x.float()
    inv_rms = torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (x32 * inv_rms * weight.float()).to(x.dtype)


def fused_add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """residual <- x + residual (in place); returns rms_norm of the fp32 sum.

    The sum is normalised before rounding, as SGLang's forward_native and
    sgl_kernel both do. With ``out`` given, the result is written there too.
    """
    total = x.float() + residual.float()
    residual.copy_(total.to(residual.dtype))
    inv_rms = torch.rsqrt(total.pow(2).mean(dim=-1, keepdim=True) + eps)
    y = (total * inv_rms * weight.float()).to(x.dtype)
    if out is None:
        return y
    out.copy_(y)
    return out
