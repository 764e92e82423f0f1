"""Expert-parallel token dispatch and combine over ``all_to_all``: each rank
holds ``num_experts / world`` consecutive experts and its own tokens; a
token's hidden row goes once to every rank that holds one of its top-k
experts, with the ids (local to that rank, -1 for experts elsewhere) and
weights of its experts there; that rank sums its experts' weighted outputs
per row and sends one row back, which the token's rank adds up.

This is the all-to-all form of expert parallelism (DeepEP's "normal" mode
in plain collectives). SGLang 0.5.23's non-DeepEP path does not move tokens
this way (docs/scale-out.md): it keeps every token on every rank and
all-reduces the experts' output. The bytes each form moves are in
``cost.py`` and ``kunlun-triton scale-out``.

Torch only (index arithmetic, no kernels): the experts themselves run
wherever the caller runs them (``fused_experts`` with the local ids)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Dispatched:
    """What a rank received: ``hidden`` rows, and per row the top-k ids of
    the experts to run here (local ids, -1: the expert is elsewhere) and
    their weights. ``handle`` is for `combine`."""

    hidden: torch.Tensor
    topk_ids: torch.Tensor
    topk_weights: torch.Tensor
    handle: tuple


def owner_ranks(topk_ids: torch.Tensor, num_experts: int, world: int) -> torch.Tensor:
    """The rank holding each chosen expert (experts split in consecutive blocks)."""
    if num_experts % world:
        raise ValueError(f"ep dispatch: num_experts {num_experts} does not split over {world} ranks")
    return topk_ids.div(num_experts // world, rounding_mode="floor")


def dispatch(comm, hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
             num_experts: int) -> Dispatched:
    """Send each token to the ranks holding its experts (one row per token and
    rank). Four all_to_alls: the row counts, then hidden rows, ids, weights."""
    world, per_rank = comm.world_size, num_experts // comm.world_size
    owners = owner_ranks(topk_ids, num_experts, world)  # [T, k]
    # one row per (token, destination rank), ordered by destination rank
    goes = torch.zeros(hidden.shape[0], world, dtype=torch.bool, device=hidden.device)
    goes.scatter_(1, owners.long(), True)
    dest, token = goes.t().nonzero(as_tuple=True)  # sorted by destination, then token
    send = torch.bincount(dest, minlength=world).tolist()
    counts = torch.tensor(send, dtype=torch.int64).reshape(world, 1)
    recv = comm.all_to_all(counts, [1] * world, recv_splits=[1] * world).reshape(-1).tolist()
    here = owners[token] == dest[:, None]
    ids = torch.where(here, topk_ids[token] - dest[:, None] * per_rank, -1).to(torch.int32)
    weights = torch.where(here, topk_weights[token].float(), 0.0)
    rows = comm.all_to_all(hidden[token], send, recv_splits=recv)
    ids = comm.all_to_all(ids, send, recv_splits=recv)
    weights = comm.all_to_all(weights, send, recv_splits=recv)
    return Dispatched(rows, ids, weights, (token, send, recv, hidden.shape[0]))


def combine(comm, expert_rows: torch.Tensor, handle: tuple) -> torch.Tensor:
    """Send each received row's output back and add them up per token."""
    token, send, recv, tokens = handle
    back = comm.all_to_all(expert_rows, recv, recv_splits=send)
    out = torch.zeros((tokens, *expert_rows.shape[1:]), dtype=torch.float32, device=expert_rows.device)
    out.index_add_(0, token, back.float())
    return out.to(expert_rows.dtype)
