"""Accept length of STANDALONE speculative decoding on SmolLM2-135M (the
cached float32 checkpoint, ``kunlun-triton models smollm2``), the draft
being the target's first `--draft-layers` layers (its own embedding, final
norm and tied head): tokens per target verify forward, greedy, on the
kunlun platform (development mode on a CPU). Also checks that the tokens
equal HF transformers' greedy ones.

    PYTHONPATH=$PWD .venv-sglang/bin/python scripts/speculative_accept.py --draft-layers 8

Prints one JSON line: accept length (tokens per verify forward), verify
forwards, tokens, and whether the outputs equal HF's.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "List the first ten prime numbers: 2, 3, 5,",
]


def build_draft(target: str, out: Path, layers: int) -> str:
    """The target's first `layers` decoder layers as a checkpoint of its own."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    if (out / "model.safetensors").exists():
        return str(out)
    out.mkdir(parents=True, exist_ok=True)
    src = Path(target)
    config = json.loads((src / "config.json").read_text())
    config["num_hidden_layers"] = layers
    keep = {}
    with safe_open(str(src / "model.safetensors"), "pt") as f:
        for name in f.keys():
            parts = name.split(".")
            if "layers" in parts and int(parts[parts.index("layers") + 1]) >= layers:
                continue
            keep[name] = f.get_tensor(name)
    save_file(keep, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config, indent=2))
    for name in os.listdir(src):
        if name != "model.safetensors" and name != "config.json" and not (out / name).exists():
            (out / name).write_bytes((src / name).read_bytes())
    return str(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draft-layers", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--new", type=int, default=24)
    args = parser.parse_args()

    os.environ["SGLANG_PLATFORM"] = "kunlun"
    os.environ.setdefault("SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS", "0")
    import sglang
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from kunlun_triton.tools.models import fetch

    target = str(fetch("smollm2", "fp32", progress=False))
    draft = build_draft(target, Path(target).parent / f"smollm2-fp32-first{args.draft_layers}", args.draft_layers)
    tok = AutoTokenizer.from_pretrained(target)
    prompts = [tok(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]

    import torch

    hf = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    with torch.no_grad():
        expected = [hf.generate(torch.tensor([p]), max_new_tokens=args.new, do_sample=False)[0, len(p):].tolist()
                    for p in prompts]  # fmt: skip
    del hf

    engine = sglang.Engine(model_path=target, dtype="float32", max_total_tokens=2048, max_running_requests=4,
                           random_seed=0, log_level="error", speculative_algorithm="STANDALONE",
                           speculative_draft_model_path=draft, speculative_num_steps=args.steps,
                           speculative_eagle_topk=1, speculative_num_draft_tokens=args.steps + 1)  # fmt: skip
    try:
        outs = engine.generate(input_ids=prompts, sampling_params={"max_new_tokens": args.new, "temperature": 0.0,
                                                                   "ignore_eos": True})  # fmt: skip
    finally:
        engine.shutdown()
    verify = sum(o["meta_info"]["spec_verify_ct"] for o in outs)
    tokens = sum(o["meta_info"]["completion_tokens"] for o in outs)
    print(json.dumps({"draft_layers": args.draft_layers, "num_steps": args.steps, "verify_forwards": verify,
                      "tokens": tokens, "accept_length": round(tokens / verify, 3),
                      "equal_to_hf_greedy": [list(o["output_ids"]) for o in outs] == expected}))  # fmt: skip


if __name__ == "__main__":
    main()
