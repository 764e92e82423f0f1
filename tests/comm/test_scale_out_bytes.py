"""The bytes model (kunlun_triton.comm.cost) against the bytes the
communicator actually hands torch.distributed in an MoE layer on 2 and 4
gloo ranks (each scheme's output against the unsplit layer in float64), the
expected distinct ranks per token against a Monte Carlo count, and the
`kunlun-triton scale-out` table against its closed forms."""

from __future__ import annotations

import socket
from math import comb

import pytest
import torch
import torch.multiprocessing as mp

import ep_workers
from kunlun_triton.comm import cost


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("world", [2, 4])
def test_moe_layer_bytes_equal_the_model(world):
    mp.spawn(ep_workers.moe_layers, args=(world, _free_port()), nprocs=world, join=True)


@pytest.mark.parametrize("experts,topk,world", [(128, 8, 8), (64, 6, 4), (8, 2, 2)])
def test_distinct_ranks_per_token_against_sampling(experts, topk, world):
    g = torch.Generator().manual_seed(0)
    n = 20000
    ids = torch.rand(n, experts, generator=g).argsort(1)[:, :topk]
    owners = ids // (experts // world)
    # distinct ranks other than rank 0 (the token's own), over tokens
    hit = torch.zeros(n, world, dtype=torch.bool).scatter_(1, owners, True)
    sampled = hit[:, 1:].sum(1).double().mean().item()
    assert abs(cost.distinct_remote_ranks(experts, topk, world) - sampled) < 0.03 * world


def test_scale_out_table_rows(capsys):
    from kunlun_triton.tools import scale_out

    assert scale_out.main(["--world", "2,8", "--model", "qwen3-30b-a3b"]) == 0
    text = capsys.readouterr().out
    h, b = 2048, 2
    for world in (2, 8):
        tp = 2 * (world - 1) / world * h * b
        dp = 2 * (world - 1) / world * h * b  # gather + scatter, balanced
        p_none = comb(128 - 128 // world, 8) / comb(128, 8)
        pairs = (world - 1) * (1 - p_none) / world
        a2a = pairs * (2 * h * b + 8 * 8) + (world - 1) * 8 / 1024
        row = next(line for line in text.splitlines() if line.startswith(f"| qwen3-30b-a3b | {world} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert [float(c) for c in cells[2:6]] == pytest.approx([tp, tp, dp, a2a], abs=0.51), row


@pytest.mark.parametrize("argv, named", [
    (["--world", "1"], "--world"), (["--world", "2,x"], "--world"), (["--model", "llama-3-8b"], "--model"),
    (["--tokens", "0"], "--tokens"), (["--tokens", "1001"], "--tokens"), (["--ranks", "0", "--host-time"], "--ranks"),
])
def test_a_bad_command_line_is_named(argv, named, capsys):
    from kunlun_triton.cli import main

    with pytest.raises(SystemExit) as info:
        main(["scale-out", *argv])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err and named in err and "Traceback" not in err, err
