"""`assert_close` for comparing kernels with references, with the per-dtype
tolerances production code also reads (`kunlun_triton.runtime.tolerances`)."""

from __future__ import annotations

import torch

from ..runtime.tolerances import TOLERANCES, max_abs_error, tolerance  # noqa: F401 (the tests' names)


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
