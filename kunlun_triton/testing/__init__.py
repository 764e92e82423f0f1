"""Tools for people writing and testing kernels in this package.

- `TOLERANCES`, `tolerance`, `assert_close`: per-dtype comparison with a reference.
- `KernelSpec`, `assert_lowers`, `compile_ahead_of_time`: prove a kernel lowers
  for CUDA sm_90 and HIP gfx942 without a device.
- `paged`: paged KV pools and decode/extend argument sets for attention.
- `SHIPPED_TARGETS`: run an op with another target's configs;
  `LOWERING_TARGETS`: the targets whose launch plans the lowering tests compile.
- `launches`: stub Triton launches to count compilations and time launchers,
  and record a call's launches as `KernelSpec`s for any target.
- `sass`: registers, spills, shared memory and instructions per loop of a
  compiled kernel (`kunlun-triton inspect`).

Imports nothing beyond torch and triton (no hypothesis: the tools import this).
"""

from . import paged
from .aot import AOT_TARGETS, KernelSpec, assert_lowers, compile_ahead_of_time
from .targets import LOWERING_TARGETS, SHIPPED_TARGETS, aot_target, target_id
from .tolerances import TOLERANCES, assert_close, max_abs_error, tolerance

__all__ = [
    "AOT_TARGETS",
    "KernelSpec",
    "LOWERING_TARGETS",
    "SHIPPED_TARGETS",
    "TOLERANCES",
    "assert_close",
    "aot_target",
    "assert_lowers",
    "compile_ahead_of_time",
    "max_abs_error",
    "paged",
    "target_id",
    "tolerance",
]
