"""Collectives for a tensor-parallel (or expert-parallel / attention-DP)
group over ``torch.distributed``. The even collectives live here, the
uneven ones (``all_to_all``, ``all_gatherv``, ``reduce_scatterv``) in
``uneven.py``; checked mode's descriptions in ``checked.py``.

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
watchdog end a hang. The timeout is ``timeout_s`` or, when not given,
``KUNLUN_TRITON_COMM_TIMEOUT_S`` (default 600 s); anything but a finite
number of seconds > 0 is refused when the communicator is built.

Checked mode (``checked=``, or ``KUNLUN_TRITON_COMM_CHECKED``; on by default
for gloo, off for device backends) exchanges a 12-integer description of
each call first (collective, dtype, shape, op / dim / src) with one small
all-gather: when the ranks disagree, every rank raises ``CollectiveError``
listing what each rank passed, nothing is sent, and the group stays usable.
Unchecked, mismatched sizes reach the backend, which aborts the process
(gloo: ``EnforceNotMet``, then ``std::terminate``) or hangs until the
timeout. The exchange costs one more collective per call and, on a device,
a host sync, which is why device backends skip it: under SGLang every TP
rank runs the same forward on the same scheduled batch (the scheduler
broadcasts it to the group), so every collective is called in the same
order with the same shapes on all ranks and the exchange would never fire.

What a failed collective leaves (the error says it too): on gloo the
in-place ones (``all_reduce``, ``broadcast``) work on a private copy and
write the input only once the collective succeeded, so a failure leaves the
input as it was; the others return new tensors and never write the input.
On device backends ``all_reduce``/``broadcast`` run in place (a copy would
cost a pass over the tensor on every call), so after a failure the input's
contents are undefined. After ``CollectiveTimeout`` the group is unusable:
the collective may still be pending in the backend.
"""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist

from ..runtime.env import env_flag
from ..runtime.log import logger
from .checked import check_dim, describe, describe_text, dim_code, disagreement, op_code, reduce_op, row_length
from .setup import (  # noqa: F401  (default_backend and the errors: this module's names since the start)
    DEFAULT_TIMEOUT_S,
    CollectiveError,
    CollectiveTimeout,
    default_backend,
    timeout_seconds,
)
from .uneven import UnevenCollectives

_LOW_PRECISION = (torch.float16, torch.bfloat16)
_UNTOUCHED = "the input tensor is unchanged (the result was never returned)"
_DEAD = "; the group is unusable now (the collective may still be pending): end the process"
_KEPT = "nothing was sent, the inputs are unchanged and the group is still usable"


def init_tp_group(
    rank: int,
    world_size: int,
    init_method: str,
    backend: str | None = None,
    timeout_s: float | None = None,
    name: str = "tp",
    checked: bool | None = None,
) -> TPCommunicator:
    """Start ``torch.distributed`` (if needed) and return a communicator over
    all ``world_size`` ranks. ``init_method`` e.g. ``tcp://127.0.0.1:29500``.
    ``timeout_s`` as for `TPCommunicator`, checked before anything starts."""
    timeout_s = timeout_seconds(timeout_s, "init_tp_group")
    backend = backend or default_backend()
    timeout = datetime.timedelta(seconds=timeout_s)
    if not dist.is_initialized():
        try:
            dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size, timeout=timeout)
        except Exception as exc:  # rendezvous that never completes, bad address, ...
            raise CollectiveError(
                f"init of group '{name}' (rank {rank} of {world_size}, backend {backend}, {init_method}) failed: {exc}"
            ) from exc
    return TPCommunicator(None, name=name, backend=backend, timeout_s=timeout_s, checked=checked)


