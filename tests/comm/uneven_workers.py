"""Code each spawned rank runs for the uneven collectives (all_to_all,
all_gatherv, reduce_scatterv). Every rank builds every rank's inputs and
splits from the same seeds, so it computes the expected result itself by
slicing and concatenating (or summing) them: an oracle that never calls a
collective."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from kunlun_triton.comm import TPCommunicator, init_tp_group
from kunlun_triton.testing import assert_close

DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.float8_e4m3fn, torch.bool)


def rows_of(rank: int, n: int, trailing, dtype, seed: int) -> torch.Tensor:
    """Rank `rank`'s input: `n` rows, values unique to (rank, row)."""
    g = torch.Generator().manual_seed(seed * 1009 + rank)
    x = torch.randn((n, *trailing), generator=g) * 4
    if dtype == torch.bool:
        return x > 0
    return x.to(dtype)


def split_table(world: int, seed: int, idle: int | None = None) -> list[list[int]]:
    """table[r][s]: rows rank r sends to rank s (zeros included; rank `idle` sends nothing)."""
    g = torch.Generator().manual_seed(seed)
    table = torch.randint(0, 4, (world, world), generator=g).tolist()
    if idle is not None:
        table[idle] = [0] * world
    return table


def expected_all_to_all(xs, table, me):
    parts = []
    for s, x in enumerate(xs):
        start = sum(table[s][:me])
        parts.append(x[start : start + table[s][me]])
    return torch.cat(parts)


def _same(a, b, dtype, moved=True):
    if moved and dtype in (torch.float32, torch.int64, torch.bool, torch.float8_e4m3fn):
        # moved, not computed: bit for bit
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8)), (a, b)
    else:
        assert_close(a, b, dtype=dtype)


def uneven(rank, world, port):
    torch.set_num_threads(1)
    checked = init_tp_group(rank, world, f"tcp://127.0.0.1:{port}", backend="gloo", timeout_s=60, checked=True)
    unchecked = TPCommunicator(None, backend="gloo", timeout_s=60, checked=False)
    for comm in (checked, unchecked):
        for case, dtype in enumerate(DTYPES):
            trailing = (3,) if case % 2 else (2, 5)
            idle = case % world if case >= 2 else None
            table = split_table(world, seed=case, idle=idle)
            xs = [rows_of(r, sum(table[r]), trailing, dtype, seed=case) for r in range(world)]
            want = expected_all_to_all(xs, table, rank)
            recv = [table[s][rank] for s in range(world)]
            _same(comm.all_to_all(xs[rank], table[rank]), want, dtype)
            _same(comm.all_to_all(xs[rank], table[rank], recv_splits=recv), want, dtype)
            out = torch.zeros_like(want)
            assert comm.all_to_all(xs[rank], table[rank], recv_splits=recv, out=out) is out
            _same(out, want, dtype)
            # all_gatherv: per-rank batches of different sizes, one rank idle
            sizes = [table[r][0] + (r % 2) for r in range(world)]
            if idle is not None:
                sizes[idle] = 0
            ys = [rows_of(r, sizes[r], trailing, dtype, seed=100 + case) for r in range(world)]
            _same(comm.all_gatherv(ys[rank], sizes), torch.cat(ys), dtype)
            if dtype in (torch.int64, torch.bool, torch.float8_e4m3fn):
                continue  # no sum of these on gloo (and none needed: hidden states are float)
            # reduce_scatterv: the global buffer, sum of every rank's, back in per-rank rows
            zs = [rows_of(r, sum(sizes), trailing, dtype, seed=200 + case) for r in range(world)]
            total = torch.stack([z.double() for z in zs]).sum(0)
            start = sum(sizes[:rank])
            want = total[start : start + sizes[rank]].to(dtype)
            _same(comm.reduce_scatterv(zs[rank], sizes), want, dtype, moved=False)
            peak = torch.stack([z.double() for z in zs]).max(0).values[start : start + sizes[rank]].to(dtype)
            _same(comm.reduce_scatterv(zs[rank], sizes, op="max"), peak, dtype, moved=False)
    _device_path(rank, world)
    _moe_dp_round_trip(checked)
    checked.barrier()
    dist.destroy_process_group()


def _device_path(rank, world):
    """The device backends' all_gatherv (torch's list all_gather, out written
    in place) on gloo, with equal sizes: gloo refuses unequal ones, which is
    why gloo takes the all-to-all path above."""
    comm = TPCommunicator(None, backend="nccl", timeout_s=60, checked=False)
    ys = [rows_of(r, 3, (4,), torch.bfloat16, seed=7) for r in range(world)]
    out = torch.zeros(3 * world, 4, dtype=torch.bfloat16)
    assert comm.all_gatherv(ys[rank], [3] * world, out=out) is out
    _same(out, torch.cat(ys), torch.float32)


def _moe_dp_round_trip(comm):
    """DP attention around an MoE layer: per-rank batches (one idle) gathered,
    a token-wise layer applied to the global batch split by hidden columns
    (each rank a partial sum, as TP experts), reduce-scattered back: equals
    the layer on each rank's own tokens."""
    world, rank = comm.world_size, comm.rank
    g = torch.Generator().manual_seed(11)
    hidden = 8
    w = torch.randn(hidden, hidden, generator=g)
    sizes = [(r * 3) % 5 for r in range(world)]  # rank 0 idle
    xs = [torch.randn(sizes[r], hidden, generator=g) for r in range(world)]
    gathered = comm.all_gatherv(xs[rank], sizes)
    cols = slice(rank * hidden // world, (rank + 1) * hidden // world)
    partial = gathered[:, cols] @ w[cols, :]
    mine = comm.reduce_scatterv(partial, sizes)
    assert_close(mine, xs[rank] @ w, dtype=torch.float32)


def serve(rank, world, port, inbox, outbox):
    """Runs the uneven calls it is sent (one per message) on a checked gloo
    communicator and reports each outcome (result, or the error and whether
    the input and out were left unchanged), until it gets None."""
    torch.set_num_threads(1)
    comm = init_tp_group(rank, world, f"tcp://127.0.0.1:{port}", backend="gloo", timeout_s=30, checked=True)
    outbox.put((-1, rank, "ready", None))
    while True:
        call = inbox.get()
        if call is None:
            break
        seq, (collective, rows, trailing, dtype, kwargs) = call
        x = (torch.arange(rows * math.prod(trailing), dtype=torch.float32).reshape(rows, *trailing)
             .add(100 * rank).to(dtype))
        before = x.clone()
        out = kwargs.pop("out", None)
        out_before = None if out is None else out.clone()
        try:
            result = getattr(comm, collective)(x, out=out, **kwargs)
            outbox.put((seq, rank, "ok", result.float().tolist()))
        except Exception as exc:  # reported to the test, which decides
            unchanged = torch.equal(x, before) and (out is None or torch.equal(out, out_before))
            outbox.put((seq, rank, type(exc).__name__, (str(exc), unchanged)))
    dist.destroy_process_group()
