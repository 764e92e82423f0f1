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
import math
import numbers

import torch
import torch.distributed as dist

from ..runtime.env import EnvError, env_flag, env_float, env_str
from ..runtime.log import logger

DEFAULT_TIMEOUT_S = 600.0
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
        # torch's own backends plus the ones a vendor build registers (bkcl):
        # a typo fails here naming the variable, not in init_process_group.
        known = sorted({b for b in dist.Backend.backend_list if b not in ("undefined", "fake")} | {"bkcl"})
        if forced.lower() not in known:
            raise EnvError("KUNLUN_TRITON_DIST_BACKEND", forced, "one of " + ", ".join(known))
        return forced.lower()
    if target_name is None:
        from ..runtime import current_target

        target_name = current_target().name
    from ..runtime.capabilities import profile  # the target's collective backend is a fact of its profile

    return profile(target_name).collective_backend


def timeout_seconds(timeout_s=None, where: str = "TPCommunicator") -> float:
    """``timeout_s`` checked (a finite number of seconds > 0 that a
    ``timedelta`` holds), or ``KUNLUN_TRITON_COMM_TIMEOUT_S`` when None."""
    if timeout_s is None:
        value = env_float("KUNLUN_TRITON_COMM_TIMEOUT_S", DEFAULT_TIMEOUT_S)  # EnvError unless finite and > 0
        if value > _MAX_TIMEOUT_S:
            raise EnvError("KUNLUN_TRITON_COMM_TIMEOUT_S", env_str("KUNLUN_TRITON_COMM_TIMEOUT_S"),
                           f"a number of seconds in (0, {_MAX_TIMEOUT_S:g}]")
        return value
    ok = isinstance(timeout_s, numbers.Real) and not isinstance(timeout_s, bool)
    value = float(timeout_s) if ok else math.nan
    if not (math.isfinite(value) and 0 < value <= _MAX_TIMEOUT_S):
        raise ValueError(
            f"{where}: timeout_s must be a finite number of seconds in (0, {_MAX_TIMEOUT_S:g}], got {timeout_s!r}"
        )
    return value


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


