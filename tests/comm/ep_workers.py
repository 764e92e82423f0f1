"""Each rank of the MoE-layer runs: the three ways of placing experts over
ranks (SGLang's replicated-token EP with an all-reduce, DP attention's
gather / reduce-scatter, token dispatch by all-to-all) computed with the
communicator, against the unsplit layer in float64; and the bytes each
collective was handed, counted by wrapping torch.distributed's calls in the
rank, against what ``kunlun_triton.comm.cost`` predicts from the routing."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

from kunlun_triton.comm import TPCommunicator, init_tp_group
from kunlun_triton.comm import cost, ep
from kunlun_triton.testing import assert_close

EXPERTS, TOPK, HIDDEN, INTER = 8, 2, 16, 8
TOKENS = (5, 0, 3, 7)  # per rank: rank 1 idle


class Counter:
    """Wraps the torch.distributed calls the communicator makes; adds up the
    bytes each hands the backend for other ranks and expects from them
    (the rank's own rows excluded; reductions as reduce-scatter + all-gather)."""

    def __init__(self, world, rank):
        self.world, self.rank, self.send, self.recv = world, rank, 0.0, 0.0
        self.saved = {n: getattr(dist, n) for n in ("all_to_all_single", "all_reduce", "reduce_scatter",
                                                    "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor")}
        for name, fn in self.saved.items():
            setattr(dist, name, self._wrap(name, fn))

    def _wrap(self, name, fn):
        def counted(*args, **kwargs):
            self._count(name, *args, **kwargs)
            return fn(*args, **kwargs)
        return counted

    def _count(self, name, out, inp=None, out_splits=None, in_splits=None, **_):
        w, r = self.world, self.rank
        if name == "all_to_all_single":
            row_in = inp.element_size() * math.prod(inp.shape[1:])
            row_out = out.element_size() * math.prod(out.shape[1:])
            ins = in_splits or [inp.shape[0] // w] * w
            outs = out_splits or [out.shape[0] // w] * w
            self.send += (sum(ins) - ins[r]) * row_in
            self.recv += (sum(outs) - outs[r]) * row_out
        elif name == "all_reduce":
            self.send += 2 * (w - 1) / w * out.nbytes
            self.recv += 2 * (w - 1) / w * out.nbytes
        elif name == "reduce_scatter":  # (output, input_list)
            self.send += sum(c.nbytes for i, c in enumerate(inp) if i != r)
            self.recv += (w - 1) * out.nbytes
        else:
            raise AssertionError(f"the MoE layer called {name}, which this count does not expect")

    def take(self):
        got, self.send, self.recv = (self.send, self.recv), 0.0, 0.0
        return got

    def close(self):
        for name, fn in self.saved.items():
            setattr(dist, name, fn)


def _model(world):
    g = torch.Generator().manual_seed(3)
    w1 = torch.randn(EXPERTS, HIDDEN, INTER, generator=g) / HIDDEN**0.5
    w2 = torch.randn(EXPERTS, INTER, HIDDEN, generator=g) / INTER**0.5
    xs, ids, weights = [], [], []
    for r in range(world):
        n = TOKENS[r]
        xs.append(torch.randn(n, HIDDEN, generator=g))
        ids.append(torch.stack([torch.randperm(EXPERTS, generator=g)[:TOPK] for _ in range(n)])
                   if n else torch.zeros(0, TOPK, dtype=torch.int64))
        weights.append(torch.rand(n, TOPK, generator=g))
    return w1, w2, xs, ids, weights


def _experts(x, ids, weights, w1, w2, first=0):
    """Weighted expert MLPs for the ids in [first, first + experts held); -1 skipped."""
    out = torch.zeros(x.shape[0], HIDDEN, dtype=x.dtype)
    for e in range(w1.shape[0]):
        hit = ids == e
        rows = hit.any(1).nonzero().flatten()
        if rows.numel():
            y = F.silu(x[rows] @ w1[e].to(x.dtype)) @ w2[e].to(x.dtype)
            out.index_add_(0, rows, y * (weights[rows] * hit[rows]).sum(1, keepdim=True).to(x.dtype))
    return out


def moe_layers(rank, world, port):
    torch.set_num_threads(1)
    init_tp_group(rank, world, f"tcp://127.0.0.1:{port}", backend="gloo", timeout_s=60, checked=True)
    comm = TPCommunicator(None, backend="gloo", timeout_s=60, checked=False)  # data moves only
    w1, w2, xs, ids, weights = _model(world)
    want = [_experts(x.double(), i, w, w1.double(), w2.double()) for x, i, w in zip(xs, ids, weights)]
    per = EXPERTS // world
    mine = slice(rank * per, (rank + 1) * per)
    local = lambda i: torch.where((i >= rank * per) & (i < (rank + 1) * per), i - rank * per, -1)  # noqa: E731
    row = HIDDEN * 4
    counter = Counter(world, rank)
    try:
        # SGLang's --ep-size path: every token on every rank, local experts, one all-reduce
        x_all, ids_all, w_all = torch.cat(xs), torch.cat(ids), torch.cat(weights)
        out = comm.all_reduce(_experts(x_all, local(ids_all), w_all, w1[mine], w2[mine]))
        assert_close(out, torch.cat(want).float(), dtype=torch.float32)
        expected = cost.all_reduce(sum(TOKENS[:world]) * row, world)
        got = counter.take()
        assert got == (expected.send, expected.recv), (got, expected)

        # DP attention: gather every rank's tokens, local experts, reduce-scatter back
        sizes = list(TOKENS[:world])
        gathered = comm.all_gatherv(xs[rank], sizes)
        partial = _experts(gathered, local(ids_all), w_all, w1[mine], w2[mine])
        out = comm.reduce_scatterv(partial, sizes)
        assert_close(out, want[rank].float(), dtype=torch.float32)
        expected = cost.dp_gather_exact(sizes, rank, row)
        got = counter.take()
        assert got == (expected.send, expected.recv), (got, expected)

        # token dispatch by all-to-all
        got = ep.dispatch(comm, xs[rank], ids[rank], weights[rank], EXPERTS)
        partial = _experts(got.hidden, got.topk_ids, got.topk_weights, w1[mine], w2[mine])
        out = ep.combine(comm, partial, got.handle)
        assert_close(out, want[rank].float(), dtype=torch.float32)
        expected = cost.a2a_exact(ids, rank, EXPERTS, row)
        assert counter.take() == (expected.send, expected.recv), (counter.take(), expected)
    finally:
        counter.close()
    comm.barrier()
    dist.destroy_process_group()
