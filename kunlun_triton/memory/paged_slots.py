"""Slot arithmetic of the paged allocator (`paged_allocator.PagedKVAllocator`):
the slots of an extend from the pages taken and the requests' host lengths,
and the checks of those host lengths (messages name the allocator's call)."""

from __future__ import annotations

import numpy as np
import torch


def extend_slots(pages, offsets, ps, prefix, extend, prefix_pages, new_per_req, last_loc, num_tokens, to_device):
    """Every slot is one gather from a small table on the device: the new
    pages' slots (``pages[j] * ps + 0..ps-1``), then one row per request
    continuing its partial page (``last_loc[i] + 1 + 0..ps-1``). Request
    ``i`` reads ``c_i`` slots of its partial row, then ``extend_i - c_i``
    consecutive new-page slots from its first new page on; the flat index
    is two runs per request, built on the host from the CPU lengths
    (3 per-token numpy ops). A batch of one request without a partial
    page is the table's head, no gather.

    Measured (1 thread, page 16, serving trace: 1-2 requests, ~1.9k
    tokens, median per call): the first version (~12 per-token numpy ops,
    div, cat, ``t[idx]``) 246 us, this one 103 us, SGLang's torch path
    594 us. ``index_select`` gathers 1.9k slots in 5 us, ``t[idx]`` in
    21 us; numpy ufuncs and methods, not np.cumsum/np.repeat/
    np.array_equal, whose Python wrappers cost ~4 us each vs 0.6 us for
    np.add.accumulate. `offsets`: 0..ps-1 on the pool's device; `to_device`
    moves a host index array there."""
    room = prefix_pages * ps - prefix  # free slots left on each partial page
    table = torch.add(offsets, pages.unsqueeze(1), alpha=ps).view(-1)  # one op, ~2x the mul+add pair
    first_new = (np.add.accumulate(new_per_req) - new_per_req) * ps  # first new-page slot in `table`
    if not room.any():
        if prefix.size == 1:
            if extend[0] != num_tokens:
                raise token_count_mismatch(num_tokens, int(extend[0]))
            return table[:num_tokens]
        src, lens = first_new, extend
    else:
        partial = np.minimum(room, extend)  # tokens continuing last_loc
        rows = last_loc.to(torch.int64).unsqueeze(1) + offsets + 1
        table = torch.cat((table, rows.view(-1)))
        # runs: (partial row i, c_i tokens), (new pages of i, extend_i - c_i tokens)
        src = np.stack(((pages.numel() + np.arange(prefix.size)) * ps, first_new), axis=1).reshape(-1)
        lens = np.stack((partial, extend - partial), axis=1).reshape(-1)
    ends = np.add.accumulate(lens)
    if ends[-1] != num_tokens:  # the caller's extend_num_tokens, checked on a sum we need anyway
        raise token_count_mismatch(num_tokens, int(ends[-1]))
    flat = np.arange(num_tokens) + (src - (ends - lens)).repeat(lens)
    return table.index_select(0, to_device(flat))


def host_lengths(op: str, name: str, t) -> np.ndarray:
    """A 1-D CPU integer tensor of per-request lengths, as a numpy view. The
    checks read the array's flags after ``numpy()`` (which the caller needs
    anyway, and which refuses device tensors and non-tensors): 0.15 us, vs
    0.3 us for the same checks on the tensor."""
    try:
        a = t.numpy()
    except (AttributeError, TypeError, RuntimeError):
        a = None
    if a is None or a.ndim != 1 or a.dtype.kind not in "iu":
        got = type(t).__name__ if not isinstance(t, torch.Tensor) else f"{t.dtype} {tuple(t.shape)} on {t.device}"
        raise TypeError(f"{op}: {name} must be a 1-D CPU integer tensor of lengths, got {got}")
    return a


def token_count_mismatch(given: int, lengths: int) -> ValueError:
    return ValueError(f"alloc_extend: extend_num_tokens {given} != sum(seq_lens - prefix_lens) = {lengths}")


def count_mismatch(op: str, n: int, **per_request) -> ValueError:
    sizes = ", ".join(f"{k} {v.numel()}" for k, v in per_request.items())
    return ValueError(f"{op}: need one entry per request in every argument: {n} lengths, but {sizes}")
