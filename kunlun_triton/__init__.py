"""kunlun-triton: Triton kernels for LLM serving on Kunlun XPUs and any Triton target.

The kernels need only torch and triton; SGLang is touched only by
`kunlun_triton.sglang_plugin`.
"""

from .runtime import current_target, dispatch_report, reset_dispatch_report

__version__ = "0.1.0"


def device_count() -> int:
    """Devices the current target can run kernels on (1 for the CPU targets)."""
    target = current_target()
    if target.device_type == "cpu":
        return 1
    import torch

    return torch.cuda.device_count()


__all__ = ["current_target", "device_count", "dispatch_report", "reset_dispatch_report", "__version__"]
