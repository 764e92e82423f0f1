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

from .env import env_choice, raw_env_token
from .log import debug_enabled, logger
from .target import current_target

BACKENDS = ("auto", "triton", "torch")


class DispatchError(RuntimeError):
    """KUNLUN_TRITON_BACKEND=triton but the Triton path cannot run."""


_parsed_backend: dict = {}


def forced_backend() -> str:
    raw = raw_env_token("KUNLUN_TRITON_BACKEND")
    backend = _parsed_backend.get(raw)
    if backend is None:  # parsed once per value: every op call asks
        backend = _parsed_backend[raw] = env_choice("KUNLUN_TRITON_BACKEND", BACKENDS, "auto")
    return backend


_lock = threading.Lock()
_report: dict[str, dict] = {}
_warned: set[str] = set()
# op -> (target, the two switches' raw values, device attribute, call counts)
# of its last Triton decision: `use_triton`'s fast path.
_last_triton: dict[str, tuple] = {}


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

    Every op calls this once per call, so the common answer (Triton, as last
    time) costs little: while the target and the two switches are the ones
    that decided last time (identity tests, no env decoding) it is one
    attribute per tensor and one counter (0.5 us against 1.8 us for the full
    decision on the build machine)."""
    last = _last_triton.get(op)
    if (last is not None and last[0] is current_target() and last[1] is raw_env_token("KUNLUN_TRITON_BACKEND")
            and last[2] is raw_env_token("KUNLUN_TRITON_DEBUG")):  # fmt: skip
        on_device = last[3]
        for t in tensors:
            if not getattr(t, on_device, True):  # a tensor elsewhere (non-tensors pass)
                break
        else:
            last[4]["triton"] += 1  # a lost count under a thread race is harmless
            return True
    return _decide(op, tensors)


def _decide(op: str, tensors) -> bool:
    backend = forced_backend()
    target = current_target()
    if backend == "torch":
        why = "KUNLUN_TRITON_BACKEND=torch"
    else:
        why = _why_not_triton(tensors)
        if why and backend == "triton":
            raise DispatchError(f"{op}: KUNLUN_TRITON_BACKEND=triton but {why}")
    if why is None:
        _record(op, "triton", f"target {target.name}", target)
        on_device = _ON_DEVICE.get(target.device_type)
        if on_device and not debug_enabled():
            _last_triton[op] = (target, raw_env_token("KUNLUN_TRITON_BACKEND"), raw_env_token("KUNLUN_TRITON_DEBUG"),
                                on_device, _report[op]["calls"])  # fmt: skip
        return True
    _last_triton.pop(op, None)
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
        _last_triton.clear()
