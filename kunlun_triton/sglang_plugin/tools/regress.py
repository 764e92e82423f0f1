"""`kunlun-triton regress`: a model's greedy outputs recorded once, compared later.

The seed's practice for real models (0.5B, 7B, 14B): fixed prompts through
the chat template, greedy decoding on SGLang on the kunlun platform, and a
golden file of what came out::

    kunlun-triton regress --model DIR --record --golden my-model.json   # on a reference
    kunlun-triton regress --model DIR --golden my-model.json            # later, or on your card
    kunlun-triton regress --model qwen2.5-0.5b --golden tests/regression/golden/qwen2.5-0.5b-fp32.json

``--model`` is any checkpoint directory (an operator's own 7B or 14B) or a
known model's name (``kunlun-triton models list``: fetched first). Every
argument and the golden file are checked before an engine starts, one line
per problem (kunlun_triton/tools/regress_args.py).

The golden file holds, per case: the prompt's token ids (a tokenizer change
shows up), the greedy output ids, and the top-5 (token id, logprob) at every
step; TTFT and TPOT are recorded as information and never compared. A
comparison checks, per case:

- the greedy output ids equal the golden ones;
- teacher-forced: the prompt plus the golden output in one prefill, so one
  early flip does not hide the rest: at every step the top-1 equals the
  golden token, and every token in both top-5 lists has a logprob within
  ``--atol`` nats of the golden one.

Each case prints pass or FAIL with its TTFT and TPOT, then one line per
disagreement. Exit status 0 when everything agrees, 1 when something does not,
2 for bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

TOP = 5
# nats: SmolLM2 in fp32 on the interpreter differs from HF eager by 4e-5 (docs/real-model.md); a
# device's kernels (other summation orders, tf32, half-precision models) by more
DEFAULT_ATOL = 0.05

LONG_RULES = [
    "Answer in the language of the question.", "Prefer short sentences.", "Never invent a source.",
    "Say when you do not know.", "Give numbers with their units.", "Keep code examples runnable.",
    "Use metric units unless asked otherwise.", "Explain acronyms the first time they appear.",
]


def long_system_prompt(n_rules: int = 60) -> str:
    """A system prompt of about 1,500 tokens (60 numbered rules) for the long-context case."""
    return "You are a careful assistant. Follow these rules.\n" + "\n".join(
        f"Rule {i + 1}: {LONG_RULES[i % len(LONG_RULES)]} This rule has priority {i % 7 + 1} "
        f"and applies to section {chr(65 + i % 26)}." for i in range(n_rules))


CASES = {
    "english": [{"role": "user", "content": "What is the capital of France?"}],
    "chinese": [{"role": "user", "content": "中国的首都是哪个城市？"}],
    "code": [{"role": "user", "content": "Write a Python function that returns the square of a number."}],
    "long_system": [{"role": "system", "content": long_system_prompt()},
                    {"role": "user", "content": "Which rule has priority 3 and applies to section C?"}],
}


def encode(tokenizer, messages) -> list:
    """The prompt's token ids: through the chat template when the model has one."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer("\n".join(m["content"] for m in messages))["input_ids"])


def _top(entries) -> list:
    """SGLang's top-logprob entries [(logprob, id, text?), ...] as [[id, logprob], ...]."""
    return [[int(e[1]), float(e[0])] for e in (entries or [])]


def _greedy_params(max_new_tokens: int) -> dict:
    return {"max_new_tokens": max_new_tokens, "temperature": 0.0, "ignore_eos": True}


async def _stream_one(engine, input_ids, max_new_tokens) -> dict:
    """One greedy request, streamed (for TTFT/TPOT), with its top-5 per step."""
    start, first, last, final = time.perf_counter(), None, None, None
    ids, top = [], []
    gen = await engine.async_generate(input_ids=input_ids, sampling_params=_greedy_params(max_new_tokens),
                                      return_logprob=True, top_logprobs_num=TOP, stream=True)
    async for chunk in gen:
        last = time.perf_counter()
        first = first or last
        final = chunk
        meta = chunk["meta_info"]
        done = int(meta["completion_tokens"])
        # cumulative or incremental streaming (a server option): take what is new either way
        new_ids, new_top = list(chunk["output_ids"]), meta.get("output_top_logprobs") or []
        ids = new_ids if len(new_ids) == done else ids + new_ids
        top = list(new_top) if len(new_top) == done else top + list(new_top)
    tokens = len(ids)
    return {"output_ids": [int(i) for i in ids], "top5": [_top(t) for t in top],
            "cached_tokens": int(final["meta_info"].get("cached_tokens", 0)),
            "ttft_s": round(first - start, 3),
            "tpot_s": round((last - first) / (tokens - 1), 3) if tokens > 1 else None}


