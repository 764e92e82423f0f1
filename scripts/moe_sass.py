"""Registers, spills and SASS per main-loop iteration of the MoE expert GEMMs
on sm_90, ours next to SGLang 0.5.23's ``fused_moe_kernel`` at the same block
sizes, from ahead-of-time compiled cubins: no GPU needed.

Columns: registers per thread, spill bytes, shared memory, SASS instructions
(static), K steps per program (K / BLOCK_K), whether the K loop stayed a
loop (``body``) or was unrolled (the constexpr trip count lets the compiler
do so), SASS per K step (the loop body; unrolled: the whole kernel / K
steps, which charges that kernel its prologue and epilogue too) and what a
K step holds: MMA instructions (HMMA, or HGMMA/WGMMA on Hopper; a 2 x 128
pair of ours is one 256-wide of SGLang's), loads, stores, barriers.

    python scripts/moe_sass.py                       # every model x phase
    python scripts/moe_sass.py --model mixtral-8x7b --phase prefill

Needs SGLang importable (the .venv-sglang environment) and TRITON_INTERPRET
unset. Tiles and launch options come from ``autotune_configs/cuda-sm_90.yaml``
(the op spec's ``kernels`` computes our constexprs as the launcher does);
SGLang's kernel gets BLOCK_N = 2 x ours for W13 (our program computes the
gate and the up tile of BLOCK_N columns each per K step: the same MMA work)
and the same tiles for W2. Both are compiled with the launch-time
specialisation a real call gets (16-byte aligned pointers, sizes and strides
divisible by 16 marked so), then ``ptxas -v`` gives registers and spill
bytes and ``cuobjdump -sass`` the loop: the innermost backward branch whose
body holds the MMA instructions, counted by kind. A stopgap until
``kunlun-triton inspect`` lands; the numbers are in README.md.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)
os.environ.pop("SGLANG_PLATFORM", None)  # our development mode would turn the interpreter back on
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from kunlun_triton.ops.moe import spec as moe_spec  # noqa: E402
from kunlun_triton.runtime import get_config  # noqa: E402
from kunlun_triton.sglang_plugin.baselines.moe import fused_experts_kernel_baselines  # noqa: E402

BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
PHASES = {"decode": 16, "prefill": 4096}
KINDS = {"mma": r"^(HMMA|HGMMA|WGMMA)", "global loads": r"^(LDG|LDGSTS|UTMALDG)", "shared loads": r"^(LDS|LDSM)",
         "shared stores": r"^(STS)", "barriers": r"^(BAR|WARPSYNC|SYNCS|ARRIVES|DEPBAR)"}  # fmt: skip


def _compile(spec, options, aligned_ints):
    module, name = spec.kernel.split(":")
    fn = getattr(__import__(module, fromlist=[name]), name)
    constexprs = {k: (getattr(tl, v[3:]) if isinstance(v, str) and v.startswith("tl.") else v)
                  for k, v in spec.constexprs.items()}  # fmt: skip
    attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a, t in spec.signature.items()
             if t.startswith("*") or a in aligned_ints}  # fmt: skip
    src = ASTSource(fn, spec.signature, constexprs, attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def _measure(compiled, k_steps: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        ptx, cubin = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        ptx.write_text(compiled.asm["ptx"])
        log = subprocess.run([str(BIN / "ptxas"), "-lineinfo", "-v", "--regAllocOptLevel=2", "--gpu-name=sm_90a",
                              str(ptx), "-o", str(cubin)], capture_output=True, text=True, check=True).stderr  # fmt: skip
        sass = subprocess.run([str(BIN / "cuobjdump"), "-sass", str(cubin)], capture_output=True, text=True,
                              check=True).stdout  # fmt: skip
    regs = int(re.search(r"Used (\d+) registers", log).group(1))
    spill_stores, spill_loads = map(int, re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log).groups())
    code = []  # (address, opcode, text)
    for line in sass.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*?);", line)
        if m:
            code.append((int(m.group(1), 16), m.group(2), m.group(3)))
    loops = []
    for i, (addr, op, rest) in enumerate(code):
        target = re.search(r"0x([0-9a-f]+)", rest)
        if op.startswith("BRA") and target and int(target.group(1), 16) < addr:
            body = [c for c in code if int(target.group(1), 16) <= c[0] <= addr]
            if any(re.match(KINDS["mma"], c[1]) for c in body):
                loops.append(body)
    loop = min(loops, key=len) if loops else []
    mma = [c for c in code if re.match(KINDS["mma"], c[1])]
    # SASS per K step (one BLOCK_M x BLOCK_N x BLOCK_K step, the same MMA work
    # for both kernels): the K loop's body, or, where the compiler unrolled the
    # loop (constexpr trip count), the whole kernel / K steps, which charges
    # that kernel its prologue and epilogue too.
    per_step = len(loop) if loop else len(code) / k_steps
    body = loop or code
    counts = {kind: sum(bool(re.match(rx, c[1])) for c in body) for kind, rx in KINDS.items()}
    if not loop:
        counts = {kind: round(n / k_steps, 1) for kind, n in counts.items()}
    return {"regs": regs, "spill_st": spill_stores, "spill_ld": spill_loads, "smem": compiled.metadata.shared,
            "sass": len(code), "k_steps": k_steps, "k_loop": "body" if loop else "unrolled",
            "sass/k-step": round(per_step, 1), **{f"{k}/k-step": v for k, v in counts.items()}}  # fmt: skip


def rows(model: str, phase: str) -> list[dict]:
    experts, top_k, hidden, inter = moe_spec.MOE_MODELS[model]
    tokens = PHASES[phase]
    shape = {"tokens": tokens, "num_experts": experts, "top_k": top_k, "hidden_size": hidden,
             "intermediate_size": inter}  # fmt: skip
    config = get_config("fused_experts", target=moe_spec.GPU, tokens=tokens, num_experts=experts, top_k=top_k,
                        hidden_size=hidden, intermediate_size=inter)  # fmt: skip
    options = {k: config[k] for k in ("num_warps", "num_stages") if k in config}
    ours = {k.kernel.split(":")[1]: k for k in moe_spec.fused_experts_kernels(shape, torch.bfloat16, config)}
    theirs = fused_experts_kernel_baselines(shape, torch.bfloat16, config)
    up, down = ours["moe_gate_up_kernel"], ours["moe_down_kernel"]
    theirs_up, theirs_down = theirs["moe_gate_up_kernel"], theirs["moe_down_kernel"]
    bm, bn, bk = up.constexprs["BLOCK_M"], up.constexprs["BLOCK_N"], up.constexprs["BLOCK_K"]
    dbn, dbk = down.constexprs["BLOCK_N"], down.constexprs["BLOCK_K"]
    ints_ours = {"x_stride", "w_stride_e", "w_stride_n", "out_stride"}
    ints_theirs = {"N", "K", "EM", "num_valid_tokens", "stride_am", "stride_be", "stride_bn", "stride_cm"}
    out = []
    for gemm, spec, aligned, tiles, steps in (
        ("W13", up, ints_ours, f"{bm}x(2x{bn})x{bk}", -(-hidden // bk)),
        ("W13", theirs_up, ints_theirs, f"{bm}x{2 * bn}x{bk}", -(-hidden // bk)),
        ("W2", down, ints_ours, f"{bm}x{dbn}x{dbk}", -(-inter // dbk)),
        ("W2", theirs_down, ints_theirs, f"{bm}x{dbn}x{dbk}", -(-inter // dbk)),
    ):  # fmt: skip
        who = "sglang" if spec.kernel.startswith("sglang") else "ours"
        out.append({"model": model, "phase": phase, "gemm": gemm, "impl": who, "tile MxNxK": tiles,
                    **options, **_measure(_compile(spec, options, aligned), steps)})  # fmt: skip
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=[*moe_spec.MOE_MODELS, "all"], default="all")
    parser.add_argument("--phase", choices=[*PHASES, "all"], default="all")
    args = parser.parse_args(argv)
    models = list(moe_spec.MOE_MODELS) if args.model == "all" else [args.model]
    phases = list(PHASES) if args.phase == "all" else [args.phase]
    table = [r for m in models for p in phases for r in rows(m, p)]
    cols = list(table[0])
    widths = [max(len(c), *(len(str(r[c])) for r in table)) for c in cols]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    for r in table:
        print("  ".join(str(r[c]).ljust(w) for c, w in zip(cols, widths)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
