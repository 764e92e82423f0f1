"""all_to_all / all_gatherv / reduce_scatterv on 2 and 4 CPU processes over
gloo, against each rank's expected rows computed from every rank's inputs
(uneven splits, zero rows, an idle rank, float8/bool/int moved bit for bit,
checked and unchecked, out= buffers); a DP-attention round trip (gather,
partial sums, reduce-scatter back) against the unsplit layer."""

from __future__ import annotations

import socket

import pytest
import torch.multiprocessing as mp

import uneven_workers


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("world", [2, 4])
def test_uneven_collectives(world):
    mp.spawn(uneven_workers.uneven, args=(world, _free_port()), nprocs=world, join=True)