def greedy(engine, prompts: list, max_new_tokens: int) -> list:
    """Every prompt at once (a batch), greedy; per prompt its output ids, top-5 per step,
    cached tokens and TTFT/TPOT."""
    return engine.loop.run_until_complete(
        asyncio.gather(*(_stream_one(engine, p, max_new_tokens) for p in prompts)))


def teacher_forced(engine, prompts: list, forced: list) -> list:
    """For each prompt + forced continuation, in one prefill: the top-5 [[id, logprob]]
    of the distribution that predicts each forced token."""
    inputs = [list(p) + list(f) for p, f in zip(prompts, forced)]
    outs = engine.generate(input_ids=inputs, sampling_params=_greedy_params(1), return_logprob=True,
                           top_logprobs_num=TOP, logprob_start_len=[len(p) - 1 for p in prompts])
    result = []
    for p, f, out in zip(prompts, forced, outs):
        tops = out["meta_info"]["input_top_logprobs"]
        # SGLang 0.5.23 (logprob_result_processor.py): [None] + the distribution computed at
        # each position from start on, the last (sampling) one dropped; so entry j predicts
        # input token start + j: with start = len(p) - 1, entries 1..len(f) are the forced ones
        result.append([_top(t) for t in tops[1:1 + len(f)]])
    return result


def compare_top5(golden_steps: list, steps: list, atol: float, where: str) -> list:
    """Problems (strings) between two runs' per-step top-5 lists."""
    problems = []
    for i, (want, got) in enumerate(zip(golden_steps, steps)):
        if got[0][0] != want[0][0]:
            problems.append(f"{where} step {i}: top-1 {got[0][0]} ({got[0][1]:.3f}), golden {want[0][0]} "
                            f"({want[0][1]:.3f})")
            continue
        wanted = dict((tid, lp) for tid, lp in want)
        for tid, lp in got:
            if tid in wanted and not abs(lp - wanted[tid]) <= atol:
                problems.append(f"{where} step {i}: token {tid} logprob {lp:.4f}, golden {wanted[tid]:.4f} "
                                f"(|diff| > {atol})")
    if len(steps) != len(golden_steps):
        problems.append(f"{where}: {len(steps)} steps, golden {len(golden_steps)}")
    return problems


def run_cases(engine, tokenizer, names: list, max_new_tokens: int) -> dict:
    prompts = [encode(tokenizer, CASES[n]) for n in names]
    results = greedy(engine, prompts, max_new_tokens)
    return {n: {"input_ids": p, **r} for n, p, r in zip(names, prompts, results)}


def compare_cases(golden: dict, engine, tokenizer, atol: float):
    """({case: [problems]}, this engine's runs) between a golden file and this engine."""
    names = list(golden["cases"])
    current = run_cases(engine, tokenizer, names, golden["max_new_tokens"])
    problems = {n: [] for n in names}
    for n in names:
        want, got = golden["cases"][n], current[n]
        if got["input_ids"] != want["input_ids"]:
            problems[n].append(f"{n}: the prompt encodes differently (tokenizer or chat template changed)")
            continue
        if got["output_ids"] != want["output_ids"]:
            at = next(i for i, (a, b) in enumerate(zip(got["output_ids"] + [None], want["output_ids"])) if a != b)
            problems[n].append(f"{n}: greedy output differs from step {at}: {got['output_ids'][at:at + 4]} vs "
                               f"golden {want['output_ids'][at:at + 4]}")
    forced = teacher_forced(engine, [golden["cases"][n]["input_ids"] for n in names],
                            [golden["cases"][n]["output_ids"] for n in names])
    for n, steps in zip(names, forced):
        problems[n] += compare_top5(golden["cases"][n]["top5"], steps, atol, f"{n} (teacher-forced)")
    return problems, current


def compare(golden: dict, engine, tokenizer, atol: float) -> list:
    """Problems between a golden file and this engine (empty: all agree)."""
    return [p for found in compare_cases(golden, engine, tokenizer, atol)[0].values() for p in found]


