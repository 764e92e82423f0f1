"""Worker for test_sglang_collectives.py: one process per rank, SGLang's own
``GroupCoordinator`` over gloo on the kunlun platform (development mode),
with our collective hooks installed. Each collective is checked against the
answer computed locally from every rank's input (plain torch, no
communication), and the dispatch report must show it ran through
``kunlun_triton.comm``."""

from __future__ import annotations

import os


def _inputs(rank, dtype):
    import torch

    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(4, 6, generator=g).to(dtype)


def run(rank, world, port):
    os.environ["SGLANG_PLATFORM"] = "kunlun"
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    from sglang.srt.distributed.parallel_state import GroupCoordinator

    from kunlun_triton import dispatch_report
    from kunlun_triton.sglang_plugin.layers.collectives import IMPL
    from kunlun_triton.sglang_plugin.install import install

    install("platform")
    coord = GroupCoordinator(
        group_ranks=[list(range(world))], local_rank=rank, torch_distributed_backend="gloo",
        use_pynccl=False, use_mscclpp=False, use_custom_allreduce=False, use_torch_symm_mem_all_reduce=False,
        use_hpu_communicator=False, use_xpu_communicator=False, group_name="tp",
    )  # fmt: skip
    everyone = {dt: [_inputs(r, dt) for r in range(world)] for dt in (torch.float32, torch.float16)}

    for dt, xs in everyone.items():
        expected = torch.stack([x.float() for x in xs]).sum(0)
        got = coord.all_reduce(xs[rank].clone())
        tol = 1e-6 if dt == torch.float32 else 2e-3
        torch.testing.assert_close(got.float(), expected, atol=tol, rtol=tol)

    xs = everyone[torch.float32]
    torch.testing.assert_close(coord.all_gather(xs[rank], dim=-1), torch.cat(xs, dim=-1))
    torch.testing.assert_close(coord.all_gather(xs[rank], dim=0), torch.cat(xs, dim=0))
    out = torch.empty(world * 4, 6)
    coord.all_gather_into_tensor(out, xs[rank])
    torch.testing.assert_close(out, torch.cat(xs, dim=0))

    full = torch.stack(xs).sum(0)  # [4, 6]: rows split over the ranks
    part = torch.empty(4 // world, 6)
    coord.reduce_scatter_tensor(part, xs[rank])
    torch.testing.assert_close(part, full.chunk(world, dim=0)[rank], atol=1e-6, rtol=1e-6)

    # The uneven forms (pynccl only in SGLang; DP attention with expert parallelism):
    # rank r holds sizes[r] rows, an idle rank none.
    sizes = [3, 0] if world == 2 else [3] + [r % 2 for r in range(1, world)]
    rows = [x[: sizes[r]] for r, x in enumerate(xs)]
    gathered = coord.all_gatherv([rows[rank], rows[rank].half()], sizes=sizes)
    torch.testing.assert_close(gathered[0], torch.cat(rows))
    torch.testing.assert_close(gathered[1], torch.cat(rows).half())
    out = torch.empty(sum(sizes), 6)
    assert coord.all_gatherv(rows[rank], sizes=sizes, output=out)[0] is out
    torch.testing.assert_close(out, torch.cat(rows))
    tall = [torch.cat([x, x])[: sum(sizes)] for x in xs]  # sum(sizes) rows on every rank
    mine = torch.empty(sizes[rank], 6)
    coord.reduce_scatterv(tall[rank], output=mine, sizes=sizes)
    total = torch.stack(tall).sum(0)
    torch.testing.assert_close(mine, total.split(sizes)[rank], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(coord.reduce_scatterv(xs[rank]), full.chunk(world)[rank], atol=1e-6, rtol=1e-6)

    b = xs[rank].clone()
    coord.broadcast(b, src=world - 1)
    torch.testing.assert_close(b, xs[world - 1])

    ops = dispatch_report()
    for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):
        assert op in ops, f"{op} not recorded: {sorted(ops)}"
        assert set(ops[op]["calls"]) == {IMPL}, (op, ops[op])
    assert ops["all_reduce"]["calls"][IMPL] == 2 and ops["all_gather"]["calls"][IMPL] == 5
    assert ops["reduce_scatter"]["calls"][IMPL] == 3
    assert "tp" in ops["all_reduce"]["reason"] and "gloo" in ops["all_reduce"]["reason"]
    dist.destroy_process_group()
