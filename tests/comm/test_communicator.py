"""Collectives on 2 and 4 CPU processes over gloo, against the single-process
answer; tensor-parallel MLP and attention against the unsplit computation;
a missing peer fails with a timeout that names the collective."""

from __future__ import annotations

import socket

import pytest
import torch.multiprocessing as mp

import comm_workers
from kunlun_triton.comm import default_backend


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("world", [2, 4])
def test_collectives_and_tensor_parallel_layers(world):
    mp.spawn(comm_workers.collectives, args=(world, _free_port()), nprocs=world, join=True)


def test_missing_peer_times_out_with_a_named_error():
    mp.spawn(comm_workers.missing_peer, args=(2, _free_port(), 3.0), nprocs=2, join=True)


def test_backend_per_target(monkeypatch):
    monkeypatch.delenv("KUNLUN_TRITON_DIST_BACKEND", raising=False)
    assert [default_backend(t) for t in ("kunlun", "cuda", "hip", "interpreter", "torch")] == [
        "nccl", "nccl", "nccl", "gloo", "gloo",
    ]
    monkeypatch.setenv("KUNLUN_TRITON_DIST_BACKEND", "bkcl")
    assert default_backend("kunlun") == "bkcl"