def dump_golden(data: dict) -> str:
    """JSON with one line per list (prompt ids, output ids, each step's top-5), so a
    change that alters outputs reads as a short diff."""
    lines = ["{"]
    for key, value in data.items():
        if key != "cases":
            lines.append(f" {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)},")
    lines.append(' "cases": {')
    for i, (name, case) in enumerate(data["cases"].items()):
        lines.append(f"  {json.dumps(name)}: {{")
        fields = [f"   {json.dumps(k)}: {json.dumps(v)}" for k, v in case.items() if k != "top5"]
        steps = ",\n".join(f"    {json.dumps(step)}" for step in case["top5"])
        fields.append(f'   "top5": [\n{steps}\n   ]')
        lines.append(",\n".join(fields))
        lines.append("  }" + ("," if i + 1 < len(data["cases"]) else ""))
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"


def start_engine(model_path: str, dtype: str, tp_size: int = 1, **kwargs):
    os.environ.setdefault("SGLANG_PLATFORM", "kunlun")
    os.environ.setdefault("SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS", "0")
    import sglang

    # watchdog_timeout: under the Triton interpreter a ~1500-token prompt's
    # bf16 prefill outlasts SGLang's 300 s watchdog, which then SIGQUITs the
    # caller with no report (the full regression form on 2 cores, 2026-12-03).
    options = dict(max_total_tokens=8192, max_running_requests=8, random_seed=0, log_level="error",
                   watchdog_timeout=3600)  # fmt: skip
    return sglang.Engine(model_path=model_path, dtype=dtype, tp_size=tp_size, **{**options, **kwargs})


def main(argv=None) -> int:
    from ...tools.models import MODELS, FetchError, fetch
    from ...tools.regress_args import USAGE_ERROR, check, result_line

    parser = argparse.ArgumentParser(prog="kunlun-triton regress", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", "--model-path", dest="model", required=True,
                        help=f"a checkpoint directory, or a known model ({', '.join(MODELS)}: fetched first)")
    parser.add_argument("--golden", help="the golden file (default with --record: regress-<model>-<dtype>.json)")
    parser.add_argument("--record", action="store_true", help="write the golden file instead of comparing")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--tp-size", type=int, default=1)
    parser.add_argument("--cases", default="english,chinese,code,long_system",
                        help=f"comma-separated, from {', '.join(CASES)}")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--atol", type=float, default=DEFAULT_ATOL, help="logprob tolerance in nats")
    args = parser.parse_args(argv)
    label = Path(args.model).name
    args.golden = args.golden or f"regress-{label}-{args.dtype}.json"
    golden, errors = check(args, tuple(MODELS), tuple(CASES))
    if errors:
        print("\n".join(f"error: {e}" for e in errors), file=sys.stderr)
        raise SystemExit(USAGE_ERROR)
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    golden_path = Path(args.golden)
    model_path = args.model
    if args.model in MODELS and not Path(args.model).exists():
        try:
            model_path = str(fetch(args.model, "bf16" if args.dtype == "bfloat16" else "fp32"))
        except FetchError as exc:
            print(f"error: --model {args.model}: {exc}", file=sys.stderr)
            return 1

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    engine = start_engine(model_path, args.dtype, args.tp_size)
    try:
        if args.record:
            import sglang

            cases = run_cases(engine, tokenizer, names, args.max_new_tokens)
            data = {"model": Path(model_path).name, "dtype": args.dtype, "tp_size": args.tp_size,
                    "sglang": sglang.__version__, "max_new_tokens": args.max_new_tokens, "top": TOP,
                    "note": "ttft_s/tpot_s are information, never compared", "cases": cases}
            golden_path.write_text(dump_golden(data))
            print(f"{label}: recorded")
            for n, c in cases.items():
                print(f"{result_line(n, [], c).replace(' pass ', ' ')}  {tokenizer.decode(c['output_ids'])!r}")
            print(f"wrote {golden_path}")
            return 0
        problems, current = compare_cases(golden, engine, tokenizer, args.atol)
    finally:
        engine.shutdown()
    print(f"{label} ({args.dtype}, TP {args.tp_size}) against {golden_path}:")
    for n in golden["cases"]:
        print(result_line(n, problems[n], current[n]))
    found = [p for n in golden["cases"] for p in problems[n]]
    for p in found:
        print(f"  {p}")
    n = len(golden["cases"])
    print(f"{n} case(s) x {golden['max_new_tokens']} tokens: " + (f"{len(found)} problem(s)" if found else
                                                                  "all agree with the golden file"))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
