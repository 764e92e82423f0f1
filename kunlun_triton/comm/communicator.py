"""Collectives for a tensor-parallel group over ``torch.distributed``.

Backend per target (``KUNLUN_TRITON_DIST_BACKEND`` or ``backend=`` override):

- ``kunlun``: ``"nccl"``. Kunlun's vendor torch exposes its cards as
  ``cuda`` and answers the ``nccl`` backend name with its own collective
  library; Baidu's vLLM-Kunlun platform declares ``dist_backend = "nccl"``
  for that reason. Not verified here (no Kunlun card reachable): if a vendor
  build registers another name (``"bkcl"``/``"xccl"``), set the variable;
- ``cuda``: ``"nccl"``; ``hip``: ``"nccl"`` (ROCm torch maps it to RCCL);
- ``interpreter`` / ``torch`` (CPU): ``"gloo"``.

On gloo, fp16/bf16 sums are done in fp32 (upcast, reduce, cast back, said in
a debug line): gloo adds in the tensor's own precision, and older torch
builds have no bf16 gloo reduction at all.

A peer that never arrives makes the collective fail after the group's
timeout with ``CollectiveTimeout`` naming the collective, the group, the
rank and the backend, instead of hanging. That host-side wait is gloo's
only: on device backends it would stall the host on every collective, so
there the process group's own timeout (set by `init_tp_group`) and its
watchdog end a hang.
"""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist

from ..runtime.env import env_str
from ..runtime.log import logger

DEFAULT_TIMEOUT_S = 600.0
_TARGET_BACKENDS = {"kunlun": "nccl", "cuda": "nccl", "hip": "nccl", "interpreter": "gloo", "torch": "gloo"}
_LOW_PRECISION = (torch.float16, torch.bfloat16)


class CollectiveError(RuntimeError):
    """A collective failed; the message names it and its group."""


class CollectiveTimeout(CollectiveError):
    """A collective did not complete within the group's timeout. The group is
    unusable afterwards (the collective may still be pending in the backend):
    end the process rather than retry on it."""


def default_backend(target_name: str | None = None) -> str:
    forced = env_str("KUNLUN_TRITON_DIST_BACKEND")
    if forced:
        return forced
    if target_name is None:
        from ..runtime import current_target

        target_name = current_target().name
    return _TARGET_BACKENDS.get(target_name, "gloo")


def init_tp_group(
    rank: int,
    world_size: int,
    init_method: str,
    backend: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    name: str = "tp",
) -> TPCommunicator:
    """Start ``torch.distributed`` (if needed) and return a communicator over
    all ``world_size`` ranks. ``init_method`` e.g. ``tcp://127.0.0.1:29500``."""
    backend = backend or default_backend()
    timeout = datetime.timedelta(seconds=timeout_s)
    if not dist.is_initialized():
        try:
            dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size, timeout=timeout)
        except Exception as exc:  # rendezvous that never completes, bad address, ...
            raise CollectiveError(
                f"init of group '{name}' (rank {rank} of {world_size}, backend {backend}, {init_method}) failed: {exc}"
            ) from exc
    return TPCommunicator(None, name=name, backend=backend, timeout_s=timeout_s)


