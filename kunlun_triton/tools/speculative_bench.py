"""`kunlun-triton bench speculative`: accept length, tokens per target forward
and decode throughput with and without speculative decoding, side by side,
in one run, on the kunlun platform (SGLang engines; development mode on a CPU).

    kunlun-triton bench speculative --model-path smollm2 --draft-layers 8
    kunlun-triton bench speculative --model-path DIR --speculative-algorithm EAGLE \\
        --speculative-draft-model-path HEAD --speculative-eagle-topk 2 --speculative-num-draft-tokens 5

Two engines, one after the other (never two alive): the target with
``--speculative-*`` options, then the target alone (``--no-baseline`` skips
it). Each serves one untimed warm-up request, then the prompts as one greedy
batch (timed: output tokens / wall seconds). The speculative engine's
numbers come from its scheduler's dispatch report (``accept``:
SGLang's per-request counters, sglang_plugin/speculative/accept.py; ``speculative``:
which of our ops each phase ran), taken before and after the timed batch, so
the warm-up is not in them. The tokens of the two runs are compared: greedy
speculative decoding is lossless, so they must be equal (exit status 1 when
not). The draft is ``--speculative-draft-model-path``, or with
``--draft-layers N`` the target's first N layers (its own embedding, final
norm and head) written next to the target (STANDALONE).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "List the first ten prime numbers: 2, 3, 5,",
]
COUNTS = ("requests", "completion_tokens", "verify_steps", "correct_drafts", "verify_forwards")


def build_truncated_draft(target, out, layers: int) -> str:
    """The target's first `layers` decoder layers as a checkpoint of its own
    (single-file safetensors checkpoints; tokenizer and other files copied)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    src, out = Path(target), Path(out)
    if (out / "model.safetensors").exists():
        return str(out)
    config = json.loads((src / "config.json").read_text())
    if not 0 < layers < int(config["num_hidden_layers"]):
        raise ValueError(f"bench speculative: --draft-layers must be in 1..{config['num_hidden_layers'] - 1} "
                         f"(the target has {config['num_hidden_layers']}), got {layers}")  # fmt: skip
    if not (src / "model.safetensors").exists():
        raise ValueError(f"bench speculative: --draft-layers needs a single-file checkpoint ({src}/model.safetensors)")
    out.mkdir(parents=True, exist_ok=True)
    config["num_hidden_layers"] = layers
    keep = {}
    with safe_open(str(src / "model.safetensors"), "pt") as f:
        for name in f.keys():
            parts = name.split(".")
            if "layers" in parts and int(parts[parts.index("layers") + 1]) >= layers:
                continue
            keep[name] = f.get_tensor(name)
    for name in os.listdir(src):
        if name not in ("model.safetensors", "config.json", "kunlun_tiny_model.json") and (src / name).is_file():
            (out / name).write_bytes((src / name).read_bytes())
    (out / "config.json").write_text(json.dumps(config, indent=2))
    save_file(keep, str(out / "model.safetensors"))  # last: its presence marks a complete draft
    return str(out)


def accept_delta(before: dict | None, after: dict, num_draft_tokens: int) -> dict:
    """The report's accept counters over the timed batch (after - before), with
    the ratios recomputed as the report computes them."""
    from ..sglang_plugin.speculative.accept import accept_ratios

    before = before or {}
    counts = {k: int(after.get(k, 0)) - int(before.get(k, 0)) for k in COUNTS}
    return accept_ratios(counts, num_draft_tokens)


def phase_delta(before: dict, after: dict) -> dict:
    """{phase: {"forwards", "requests", "ops": {op: layer calls}}} over the timed batch."""
    out = {}
    for phase, entry in after.items():
        old = before.get(phase, {})
        ops = {op: n - old.get("ops", {}).get(op, 0) for op, n in entry.get("ops", {}).items()}
        out[phase] = {"forwards": entry["forwards"] - old.get("forwards", 0),
                      "requests": entry["requests"] - old.get("requests", 0),
                      "ops": {k: v for k, v in ops.items() if v}}  # fmt: skip
    return out


