"""Per-dtype tolerances and `assert_close` for comparing kernels with references.

The defaults assume the reference computes in fp32 and casts once to the
output dtype, so the kernel may differ by a rounding or two of that dtype
(fp16: 2**-10 relative, bf16: 2**-7) plus fp32 reordering of reductions.
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


def assert_close(actual, expected, *, dtype=None, atol=None, rtol=None, scale=1.0, msg=""):
    """torch.testing.assert_close with this package's per-dtype tolerances.

    `dtype` picks the tolerance (default: `expected`'s dtype); explicit
    `atol`/`rtol` win. Shapes and dtypes must match exactly.
    """
    dtype = dtype or expected.dtype
    default_atol, default_rtol = tolerance(dtype, scale) if dtype.is_floating_point else (0.0, 0.0)
    atol = default_atol if atol is None else atol
    rtol = default_rtol if rtol is None else rtol
    try:
        torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol, equal_nan=True)
    except AssertionError as exc:
        detail = f"max abs error {max_abs_error(actual, expected):.3g} (atol={atol:g}, rtol={rtol:g}, {dtype})"
        raise AssertionError(f"{msg + ': ' if msg else ''}{detail}\n{exc}") from None
