"""Masked loads, per target: ``other=`` where it works, ``tl.where`` where it may not.

Kunlun's Triton may ignore a masked load's ``other=`` and leave whatever was
in memory in the masked lanes; every other target honours it. Kernels take
``LOAD_IGNORES_OTHER`` (`runtime.capabilities().load_ignores_other`, a
constexpr) and load through `masked_load`, so only Kunlun pays for the
``tl.where``: on CUDA and HIP a ``tl.where`` between a masked load and
``tl.dot`` moves the K/V tile from shared memory through registers and
back (decode on sm_90: a masked tile costs 423 instructions instead of 244
and the kernel 88 registers instead of 64; `kunlun-triton inspect`). Tiles
that need no mask load without one on every target.
"""

import triton
import triton.language as tl


@triton.jit
def masked_load(ptrs, mask, other, LOAD_IGNORES_OTHER: tl.constexpr):
    """``tl.load(ptrs, mask)`` with `other` in the masked lanes on every target."""
    if LOAD_IGNORES_OTHER:
        return tl.where(mask, tl.load(ptrs, mask=mask), other)
    else:
        return tl.load(ptrs, mask=mask, other=other)