def _report(engine) -> dict:
    from ..sglang_plugin.report import engine_dispatch_report

    return engine_dispatch_report(engine)[0]


def run_one(start, target: str, prompts: list, new: int, options: dict) -> dict:
    """One engine: warm-up, the timed greedy batch, the report around it; shut down."""
    greedy = {"max_new_tokens": new, "temperature": 0.0, "ignore_eos": True}
    engine = start(target, **options)
    try:
        warmup = engine.generate(input_ids=prompts[0], sampling_params={**greedy, "max_new_tokens": 2})
        before = _report(engine)
        t0 = time.perf_counter()
        outs = engine.generate(input_ids=prompts, sampling_params=greedy)
        seconds = time.perf_counter() - t0
        after = _report(engine)
    finally:
        engine.shutdown()
    tokens = sum(o["meta_info"]["completion_tokens"] for o in outs)
    return {"outputs": outs, "warmup": [warmup], "seconds": seconds, "tokens": tokens,
            "tokens_per_s": tokens / seconds if seconds > 0 else None, "report_before": before, "report": after}


def measure(target: str, prompts: list, new: int, spec_options: dict, baseline: bool = True, start=None,
            **engine_options) -> dict:
    """{"speculative": run, "baseline": run or None, "accept": over the timed batch,
    "phases": ops per speculative phase over it, "lossless": tokens equal}."""
    if start is None:
        from ..sglang_plugin.tools.regress import start_engine

        def start(path, **kw):
            return start_engine(path, kw.pop("dtype"), **kw)

    engine_options.setdefault("dtype", "float32")
    spec = run_one(start, target, prompts, new, {**engine_options, **spec_options})
    base = run_one(start, target, prompts, new, engine_options) if baseline else None
    draft_tokens = int(spec_options.get("speculative_num_draft_tokens") or 0)
    result = {"speculative": spec, "baseline": base, "options": spec_options,
              "accept": accept_delta(spec["report_before"].get("accept"), spec["report"].get("accept") or {},
                                     draft_tokens),
              "phases": phase_delta(spec["report_before"].get("speculative", {}), spec["report"]["speculative"])}
    if base is not None:
        result["lossless"] = [list(o["output_ids"]) for o in spec["outputs"]] == [
            list(o["output_ids"]) for o in base["outputs"]]  # fmt: skip
    return result


def format_result(result: dict) -> str:
    spec, base, acc = result["speculative"], result["baseline"], result["accept"]

    def num(v, fmt="{:.2f}"):
        return "-" if v is None else fmt.format(v)

    rows = [("", "speculative", "without"),
            ("output tokens", str(spec["tokens"]), str(base["tokens"]) if base else "-"),
            ("wall seconds", num(spec["seconds"]), num(base["seconds"]) if base else "-"),
            ("tokens / s", num(spec["tokens_per_s"], "{:.3f}"), num(base["tokens_per_s"], "{:.3f}") if base else "-"),
            ("accept length (tokens / verify step)", num(acc["accept_length"]), "1"),
            ("tokens per target forward (decode)", num(acc["tokens_per_target_forward"]), "1"),
            ("accept rate (drafts accepted)", num(acc["accept_rate"]), "-")]  # fmt: skip
    width = max(len(r[0]) for r in rows)
    lines = [f"{a:<{width}}  {b:>12}  {c:>10}" for a, b, c in rows]
    if base and spec["tokens_per_s"] and base["tokens_per_s"]:
        lines.append(f"{'speed-up':<{width}}  {spec['tokens_per_s'] / base['tokens_per_s']:>11.2f}x")
    lines.append(f"verify steps {acc['verify_steps']}, target verify forwards {acc['verify_forwards']}, "
                 f"correct drafts {acc['correct_drafts']}, requests {acc['requests']}")  # fmt: skip
    for phase, entry in sorted(result["phases"].items()):
        ops = ", ".join(f"{k}={v}" for k, v in sorted(entry["ops"].items()))
        lines.append(f"  {phase}: {entry['forwards']} forwards, {entry['requests']} rows  [{ops}]")
    if "lossless" in result:
        lines.append("tokens equal without speculative decoding: " + ("yes" if result["lossless"] else "NO"))
    return "\n".join(lines)


