"""The cost of a compiled kernel, read from its machine code: no device needed.

CUDA: the cubin of an ahead-of-time compile (`compile_ahead_of_time(...,
artifacts=True)`) goes through ``cuobjdump`` (shipped with Triton under
``triton/backends/nvidia/bin``) for registers, local memory (spills) and the
SASS listing. HIP: the AMDGCN text carries its own register counts, spill
counts and LDS size. In both, a loop is a backward branch; its body is the
instructions from the branch target to the branch, which is what one
iteration of a kernel's main loop costs per thread.

`kernel_cost` returns one flat dict per kernel: ``regs``, ``spill_bytes``,
``smem_bytes``, ``num_warps``, ``num_stages``, ``occupancy`` (CTAs per SM on
sm_90, waves per SIMD on gfx942), ``sass_total`` and ``loops`` (each
``{"start", "end", "instructions"}``, in address order).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

# sm_90 (Hopper): per SM
SM90_REGS = 65536
SM90_WARPS = 64
SM90_CTAS = 32
SM90_SMEM = 233472  # 228 KB, of which each CTA reserves 1 KB for the system
SM90_CTA_RESERVED_SMEM = 1024
# gfx942 (CDNA3): per SIMD
GFX942_VGPRS = 512
GFX942_WAVES = 8

_SASS_LINE = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_RES_USAGE = re.compile(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)")


def nvidia_tool(name: str) -> str:
    import triton

    path = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
    if not path.exists():
        raise FileNotFoundError(f"{name} is not shipped with this Triton ({path})")
    return str(path)


def parse_sass(listing: str) -> list[tuple[int, str]]:
    """(address, instruction) per SASS instruction of one function."""
    return [(int(m.group(1), 16), m.group(2).strip()) for m in map(_SASS_LINE.match, listing.splitlines()) if m]


def _opcode(text: str) -> str:
    parts = text.split()
    if parts and parts[0].startswith("@"):
        parts = parts[1:]
    return parts[0] if parts else ""


def _loops(instructions, branch_target) -> list[dict]:
    """Backward branches -> loop bodies: {start, end, instructions} in address
    order; instructions counts the body's instructions (nops excluded)."""
    loops = []
    for index, (addr, text) in enumerate(instructions):
        target = branch_target(text)
        if target is None or target >= addr:
            continue
        body = [t for a, t in instructions if target <= a <= addr and not _opcode(t).startswith(("NOP", "s_nop"))]
        loops.append({"start": target, "end": addr, "instructions": len(body)})
    return sorted(loops, key=lambda loop: (loop["start"], loop["end"]))


def _sass_branch_target(text: str) -> int | None:
    if _opcode(text) not in ("BRA", "BRA.U", "BRA.DIV"):
        return None
    match = re.search(r"0x([0-9a-f]+)", text.split(None, 2)[-1])
    return int(match.group(1), 16) if match else None


