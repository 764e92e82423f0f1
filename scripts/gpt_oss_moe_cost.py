"""Device-free cost of gpt-oss's expert GEMMs (docs/moe.md, "gpt-oss"):
registers, spills and SASS per K-loop iteration of moe_gate_up_kernel /
moe_down_kernel compiled ahead of time for sm_90 (and gfx942: VGPRs,
spills, instructions per iteration), bf16 vs bf16 with gpt-oss's epilogue
vs MXFP4 with it, at one tile config so each loop step covers the same K.

    PYTHONPATH=$PWD .venv/bin/python scripts/gpt_oss_moe_cost.py [--tokens 1]
"""

import argparse

import torch

from kunlun_triton.introspect import compile_ahead_of_time
from kunlun_triton.introspect.sass import kernel_cost
from kunlun_triton.ops.spec import all_specs
from kunlun_triton.testing import aot_target
from kunlun_triton.runtime import Target

GPT_OSS_20B = {"num_experts": 32, "top_k": 4, "hidden_size": 2880, "intermediate_size": 2880}
TILES = {"formulation": "dot", "BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 64, "DOWN_BLOCK_N": 64, "DOWN_BLOCK_K": 64,
         "num_warps": 4, "num_stages": 4}  # fmt: skip
VARIANTS = {"bf16": {}, "bf16 + gpt-oss epilogue": {"gpt_oss": True}, "mxfp4 + gpt-oss epilogue": {"gpt_oss": True, "mxfp4": True}}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=1)
    args = parser.parse_args()
    spec = all_specs(("moe",))["fused_experts"]
    jobs = []
    for name, extra in VARIANTS.items():
        shape = {**GPT_OSS_20B, "tokens": args.tokens, **extra}
        for k in spec.kernels(shape, torch.bfloat16, TILES):
            if k.kernel.endswith(("moe_gate_up_kernel", "moe_down_kernel")):
                for t in (Target("cuda", "sm_90", "cuda", "aot"), Target("hip", "gfx942", "hip", "aot")):
                    jobs.append(((name, k.kernel.split(":")[1], t.name), (k, aot_target(t))))
    results = compile_ahead_of_time([job for _, job in jobs], artifacts=True)
    print("| variant | kernel | target | regs | spill B | SASS total | SASS per K step (64 K) |")
    print("|---|---|---|---|---|---|---|")
    for (name, kernel, target), r in zip((label for label, _ in jobs), results):
        if not r["ok"]:
            print(f"| {name} | {kernel} | {target} | failed: {r.get('error')} |")
            continue
        cost = kernel_cost(r)
        loops = cost.get("loops") or []
        body = max((loop["instructions"] for loop in loops), default=0)
        print(f"| {name} | {kernel} | {target} | {cost['regs']} | {cost['spill_bytes']} | {cost['sass_total']} | {body} |")


if __name__ == "__main__":
    main()