def _resolve_model(path: str, dtype: str) -> str:
    from .models import MODELS, fetch

    if path in MODELS and not Path(path).exists():
        return str(fetch(path, "bf16" if dtype == "bfloat16" else "fp32", progress=False))
    return path


def build_parser() -> argparse.ArgumentParser:
    from .arguments import positive_int

    p = argparse.ArgumentParser(prog="kunlun-triton bench speculative", description=__doc__.split("\n\n")[0])
    p.add_argument("--model-path", required=True, help="target checkpoint directory, or a known model (smollm2)")
    p.add_argument("--speculative-algorithm", default="STANDALONE")
    draft = p.add_mutually_exclusive_group(required=True)
    draft.add_argument("--speculative-draft-model-path")
    draft.add_argument("--draft-layers", type=positive_int, help="STANDALONE draft: the target's first N layers")
    p.add_argument("--speculative-num-steps", type=positive_int, default=3)
    p.add_argument("--speculative-eagle-topk", type=positive_int, default=1)
    p.add_argument("--speculative-num-draft-tokens", type=positive_int, default=None,
                   help="default: num-steps + 1 (a chain)")
    p.add_argument("--max-new-tokens", type=positive_int, default=16)
    p.add_argument("--prompt", action="append", help="a prompt (repeatable; default: three built in)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--page-size", type=positive_int, default=None)
    p.add_argument("--no-baseline", action="store_true", help="skip the engine without speculative decoding")
    p.add_argument("--json", metavar="FILE", help="also write the numbers (no outputs) as JSON here")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("SGLANG_PLATFORM", "kunlun")
    target = _resolve_model(args.model_path, args.dtype)
    try:
        draft = args.speculative_draft_model_path or build_truncated_draft(
            target, Path(target).parent / f"{Path(target).name}-first{args.draft_layers}", args.draft_layers)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(target)
    prompts = [tok(p, add_special_tokens=False)["input_ids"] for p in (args.prompt or PROMPTS)]
    spec = {"speculative_algorithm": args.speculative_algorithm, "speculative_draft_model_path": draft,
            "speculative_num_steps": args.speculative_num_steps, "speculative_eagle_topk": args.speculative_eagle_topk,
            "speculative_num_draft_tokens": args.speculative_num_draft_tokens or args.speculative_num_steps + 1}
    extra = {"page_size": args.page_size} if args.page_size else {}
    result = measure(target, prompts, args.max_new_tokens, spec, baseline=not args.no_baseline, dtype=args.dtype,
                     **extra)  # fmt: skip
    print(f"# {Path(target).name}, {args.speculative_algorithm} (draft {Path(draft).name}, "
          f"{spec['speculative_num_steps']} steps, topk {spec['speculative_eagle_topk']}, "
          f"{spec['speculative_num_draft_tokens']} draft tokens), {len(prompts)} prompts x {args.max_new_tokens} "
          f"greedy tokens, {args.dtype}")  # fmt: skip
    print(format_result(result))
    if args.json:
        summary = {"model": Path(target).name, "draft": Path(draft).name, "options": {**spec, **extra},
                   "accept": result["accept"], "phases": result["phases"], "lossless": result.get("lossless"),
                   **{f"{k}_{m}": (result[k] or {}).get(m) for k in ("speculative", "baseline")
                      for m in ("tokens", "seconds", "tokens_per_s")}}  # fmt: skip
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 0 if result.get("lossless", True) else 1
