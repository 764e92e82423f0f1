"""Pure-torch RMSNorm: the oracle for the kernels and the CPU fallback path.

Follows SGLang's ``RMSNorm.forward_native`` (fp32 maths, one cast at the
end), with the mean of squares taken of x / max|x| as the kernels do, so rows
of huge or tiny magnitude are normalised right instead of to 0 or inf.
"""

from __future__ import annotations

import math

import torch

MIN_PEAK = 2.0**-100  # as kernels.MIN_PEAK


def inv_rms(x32: torch.Tensor, eps: float) -> torch.Tensor:
    """1 / sqrt(mean(x32**2, last dim) + eps), keepdim, never squaring above 1
    (the hypot of `kernels._normalize`)."""
    if x32.shape[-1] == 0:
        return torch.full((*x32.shape[:-1], 1), 1 / math.sqrt(eps) if eps else math.nan, device=x32.device)
    scale = x32.abs().amax(dim=-1, keepdim=True).clamp(min=MIN_PEAK).reciprocal()
    t = (x32 * scale).pow(2).mean(dim=-1, keepdim=True).sqrt()
    e = math.sqrt(eps) * scale
    big = torch.maximum(t, e)
    ratio = torch.minimum(t, e) / big
    return scale / big * torch.rsqrt(1 + ratio * ratio)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(mean(x**2, last dim) + eps) * weight, computed in fp32, in x's dtype."""
    x32 = x.float()
    return (x32 * inv_rms(x32, eps) * weight.float()).to(x.dtype)


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
    y = (total * inv_rms(total, eps) * weight.float()).to(x.dtype)
    if out is None:
        return y
    out.copy_(y)
    return out


def gated_rms_norm(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """rms_norm(x) * weight * silu(z) in fp32, one rounding to x's dtype."""
    x32, z32 = x.float(), z.float()
    return (x32 * inv_rms(x32, eps) * weight.float() * (z32 * torch.sigmoid(z32))).to(x.dtype)
