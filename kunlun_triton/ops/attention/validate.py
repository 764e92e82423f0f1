"""Input checks shared by the paged attention and KV-store ops.

Two tiers. Shape, dtype, device and layout checks read only tensor metadata
and always run. Metadata value checks (indptr monotone, slot ids in range,
max_len_extend large enough) read device tensors back to the host, a sync,
so they run in checked mode only: on by default (`check=True`), off per call
with `check=False` or everywhere with ``KUNLUN_TRITON_CHECK=0``.
"""

from __future__ import annotations

import os

import torch

from ...runtime import capabilities

INDEX_DTYPES = (torch.int32, torch.int64)


def checked_mode(check: bool) -> bool:
    return bool(check) and os.environ.get("KUNLUN_TRITON_CHECK", "1").strip().lower() not in ("0", "false", "no", "off")


def require_tensor(op: str, name: str, t, rank: int, *, float_data: bool = True, last_dim_contiguous: bool = True):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != rank:
        raise ValueError(f"{op}: {name} must have {rank} dimensions, got shape {tuple(t.shape)}")
    if float_data:
        if t.dtype not in capabilities().dtypes:
            raise TypeError(f"{op}: {name} has dtype {t.dtype}; supported: float32, float16, bfloat16")
    elif t.dtype not in INDEX_DTYPES:
        raise TypeError(f"{op}: {name} must be int32 or int64, got {t.dtype}")
    if last_dim_contiguous and t.numel() and t.stride(-1) != 1:
        raise ValueError(f"{op}: {name} must be contiguous in its last dimension (stride {t.stride(-1)})")


def require_same(op: str, what: str, **tensors_or_values):
    """All named values equal (dtypes, devices, sizes); the error names each."""
    values = list(tensors_or_values.values())
    if any(v != values[0] for v in values[1:]):
        listed = ", ".join(f"{k}={v}" for k, v in tensors_or_values.items())
        raise ValueError(f"{op}: {what} must match: {listed}")


def require_same_device(op: str, **tensors):
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        raise ValueError(f"{op}: all tensors must be on one device: " + ", ".join(f"{k} on {v}" for k, v in devices.items()))


def check_indptr(op: str, name: str, indptr: torch.Tensor, batch: int, limit: int, limit_name: str):
    if indptr.numel() != batch + 1:
        raise ValueError(f"{op}: {name} must have batch + 1 = {batch + 1} entries, got {indptr.numel()}")
    values = indptr.detach().cpu().long()
    if values.numel() and values[0] < 0:
        raise ValueError(f"{op}: {name}[0] = {int(values[0])} is negative")
    steps = values[1:] - values[:-1]
    if (steps < 0).any():
        i = int(torch.nonzero(steps < 0)[0])
        raise ValueError(f"{op}: {name} must be non-decreasing; {name}[{i}] = {int(values[i])} > {name}[{i + 1}] = {int(values[i + 1])}")
    if values.numel() and values[-1] > limit:
        raise ValueError(f"{op}: {name}[-1] = {int(values[-1])} exceeds {limit_name} = {limit}")
    return values


def check_slots(op: str, name: str, slots: torch.Tensor, num_slots: int, used: int | None = None):
    """Slot ids slots[:used] must lie in [0, num_slots)."""
    values = slots.detach()[: slots.numel() if used is None else used]
    if values.numel() == 0:
        return
    lo, hi = int(values.min()), int(values.max())
    if lo < 0 or hi >= num_slots:
        bad = lo if lo < 0 else hi
        raise ValueError(f"{op}: {name} holds slot id {bad}, outside the pool's [0, {num_slots})")


def check_kv_pool(op: str, q_heads: int, head_dim: int, k_buffer, v_buffer, q_name: str):
    """Pool shape rules shared by decode and extend: [slots, kv_heads, dim]."""
    require_tensor(op, "k_buffer", k_buffer, 3)
    require_tensor(op, "v_buffer", v_buffer, 3)
    require_same(op, "slot counts and kv head counts of the pools", k_buffer=tuple(k_buffer.shape[:2]), v_buffer=tuple(v_buffer.shape[:2]))
    require_same(op, "head dims of the query and the key pool", **{q_name: head_dim, "k_buffer": k_buffer.shape[2]})
    kv_heads = k_buffer.shape[1]
    if kv_heads == 0 or q_heads % kv_heads:
        raise ValueError(f"{op}: {q_name} has {q_heads} heads, not a multiple of the pool's {kv_heads} kv heads")
    return q_heads // kv_heads