class TPCommunicator:
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
            _reduce_op(op)  # the checks the group's ranks run, on one rank too
            return tensor
        self._agree("all_reduce", tensor, _op_code(op))
        reduce_op = _reduce_op(op)
        work = self._wide(tensor, op)
        if work is tensor and self.private_inplace:
            work = tensor.clone(memory_format=torch.contiguous_format)
        self._run("all_reduce", lambda: dist.all_reduce(work, op=reduce_op, group=self.group, async_op=True),
                  self._inplace_leaves())
        if work is not tensor:
            tensor.copy_(work)
        return tensor

    def all_gather(self, tensor: torch.Tensor, dim: int = 0) -> torch.Tensor:
        """Every rank's ``tensor`` concatenated along ``dim``, in rank order."""
        if self.world_size == 1:
            _check_dim("all_gather", tensor, dim)
            return tensor.clone()
        self._agree("all_gather", tensor, _dim_code(tensor, dim))
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
            self._agree("reduce_scatter", tensor, _dim_code(tensor, dim) * 8 + _op_code(op))
        else:
            _reduce_op(op)
            _check_dim("reduce_scatter", tensor, dim)
        size = tensor.shape[dim]
        if size % self.world_size:
            raise ValueError(f"reduce_scatter: dim {dim} of size {size} does not split over {self.world_size} ranks")
        if self.world_size == 1:
            return tensor.clone()
        reduce_op = _reduce_op(op)
        src = self._wide(tensor.movedim(dim, 0).contiguous(), op)
        out = src.new_empty((size // self.world_size, *src.shape[1:]))
        self._run(
            "reduce_scatter",
            lambda: dist.reduce_scatter_tensor(out, src, op=reduce_op, group=self.group, async_op=True),
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

    def _agree(self, collective: str, tensor, extra: int) -> None:
        """Checked mode: every rank's description of this call, compared on
        the host; a mismatch raises on every rank before anything is sent."""
        if not self.checked:
            return
        mine = _describe(collective, tensor, extra)
        device = "cpu" if self.backend == "gloo" else (tensor.device if tensor is not None else "cuda")
        table = torch.empty(self.world_size * _DESC_LEN, dtype=torch.int64, device=device)
        mine_t = torch.tensor(mine, dtype=torch.int64, device=device)
        self._run(f"{collective} (checked mode's shape exchange)",
                  lambda: dist.all_gather_into_tensor(table, mine_t, group=self.group, async_op=True), _UNTOUCHED)
        rows = table.view(self.world_size, _DESC_LEN).cpu().tolist()
        if any(row != mine for row in rows):
            calls = ", ".join(f"rank {r}: {_describe_text(row)}" for r, row in enumerate(rows))
            raise CollectiveError(self._message(
                collective, f"refused: the ranks' calls do not match ({calls}); nothing was sent, the inputs are "
                "unchanged and the group is still usable"))

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


_MAX_TIMEOUT_S = 365 * 24 * 3600.0  # a year: beyond it a "timeout" is a hang
_UNTOUCHED = "the input tensor is unchanged (the result was never returned)"
_DEAD = "; the group is unusable now (the collective may still be pending): end the process"
_OP_NAMES = ("sum", "max", "min", "product")
_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier")
_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int16,
           torch.int8, torch.uint8, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2)
_MAX_DIMS = 8
_DESC_LEN = 4 + _MAX_DIMS  # collective, dtype, extra, ndim, dims (the 8th holds the product of the rest)


def _op_code(op) -> int:
    """1.. for a known reduction, 0 for anything else (refused after the exchange)."""
    return _OP_NAMES.index(op) + 1 if op in _OP_NAMES else 0


def _dim_code(tensor, dim) -> int:
    """``dim`` counted from 0 (-1 and ndim-1 agree); out of range: as given."""
    n = tensor.dim()
    return dim % n if isinstance(dim, int) and n and -n <= dim < n else (dim if isinstance(dim, int) else -99)


def _check_dim(collective: str, tensor, dim) -> None:
    n = tensor.dim()
    if isinstance(dim, bool) or not isinstance(dim, int) or not -max(n, 1) <= dim < max(n, 1):
        raise ValueError(f"{collective}: dim {dim!r} is out of range for a {n}-D tensor")


def _describe(collective: str, tensor, extra: int) -> list[int]:
    """A fixed-length description of one call (same length on every rank)."""
    row = [_COLLECTIVES.index(collective), -1, int(extra), -1] + [-1] * _MAX_DIMS
    if tensor is not None:
        shape = list(tensor.shape)
        if len(shape) > _MAX_DIMS:
            shape = shape[: _MAX_DIMS - 1] + [math.prod(shape[_MAX_DIMS - 1 :])]
        row[1] = _DTYPES.index(tensor.dtype) if tensor.dtype in _DTYPES else len(_DTYPES)
        row[3] = tensor.dim()
        row[4 : 4 + len(shape)] = shape
    return row


def _describe_text(row: list[int]) -> str:
    name = _COLLECTIVES[row[0]] if 0 <= row[0] < len(_COLLECTIVES) else "?"
    if row[3] < 0:
        return f"{name}()"
    dtype = str(_DTYPES[row[1]]).replace("torch.", "") if 0 <= row[1] < len(_DTYPES) else "other dtype"
    shape = row[4 : 4 + min(row[3], _MAX_DIMS)]
    extra = row[2]
    op = lambda code: _OP_NAMES[code - 1] if 1 <= code <= len(_OP_NAMES) else "unknown op"  # noqa: E731
    arg = {"all_reduce": lambda: op(extra), "broadcast": lambda: f"src {extra}", "all_gather": lambda: f"dim {extra}",
           "reduce_scatter": lambda: f"dim {extra // 8}, {op(extra % 8)}"}.get(name, lambda: str(extra))()
    return f"{name}({dtype}{shape}, {arg})"


def _reduce_op(op: str):
    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN, "product": dist.ReduceOp.PRODUCT}
    if op == "avg":
        raise ValueError("op='avg' is not portable across backends; sum and divide by world_size")
    if op not in ops:
        raise ValueError(f"unknown reduction {op!r}; expected one of {', '.join(ops)}")
    return ops[op]