def sm90_ctas_per_sm(regs: int, num_warps: int, smem: int) -> int:
    """Resident CTAs per SM on sm_90: registers are allocated per warp in
    units of 256, shared memory per CTA plus 1 KB reserved."""
    per_warp = -(-max(regs, 1) * 32 // 256) * 256
    by_regs = (SM90_REGS // per_warp) // num_warps
    by_warps = SM90_WARPS // num_warps
    by_smem = SM90_SMEM // (smem + SM90_CTA_RESERVED_SMEM)
    return max(0, min(by_regs, by_warps, by_smem, SM90_CTAS))


def cuda_cost(cubin: bytes, metadata: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        usage = subprocess.run([nvidia_tool("cuobjdump"), "-res-usage", path], capture_output=True, text=True,
                               check=True).stdout  # fmt: skip
        listing = subprocess.run([nvidia_tool("cuobjdump"), "-sass", path], capture_output=True, text=True,
                                 check=True).stdout  # fmt: skip
    match = _RES_USAGE.search(usage)
    if not match:
        raise ValueError(f"cuobjdump -res-usage printed no REG/LOCAL line:\n{usage}")
    regs, stack, _, local = (int(g) for g in match.groups())
    instructions = parse_sass(listing)
    # the tail after EXIT: a branch to itself and nop padding
    counted = [(a, t) for a, t in instructions if not _opcode(t).startswith("NOP") and _sass_branch_target(t) != a]
    smem = int(metadata.get("shared", 0))
    warps = int(metadata.get("num_warps", 4))
    return {
        "regs": regs,
        "spill_bytes": local + stack,
        "smem_bytes": smem,
        "num_warps": warps,
        "num_stages": int(metadata.get("num_stages", 0)),
        "occupancy": sm90_ctas_per_sm(regs, warps, smem),
        "occupancy_unit": "CTAs/SM",
        "sass_total": len(counted),
        "loops": _loops(instructions, _sass_branch_target),
    }


def _amdgcn_meta(text: str, key: str) -> int:
    match = re.search(rf"\.{key}:\s*(\d+)", text) or re.search(rf";\s*{key}:\s*(\d+)", text)
    return int(match.group(1)) if match else 0


def hip_cost(amdgcn: str, metadata: dict) -> dict:
    """Counts from the AMDGCN listing of one kernel (gfx942, 64-lane waves)."""
    lines, labels = [], {}
    for line in amdgcn.splitlines():
        label = re.match(r"^(\.?L\w+):", line)
        if label:
            labels[label.group(1)] = len(lines)
        elif line.startswith(("\ts_", "\tv_", "\tglobal_", "\tbuffer_", "\tds_", "\tflat_", "\tscratch_")):
            lines.append((len(lines), line.split(";")[0].strip()))

    def target(text):
        if not text.startswith(("s_branch", "s_cbranch")):
            return None
        parts = text.split()
        return labels.get(parts[-1]) if len(parts) > 1 else None

    vgprs = _amdgcn_meta(amdgcn, "vgpr_count")
    spills = _amdgcn_meta(amdgcn, "vgpr_spill_count") + _amdgcn_meta(amdgcn, "sgpr_spill_count")
    granule = -(-max(vgprs, 1) // 8) * 8
    return {
        "regs": vgprs,
        "spill_bytes": spills * 4,
        "smem_bytes": int(metadata.get("shared", 0)),
        "num_warps": int(metadata.get("num_warps", 4)),
        "num_stages": int(metadata.get("num_stages", 0)),
        "occupancy": min(GFX942_WAVES, GFX942_VGPRS // granule),
        "occupancy_unit": "waves/SIMD",
        "sass_total": len(lines),
        "loops": _loops(lines, target),
    }


def kernel_cost(result: dict) -> dict:
    """The cost of one `compile_ahead_of_time(..., artifacts=True)` result."""
    if "cubin" in result:
        return cuda_cost(result["cubin"], result["metadata"])
    if "amdgcn" in result:
        return hip_cost(result["amdgcn"], result["metadata"])
    raise ValueError(f"{result['spec'].label} on {result['target']}: no machine code to measure")


def executed_per_program(cost: dict, trips) -> float | None:
    """Instructions one program executes (per warp), from the static counts:
    the straight-line code once and each loop's own body (less the loops
    nested in it) `trips` times, `trips` being each SASS loop's iterations
    per program in address order (a nested loop's: all of them, per
    program). None when `trips` does not name every loop (the compiler
    split or unrolled one: the count would be a guess). Branches inside a
    body count as taken both ways."""
    loops = cost["loops"]
    if trips is None or len(trips) != len(loops):
        return None

    def inside(inner, outer):
        return inner is not outer and outer["start"] <= inner["start"] and inner["end"] <= outer["end"]

    def children(loop):
        nested = [c for c in loops if inside(c, loop)]
        return [c for c in nested if not any(inside(c, m) for m in nested)]

    top = [loop for loop in loops if not any(inside(loop, other) for other in loops)]
    total = cost["sass_total"] - sum(loop["instructions"] for loop in top)
    for loop, n in zip(loops, trips):
        total += n * (loop["instructions"] - sum(c["instructions"] for c in children(loop)))
    return total
