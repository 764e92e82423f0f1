"""Input checks the linear-attention ops share: ragged batch bounds, state
slots (SGLang's padding slot -1 allowed, no slot twice: two programs would
race on it), the state pool's shape."""

from __future__ import annotations

import torch

from ..validation import check_indptr, require_index_tensor, require_number, require_tensor

PAD_SLOT = -1


def check_slots(op: str, name: str, slots: torch.Tensor, num_slots: int) -> None:
    """Slots lie in [-1, num_slots) and no slot >= 0 repeats (host read: checked mode only)."""
    values = slots.detach().cpu().long()
    if values.numel() == 0:
        return
    lo, hi = int(values.min()), int(values.max())
    if lo < PAD_SLOT or hi >= num_slots:
        bad = lo if lo < PAD_SLOT else hi
        raise ValueError(f"{op}: {name} holds slot {bad}, outside the pool's [0, {num_slots}) (or -1 for padding)")
    live = values[values >= 0]
    if live.unique().numel() != live.numel():
        raise ValueError(f"{op}: {name} names a slot twice; each request needs its own state slot")


def check_track_slots(op: str, track_slots, cache_indices: torch.Tensor, num_slots: int) -> None:
    """Snapshot slots (optional, -1: none): one a request, in the pool, none repeated, none a
    request's own slot (two programs would race on it)."""
    if track_slots is None:
        return
    require_index_tensor(op, "track_slots", track_slots)
    if track_slots.shape != cache_indices.shape:
        raise ValueError(f"{op}: track_slots has {track_slots.shape[0]} entries for {cache_indices.shape[0]} requests")
    check_slots(op, "track_slots", track_slots, num_slots)
    live = track_slots.detach().cpu().long()
    if bool(torch.isin(live[live >= 0], cache_indices.detach().cpu().long()).any()):
        raise ValueError(f"{op}: track_slots names a slot a request reads; a snapshot needs a slot of its own")


def check_track_state(op: str, track_state, track_chunk_idx, track_chunk_size: int, query_start_loc,
                      state_pool: torch.Tensor) -> None:  # fmt: skip
    """The prefill's optional snapshot (given with track_chunk_idx: the launcher checks the pair):
    [requests, *state dims] contiguous, float, one chunk index a request (-1: none) whose point lies
    inside the request (host read: checked mode only)."""
    if track_state is None:
        return
    batch = query_start_loc.shape[0] - 1
    require_tensor(op, "track_state", track_state, dtypes=(torch.float32, torch.bfloat16, torch.float16))
    if tuple(track_state.shape) != (batch, *state_pool.shape[1:]) or not track_state.is_contiguous():
        raise ValueError(f"{op}: track_state must be contiguous [requests, *state_pool.shape[1:]] = "
                         f"{[batch, *state_pool.shape[1:]]}, got {list(track_state.shape)}")  # fmt: skip
    require_index_tensor(op, "track_chunk_idx", track_chunk_idx)
    if track_chunk_idx.shape[0] != batch:
        raise ValueError(f"{op}: track_chunk_idx has {track_chunk_idx.shape[0]} entries for {batch} requests")
    require_number(op, "track_chunk_size", track_chunk_size, minimum=1, integer=True)
    points = track_chunk_idx.detach().cpu().long() * track_chunk_size
    lengths = (query_start_loc[1:] - query_start_loc[:-1]).detach().cpu().long()
    bad = (track_chunk_idx.detach().cpu() < -1) | ((points >= lengths) & (points >= 0))
    if bool(bad.any()):
        n = int(bad.nonzero()[0, 0])
        raise ValueError(f"{op}: track_chunk_idx[{n}] = {int(track_chunk_idx[n])} puts the snapshot at token "
                         f"{int(points[n])} of a {int(lengths[n])}-token request (-1 for none)")  # fmt: skip


def require_requests(op: str, cache_indices, has_initial_state, batch: int) -> None:
    require_index_tensor(op, "cache_indices", cache_indices)
    if cache_indices.shape[0] != batch:
        raise ValueError(f"{op}: cache_indices has {cache_indices.shape[0]} entries for {batch} requests")
    if has_initial_state is not None:
        require_tensor(op, "has_initial_state", has_initial_state, dtypes=(torch.bool, torch.int32, torch.int64, torch.int8,
                       torch.uint8), ndim=1)  # fmt: skip
        if has_initial_state.shape[0] != batch:
            raise ValueError(f"{op}: has_initial_state has {has_initial_state.shape[0]} entries for {batch} requests")


def ragged_max_len(op: str, query_start_loc, batch: int, tokens: int, max_len, checked: bool) -> int:
    """The longest request: `max_len` (a host int) or read from query_start_loc (a host sync)."""
    require_index_tensor(op, "query_start_loc", query_start_loc)
    if checked:
        values = check_indptr(op, "query_start_loc", query_start_loc, batch, tokens, "the token count")
        if batch and (int(values[0]) != 0 or int(values[-1]) != tokens):
            raise ValueError(f"{op}: query_start_loc must run from 0 to the token count {tokens}, got "
                             f"{int(values[0])}..{int(values[-1])}")  # fmt: skip
        longest = int((values[1:] - values[:-1]).max()) if batch else 0
        if max_len is not None and max_len < longest:
            raise ValueError(f"{op}: max_len = {max_len} but a request has {longest} tokens")
        return longest if max_len is None else int(max_len)
    if max_len is None:
        return int((query_start_loc[1:] - query_start_loc[:-1]).max()) if batch else 0
    return int(max_len)
