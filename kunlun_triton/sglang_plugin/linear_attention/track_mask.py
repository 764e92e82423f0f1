"""The extra_buffer prefix cache's decode track mask, staged unpinned off a card.

SGLang 0.5.23's ``ScheduleBatch.prepare_for_decode``
(``srt/managers/schedule_batch.py``) stages the mask of the requests whose
states a decode step snapshots with ``track_mask_cpu.pin_memory()``, not
through the platform's ``is_pin_memory_available()``. Pinning needs the
device runtime: on a host without one (the platform's development mode) it
raises "Found no NVIDIA driver" in the scheduler at the first decode of a
hybrid model. The AROUND hook below runs the original with pinning a no-op
there (an unpinned tensor copies the same); with a device runtime (a card)
the original runs untouched. Scope: platform. Test:
tests/sglang_plugin/test_sglang_qwen3_next.py (every extra_buffer decode).
"""

from __future__ import annotations

import torch

PREPARE_DECODE_HOOK = "sglang.srt.managers.schedule_batch.ScheduleBatch.prepare_for_decode"


def _unpinned(tensor, *args, **kwargs):
    return tensor


def prepare_for_decode_unpinned(original, self, *args, **kwargs):
    """AROUND ``ScheduleBatch.prepare_for_decode``."""
    if torch.cuda.is_available():
        return original(self, *args, **kwargs)
    pin_memory = torch.Tensor.pin_memory
    torch.Tensor.pin_memory = _unpinned
    try:
        return original(self, *args, **kwargs)
    finally:
        torch.Tensor.pin_memory = pin_memory
