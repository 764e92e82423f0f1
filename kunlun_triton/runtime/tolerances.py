"""Per-dtype tolerances of a kernel against its reference: what production
code (`kunlun-triton doctor` / bench's checks, `tools/checks.py`) and the
tests (`kunlun_triton.testing.assert_close`) both compare with.

The defaults assume the reference computes in fp32 and casts once to the
output dtype, so the kernel may differ by a rounding or two of that dtype
(fp16: 2**-10 relative, bf16: 2**-7) plus fp32 reordering of reductions.
An op's spec scales them (`OpSpec.tolerance_scale`) for long reductions.
"""

from __future__ import annotations

import torch

# dtype -> (atol, rtol)
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}


def tolerance(dtype: torch.dtype, scale: float = 1.0) -> tuple[float, float]:
    """(atol, rtol) for `dtype`, both multiplied by `scale` for long reductions."""
    if dtype not in TOLERANCES:
        raise KeyError(f"no tolerance for {dtype}; known: {list(TOLERANCES)}")
    atol, rtol = TOLERANCES[dtype]
    return atol * scale, rtol * scale


def max_abs_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    if actual.numel() == 0:
        return 0.0
    return (actual.double() - expected.double()).abs().max().item()
