"""Pure-torch W8A8-INT8: the oracle for the kernels and the fallback path.

Written the plain way from the definitions (SGLang 0.5.23's
``int8_kernel.per_token_quant_int8`` and ``sgl_kernel.int8_scaled_mm``):
fp32 maths, ``torch.round`` (half to even), the int32 product exact.
"""

from __future__ import annotations

import torch

ABSMAX_FLOOR = 1e-10


def per_token_quant_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q int8 [..., D], scale fp32 [..., 1]): scale = max(|x|, 1e-10) / 127 per row,
    q = round(x * (127 / absmax))."""
    xf = x.float()
    absmax = xf.abs().amax(dim=-1, keepdim=True).clamp(min=ABSMAX_FLOOR) if x.shape[-1] else \
        torch.full((*x.shape[:-1], 1), ABSMAX_FLOOR, device=x.device)  # fmt: skip
    # a true division (torch's `127.0 / t` is 127 * reciprocal(t): one more rounding)
    q = torch.round(xf * torch.div(absmax.new_full((), 127.0), absmax)).to(torch.int8)
    return q, absmax / 127.0


def int32_accumulators(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a (int8 [M, K]) @ b (int8 [K, N]) as int32. In float64, which is exact
    here (|sum| <= K * 2**14 < 2**53) and uses BLAS (int64 matmuls do not)."""
    return (a.double() @ b.double()).to(torch.int32)


def int8_scaled_mm(a, b, scale_a, scale_b, out_dtype, bias=None) -> torch.Tensor:
    """(a @ b) * scale_a[m] * scale_b[n] (+ bias[n]) in fp32, rounded once to out_dtype."""
    y = int32_accumulators(a, b).float() * scale_a.reshape(-1, 1).float() * scale_b.reshape(1, -1).float()
    if bias is not None:
        y = y + bias.float()[None, :]
    return y.to(out_dtype)


def dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """q * scale in fp32 (rows of q scaled by scale [..., 1])."""
    return q.float() * scale.float()
