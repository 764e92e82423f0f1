"""`kunlun-triton scale-out`: what expert parallelism and DP attention cost
in communication, device-free.

Default: bytes each rank sends per MoE layer, per token of the step (all
ranks' tokens together), for every MoE model preset at EP 2/4/8 against TP
at the same width, from ``kunlun_triton.comm.cost`` (schemes explained
there; each rank receives as much in these balanced cases). The model
presets are ``tools/presets.py``'s with experts, so a new MoE preset gets a
row. ``--host-time``: the communicator's host time per collective against
torch.distributed's own call on gloo, over spawned CPU ranks (interleaved
rounds, medians, ratios), checked mode on (gloo's default) and off.

    kunlun-triton scale-out [--world 2,4,8] [--model NAME ...] [--tokens 1024]
    kunlun-triton scale-out --host-time [--ranks 2] [--rounds 7]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import time

from .arguments import positive_int
from .presets import MODEL_PRESETS

_MOE = {name: p for name, p in MODEL_PRESETS.items() if p.num_experts}


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or any(v < 2 for v in values):
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of group sizes >= 2, got {text!r}")
    return values


def bytes_table(models, worlds, tokens: int, dtype_bytes: int) -> str:
    from ..comm.cost import SCHEMES, distinct_remote_ranks, layer_bytes_per_token

    lines = ["| model | N | " + " | ".join(f"{s} B/token" for s in SCHEMES) + " | a2a / tp | other ranks per token (a2a) |",
             "|" + "---|" * (len(SCHEMES) + 4)]
    skipped = []
    for name in models:
        p = MODEL_PRESETS[name]
        for world in worlds:
            if p.num_experts % world:
                skipped.append(f"{name} at N={world} ({p.num_experts} experts do not split over {world} ranks)")
                continue
            cells = [layer_bytes_per_token(s, p.hidden_size, p.num_experts, p.num_experts_per_tok, world,
                                           dtype_bytes, tokens).send for s in SCHEMES]
            d = distinct_remote_ranks(p.num_experts, p.num_experts_per_tok, world)
            lines.append(f"| {name} | {world} | " + " | ".join(f"{c:.1f}" for c in cells)
                         + f" | {cells[-1] / cells[0]:.2f} | {d:.2f} |")
    return "\n".join(lines + [f"\nskipped: {', '.join(skipped)}"] * bool(skipped))


# ------------------------------------------------------------ host time


def _cases(comm, dist, torch, tokens: int, hidden: int):
    """(name, ours, torch's) callables; the same data on both sides."""
    w, r = comm.world_size, comm.rank
    x = torch.randn(tokens, hidden)
    out_ag = torch.empty(w * tokens, hidden)
    out_rs = torch.empty(tokens // w, hidden)
    send = [(tokens // w) + (1 if s == (r + 1) % w else -1 if s == r else 0) for s in range(w)]
    recv = [(tokens // w) + (1 if r == (s + 1) % w else -1 if s == r else 0) for s in range(w)]
    out_a2a = torch.empty(sum(recv), hidden)
    sizes = [tokens // w + (s % 2) for s in range(w)]  # uneven per-rank batches
    mine = torch.randn(sizes[r], hidden)
    padded, gathered = torch.zeros(max(sizes), hidden), torch.empty(w * max(sizes), hidden)
    full = torch.randn(sum(sizes), hidden)
    out_rsv = torch.empty(sizes[r], hidden)

    def torch_gatherv():  # SGLang's MAX_LEN gather: pad to the largest rank, all-gather
        padded[: sizes[r]].copy_(mine)
        dist.all_gather_into_tensor(gathered, padded)

    return [
        ("all_reduce", lambda: comm.all_reduce(x), lambda: dist.all_reduce(x)),
        ("all_gather", lambda: comm.all_gather(x), lambda: dist.all_gather_into_tensor(out_ag, x)),
        ("reduce_scatter", lambda: comm.reduce_scatter(x), lambda: dist.reduce_scatter_tensor(out_rs, x)),
        ("all_to_all", lambda: comm.all_to_all(x, send, recv),
         lambda: dist.all_to_all_single(out_a2a, x, recv, send)),
        ("all_gatherv", lambda: comm.all_gatherv(mine, sizes), torch_gatherv),
        ("reduce_scatterv", lambda: comm.reduce_scatterv(full, sizes),
         lambda: dist.reduce_scatter(out_rsv, list(full.split(sizes)))),
    ]


def _time_rank(rank, world, port, rounds, calls, queue):
    import torch
    import torch.distributed as dist

    from ..comm import TPCommunicator, init_tp_group

    torch.set_num_threads(1)
    checked = init_tp_group(rank, world, f"tcp://127.0.0.1:{port}", backend="gloo", timeout_s=120, checked=True)
    unchecked = TPCommunicator(None, backend="gloo", timeout_s=120, checked=False)
    rows = []
    for tokens in (8 * world, 512):
        torch.manual_seed(rank)
        for (name, ours_c, base), (_, ours_u, _) in zip(_cases(checked, dist, torch, tokens, 2048),
                                                        _cases(unchecked, dist, torch, tokens, 2048)):
            times = {"torch": [], "unchecked": [], "checked": []}
            fns = {"torch": base, "unchecked": ours_u, "checked": ours_c}
            for i in range(rounds):
                order = list(fns) if i % 2 == 0 else list(reversed(fns))  # interleaved, order alternating
                for key in order:
                    dist.barrier()
                    start = time.perf_counter()
                    for _ in range(calls):
                        fns[key]()
                    times[key].append((time.perf_counter() - start) / calls * 1e6)
            rows.append((name, tokens, *(statistics.median(times[k]) for k in ("torch", "unchecked", "checked"))))
    if rank == 0:
        queue.put(rows)
    dist.destroy_process_group()


def host_time_table(world: int, rounds: int, calls: int) -> str:
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.spawn(_time_rank, args=(world, port, rounds, calls, queue), nprocs=world, join=True)
    rows = queue.get()
    lines = [f"host time per call, {world} gloo ranks, float32 rows of 2048, median of {rounds} interleaved rounds "
             f"of {calls} calls (rank 0)", "",
             "| collective | rows | torch.distributed us | ours unchecked us | ratio | ours checked us | ratio |",
             "|---|---|---|---|---|---|---|"]
    for name, tokens, base, unchecked, checked in rows:
        lines.append(f"| {name} | {tokens} | {base:.0f} | {unchecked:.0f} | {unchecked / base:.2f} | "
                     f"{checked:.0f} | {checked / base:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="kunlun-triton scale-out", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world", type=_int_list, default=[2, 4, 8], help="group sizes (default 2,4,8)")
    parser.add_argument("--model", action="append", choices=sorted(_MOE), help="MoE presets (default: all)")
    parser.add_argument("--tokens", type=positive_int, default=1024, help="tokens in a step, all ranks (1024)")
    parser.add_argument("--dtype-bytes", type=positive_int, default=2, help="bytes per hidden element (2: bf16)")
    parser.add_argument("--host-time", action="store_true", help="time the communicator against torch.distributed")
    parser.add_argument("--ranks", type=positive_int, default=2, help="--host-time: gloo ranks (2)")
    parser.add_argument("--rounds", type=positive_int, default=7, help="--host-time: interleaved rounds (7)")
    parser.add_argument("--calls", type=positive_int, default=20, help="--host-time: calls per round (20)")
    args = parser.parse_args(argv)
    uneven = [w for w in args.world if args.tokens % w]
    if uneven:
        parser.error(f"--tokens {args.tokens} is not a multiple of --world {uneven[0]} (balanced ranks)")
    if args.host_time:
        print(host_time_table(args.ranks, args.rounds, args.calls))
        return 0
    print(f"bytes each rank sends per MoE layer per token ({args.tokens} tokens a step over all ranks, "
          f"{args.dtype_bytes}-byte hidden elements; each rank receives as much)\n")
    print(bytes_table(args.model or sorted(_MOE), args.world, args.tokens, args.dtype_bytes))
    return 0
