"""Collectives whose ranks pass different row counts: what expert
parallelism and data-parallel attention move (docs/scale-out.md says which
SGLang path calls which).

- ``all_to_all(x, send_splits, recv_splits=None)``: rank r sends rows
  ``send_splits[s]`` of ``x`` (in order, along dim 0) to rank s and gets back
  the rows every rank sent it, in rank order: token dispatch and combine.
- ``all_gatherv(x, sizes)``: every rank's ``x`` (``sizes[r]`` rows on rank r)
  concatenated in rank order: the DP-attention gather of per-rank batches of
  different sizes (idle ranks pass 0 rows).
- ``reduce_scatterv(x, sizes)``: rows ``sizes[r]`` of the group's reduction of
  ``x`` (``sum(sizes)`` rows, the same on every rank) to rank r: the
  DP-attention scatter back after the experts.

How they run (torch 2.13 and 2.14 read and tried): gloo has
``all_to_all_single`` with uneven splits and ``reduce_scatter`` with a list
of chunks of different sizes (zero-row chunks included), but its
``allgather`` refuses tensors of different sizes ("invalid tensor size") and
its ``alltoall`` has no float8 types ("Invalid scalar type"). So data that
is only moved (``all_to_all``, ``all_gatherv``) travels as a byte view of
its rows on every backend (any dtype, no copy), and on gloo ``all_gatherv``
is an ``all_to_all_single`` in which each rank sends its rows to every rank:
each rank's rows cross the wire once per peer, as an all-gather, with no
padding to the largest rank. On device backends it is torch's list
``all_gather``, which takes chunks of different sizes (nccl: one broadcast
per rank, grouped). ``reduce_scatterv`` is torch's list ``reduce_scatter``
everywhere, fp16/bf16 summed in fp32 on gloo as ``reduce_scatter``.

Bad input (checked mode, the default on gloo): splits or sizes that are not
``world_size`` non-negative ints, that do not sum to the rows given, an
``out`` buffer of the wrong dtype, shape or device, ranks whose calls
disagree (dtype, trailing shape, sizes, what one sends and the other
expects): every rank raises (ValueError naming the argument on the rank that
passed it, CollectiveError on the others) before anything is sent; inputs
and ``out`` are unchanged and the group stays usable. Unchecked (device
backends), a rank's own bad arguments raise ValueError on that rank and its
peers wait for it until the group's timeout, as in SGLang's own asserts."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from .checked import HEAD, as_splits, op_code, reduce_op

_UNTOUCHED = "the input tensor and out are unchanged (the result was never written)"


def _rows(collective: str, tensor) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{collective}: tensor must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dim() < 1:
        raise ValueError(f"{collective}: tensor must have at least one dim (rows along dim 0), got a 0-D tensor")


def _check_out(collective: str, out, tensor, rows: int) -> None:
    if out is None:
        return
    want = (rows, *tensor.shape[1:])
    if not isinstance(out, torch.Tensor):
        raise ValueError(f"{collective}: out must be a torch.Tensor, got {type(out).__name__}")
    if out.dtype != tensor.dtype:
        raise ValueError(f"{collective}: out has dtype {out.dtype}, the tensor {tensor.dtype}")
    if tuple(out.shape) != want:
        raise ValueError(f"{collective}: out has shape {list(out.shape)}, expected {list(want)}")
    if out.device != tensor.device:
        raise ValueError(f"{collective}: out is on {out.device}, the tensor on {tensor.device}")


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """Rows of ``t`` (contiguous) as uint8 rows: what a data-moving collective
    sends, in any dtype (gloo's alltoall has no float8)."""
    width = math.prod(t.shape[1:])
    if t.numel() == 0:  # an empty reshape may carry a 0 stride, which view() refuses
        return torch.empty((t.shape[0], width * t.element_size()), dtype=torch.uint8, device=t.device)
    return t.reshape(t.shape[0], width).view(torch.uint8)


class UnevenCollectives:
    """Mixed into TPCommunicator: uses its group, checked mode and waits."""

    def all_to_all(self, tensor: torch.Tensor, send_splits, recv_splits=None, out=None) -> torch.Tensor:
        """Rows of ``tensor`` (dim 0) scattered to the ranks by ``send_splits``;
        returns the rows received, in rank order (``recv_splits`` rows from
        each rank; exchanged when not given)."""
        name, world = "all_to_all", self.world_size
        send = recv = problem = None
        try:
            _rows(name, tensor)
            send = as_splits(send_splits, world, name, "send_splits")
            if sum(send) != tensor.shape[0]:
                raise ValueError(f"{name}: send_splits {send} sum to {sum(send)}, but tensor has "
                                 f"{tensor.shape[0]} rows (dim 0)")
            if recv_splits is not None:
                recv = as_splits(recv_splits, world, name, "recv_splits")
            if out is not None:
                if recv is None:
                    raise ValueError(f"{name}: out needs recv_splits (its row count)")
                _check_out(name, out, tensor, sum(recv))
        except ValueError as exc:
            problem = str(exc)
        if world == 1:
            if problem:
                raise ValueError(problem)
            if recv is not None and recv != send:
                raise ValueError(f"{name}: recv_splits {recv} on one rank must equal send_splits {send}")
            return _fill(out, tensor.clone())
        given = tensor if isinstance(tensor, torch.Tensor) else None
        rows = self._agree(name, given, 0, problem, send, recv)
        if recv is None:
            if rows is not None:  # the exchange carried every rank's send_splits
                recv = [row[HEAD + 1 + self.rank] for row in rows]
            else:
                recv = self._exchange_counts(send, tensor.device)
        src = tensor.contiguous()
        result = self._target(out, src, sum(recv))
        self._run(name, lambda: dist.all_to_all_single(_bytes(result), _bytes(src), recv, send,
                                                       group=self.group, async_op=True), self._leaves(out))
        return _fill(out, result)

    def all_gatherv(self, tensor: torch.Tensor, sizes, out=None) -> torch.Tensor:
        """Every rank's rows (``sizes[r]`` on rank r) concatenated in rank order."""
        name, world = "all_gatherv", self.world_size
        counts = problem = None
        try:
            _rows(name, tensor)
            counts = as_splits(sizes, world, name, "sizes")
            if tensor.shape[0] != counts[self.rank]:
                raise ValueError(f"{name}: tensor has {tensor.shape[0]} rows (dim 0) but sizes[{self.rank}] "
                                 f"(this rank) is {counts[self.rank]}")
            _check_out(name, out, tensor, sum(counts))
        except ValueError as exc:
            problem = str(exc)
        if world == 1:
            if problem:
                raise ValueError(problem)
            return _fill(out, tensor.clone())
        self._agree(name, tensor if isinstance(tensor, torch.Tensor) else None, 0, problem, counts)
        src = tensor.contiguous()
        result = self._target(out, src, sum(counts))
        if sum(counts):  # the same on every rank (checked mode makes sure)
            if self.backend == "gloo":
                # gloo's allgather refuses chunks of different sizes: every rank
                # sends its rows to every rank through its uneven alltoall.
                mine = _bytes(src).repeat(world, 1)
                start = lambda: dist.all_to_all_single(  # noqa: E731
                    _bytes(result), mine, counts, [counts[self.rank]] * world, group=self.group, async_op=True)
            else:
                chunks = list(_bytes(result).split(counts))
                start = lambda: dist.all_gather(chunks, _bytes(src), group=self.group, async_op=True)  # noqa: E731
            self._run(name, start, self._leaves(out))
        return _fill(out, result)

    def reduce_scatterv(self, tensor: torch.Tensor, sizes, op: str = "sum", out=None) -> torch.Tensor:
        """Rows ``sizes[rank]`` (in rank order along dim 0) of the group's
        reduction of ``tensor``, which has ``sum(sizes)`` rows on every rank."""
        name, world = "reduce_scatterv", self.world_size
        counts = problem = None
        try:
            _rows(name, tensor)
            try:
                reduce_op(op)
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
            counts = as_splits(sizes, world, name, "sizes")
            if sum(counts) != tensor.shape[0]:
                raise ValueError(f"{name}: sizes {counts} sum to {sum(counts)}, but tensor has "
                                 f"{tensor.shape[0]} rows (dim 0)")
            _check_out(name, out, tensor, counts[self.rank])
        except ValueError as exc:
            problem = str(exc)
        if world == 1:
            if problem:
                raise ValueError(problem)
            return _fill(out, tensor.clone())
        self._agree(name, tensor if isinstance(tensor, torch.Tensor) else None, op_code(op), problem, counts)
        work = self._wide(tensor.contiguous(), op)
        chunks = list(work.split(counts))
        result = work.new_empty((counts[self.rank], *work.shape[1:]))
        self._run(name, lambda: dist.reduce_scatter(result, chunks, op=reduce_op(op), group=self.group,
                                                    async_op=True), _UNTOUCHED)
        return _fill(out, result.to(tensor.dtype))

    def _target(self, out, src: torch.Tensor, rows: int) -> torch.Tensor:
        """Where the backend writes: ``out`` itself on device backends (no extra
        pass), a private buffer copied into ``out`` after success on gloo (so a
        failure leaves ``out`` as it was, as the in-place collectives)."""
        if out is not None and out.is_contiguous() and not self.private_inplace:
            return out
        return src.new_empty((rows, *src.shape[1:]))

    def _leaves(self, out) -> str:
        if out is None or self.private_inplace:
            return _UNTOUCHED
        return "the input tensor is unchanged; out's contents are undefined (the backend writes into it)"

    def _exchange_counts(self, send: list[int], device) -> list[int]:
        """Unchecked all_to_all without recv_splits: one all-to-all of the counts."""
        device = "cpu" if self.backend == "gloo" else device
        mine = torch.tensor(send, dtype=torch.int64, device=device)
        theirs = torch.empty_like(mine)
        self._run("all_to_all (split exchange)",
                  lambda: dist.all_to_all_single(theirs, mine, group=self.group, async_op=True), _UNTOUCHED)
        return theirs.cpu().tolist()


def _fill(out, result: torch.Tensor) -> torch.Tensor:
    if out is None or out is result:
        return result
    out.copy_(result)
    return out
