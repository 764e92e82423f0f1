#!/usr/bin/env python
"""Time the main job's generation in development mode: wall and CPU seconds.

Three chat prompts x 32 new tokens, batched, greedy, through SGLang on the
kunlun platform (CPU + Triton interpreter), as ``scripts/sglang_generate.py``
starts its engine. Prints the generation's wall seconds and the scheduler
process's CPU seconds over it (the model runs there; on a shared machine CPU
seconds say what the work costs, wall seconds what a user waited), the load
average, and the per-step figures. Used for docs/dev-mode-speed.md:

    python scripts/dev_mode_measure.py --model-path DIR [--max-new-tokens 32]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

PROMPTS = ["What is the capital of France?", "What are the three primary colors?", "What is 12 + 30?"]


def _scheduler():
    import psutil

    for child in psutil.Process().children(recursive=True):
        try:
            if "scheduler" in child.name() or "scheduler" in " ".join(child.cmdline()):
                return child
        except psutil.Error:
            continue
    raise RuntimeError("no SGLang scheduler process found")


def _cpu(proc) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args(argv)
    os.environ.setdefault("SGLANG_PLATFORM", "kunlun")
    os.environ.setdefault("SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS", "0")
    import sglang
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model_path)
    ids = [tokenizer(tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                                   add_generation_prompt=True), add_special_tokens=False)["input_ids"]
           for p in PROMPTS]  # fmt: skip
    engine = sglang.Engine(model_path=args.model_path, max_total_tokens=4096, max_running_requests=8,
                           chunked_prefill_size=256, random_seed=0, log_level="error")  # fmt: skip
    try:
        sched = _scheduler()
        params = {"max_new_tokens": args.max_new_tokens, "temperature": 0.0, "ignore_eos": True}
        engine.generate(input_ids=[ids[0][:8]], sampling_params={"max_new_tokens": 2, "temperature": 0.0})  # warm-up
        cpu0, t0, load0 = _cpu(sched), time.time(), os.getloadavg()[0]
        outs = engine.generate(input_ids=ids, sampling_params=[params] * len(ids))
        wall, cpu, load1 = time.time() - t0, _cpu(sched) - cpu0, os.getloadavg()[0]
    finally:
        engine.shutdown()
    for prompt, out in zip(PROMPTS, outs):
        print(f">>> {prompt!r}\n{out['text']!r}")
    steps = args.max_new_tokens
    print(f"prompt tokens {[len(i) for i in ids]}, {steps} new tokens each, batched")
    print(f"generation: {wall:.1f} s wall, {cpu:.1f} s scheduler CPU "
          f"({cpu / steps:.2f} s CPU per token step, prefill included); load average {load0:.1f} -> {load1:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
