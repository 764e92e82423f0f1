"""The SGLang platform classes: Kunlun (device ``cuda`` through the vendor's
torch) and the CPU development mode (Triton interpreter).

Written against SGLang 0.5.23's ``sglang/srt/platforms/interface.py`` and
``device_mixin.py``; the older releases of the window get their own hook
names from ``versions.platform_compat()`` (placed first in the bases, so it
wraps ours) and a capabilities stand-in from ``versions.make_capabilities``.
``get_device`` returns a string because callers split it on ``:``. Kunlun is
never called ``xpu`` (that string selects Intel XPU defaults in SGLang).
"""

from __future__ import annotations

import logging
from typing import Optional

import torch
from sglang.srt.platforms.device_mixin import DeviceMixin, PlatformEnum
from sglang.srt.platforms.interface import SRTPlatform

from ...runtime import capabilities, current_target
from ...runtime.capabilities import device_graphs, torch_exposes_device_graphs  # noqa: F401 (asked here by tests)
from ..install import install
from ..speculative.algorithms import serves, speculative_cache_locs
from .defaults import apply_defaults
from .mode import dev_mode, enter_dev_mode
from .names import ATTENTION_BACKEND, DISPATCH_KEY, LOGGER, PLATFORM_NAME
from .versions import make_capabilities, platform_compat

# The hooks the installed SGLang calls under older names (empty on 0.5.23).
_SGLangCompat = platform_compat()

logger = logging.getLogger(LOGGER)


class KunlunDeviceMixin(DeviceMixin):
    """Kunlun cards as the vendor torch build exposes them: device ``cuda``."""

    _enum = PlatformEnum.OOT
    device_name = PLATFORM_NAME
    device_type = "cuda"

    def get_device(self, device_id: Optional[int] = None) -> str:
        return "cuda" if device_id is None else f"cuda:{device_id}"

    def set_device(self, device) -> None:
        torch.cuda.set_device(device)

    def get_device_name(self, device_id: int = 0) -> str:
        return torch.cuda.get_device_name(device_id)

    def get_device_uuid(self, device_id: int = 0) -> str:
        props = torch.cuda.get_device_properties(device_id)
        return str(getattr(props, "uuid", device_id))

    def get_device_capability(self, device_id: int = 0):
        return None

    def get_device_total_memory(self, device_id: int = 0) -> int:
        return int(torch.cuda.get_device_properties(device_id).total_memory)

    def get_current_memory_usage(self, device=None) -> float:
        # SGLang's contract: free = get_device_total_memory() - this.
        free, total = torch.cuda.mem_get_info(device)
        return float(total - free)

    def get_available_memory(self, device_id: int = 0) -> tuple[int, int]:
        free, total = torch.cuda.mem_get_info(device_id)
        return int(free), int(total)

    def empty_cache(self) -> None:
        torch.cuda.empty_cache()

    def synchronize(self) -> None:
        torch.cuda.synchronize()

    def is_pin_memory_available(self, device=None) -> bool:
        return True

    def get_torch_distributed_backend_str(self) -> str:
        # Kunlun's torch build registers its collective library as the
        # backend for device "cuda"; on NVIDIA/AMD that is nccl/rccl.
        return capabilities().collective_backend


class KunlunDevDeviceMixin(DeviceMixin):
    """Development mode: the host CPU stands in for the card."""

    _enum = PlatformEnum.OOT
    device_name = PLATFORM_NAME
    device_type = "cpu"

    def get_device(self, device_id: Optional[int] = None) -> str:
        return "cpu"  # torch allows only index 0 on CPU; ranks share it

    def set_device(self, device) -> None:
        pass

    def get_device_name(self, device_id: int = 0) -> str:
        return "kunlun development mode (cpu, Triton interpreter)"

    def get_device_uuid(self, device_id: int = 0) -> str:
        import platform as _platform

        return _platform.machine()

    def get_device_capability(self, device_id: int = 0):
        return None

    def get_device_total_memory(self, device_id: int = 0) -> int:
        import psutil

        return int(psutil.virtual_memory().total)

    def get_current_memory_usage(self, device=None) -> float:
        import psutil

        vm = psutil.virtual_memory()
        return float(vm.total - vm.available)

    def get_available_memory(self, device_id: int = 0) -> tuple[int, int]:
        import psutil

        vm = psutil.virtual_memory()
        return int(vm.available), int(vm.total)

    def get_torch_distributed_backend_str(self) -> str:
        return "gloo"