class TPCommunicator:
    """all_reduce / all_gather / reduce_scatter / broadcast / barrier on one
    process group (``None``: the default group)."""

    def __init__(self, group=None, *, name: str = "tp", backend: str | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, upcast_low_precision: bool | None = None):
        self.group = group
        self.name = name
        self.backend = backend or dist.get_backend(group)
        self.timeout_s = timeout_s
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.upcast = self.backend == "gloo" if upcast_low_precision is None else upcast_low_precision

    def __repr__(self) -> str:
        return f"TPCommunicator('{self.name}', rank {self.rank} of {self.world_size}, backend {self.backend})"

    # ------------------------------------------------------------ collectives

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Reduce ``tensor`` across the group in place; returns it."""
        if self.world_size == 1:
            return tensor
        work = self._wide(tensor, op)
        self._run("all_reduce", lambda: dist.all_reduce(work, op=_reduce_op(op), group=self.group, async_op=True))
        if work is not tensor:
            tensor.copy_(work)
        return tensor

    def all_gather(self, tensor: torch.Tensor, dim: int = 0) -> torch.Tensor:
        """Every rank's ``tensor`` concatenated along ``dim``, in rank order."""
        if self.world_size == 1:
            return tensor.clone()
        src = tensor.movedim(dim, 0).contiguous()
        out = src.new_empty((self.world_size * src.shape[0], *src.shape[1:]))
        self._run("all_gather", lambda: dist.all_gather_into_tensor(out, src, group=self.group, async_op=True))
        return out.movedim(0, dim)

    def reduce_scatter(self, tensor: torch.Tensor, dim: int = 0, op: str = "sum") -> torch.Tensor:
        """This rank's chunk (``dim`` split evenly in rank order) of the
        group's reduction of ``tensor``."""
        size = tensor.shape[dim]
        if size % self.world_size:
            raise ValueError(f"reduce_scatter: dim {dim} of size {size} does not split over {self.world_size} ranks")
        if self.world_size == 1:
            return tensor.clone()
        src = self._wide(tensor.movedim(dim, 0).contiguous(), op)
        out = src.new_empty((size // self.world_size, *src.shape[1:]))
        self._run(
            "reduce_scatter",
            lambda: dist.reduce_scatter_tensor(out, src, op=_reduce_op(op), group=self.group, async_op=True),
        )
        return out.to(tensor.dtype).movedim(0, dim)

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        """``tensor`` of group rank ``src`` on every rank, in place."""
        if self.world_size == 1:
            return tensor
        root = dist.get_global_rank(self.group, src) if self.group is not None else src
        self._run("broadcast", lambda: dist.broadcast(tensor, root, group=self.group, async_op=True))
        return tensor

    def barrier(self) -> None:
        """Wait for every rank. On gloo a monitored barrier names the ranks
        that did not arrive."""
        if self.world_size == 1:
            return
        if self.backend == "gloo":
            self._run(
                "barrier",
                lambda: dist.monitored_barrier(
                    group=self.group, timeout=datetime.timedelta(seconds=self.timeout_s), wait_all_ranks=True
                ),
            )
        else:
            self._run("barrier", lambda: dist.barrier(group=self.group, async_op=True))

    # ------------------------------------------------------------ helpers

    def _wide(self, tensor: torch.Tensor, op: str) -> torch.Tensor:
        if self.upcast and tensor.dtype in _LOW_PRECISION and op == "sum":
            logger.debug("%s: %s reduction on %s runs in float32", self, tensor.dtype, self.backend)
            return tensor.float()
        return tensor

    def _run(self, collective: str, start) -> None:
        """Start the collective and wait for it with the group's timeout."""
        try:
            work = start()
            if work is None:
                return
            if self.backend != "gloo":
                # Device backends (nccl, Kunlun's): a plain wait only orders the
                # current stream after the collective. A host-side timeout would
                # synchronise the CPU with the device on every call, so hangs are
                # left to the process group's own timeout (its watchdog).
                work.wait()
            elif not work.wait(timeout=datetime.timedelta(seconds=self.timeout_s)):
                raise CollectiveTimeout(self._message(collective, "did not complete"))
        except CollectiveError:
            raise
        except Exception as exc:
            text = str(exc)
            if "timed out" in text.lower() or "timeout" in text.lower():
                raise CollectiveTimeout(
                    self._message(collective, f"timed out after {self.timeout_s:g}s: a peer never arrived ({text})")
                ) from exc
            raise CollectiveError(self._message(collective, f"failed: {text}")) from exc

    def _message(self, collective: str, what: str) -> str:
        return (
            f"{collective} on group '{self.name}' (rank {self.rank} of {self.world_size}, "
            f"backend {self.backend}) {what}"
        )


def _reduce_op(op: str):
    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN, "product": dist.ReduceOp.PRODUCT}
    if op == "avg":
        raise ValueError("op='avg' is not portable across backends; sum and divide by world_size")
    if op not in ops:
        raise ValueError(f"unknown reduction {op!r}; expected one of {', '.join(ops)}")
    return ops[op]
