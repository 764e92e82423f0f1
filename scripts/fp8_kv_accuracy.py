"""Teacher-forced accuracy of an fp8 KV cache against the model-dtype cache.

    python scripts/fp8_kv_accuracy.py [--model DIR] [--tokens 256]

--model defaults to the bf16 SmolLM2-135M-Instruct checkpoint (`kunlun-triton
models fetch smollm2 --dtype bf16`: fetched and converted once, then cached).

The measurement is `kunlun_triton.tools.kv_cache_accuracy` (HF transformers
runs the model, every attention layer through our store_kv + unified
extend_attention, one forward per cache dtype); this prints its table for
docs/fp8-kv-cache.md. Needs transformers (the sglang venv has it); no SGLang.
"""

from __future__ import annotations

import argparse
import os
import sys

# --backend torch: the same ops on their torch references (torch's float8 casts; the kernels
# equal them: tests/ops/attention/test_fp8_*.py), faster under the CPU interpreter.
_backend = sys.argv[sys.argv.index("--backend") + 1] if "--backend" in sys.argv else "triton"
os.environ["KUNLUN_TRITON_BACKEND"] = _backend  # triton: measure the kernels, never a fallback
from kunlun_triton.runtime.env import env_is_set  # noqa: E402 - no torch, no kernels imported

if not env_is_set("TRITON_INTERPRET"):
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"  # before any kernel module is imported


def main(argv=None) -> int:
    from kunlun_triton.runtime.dispatch import dispatch_report
    from kunlun_triton.tools import kv_cache_accuracy as acc

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a checkpoint directory (default: SmolLM2's bf16 one)")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--backend", choices=("triton", "torch"), default="triton",
                        help="our Triton kernels (default) or the ops' torch references")
    args = parser.parse_args(argv)
    if args.model is None:
        from kunlun_triton.tools.models import fetch

        args.model = str(fetch("smollm2", "bf16"))
    model, tokenizer = acc.load(args.model)
    ids = acc.text_ids(tokenizer, args.tokens)
    print(f"{args.model}: {model.dtype}, {ids.shape[1] - 1} teacher-forced positions, ops on {args.backend}")
    lps = acc.forwards(model, ids, say=lambda line: print(line, flush=True))
    ran = {op: dispatch_report()[op]["calls"] for op in ("store_kv", "extend_attention")}
    print(f"  ran: {ran}")
    results = {label: acc.agreement(label, lps[label], lps["model"], ids) for label in ("fp8_e4m3", "fp8_e5m2")}
    baseline = acc.agreement("model", lps["model"], acc.hf_log_probs(model, ids), ids)
    print(acc.markdown(results, model.dtype, baseline))
    return 0


if __name__ == "__main__":
    sys.exit(main())
