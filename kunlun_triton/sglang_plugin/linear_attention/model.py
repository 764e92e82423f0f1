"""Qwen3-Next's gated-delta-net layer built on the platform's device.

SGLang 0.5.23's ``Qwen3GatedDeltaNet.__init__`` (``srt/models/qwen3_next.py``)
builds its gated norm on ``torch.get_device_module().current_device()``:
with no argument torch answers for its own accelerator, ``torch.cuda`` in
SGLang's CUDA build of torch, and on a machine without a CUDA driver (the
platform's development mode) that raises "Found no NVIDIA driver" while the
scheduler builds the model. The AROUND hook below builds the layer with
``torch.get_device_module`` answering for the platform's device type when
asked for none. On a card (Kunlun's vendor torch reports ``cuda``) the two
agree and the original runs untouched. Scope: platform. Test:
tests/sglang_plugin/test_sglang_qwen3_next.py.
"""

from __future__ import annotations

import torch

GDN_LAYER_INIT_HOOK = "sglang.srt.models.qwen3_next.Qwen3GatedDeltaNet.__init__"


def build_on_platform_device(original, self, *args, **kwargs):
    """AROUND ``Qwen3GatedDeltaNet.__init__``."""
    from sglang.srt.platforms import current_platform

    device_type = getattr(current_platform, "device_type", "cuda")
    if device_type == "cuda":
        return original(self, *args, **kwargs)
    torch_default = torch.get_device_module

    def platform_device_module(device=None):
        return torch_default(device_type if device is None else device)

    torch.get_device_module = platform_device_module
    try:
        return original(self, *args, **kwargs)
    finally:
        torch.get_device_module = torch_default