class TPCommunicator(UnevenCollectives):
    """all_reduce / all_gather / reduce_scatter / broadcast / barrier on one
    process group (``None``: the default group).

    ``timeout_s``: seconds a gloo collective waits for its peers (None:
    ``KUNLUN_TRITON_COMM_TIMEOUT_S``, default 600). ``checked``: exchange
    each call's description first so mismatched calls raise on every rank
    (None: ``KUNLUN_TRITON_COMM_CHECKED``, default on for gloo only). See
    the module docstring for what a failed collective leaves."""

    def __init__(self, group=None, *, name: str = "tp", backend: str | None = None,
                 timeout_s: float | None = None, upcast_low_precision: bool | None = None,
                 checked: bool | None = None):
        self.timeout_s = timeout_seconds(timeout_s)  # before anything touches the group
        self.group = group
        self.name = name
        self.backend = backend or dist.get_backend(group)
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.upcast = self.backend == "gloo" if upcast_low_precision is None else upcast_low_precision
        if checked is None:
            checked = env_flag("KUNLUN_TRITON_COMM_CHECKED", self.backend == "gloo")
        self.checked = bool(checked)
        # gloo: in-place collectives run on a private copy (see the module docstring)
        self.private_inplace = self.backend == "gloo"

    def __repr__(self) -> str:
        return f"TPCommunicator('{self.name}', rank {self.rank} of {self.world_size}, backend {self.backend})"

    # ------------------------------------------------------------ collectives

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Reduce ``tensor`` across the group in place; returns it."""
        if self.world_size == 1:
            reduce_op(op)  # the checks the group's ranks run, on one rank too
            return tensor
        self._agree("all_reduce", tensor, op_code(op))
        torch_op = reduce_op(op)
        work = self._wide(tensor, op)
        if work is tensor and self.private_inplace:
            work = tensor.clone(memory_format=torch.contiguous_format)
        self._run("all_reduce", lambda: dist.all_reduce(work, op=torch_op, group=self.group, async_op=True),
                  self._inplace_leaves())
        if work is not tensor:
            tensor.copy_(work)
        return tensor

    def all_gather(self, tensor: torch.Tensor, dim: int = 0) -> torch.Tensor:
        """Every rank's ``tensor`` concatenated along ``dim``, in rank order."""
        if self.world_size == 1:
            check_dim("all_gather", tensor, dim)
            return tensor.clone()
        self._agree("all_gather", tensor, dim_code(tensor, dim))
        src = tensor.movedim(dim, 0).contiguous()
        out = src.new_empty((self.world_size * src.shape[0], *src.shape[1:]))
        self._run("all_gather", lambda: dist.all_gather_into_tensor(out, src, group=self.group, async_op=True),
                  _UNTOUCHED)
        return out.movedim(0, dim)

    def reduce_scatter(self, tensor: torch.Tensor, dim: int = 0, op: str = "sum") -> torch.Tensor:
        """This rank's chunk (``dim`` split evenly in rank order) of the
        group's reduction of ``tensor``."""
        if self.world_size > 1:
            # first: a rank whose shape differs must not fail alone below
            self._agree("reduce_scatter", tensor, dim_code(tensor, dim) * 8 + op_code(op))
        else:
            reduce_op(op)
            check_dim("reduce_scatter", tensor, dim)
        size = tensor.shape[dim]
        if size % self.world_size:
            raise ValueError(f"reduce_scatter: dim {dim} of size {size} does not split over {self.world_size} ranks")
        if self.world_size == 1:
            return tensor.clone()
        torch_op = reduce_op(op)
        src = self._wide(tensor.movedim(dim, 0).contiguous(), op)
        out = src.new_empty((size // self.world_size, *src.shape[1:]))
        self._run(
            "reduce_scatter",
            lambda: dist.reduce_scatter_tensor(out, src, op=torch_op, group=self.group, async_op=True),
            _UNTOUCHED,
        )
        return out.to(tensor.dtype).movedim(0, dim)

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        """``tensor`` of group rank ``src`` on every rank, in place."""
        if self.world_size == 1:
            if not (isinstance(src, int) and src == 0):
                raise ValueError(f"broadcast: src {src} is not a rank of group '{self.name}' (0..0)")
            return tensor
        self._agree("broadcast", tensor, src)
        if not 0 <= src < self.world_size:
            raise ValueError(f"broadcast: src {src} is not a rank of group '{self.name}' (0..{self.world_size - 1})")
        root = dist.get_global_rank(self.group, src) if self.group is not None else src
        work = tensor
        if self.private_inplace or not tensor.is_contiguous():
            work = tensor.clone(memory_format=torch.contiguous_format)
        self._run("broadcast", lambda: dist.broadcast(work, root, group=self.group, async_op=True),
                  self._inplace_leaves())
        if work is not tensor and self.rank != src:
            tensor.copy_(work)
        return tensor

    def barrier(self) -> None:
        """Wait for every rank. On gloo a monitored barrier names the ranks
        that did not arrive."""
        if self.world_size == 1:
            return
        self._agree("barrier", None, 0)
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

    def _inplace_leaves(self) -> str:
        if self.private_inplace:
            return "the input tensor is unchanged (the collective ran on a copy)"
        return ("the input tensor's contents are undefined (the collective runs in place and may have written "
                "part of it)")

    def _agree(self, collective: str, tensor, extra: int, problem: str | None = None, a=None, b=None):
        """Checked mode: every rank's description of this call, compared on
        the host; a mismatch, or arguments one rank refused (``problem``),
        raise on every rank before anything is sent. Returns the ranks' rows
        (None unchecked, where ``problem`` raises at once: the peers then
        fail on their own, or wait until the timeout)."""
        if not self.checked:
            if problem:
                raise ValueError(problem)
            return None
        world = self.world_size
        mine = describe(collective, tensor, extra, world, problem is not None, a, b)
        device = "cpu" if self.backend == "gloo" else (tensor.device if tensor is not None else "cuda")
        table = torch.empty(world * row_length(world), dtype=torch.int64, device=device)
        mine_t = torch.tensor(mine, dtype=torch.int64, device=device)
        self._run(f"{collective} (checked mode's shape exchange)",
                  lambda: dist.all_gather_into_tensor(table, mine_t, group=self.group, async_op=True), _UNTOUCHED)
        rows = table.view(world, row_length(world)).cpu().tolist()
        why = disagreement(rows, world)
        if problem:
            raise ValueError(f"{problem} (refused on every rank of group '{self.name}': {_KEPT})")
        if why:
            calls = ", ".join(f"rank {r}: {describe_text(row, world)}" for r, row in enumerate(rows))
            raise CollectiveError(self._message(collective, f"refused: {why} ({calls}); {_KEPT}"))
        return rows

    def _run(self, collective: str, start, leaves: str = "") -> None:
        """Start the collective and wait for it with the group's timeout.
        `leaves`: what a failure leaves of the caller's tensors, for the error."""
        after = f"; {leaves}" if leaves else ""
        try:
            work = start()
            if work is None:
                return
            if self.backend != "gloo":
                # Device backends (nccl, Kunlun's): a plain wait only orders the
                # current stream after the collective. A host-side timeout would
                # synchronise the CPU with the device on every call, so hangs are
                # left to the process group's own timeout (its watchdog).
                if work.wait() is False:
                    raise CollectiveTimeout(self._message(collective, f"did not complete{after}{_DEAD}"))
            elif not work.wait(timeout=datetime.timedelta(seconds=self.timeout_s)):
                raise CollectiveTimeout(self._message(collective, f"did not complete{after}{_DEAD}"))
        except CollectiveError:
            raise
        except Exception as exc:
            text = str(exc)
            if "timed out" in text.lower() or "timeout" in text.lower():
                raise CollectiveTimeout(self._message(
                    collective, f"timed out after {self.timeout_s:g}s: a peer never arrived ({text}){after}{_DEAD}"
                )) from exc
            raise CollectiveError(self._message(collective, f"failed: {text}{after}")) from exc

    def _message(self, collective: str, what: str) -> str:
        return (
            f"{collective} on group '{self.name}' (rank {self.rank} of {self.world_size}, "
            f"backend {self.backend}) {what}"
        )


