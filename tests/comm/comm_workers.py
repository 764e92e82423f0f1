"""Code each spawned rank runs (a module of its own so that spawn can import
it). Every rank builds all ranks' inputs from the same seeds, so it can
compute the single-process answer itself and compare."""

from __future__ import annotations

import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from kunlun_triton.comm import CollectiveTimeout, init_tp_group
from kunlun_triton.runtime import FLOAT_DTYPES
from kunlun_triton.testing import assert_close


def _inputs(world, shape, dtype, seed=0):
    return [torch.randn(shape, generator=torch.Generator().manual_seed(seed + r)).to(dtype) for r in range(world)]


def collectives(rank, world, port):
    torch.set_num_threads(1)
    comm = init_tp_group(rank, world, f"tcp://127.0.0.1:{port}", backend="gloo", timeout_s=60)
    for dtype in FLOAT_DTYPES:
        xs = _inputs(world, (3, 40), dtype)
        expected = torch.stack([x.float() for x in xs]).sum(0).to(dtype)
        assert_close(comm.all_reduce(xs[rank].clone()), expected, dtype=dtype)
        assert comm.all_reduce(xs[rank].clone(), op="max").equal(torch.stack(xs).max(0).values)
        for dim in (0, 1):
            assert comm.all_gather(xs[rank], dim=dim).equal(torch.cat(xs, dim=dim))
        rows = _inputs(world, (world * 2, 5), dtype, seed=10)
        full = torch.stack([x.float() for x in rows]).sum(0).to(dtype)
        assert_close(comm.reduce_scatter(rows[rank], dim=0), full.chunk(world, dim=0)[rank], dtype=dtype)
        cols = _inputs(world, (3, world * 4), dtype, seed=20)
        full = torch.stack([x.float() for x in cols]).sum(0).to(dtype)
        assert_close(comm.reduce_scatter(cols[rank], dim=1), full.chunk(world, dim=1)[rank], dtype=dtype)
        src = world - 1
        assert comm.broadcast(xs[rank].clone(), src=src).equal(xs[src])
    comm.barrier()
    _tp_mlp(comm)
    _tp_attention(comm)
    comm.barrier()
    # Join gloo's threads now: left to interpreter exit, a group's teardown can
    # std::terminate (seen in CI with 4 ranks).
    dist.destroy_process_group()


def _tp_mlp(comm):
    """Column-parallel up projection, row-parallel down projection, one
    all_reduce: equals the unsplit MLP."""
    g = torch.Generator().manual_seed(1)
    hidden, inter, tokens = 32, 64, 7
    x = torch.randn(tokens, hidden, generator=g)
    w_up = torch.randn(hidden, inter, generator=g) / hidden**0.5
    w_down = torch.randn(inter, hidden, generator=g) / inter**0.5
    expected = F.silu(x @ w_up) @ w_down
    part = inter // comm.world_size
    cols = slice(comm.rank * part, (comm.rank + 1) * part)
    out = comm.all_reduce(F.silu(x @ w_up[:, cols]) @ w_down[cols, :])
    assert_close(out, expected, dtype=torch.float32)


def _tp_attention(comm):
    """Heads split across ranks (q/k/v column-parallel by head, output
    projection row-parallel): the all-reduced output and the all-gathered
    head outputs equal the unsplit attention."""
    g = torch.Generator().manual_seed(2)
    heads, head_dim, tokens = 4, 8, 6
    hidden = heads * head_dim
    x = torch.randn(tokens, hidden, generator=g)
    wq, wk, wv, wo = (torch.randn(hidden, hidden, generator=g) / hidden**0.5 for _ in range(4))

    def attend(cols):
        q, k, v = ((x @ w[:, cols]).view(tokens, -1, head_dim).transpose(0, 1) for w in (wq, wk, wv))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return o.transpose(0, 1).reshape(tokens, -1)

    heads_out = attend(slice(0, hidden))
    expected = heads_out @ wo
    part = hidden // comm.world_size
    cols = slice(comm.rank * part, (comm.rank + 1) * part)
    local = attend(cols)
    assert_close(comm.all_gather(local, dim=1), heads_out, dtype=torch.float32)
    assert_close(comm.all_reduce(local @ wo[cols, :]), expected, dtype=torch.float32)


def missing_peer(rank, world, port, timeout_s):
    """Rank 0 calls all_reduce; rank 1 never does. Rank 0 must get a
    CollectiveTimeout naming the collective and the group."""
    torch.set_num_threads(1)
    # unchecked: no shape exchange, the all_reduce itself waits for the peer
    comm = init_tp_group(rank, world, f"tcp://127.0.0.1:{port}", backend="gloo", timeout_s=timeout_s, name="tp-test",
                         checked=False)
    if rank == 0:
        start = time.monotonic()
        x = torch.ones(4)
        try:
            comm.all_reduce(x)
        except CollectiveTimeout as exc:
            text = str(exc)
            assert "all_reduce" in text and "'tp-test'" in text and "rank 0 of 2" in text, text
            assert "input tensor is unchanged" in text and "unusable" in text, text
            assert torch.equal(x, torch.ones(4))  # never half-reduced where the caller sees it
            assert time.monotonic() - start < timeout_s + 30
        else:
            raise AssertionError("all_reduce with a missing peer returned")
        # The timed-out all_reduce is still pending inside gloo; tearing the
        # group down around it can std::terminate at exit (seen in CI). A group
        # that timed out is dead anyway: leave without running destructors.
        os._exit(0)
    else:
        time.sleep(timeout_s + 3)
        os._exit(0)  # rank 0 is gone; skip a teardown that would talk to it


def serve(rank, world, port, inbox, outbox):
    """A rank that runs the calls it is sent (one per message) on a checked
    gloo communicator and reports each outcome, until it gets None. The
    group lives across calls: a refused call must leave it usable."""
    torch.set_num_threads(1)
    comm = init_tp_group(rank, world, f"tcp://127.0.0.1:{port}", backend="gloo", timeout_s=30, checked=True)
    outbox.put((-1, rank, "ready", None))
    while True:
        call = inbox.get()
        if call is None:
            break
        seq, (collective, shape, dtype, arg) = call
        x = torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape).add(100 * rank).to(dtype)
        before = x.clone()
        try:
            if collective == "all_reduce":
                out = comm.all_reduce(x, op=arg)
            elif collective == "all_gather":
                out = comm.all_gather(x, dim=arg)
            elif collective == "reduce_scatter":
                out = comm.reduce_scatter(x, dim=arg)
            else:
                out = comm.broadcast(x, src=arg)
            outbox.put((seq, rank, "ok", out.float().tolist()))
        except Exception as exc:  # reported to the test, which decides
            outbox.put((seq, rank, type(exc).__name__, (str(exc), bool(torch.equal(x, before)))))
    dist.destroy_process_group()
