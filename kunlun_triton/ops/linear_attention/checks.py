"""Input checks the linear-attention ops share: ragged batch bounds, state
slots (SGLang's padding slot -1 allowed, no slot twice: two programs would
race on it), the state pool's shape."""

from __future__ import annotations

import torch

from ..validation import check_indptr, require_index_tensor, require_tensor

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
