"""Ragged batches for the linear-attention tests: request lengths (some
crossing chunk boundaries), distinct state slots (a padding slot -1 now and
then), initial states present or not. Tiny sizes: the interpreter runs them."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from strategies import DEVICE


@st.composite
def ragged_batches(draw, max_requests: int = 3, max_len: int = 20, padding: bool = True):
    """(lengths, slots, has_initial_state, pool size) with distinct slots."""
    n = draw(st.integers(1, max_requests))
    lengths = draw(st.lists(st.integers(1, max_len), min_size=n, max_size=n))
    pool = n + draw(st.integers(0, 3))
    slots = draw(st.permutations(range(pool)))[:n]
    if padding and n > 1 and draw(st.booleans()):
        slots[draw(st.integers(0, n - 1))] = -1
    has_init = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return lengths, slots, has_init, pool


def start_locs(lengths):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)


def index_tensor(values, dtype=torch.int32):
    return torch.tensor(values, dtype=dtype, device=DEVICE)


def randn(gen, *shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, generator=gen) * scale).to(dtype).to(DEVICE)
