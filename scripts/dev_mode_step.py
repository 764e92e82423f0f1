#!/usr/bin/env python
"""One decode step of a Llama model's kunlun-triton ops under the Triton
interpreter, timed per op: what development mode spends per step.

Runs the ops SGLang's Llama decode calls on our platform, layer by layer, at
SmolLM2-135M-Instruct's sizes by default (30 layers, hidden 576, 9 query
over 3 KV heads of 64, MLP 1536, vocab 49152), batch 3 at a context of 48
tokens, in bf16 (``--dtype float32``: what the main job serves): per layer
fused_add_rms_norm, rotary_embedding, store_kv, decode_attention,
fused_add_rms_norm, silu_and_mul; then the final norm and
greedy. The GEMMs (torch on the CPU) are left out: this measures our side.
Prints launches, programs and CPU milliseconds (this process's, so a busy
shared machine skews them less than wall time) per op and per launch.

    TRITON_INTERPRET=1 python scripts/dev_mode_step.py
    TRITON_INTERPRET=1 python scripts/dev_mode_step.py --profile 25   # + cProfile's top 25
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict

os.environ.setdefault("TRITON_INTERPRET", "1")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--batch", type=int, default=3)
    parser.add_argument("--context", type=int, default=48)
    parser.add_argument("--steps", type=int, default=2, help="timed steps (after one warm-up)")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"),
                        help="activations and KV pool (the main job, scripts/run.sh, serves float32)")
    parser.add_argument("--profile", type=int, default=0, help="print cProfile's top N functions")
    args = parser.parse_args(argv)

    import torch
    from triton.runtime import interpreter

    from kunlun_triton import ops
    from kunlun_triton.runtime import current_target
    from kunlun_triton.introspect.paged import decode_batch

    assert current_target().name == "interpreter", current_target()
    dtype, hidden, heads, kv_heads, dim, inter, vocab = getattr(torch, args.dtype), 576, 9, 3, 64, 1536, 49152
    bs, layers = args.batch, args.layers
    gen = torch.Generator().manual_seed(0)
    rand = lambda *s: torch.randn(*s, generator=gen).to(dtype)  # noqa: E731
    d = decode_batch([args.context] * bs, q_heads=heads, kv_heads=kv_heads, head_dim=dim, dtype=dtype, seed=1)
    q, k_buf, v_buf, o, kv_indptr, kv_indices, sm_scale = d.args()
    x, residual, w = rand(bs, hidden), rand(bs, hidden), rand(hidden)
    qkv = rand(bs, (heads + 2 * kv_heads) * dim)
    gate_up = rand(bs, 2 * inter)
    logits = torch.randn(bs, vocab, generator=gen)
    positions = torch.full((bs,), args.context - 1)
    inv = 1.0 / 100000.0 ** (torch.arange(0, dim, 2).float() / dim)
    ang = torch.outer(torch.arange(8192).float(), inv)
    cache = torch.cat([ang.cos(), ang.sin()], -1)
    loc = kv_indices[kv_indptr[1:].long() - 1]

    stats = defaultdict(lambda: [0, 0, 0.0])  # op -> launches, programs, seconds
    current = {"op": None}
    real_run, real_set_idx = interpreter.InterpretedFunction.run, interpreter.interpreter_builder.set_grid_idx

    def run(self, *a, **kw):
        stats[current["op"]][0] += 1
        return real_run(self, *a, **kw)

    def set_grid_idx(x, y, z):
        stats[current["op"]][1] += 1
        return real_set_idx(x, y, z)

    interpreter.InterpretedFunction.run = run
    interpreter.interpreter_builder.set_grid_idx = set_grid_idx

    def timed(op, fn):
        current["op"] = op
        t0 = time.process_time()
        fn()
        stats[op][2] += time.process_time() - t0

    def step():
        workspace = ops.decode_workspace(bs, heads, kv_heads, dim, dim, "cpu")
        for _ in range(layers):
            timed("fused_add_rms_norm", lambda: ops.fused_add_rms_norm(x, residual, w, 1e-5))
            qv, kv, vv = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], -1)
            timed("rotary_embedding", lambda: ops.rotary_embedding(positions, qv, kv.view(bs, kv_heads, dim), dim,
                                                                   cache, True))  # fmt: skip
            timed("store_kv", lambda: ops.store_kv(kv.view(bs, kv_heads, dim), vv.view(bs, kv_heads, dim),
                                                   k_buf, v_buf, loc))  # fmt: skip
            timed("decode_attention", lambda: ops.decode_attention(q, k_buf, v_buf, o, kv_indptr, kv_indices,
                                                                   sm_scale, workspace=workspace))  # fmt: skip
            timed("fused_add_rms_norm", lambda: ops.fused_add_rms_norm(x, residual, w, 1e-5))
            timed("silu_and_mul", lambda: ops.silu_and_mul(gate_up))
        timed("final norm", lambda: ops.fused_add_rms_norm(x, residual, w, 1e-5))
        timed("greedy", lambda: ops.greedy(logits))

    step()  # warm-up: rewrites, config lookups
    stats.clear()
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(args.steps):
        step()
    wall, total = (time.perf_counter() - t0) / args.steps, (time.process_time() - c0) / args.steps
    if profiler:
        profiler.disable()
    n = args.steps
    print(f"one decode step: {total * 1e3:.0f} ms CPU, {wall * 1e3:.0f} ms wall "
          f"({layers} layers, batch {bs}, context {args.context}, {args.dtype}; load {os.getloadavg()[0]:.1f})")
    print(f"{'op':22s} {'launches':>8s} {'programs':>8s} {'cpu ms/step':>11s} {'ms/launch':>9s}")
    launches = 0
    for op, (count, programs, secs) in sorted(stats.items(), key=lambda kv: -kv[1][2]):
        launches += count
        print(f"{op:22s} {count // n:8d} {programs // n:8d} {secs / n * 1e3:11.1f} {secs / max(count, 1) * 1e3:9.2f}")
    print(f"launches per step {launches // n}, per layer {launches / n / layers:.2f}; "
          f"{total / max(launches / n, 1) * 1e3:.2f} ms per launch")
    if profiler:
        import pstats

        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
