"""How many KV tokens fit: SGLang's ``--mem-fraction-static`` arithmetic.

SGLang reserves ``total x (1 - fraction)`` of device memory for everything
that is not weights or KV cache (activations, graphs) and gives the KV cache
what is left once the weights are loaded:

    kv_budget       = total x fraction - already_taken        (bytes)
    bytes_per_token = layers x kv_heads x head_dim x 2 (K and V) x dtype size
    tokens          = kv_budget // bytes_per_token, rounded down to whole pages

``total`` and ``already_taken`` come from the device (``torch.cuda.mem_get_info``
on CUDA/HIP/Kunlun, whose vendor torch exposes its cards as ``cuda``) or,
on the CPU, from the host (physical memory and ``MemAvailable``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from ..runtime.log import logger


@dataclass(frozen=True)
class PoolSizing:
    total_bytes: int
    taken_bytes: int
    mem_fraction_static: float
    bytes_per_token: int
    page_size: int
    num_pages: int
    memory_source: str  # where total/taken came from

    @property
    def budget_bytes(self) -> int:
        return int(self.total_bytes * self.mem_fraction_static) - self.taken_bytes

    @property
    def num_tokens(self) -> int:
        return self.num_pages * self.page_size

    def __str__(self) -> str:
        gib = 1 << 30
        return (
            f"KV pool: {self.total_bytes / gib:.2f} GiB total ({self.memory_source}) x "
            f"{self.mem_fraction_static} - {self.taken_bytes / gib:.2f} GiB taken = "
            f"{self.budget_bytes / gib:.2f} GiB for KV; {self.bytes_per_token} B/token -> "
            f"{self.num_pages} pages x {self.page_size} = {self.num_tokens} tokens"
        )


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype, v_head_dim=None) -> int:
    """K and V rows of one token in every layer."""
    item = torch.empty((), dtype=dtype).element_size()
    return num_layers * num_kv_heads * (head_dim + (head_dim if v_head_dim is None else v_head_dim)) * item


def device_memory(device) -> tuple[int, int, str]:
    """``(total, taken, source)`` in bytes for ``device``."""
    device = torch.device(device)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return total, total - free, f"torch.cuda.mem_get_info({device})"
    return (*_host_memory(), "host memory (/proc/meminfo)")


def _host_memory() -> tuple[int, int]:
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    available = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if available is None:
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    return total, total - available


def plan_kv_pool(
    *,
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype,
    mem_fraction_static: float,
    page_size: int = 1,
    device="cpu",
    v_head_dim: int | None = None,
    total_memory: int | None = None,
    taken_memory: int | None = None,
) -> PoolSizing:
    """The pool size for a model and a memory fraction. ``total_memory`` and
    ``taken_memory`` (bytes) override what the device reports."""
    if not 0.0 < mem_fraction_static <= 1.0:
        raise ValueError(f"mem_fraction_static must be in (0, 1], got {mem_fraction_static}")
    if min(num_layers, num_kv_heads, head_dim, page_size) < 1:
        raise ValueError("num_layers, num_kv_heads, head_dim and page_size must be positive")
    source = "given"
    if total_memory is None or taken_memory is None:
        total, taken, source = device_memory(device)
        total_memory = total if total_memory is None else total_memory
        taken_memory = taken if taken_memory is None else taken_memory
    per_token = kv_bytes_per_token(num_layers, num_kv_heads, head_dim, dtype, v_head_dim)
    sizing = PoolSizing(
        total_bytes=int(total_memory),
        taken_bytes=int(taken_memory),
        mem_fraction_static=float(mem_fraction_static),
        bytes_per_token=per_token,
        page_size=page_size,
        num_pages=0,
        memory_source=source,
    )
    if sizing.budget_bytes <= 0:
        raise ValueError(
            f"no memory left for the KV cache: {sizing.total_bytes} B x {mem_fraction_static} "
            f"< {sizing.taken_bytes} B already taken; raise mem_fraction_static or free memory"
        )
    # SGLang's buffers hold one extra page (page 0, padding).
    pages = sizing.budget_bytes // (per_token * page_size) - 1
    if pages < 1:
        raise ValueError(f"{sizing.budget_bytes} B of KV budget holds no page of {page_size} tokens x {per_token} B")
    return PoolSizing(**{**sizing.__dict__, "num_pages": int(pages)})


def allocator_from_memory_fraction(cls, *, kvcache=None, need_sort=False, checked=None, **plan_args):
    sizing = plan_kv_pool(**plan_args)
    logger.info("%s", sizing)
    allocator = cls(
        sizing.num_tokens, sizing.page_size, plan_args.get("dtype"), plan_args.get("device", "cpu"),
        kvcache, need_sort, checked=checked,
    )
    allocator.sizing = sizing
    return allocator
