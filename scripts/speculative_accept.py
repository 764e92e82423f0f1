"""Accept length of STANDALONE speculative decoding on SmolLM2-135M (the
cached float32 checkpoint, ``kunlun-triton models fetch smollm2``), the draft
being the target's first `--draft-layers` layers (its own embedding, final
norm and tied head): accept length (tokens per target verify step), tokens
per target forward and throughput with vs without speculative decoding,
greedy, on the kunlun platform (development mode on a CPU), and whether the
tokens equal those without it. The measurement is
``kunlun-triton bench speculative`` (kunlun_triton/tools/speculative_bench.py);
this runs it with the SmolLM2 settings of docs/speculative.md:

    PYTHONPATH=$PWD .venv-sglang/bin/python scripts/speculative_accept.py --draft-layers 8
"""

from __future__ import annotations

import argparse
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draft-layers", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--new", type=int, default=16)
    parser.add_argument("--json", help="also write the numbers as JSON here")
    args = parser.parse_args()
    from kunlun_triton.tools.speculative_bench import main as bench

    argv = ["--model-path", "smollm2", "--draft-layers", str(args.draft_layers), "--speculative-num-steps",
            str(args.steps), "--max-new-tokens", str(args.new)] + (["--json", args.json] if args.json else [])
    return bench(argv)


if __name__ == "__main__":
    sys.exit(main())
