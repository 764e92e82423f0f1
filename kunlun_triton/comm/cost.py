"""Bytes each rank sends and receives per MoE layer, from the dispatch
algorithms, device-free (docs/scale-out.md prints the table through
``kunlun-triton scale-out``).

What is counted: the payload a rank hands the backend for other ranks, and
the payload addressed to it, per collective. For a reduction the figure is
that of the bandwidth-optimal algorithm (a reduce-scatter then an
all-gather: ``2 (N-1)/N`` of the buffer each way); gloo's and nccl's own
algorithms (rings, trees) forward data and move at least that much. The
rank's own rows (sent to itself) are not counted.

Schemes, for a step of ``T`` tokens in all over a group of ``N`` ranks:

- ``tp``: tensor-parallel experts. Every rank holds all ``T`` tokens and a
  1/N slice of every expert; one all-reduce of ``T x hidden``.
- ``ep``: SGLang's non-DeepEP expert parallelism (``--ep-size N``, the
  standard dispatcher). Every rank holds all ``T`` tokens and N-th of the
  experts, runs its experts on the tokens routed there (others' ids -1), and
  the same all-reduce of ``T x hidden`` sums the partial outputs: the bytes
  of ``tp`` exactly (what changes is the weights each rank reads).
- ``ep-dp``: with ``--enable-dp-attention``: each rank holds ``T/N`` tokens;
  they are gathered to every rank before the experts (all-gather, padded to
  the largest rank in SGLang's MAX_LEN mode) and the partial outputs
  reduce-scattered back after. Balanced ranks: ``(N-1) T/N`` rows each way,
  twice.
- ``ep-a2a``: token dispatch (``comm.ep``): each rank holds ``T/N`` tokens
  and sends each one once to every other rank holding one of its top-k
  experts, with the ids and weights of its experts there (4 + 4 bytes per
  top-k slot), and gets one output row back per such rank; plus the row
  counts (8 bytes per peer). Under uniform routing a token meets
  ``(N-1) (1 - C(E - E/N, k) / C(E, k))`` other ranks on average."""

from __future__ import annotations

from dataclasses import dataclass
from math import comb

import torch

SCHEMES = ("tp", "ep", "ep-dp", "ep-a2a")
META_BYTES_PER_SLOT = 4 + 4  # int32 expert id + float32 weight per top-k slot
COUNT_BYTES = 8  # one int64 row count per peer


@dataclass(frozen=True)
class Traffic:
    send: float
    recv: float

    def __add__(self, other: "Traffic") -> "Traffic":
        return Traffic(self.send + other.send, self.recv + other.recv)

    def __truediv__(self, n: float) -> "Traffic":
        return Traffic(self.send / n, self.recv / n)


# ------------------------------------------------------------ collectives


def all_reduce(nbytes: float, world: int) -> Traffic:
    return Traffic(2 * (world - 1) / world * nbytes, 2 * (world - 1) / world * nbytes)


def all_gather(rows: list[int], rank: int, row_bytes: float) -> Traffic:
    """Rank ``rank`` sends its rows to each peer and gets every peer's rows."""
    world = len(rows)
    return Traffic((world - 1) * rows[rank] * row_bytes, (sum(rows) - rows[rank]) * row_bytes)


def reduce_scatter(rows: list[int], rank: int, row_bytes: float) -> Traffic:
    """Rank ``rank`` sends every peer's rows of its buffer, gets its own from each."""
    world = len(rows)
    return Traffic((sum(rows) - rows[rank]) * row_bytes, (world - 1) * rows[rank] * row_bytes)


def all_to_all(send_rows: list[int], recv_rows: list[int], rank: int, row_bytes: float) -> Traffic:
    return Traffic((sum(send_rows) - send_rows[rank]) * row_bytes, (sum(recv_rows) - recv_rows[rank]) * row_bytes)


# ------------------------------------------------------------ MoE layer, exact for a routing


def a2a_exact(topk_ids: list[torch.Tensor], rank: int, num_experts: int, hidden_bytes: int) -> Traffic:
    """``ep-a2a`` for the routing ``topk_ids[r]`` ([tokens_r, k]) of every rank r."""
    world = len(topk_ids)
    per_rank, k = num_experts // world, topk_ids[rank].shape[1] if topk_ids[rank].dim() == 2 else 0
    pairs = [[0] * world for _ in range(world)]  # pairs[r][d]: tokens of rank r going to rank d
    for r, ids in enumerate(topk_ids):
        for row in ids.tolist():
            for d in {e // per_rank for e in row}:
                pairs[r][d] += 1
    send, recv = pairs[rank], [pairs[r][rank] for r in range(world)]
    row = hidden_bytes + k * META_BYTES_PER_SLOT
    counts = Traffic((world - 1) * COUNT_BYTES, (world - 1) * COUNT_BYTES)
    dispatch = all_to_all(send, recv, rank, row)
    back = all_to_all(recv, send, rank, hidden_bytes)
    return counts + dispatch + back


def dp_gather_exact(tokens: list[int], rank: int, hidden_bytes: int) -> Traffic:
    """``ep-dp`` with per-rank batches ``tokens`` (all_gatherv + reduce_scatterv)."""
    return all_gather(tokens, rank, hidden_bytes) + reduce_scatter(tokens, rank, hidden_bytes)


# ------------------------------------------------------------ MoE layer, expected (balanced, uniform routing)


def distinct_remote_ranks(num_experts: int, topk: int, world: int) -> float:
    """Other ranks a token's top-k experts (distinct, uniformly drawn) live on."""
    per_rank = num_experts // world
    return (world - 1) * (1 - comb(num_experts - per_rank, topk) / comb(num_experts, topk))


def layer_bytes_per_token(scheme: str, hidden: int, num_experts: int, topk: int, world: int,
                          dtype_bytes: int = 2, tokens: int = 1024) -> Traffic:
    """Bytes one rank sends / receives per MoE layer, divided by the step's
    ``tokens`` (all ranks together; a multiple of ``world``)."""
    row = hidden * dtype_bytes
    if scheme in ("tp", "ep"):
        return all_reduce(tokens * row, world) / tokens
    per_rank = [tokens // world] * world
    if scheme == "ep-dp":
        return dp_gather_exact(per_rank, 0, row) / tokens
    if scheme == "ep-a2a":
        pairs = per_rank[0] * distinct_remote_ranks(num_experts, topk, world)
        counts = (world - 1) * COUNT_BYTES
        send = counts + pairs * (row + topk * META_BYTES_PER_SLOT) + pairs * row
        return Traffic(send, send) / tokens
    raise ValueError(f"scale-out bytes: unknown scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
