"""Tools for people writing and testing kernels in this package.

- `TOLERANCES`, `tolerance`, `assert_close`: per-dtype comparison with a reference.
- `strategies`: hypothesis strategies for shapes, dtypes and strided rows.
- `KernelSpec`, `assert_lowers`, `compile_ahead_of_time`: prove a kernel lowers
  for CUDA sm_90 and HIP gfx942 without a device.
"""

from . import strategies
from .aot import AOT_TARGETS, KernelSpec, assert_lowers, compile_ahead_of_time
from .tolerances import TOLERANCES, assert_close, max_abs_error, tolerance

__all__ = [
    "AOT_TARGETS",
    "KernelSpec",
    "TOLERANCES",
    "assert_close",
    "assert_lowers",
    "compile_ahead_of_time",
    "max_abs_error",
    "strategies",
    "tolerance",
]
