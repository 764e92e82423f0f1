"""What the package knows about its own kernels without a device: what a
launcher asks Triton for, what that compiles to and what it costs. Used by
the op specs (`OpSpec.kernels`, the doctor/bench cases' paged layouts), the
tools (``kunlun-triton inspect``, ``bench``), the SGLang baselines and the
tests; imports nothing beyond torch and triton.

- `aot`: `KernelSpec`, `compile_ahead_of_time` (lower a kernel for CUDA sm_90
  or HIP gfx942 in a child process, no device), `aot_target`.
- `launches`: stub Triton launches to count compilations and time
  launchers, and record a call's launches as `KernelSpec`s for any target.
- `sass`: registers, spills, shared memory and instructions per loop of a
  compiled kernel.
- `paged`: paged KV pools and decode/extend argument sets (SGLang's layout).
- `interpreter_counts`: bytes loaded and programs launched under the Triton
  interpreter (its speed-ups and bf16 rounding live in `runtime`, installed with the interpreter target).

Tests' comparison helpers (tolerances, `assert_close`, `assert_lowers`) are
in `kunlun_triton.testing`.
"""

from .aot import AOT_TARGETS, KernelSpec, aot_target, compile_ahead_of_time

__all__ = ["AOT_TARGETS", "KernelSpec", "aot_target", "compile_ahead_of_time"]
