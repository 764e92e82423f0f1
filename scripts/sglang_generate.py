#!/usr/bin/env python
"""Main job: chat with a real model through SGLang on the kunlun platform.

By default SmolLM2-135M-Instruct (``kunlun-triton models fetch smollm2``:
downloaded and converted once, then cached): a few chat prompts go through
the model's chat template, all at once, and each answer is printed with its
time to first token (TTFT) and time per output token after it (TPOT),
measured here on the streamed tokens; then kunlun-triton's dispatch report,
which says which kernel ran for each op. On a machine without a Kunlun card
this is development mode: CPU + Triton interpreter. If the model cannot be
had (offline), it says so and runs a tiny random model instead.

    python scripts/sglang_generate.py                          # SmolLM2, 3 chat prompts x 32 tokens
    python scripts/sglang_generate.py --prompt "Write a haiku about GPUs"
    python scripts/sglang_generate.py --tiny                   # tiny random Llama (gibberish, fast)
    python scripts/sglang_generate.py --arch qwen3_moe         # tiny MoE: moe_topk + fused_experts
    python scripts/sglang_generate.py --model qwen2.5-0.5b         # Qwen2.5-Coder-0.5B-Instruct (fetched once)
    python scripts/sglang_generate.py --model-path /models/Qwen2-7B --dtype float16
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

CHAT_PROMPTS = ["What is the capital of France?", "What are the three primary colors?", "What is 12 + 30?"]
RAW_PROMPTS = ["The quick brown fox", "Once upon a time", "Attention reads keys and values"]


def _say(msg: str) -> None:
    print(f"[sglang_generate {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _model(args):
    """(model path, dtype, chat?) for the arguments: the real model unless told otherwise."""
    if args.model_path:
        return args.model_path, args.dtype or "auto", not args.no_chat
    if not args.tiny and args.arch is None:
        from kunlun_triton.tools.models import FetchError, fetch

        _say(f"fetching {args.model} (kunlun-triton models fetch {args.model}; cached after the first time)")
        try:
            dtype = args.dtype or "float32"
            return str(fetch(args.model, "bf16" if dtype == "bfloat16" else "fp32")), dtype, not args.no_chat
        except FetchError as exc:
            _say(f"{args.model} cannot be had: {exc}")
            _say("running the tiny random model instead (its output is gibberish)")
    from kunlun_triton.sglang_plugin.tools.tiny_model import build_tiny_model, default_model_dir

    arch = args.arch or "llama"
    model_dir = default_model_dir(arch)
    _say(f"building (or reusing) a tiny random {arch} model at {model_dir}")
    return str(build_tiny_model(model_dir, arch)), args.dtype or "float32", False


async def _stream(engine, input_ids, params) -> dict:
    """One request, streamed: its output and when its first and last tokens came."""
    start = time.perf_counter()
    first = last = None
    final = None
    async for chunk in await engine.async_generate(input_ids=input_ids, sampling_params=params, stream=True):
        last = time.perf_counter()
        first = first or last
        final = chunk
    tokens = int(final["meta_info"]["completion_tokens"])
    return {"out": final, "tokens": tokens, "ttft": first - start,
            "tpot": (last - first) / (tokens - 1) if tokens > 1 else float("nan")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    from kunlun_triton.tools.models import MODELS

    parser.add_argument("--model", default="smollm2", choices=list(MODELS),
                        help="a known model, fetched once (kunlun-triton models list; default smollm2)")
    parser.add_argument("--model-path", help="a local HF checkpoint instead of a known model")
    parser.add_argument("--tiny", action="store_true", help="a tiny random model instead of SmolLM2")
    parser.add_argument("--arch", choices=("llama", "qwen2", "qwen3_moe", "mixtral"), default=None,
                        help="tiny model architecture (implies --tiny; qwen3_moe, mixtral: mixture of experts)")
    parser.add_argument("--dtype", default=None, help="model dtype (SmolLM2 and tiny models: float32)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default 32 (tiny models: 12)")
    parser.add_argument("--page-size", type=int, default=1)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--tp-size", type=int, default=1)
    parser.add_argument("--prompt", action="append", help="a prompt (repeatable)")
    parser.add_argument("--no-chat", action="store_true", help="send prompts as they are, without the chat template")
    parser.add_argument("--report-json", action="store_true",
                        help="print the dispatch report as JSON (default: a table per scheduler)")
    args = parser.parse_args(argv)

    os.environ.setdefault("SGLANG_PLATFORM", "kunlun")
    os.environ.setdefault("SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS", "0")
    model_path, dtype, chat = _model(args)
    max_new = args.max_new_tokens or (32 if chat else 12)
    prompts = args.prompt or (CHAT_PROMPTS if chat else RAW_PROMPTS)

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    templated = chat and bool(tokenizer.chat_template)  # the template adds the special tokens itself
    if templated:
        texts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                               add_generation_prompt=True) for p in prompts]
    else:
        texts = prompts
    input_ids = [tokenizer(t, add_special_tokens=not templated)["input_ids"] for t in texts]

    _say("importing SGLang (about 30 s on a small CPU)")
    import sglang

    import kunlun_triton
    from kunlun_triton.runtime.env import env_str

    _say(f"starting sglang.Engine on platform {env_str('SGLANG_PLATFORM')!r} with {model_path} ({dtype}; "
         "about a minute in development mode)")
    t0 = time.time()
    engine = sglang.Engine(model_path=model_path, dtype=dtype, tp_size=args.tp_size, page_size=args.page_size,
                           max_total_tokens=4096, max_running_requests=8, chunked_prefill_size=256,
                           random_seed=0, log_level="error")
    _say(f"engine ready in {time.time() - t0:.0f} s; generating {len(prompts)} x {max_new} tokens, all at once")
    try:
        params = {"max_new_tokens": max_new, "temperature": args.temperature}
        t0 = time.time()
        results = engine.loop.run_until_complete(
            asyncio.gather(*(_stream(engine, ids, params) for ids in input_ids)))
        _say(f"generated {sum(r['tokens'] for r in results)} tokens for {len(prompts)} requests "
             f"in {time.time() - t0:.1f} s")
        for prompt, r in zip(prompts, results):
            print(f"\n>>> {prompt}\n{r['out']['text'].strip()}")
            print(f"    [{r['tokens']} tokens; TTFT {r['ttft']:.2f} s, TPOT {r['tpot']:.2f} s]")
        from kunlun_triton.sglang_plugin.report import engine_dispatch_report

        report = engine_dispatch_report(engine)
    finally:
        engine.shutdown()
    if args.report_json:
        print("\ndispatch report (scheduler processes):")
        print(json.dumps(report, indent=2, sort_keys=True, default=str))
    else:
        from kunlun_triton.sglang_plugin.tools.serve import format_report

        print()
        for rank in sorted(report):
            print(format_report(report[rank]))
    others = sorted(op for rank in report.values() for op, rec in rank["ops"].items()
                    if set(rec.get("calls", {})) != {"triton"})
    print(f"\nevery op on Triton: {'yes' if not others else 'no: ' + ', '.join(others)}")
    print(f"target in this process: {kunlun_triton.current_target()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