class _KunlunSRTPlatformBase(SRTPlatform):
    """What both modes share: backends, pools, defaults, dtype policy."""

    supported_quantization: list = []

    def get_default_attention_backend(self) -> str:
        return ATTENTION_BACKEND

    def get_dispatch_key_name(self) -> str:
        return DISPATCH_KEY

    def get_quantization_config(self, quantization):
        from ..layers.mxfp4 import quantization_config  # function-level: see get_kv_pool_cls

        return quantization_config(quantization)

    def get_kv_pool_cls(self, *, kind):
        # Function-level (as every backend and layer module here): SGLang asks
        # for the platform class while it resolves the platform, before
        # development mode may have set TRITON_INTERPRET for our kernels.
        from ..backends.kv_pool import KunlunMHATokenToKVPool, KunlunMLATokenToKVPool

        return {"mha": KunlunMHATokenToKVPool, "mla": KunlunMLATokenToKVPool}.get(kind)

    def get_paged_allocator_cls(self):
        from ..backends.kv_pool import paged_allocator_cls  # function-level: see get_kv_pool_cls

        return paged_allocator_cls()

    def get_communicator_class(self):
        # SGLang 0.5.23 never calls this; the collectives reach our
        # communicator through the GroupCoordinator hooks (layers/collectives.py).
        # Function-level: see get_kv_pool_cls (the communicator has kernels).
        from ...comm import TPCommunicator

        return TPCommunicator

    def get_group_coordinator_device(self, local_rank: int) -> torch.device:
        if self.device_type == "cpu":
            return torch.device("cpu")
        return torch.device(f"cuda:{local_rank}")

    def init_backend(self) -> None:
        install("plugin")
        # Only here, on the active kunlun platform: the general plugin also
        # runs under other platforms, whose collectives must stay theirs.
        install("platform")

    def apply_server_args_defaults(self, server_args) -> None:
        # Also the general plugin's scope: SGLang skips general plugins of a
        # distribution that has a platform entry point not named by
        # SGLANG_PLATFORM (srt/plugins: _get_excluded_dists), and ours has two
        # names (kunlun, kunlun_triton). Idempotent where it did run.
        install("plugin")
        apply_defaults(self, server_args)

    # -- speculative decoding (speculative/, docs/speculative.md) ------------

    def supports_speculative_algorithm(self, algorithm) -> bool:
        return serves(algorithm)

    def supports_speculative_draft_attention_backend(self, algorithm, backend) -> bool:
        return serves(algorithm) and backend == ATTENTION_BACKEND

    def get_default_speculative_draft_attention_backend(self, algorithm) -> str:
        return ATTENTION_BACKEND

    def get_speculative_cache_locs_fn(self):
        return speculative_cache_locs

    def get_speculative_graph_runner_cls(self, algorithm, phase):
        return None  # the draft phases run eagerly (no draft graph metadata in our backend)

    def support_mamba_cache_extra_buffer(self) -> bool:
        return True  # the GDN kernels write SGLang's state snapshots (linear_attention/gdn.py)

    def post_load_model(self, model) -> None:
        from ..layers.moe import check_model  # function-level: see get_kv_pool_cls
        from ..linear_attention import apply_after_load

        check_model(model)  # quantized or expert-parallel MoE cannot run here: say so now
        apply_after_load(model)  # the GDN layers' hooks (linear_attention/: the module needs model_runner loaded)
        logger.info("kunlun-triton: model loaded; kernels run on target %s", current_target())


def device_graphs_available(target_name: str) -> bool:
    """Decode graph capture on this target (its capability profile: CUDA and
    HIP always; Kunlun when its vendor torch exposes device graphs), else
    off, said once."""
    if device_graphs(target_name):
        return True
    logger.info("kunlun-triton: no device graphs on target %s; decode runs eagerly (--disable-cuda-graph)", target_name)
    return False


class KunlunPlatform(KunlunDeviceMixin, _SGLangCompat, _KunlunSRTPlatformBase):
    """A Kunlun card (or a GPU, with ``KUNLUN_TRITON_TARGET=cuda|hip``)."""

    def __init__(self) -> None:
        super().__init__()
        graphs = device_graphs_available(current_target().name)
        self.capabilities = make_capabilities(supports_triton=True, graph_capture=graphs)

    def get_graph_runner_cls(self):
        """SGLang's decode graph runner: our attention backend implements the
        0.5.23 out_graph / in_graph metadata contract; device is ``cuda``."""
        from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner

        return DecodeCudaGraphRunner


class KunlunDevPlatform(KunlunDevDeviceMixin, _SGLangCompat, _KunlunSRTPlatformBase):
    """CPU development mode. SGLang's own small Triton kernels (allocator,
    request-table writes) stay on their torch paths: they were decorated at
    import time, possibly before TRITON_INTERPRET was set, so they would try a
    GPU. Ours are imported lazily, after it is set. No device graphs on the
    host: decode runs eagerly (``--disable-cuda-graph`` is forced)."""

    capabilities = make_capabilities(supports_triton=False, graph_capture=False)

    def __init__(self) -> None:
        super().__init__()
        if not dev_mode():
            # Selected directly by class name: make the mode consistent.
            enter_dev_mode()
