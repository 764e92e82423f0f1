"""What tests of kernels import: comparison with a reference and the targets
they run or lower for. Nothing in the package's production code imports
from here (the tolerances production code reads live in
`kunlun_triton.runtime.tolerances`, re-exported here); the machinery that plans, compiles and measures kernels lives in
`kunlun_triton.introspect`.

- `TOLERANCES`, `tolerance`, `assert_close`, `max_abs_error`: per-dtype
  comparison with a reference.
- `assert_lowers` (with `KernelSpec`, what it takes): prove kernels lower for
  CUDA sm_90 and HIP gfx942 without a device.
- `SHIPPED_TARGETS`, `shipped_target`, `target_id`: run an op with another
  target's configs;
  `LOWERING_TARGETS`, `aot_target`: the targets whose launch plans the
  lowering tests compile, and what each compiles for.

Imports nothing beyond torch and triton (no hypothesis).
"""

from ..introspect.aot import KernelSpec
from .lowering import assert_lowers
from .targets import LOWERING_TARGETS, SHIPPED_TARGETS, aot_target, shipped_target, target_id
from .tolerances import TOLERANCES, assert_close, max_abs_error, tolerance

__all__ = [
    "KernelSpec",
    "LOWERING_TARGETS",
    "SHIPPED_TARGETS",
    "TOLERANCES",
    "aot_target",
    "assert_close",
    "assert_lowers",
    "max_abs_error",
    "shipped_target",
    "target_id",
    "tolerance",
]
