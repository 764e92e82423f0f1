"""Device-free cost counts of `sample` (README "Sampling"): bytes loaded from
the logits per row, programs per launch, SASS per element per pass.

    PYTHONPATH=$PWD python scripts/sampling_counts.py                  # all three, vocab 151936
    PYTHONPATH=$PWD python scripts/sampling_counts.py --what bytes --batch 64 --logits peaked
    PYTHONPATH=$PWD python scripts/sampling_counts.py --what sass

- bytes: runs `sample` under the Triton interpreter (CPU) on `--batch` rows
  for each filter mix and counts the masked-in bytes its loads take from the
  logits (`kunlun_triton.introspect.interpreter_counts`), as multiples of the
  row; also how many rows each stage decided (stage 2, pivot rounds). The
  row split is the cuda-sm_90 one (BLOCK_V from its config); rows per
  program do not change what a row loads, so the interpreter runs 16.
- programs: the launch plan of a batch of 1 under the cuda-sm_90 config
  (`ops.sample_plan`, the launcher's own code).
- python: CPU microseconds of Python per `sample` / `greedy` call with the
  kernel launches stubbed out (checks off, as SGLang calls it: tensors in,
  check=False), on CPU tensors.
- sass: compiles every kernel of that plan ahead of time for sm_90 (no GPU
  needed) and counts the SASS instructions of each with Triton's bundled
  cuobjdump: per BLOCK_V tile per warp, and per element per pass per thread
  (instructions x 32 x num_warps / BLOCK_V) for the kernels that read the row.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile

if "--sass-child" not in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ.setdefault("KUNLUN_TRITON_BACKEND", "triton")

MIXES = {
    # name: (temperature, top_k, top_p, min_p)
    "temperature only": (0.7, -1, 1.0, 0.0),
    "top-k 50": (0.7, 50, 1.0, 0.0),
    "top-k 1000": (0.7, 1000, 1.0, 0.0),
    "top-p 0.9": (0.7, -1, 0.9, 0.0),
    "top-p 0.5": (0.7, -1, 0.5, 0.0),
    "min-p 0.05": (0.7, -1, 1.0, 0.05),
    "top-k 50, top-p 0.9, min-p 0.05": (0.7, 50, 0.9, 0.05),
    "top-k 1000, top-p 0.95": (1.0, 1000, 0.95, 0.0),
    "top-k 20, top-p 0.8, T 1.5": (1.5, 20, 0.8, 0.0),
}


def cuda_target():
    from kunlun_triton.runtime import Target

    return Target("cuda", "sm_90", "cuda", "sampling_counts")


OVERRIDE: dict = {}  # --block-v / --num-warps: try another config than the shipped one


def cuda_config(vocab: int) -> dict:
    from kunlun_triton.ops.sampling import ops
    from kunlun_triton.runtime import get_config

    return ops._config("sample", vocab, {**get_config("sample", target=cuda_target(), vocab=vocab), **OVERRIDE})


def make_logits(kind: str, batch: int, vocab: int):
    import torch

    gen = torch.Generator().manual_seed(1)
    if kind == "randn":  # the bench's logits: 2 * N(0, 1)
        return 2 * torch.randn(batch, vocab, generator=gen)
    # peaked, like a language model's: a Gaussian floor and 20 tokens lifted by Exp(mean 4)
    logits = 2.5 * torch.randn(batch, vocab, generator=gen)
    lifted = torch.randint(0, vocab, (batch, 20), generator=gen)
    return logits.scatter_add_(1, lifted, torch.empty(batch, 20).exponential_(0.25, generator=gen))


def count_bytes(args) -> list[dict]:
    import torch

    from kunlun_triton.ops.sampling import ops
    from kunlun_triton.ops.sampling import reference as ref
    from kunlun_triton.introspect.interpreter_counts import count_loads
    from kunlun_triton.ops.launch import LaunchSequence

    from kunlun_triton.runtime.interpreter_speed import skip_repeated_patching

    skip_repeated_patching()
    vocab, batch = args.vocab, args.batch
    config = {"BLOCK_R": 16, "BLOCK_V": cuda_config(vocab)["BLOCK_V"]}
    logits = make_logits(args.logits, batch, vocab)
    row_bytes = vocab * logits.element_size()
    rows = []
    for name, (temp, top_k, top_p, min_p) in MIXES.items():
        full = lambda v, dtype=torch.float32: torch.full((batch,), v, dtype=dtype)  # noqa: E731
        params = (full(temp), full(top_k, torch.int64), full(top_p), full(min_p))
        seeds, positions = torch.arange(batch) * 7919 + 1, torch.arange(batch)
        flags = {"top_k": top_k != -1, "top_p": top_p != 1.0, "min_p": min_p != 0.0}
        plan = ops.sample_plan(batch, vocab, ops._config("sample", vocab, config), **flags)
        out = torch.full((batch,), -1, dtype=torch.int64)
        scratch = torch.empty(plan.scratch_words, dtype=torch.int32)
        decided = []
        with count_loads(logits, row_bytes) as counts:
            for (kernel, _, _), step in zip(plan.launches, plan.calls.steps):  # one by one: which stage decided each row
                alone = LaunchSequence((step,), len(ops._CALL_ARGS))
                ops._launch(dataclasses.replace(plan, calls=alone), batch, vocab, logits, *params, seeds, positions,
                            scratch, out)  # fmt: skip
                if kernel in ("combine_kernel", "decide_kernel"):
                    decided.append(int((out >= 0).sum()))
        top_ks = torch.where(params[1] < 1, vocab, params[1])
        allowed = ref.filtered_probs(logits, params[0], top_ks, params[2], params[3])
        assert bool((allowed.gather(1, out.view(-1, 1)) > 0).all()), f"{name}: a token outside the kept set"
        per_kernel = {k: round(v / row_bytes / batch, 3) for k, v in counts.bytes_by_kernel.items()}
        # a row the pivot round decided has read at most 2 rows (+ 2 logits it gathers)
        finished_alone = sum(b > 2 * row_bytes + 16 for b in counts.bytes_by_row.values())
        rows.append({"mix": name, "rows_read_per_row": counts.bytes / row_bytes / batch,
                     "max_rows_read_per_row": max(counts.bytes_by_row.values()) / row_bytes, "decided_after_each_stage": decided, "per_kernel": per_kernel,
                     "finished_alone": finished_alone})  # fmt: skip
    return rows


def programs(args) -> list[tuple[str, int]]:
    from kunlun_triton.ops.sampling import ops

    launches = ops.sample_plan(1, args.vocab, cuda_config(args.vocab), target=cuda_target()).launches
    return [(name, grid[0] * (grid[1] if len(grid) > 1 else 1)) for name, grid, _ in launches]


def python_overhead(args) -> dict:
    """CPU time (process_time, so other processes on the machine do not
    count) per call, best of 15 x 500 calls interleaved, every kernel launch
    replaced by a no-op; also the shared dispatch decision (`use_triton`)
    alone and torch.empty for scale."""
    import time
    import timeit

    import torch

    from kunlun_triton.ops.sampling import ops
    from kunlun_triton.runtime import use_triton
    from kunlun_triton.introspect.launches import stubbed_launches

    batch, vocab = 64, args.vocab
    logits = torch.empty(batch, vocab)
    temps, top_ks = torch.full((batch,), 0.7), torch.full((batch,), 50, dtype=torch.int32)
    top_ps, min_ps = torch.full((batch,), 0.9), torch.zeros(batch)
    seeds, positions = torch.arange(batch), torch.arange(batch)
    calls = {
        "sample, SGLang's call (tensors, check=False; 4 launches)": lambda: ops.sample(
            logits, temps, top_ks, top_ps, min_ps, seeds=seeds, positions=positions, check=False),
        "sample, temperature only (numbers for the filters; 2 launches)": lambda: ops.sample(
            logits, temps, -1, 1.0, 0.0, seeds=seeds, positions=positions, check=False),
        "greedy (2 launches)": lambda: ops.greedy(logits),
        "  of which use_triton (the shared dispatch record)": lambda: use_triton("sample", logits),
        "  for scale: torch.empty(64) on this machine": lambda: torch.empty(64),
    }  # fmt: skip
    results = {}
    with stubbed_launches():
        timers = {name: timeit.Timer(call, timer=time.process_time) for name, call in calls.items()}
        for timer in timers.values():
            timer.timeit(200)
        for _ in range(15):  # interleaved, so a busy spell of the machine hits every call alike
            for name, timer in timers.items():
                best = timer.timeit(500) / 500 * 1e6
                results[name] = min(results.get(name, best), best)
    return results


def sass_counts(args) -> list[dict]:
    """Compile in a child without TRITON_INTERPRET (Triton decides at import)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    extra = [f"--{k.lower().replace('_', '-')}={v}" for k, v in OVERRIDE.items()]
    done = subprocess.run([sys.executable, __file__, "--sass-child", "--vocab", str(args.vocab), *extra], env=env,
                          capture_output=True, text=True, timeout=1800)  # fmt: skip
    if done.returncode:
        raise SystemExit(done.stderr[-4000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def _sass_child(vocab: int) -> None:
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kunlun_triton.ops.sampling import ops

    config = cuda_config(vocab)
    plan = ops.sample_plan(1, vocab, config, target=cuda_target())
    dtypes = ops.sample_arg_dtypes(torch.bfloat16)
    bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    results, seen = [], set()
    for spec, (name, _, meta) in zip(ops.plan_kernel_specs(plan, dtypes), plan.launches):
        if spec.label in seen:
            continue
        seen.add(spec.label)
        options = {k: v for k, v in meta.items() if not k[:1].isupper()}
        src = ASTSource(fn=ops._KERNELS[name], signature=spec.signature, constexprs=spec.constexprs)
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(compiled.asm["cubin"])
            f.flush()
            sass = subprocess.run([os.path.join(bin_dir, "cuobjdump"), "-sass", f.name], capture_output=True,
                                  text=True, check=True).stdout  # fmt: skip
            usage = subprocess.run([os.path.join(bin_dir, "cuobjdump"), "-res-usage", f.name], capture_output=True,
                                   text=True, check=True).stdout  # fmt: skip
        registers = int(re.search(r"REG:(\d+)", usage).group(1))
        local_bytes = int(re.search(r"LOCAL:(\d+)", usage).group(1))
        instructions = len(re.findall(r"^\s+/\*[0-9a-f]{4,}\*/\s+[^\s;]", sass, flags=re.M))
        warps = compiled.metadata.num_warps
        results.append({"kernel": spec.label, "name": name, "instructions": instructions, "num_warps": warps,
                        "registers": registers, "local_bytes": local_bytes,
                        "per_element": instructions * 32 * warps / meta["BLOCK_V"] if "BLOCK_V" in meta and
                        name in ("block_stats_kernel", "pivot_kernel") else None})  # fmt: skip
    print(json.dumps(results))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--what", choices=("all", "bytes", "programs", "python", "sass"), default="all")
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--logits", choices=("randn", "peaked"), default="randn")
    parser.add_argument("--block-v", type=int, help="BLOCK_V instead of the cuda-sm_90 config's")
    parser.add_argument("--num-warps", type=int, help="num_warps instead of the cuda-sm_90 config's")
    parser.add_argument("--sass-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    OVERRIDE.update({k: v for k, v in (("BLOCK_V", args.block_v), ("num_warps", args.num_warps)) if v})
    if args.sass_child:
        _sass_child(args.vocab)
        return 0
    if args.what in ("all", "programs"):
        print(f"launches at batch 1, vocab {args.vocab} (cuda-sm_90 config {cuda_config(args.vocab)}):")
        for name, n in programs(args):
            print(f"  {name:20s} {n:6d} programs")
    if args.what in ("all", "python"):
        print("Python per call, kernel launches stubbed (CPU time, best of 15 x 500 calls):")
        for name, us in python_overhead(args).items():
            print(f"  {name:66s} {us:6.1f} us")
    if args.what in ("all", "sass"):
        print("SASS (sm_90, bf16 logits):")
        for r in sass_counts(args):
            per = f", {r['per_element']:.1f} per element per pass" if r["per_element"] is not None else ""
            print(f"  {r['kernel']}: {r['instructions']} instructions per program per warp "
                  f"({r['num_warps']} warps, {r['registers']} registers, {r['local_bytes']} B local{per})")  # fmt: skip
    if args.what in ("all", "bytes"):
        print(f"bytes loaded from the logits per row ({args.logits} logits, batch {args.batch}, vocab {args.vocab}):")
        for r in count_bytes(args):
            print(f"  {r['mix']:34s} {r['rows_read_per_row']:.2f} x the row (max {r['max_rows_read_per_row']:.2f}); "
                  f"rows decided by the first read {r['decided_after_each_stage'][0]}, by the pivot round "
                  f"{args.batch - r['decided_after_each_stage'][0] - r['finished_alone']}, finished per row "
                  f"{r['finished_alone']} (of {args.batch})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
