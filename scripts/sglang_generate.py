#!/usr/bin/env python
"""Main job: generate text through SGLang on the kunlun platform.

Builds a tiny random model if none is given (no hub access needed), starts
``sglang.Engine`` with ``SGLANG_PLATFORM=kunlun`` (on a machine without a
Kunlun card: development mode, CPU + Triton interpreter), generates for a few
prompts and prints the text and kunlun-triton's dispatch report, which says
which kernel ran for each op.

    python scripts/sglang_generate.py                       # tiny Llama
    python scripts/sglang_generate.py --arch qwen2 --max-new-tokens 16
    python scripts/sglang_generate.py --arch qwen3_moe      # MoE: moe_topk + fused_experts
    python scripts/sglang_generate.py --model-path /models/Qwen2-7B --dtype float16
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

PROMPTS = ["The quick brown fox", "Once upon a time", "Attention reads keys and values"]


def _say(msg: str) -> None:
    print(f"[sglang_generate {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-path", help="a local HF checkpoint (default: build a tiny random one)")
    parser.add_argument("--arch", choices=("llama", "qwen2", "qwen3_moe", "mixtral"), default="llama",
                        help="tiny model architecture (qwen3_moe, mixtral: mixture of experts)")
    parser.add_argument("--dtype", default=None, help="model dtype (tiny model: float32)")
    parser.add_argument("--max-new-tokens", type=int, default=12)
    parser.add_argument("--page-size", type=int, default=1)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--tp-size", type=int, default=1)
    parser.add_argument("--prompt", action="append", help="a prompt (repeatable)")
    args = parser.parse_args(argv)

    os.environ.setdefault("SGLANG_PLATFORM", "kunlun")
    os.environ.setdefault("SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS", "0")

    from kunlun_triton.sglang_plugin.tiny_model import build_tiny_model, default_model_dir

    model_path = args.model_path
    dtype = args.dtype
    if model_path is None:
        model_dir = default_model_dir(args.arch)
        _say(f"building (or reusing) a tiny random {args.arch} model at {model_dir}")
        model_path = str(build_tiny_model(model_dir, args.arch))
        dtype = dtype or "float32"

    _say("importing SGLang (about 30 s on a small CPU)")
    import sglang

    import kunlun_triton
    from kunlun_triton.runtime.env import env_str

    _say(f"starting sglang.Engine on platform {env_str('SGLANG_PLATFORM')!r} (about a minute in development mode)")
    t0 = time.time()
    engine = sglang.Engine(
        model_path=model_path,
        dtype=dtype or "auto",
        tp_size=args.tp_size,
        page_size=args.page_size,
        max_total_tokens=4096,
        max_running_requests=8,
        chunked_prefill_size=256,
        random_seed=0,
        log_level="error",
    )
    _say(f"engine ready in {time.time() - t0:.0f} s; generating")
    try:
        prompts = args.prompt or PROMPTS
        params = {"max_new_tokens": args.max_new_tokens, "temperature": args.temperature}
        t0 = time.time()
        outputs = engine.generate(prompts, params)
        _say(f"generated {len(prompts)} completions in {time.time() - t0:.1f} s")
        for prompt, out in zip(prompts, outputs):
            print(f"\n>>> {prompt!r}\n{out['text']!r}")
        report = engine_dispatch_report(engine)
    finally:
        engine.shutdown()
    print("\ndispatch report (scheduler process):")
    print(json.dumps(report, indent=2, sort_keys=True, default=str))
    print(f"\ntarget in this process: {kunlun_triton.current_target()}")
    return 0


def engine_dispatch_report(engine) -> dict:
    from kunlun_triton.sglang_plugin.report import engine_dispatch_report as fetch

    return fetch(engine)


if __name__ == "__main__":
    sys.exit(main())
