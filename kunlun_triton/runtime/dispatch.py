"""Triton kernel or torch reference, per op call, and a record of what ran.

Every public op asks `use_triton(op, *tensors)` once per call. The answer is
Triton when the active target lowers Triton and the tensors live where that
target runs; otherwise the op runs its torch reference. The first fallback of
each op logs one warning saying why; ``KUNLUN_TRITON_DEBUG=1`` logs every
decision. ``KUNLUN_TRITON_BACKEND=auto|triton|torch`` forces a path (``triton``
raises instead of falling back).
"""

from __future__ import annotations

import threading
from collections import defaultdict

import torch

from .env import env_choice, raw_env
from .log import debug_enabled, logger
from .target import current_target

BACKENDS = ("auto", "triton", "torch")


class DispatchError(RuntimeError):
    """KUNLUN_TRITON_BACKEND=triton but the Triton path cannot run."""


_parsed_backend: dict = {}


def forced_backend() -> str:
    raw = raw_env("KUNLUN_TRITON_BACKEND")
    backend = _parsed_backend.get(raw)
    if backend is None:  # parsed once per value: every op call asks
        backend = _parsed_backend[raw] = env_choice("KUNLUN_TRITON_BACKEND", BACKENDS, "auto")
    return backend


_lock = threading.Lock()
_report: dict[str, dict] = {}
_warned: set[str] = set()


_ON_DEVICE = {"cuda": "is_cuda", "cpu": "is_cpu", "meta": "is_meta"}  # cheaper than building t.device


def _why_not_triton(tensors) -> str | None:
    target = current_target()
    if not target.is_triton:
        return target.reason
    on_device = _ON_DEVICE.get(target.device_type)
    for t in tensors:
        if isinstance(t, torch.Tensor) and not (getattr(t, on_device) if on_device else t.device.type == target.device_type):
            return f"a tensor is on {t.device.type} but target {target.name} runs on {target.device_type}"
    return None


def use_triton(op: str, *tensors) -> bool:
    """Decide and record the implementation for one call of `op`.

    Every op calls this once per call, so the common answer (the same as
    last time) costs little: the env switch is parsed once per value, the
    device test is one attribute per tensor, the tally one counter."""
    backend = forced_backend()
    target = current_target()
    on_device = _ON_DEVICE.get(target.device_type)
    if backend != "torch" and target.is_triton and on_device:
        entry = _report.get(op)
        if (entry is not None and entry["target"] is target
                and all(getattr(t, on_device) for t in tensors if isinstance(t, torch.Tensor))
                and not debug_enabled()):  # fmt: skip
            with _lock:
                entry["calls"]["triton"] += 1
            return True
    if backend == "torch":
        why = "KUNLUN_TRITON_BACKEND=torch"
    else:
        why = _why_not_triton(tensors)
        if why and backend == "triton":
            raise DispatchError(f"{op}: KUNLUN_TRITON_BACKEND=triton but {why}")
    if why is None:
        _record(op, "triton", f"target {target.name}", target)
        return True
    _record(op, "torch", why)
    return False


def record_dispatch(op: str, impl: str, reason: str) -> None:
    """Record one call of `op` that ran through `impl` outside ``use_triton``
    (e.g. SGLang's collectives through ``kunlun_triton.comm``), so the
    dispatch report shows it next to the kernels."""
    _record(op, impl, reason)


def _record(op: str, impl: str, reason: str, target=None) -> None:
    with _lock:
        entry = _report.setdefault(op, {"impl": impl, "reason": reason, "calls": defaultdict(int)})
        entry["impl"], entry["reason"], entry["target"] = impl, reason, target
        entry["calls"][impl] += 1
        first_fallback = impl == "torch" and op not in _warned
        if first_fallback:
            _warned.add(op)
    if first_fallback:
        logger.warning("%s falls back to its torch reference: %s", op, reason)
    elif debug_enabled():
        logger.debug("%s -> %s (%s)", op, impl, reason)


def dispatch_report() -> dict[str, dict]:
    """What ran for each op so far: ``{op: {impl, reason, calls: {impl: n}}}``.

    ``impl`` is the latest call's implementation; ``calls`` counts both.
    """
    with _lock:
        return {
            op: {"impl": e["impl"], "reason": e["reason"], "calls": dict(e["calls"])}
            for op, e in sorted(_report.items())
        }


def reset_dispatch_report() -> None:
    with _lock:
        _report.clear()
        _warned.clear()
