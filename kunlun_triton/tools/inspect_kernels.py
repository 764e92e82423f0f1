"""`kunlun-triton inspect`: what an op's kernels cost on a target, before any card.

For each op whose spec plans its kernels (`OpSpec.kernels`), the launcher
runs on meta tensors of the requested shape as the target would run it
(its config, its capabilities; launches stubbed), the planned kernels are
compiled ahead of time (CUDA sm_90 or HIP gfx942; Kunlun's plans on sm_90
as a proxy) and measured from their machine code (`introspect.sass`). With
``--compare sglang`` SGLang 0.5.23's kernels for the same job are planned by
SGLang's own launchers and measured in the same run.

Per kernel: registers per thread, spill bytes, shared memory, warps,
stages, occupancy (CTAs per SM on sm_90, waves per SIMD on gfx942), SASS
(or AMDGCN) instructions in total and in each loop, the first loop being
the main one (decode: whole KV tiles; extend: the prefix), and per item
(key) of a loop's tile. Optional, per op: bytes one call moves
(``--traffic``, where the op models it), stage-1 programs with work per
call (``--programs``: decode's splits), distinct compilations over a
generation (``--compilations``), Python microseconds per launcher call with
the launch stubbed (``--launcher-us``: at ``run()``, and below Triton's
binder, its specialisation and cache lookup counted).
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from ..runtime import Target, targeting
from ..runtime.capabilities import profile, target_names_where
from ..runtime.dtypes import dtype_name
from .compilations import generation_ops
from .presets import DEFAULT_PRESET, MODEL_PRESETS, parse_shapes

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# the device targets on their default parts (the capability profiles')
TARGETS = {name: profile(name).default_arch for name in target_names_where(lambda caps: caps.device)}
BATCH_KEYS = ("batch", "rows", "tokens")  # what --batch sets, first present
CONTEXT_KEYS = ("context_len", "prefix_len")  # what --context sets


MAX_SIZE = 2**24  # any --batch / --context / --shape size: past every model, and small enough to plan


def parse_target(text: str) -> Target:
    """``name`` or ``name:arch``, where arch is the one inspect compiles for
    (machine code is built for sm_90 or gfx942 whatever the arch: another
    arch would print those numbers under its name)."""
    name, colon, arch = text.partition(":")
    if name not in TARGETS or (colon and arch != TARGETS[name]):
        raise ValueError(f"--target {text!r}: expected one of {', '.join(f'{n}:{a}' for n, a in TARGETS.items())}")
    return Target(name, TARGETS[name], "meta", "kunlun-triton inspect")


def check_shape(name: str, base: dict, shape: dict, overrides: dict) -> None:
    """--shape keys the op's shape has, sizes that are integers in range, and
    heads that group (q_heads a multiple of kv_heads): what bench refuses too."""
    for key, value in shape.items():
        if isinstance(base.get(key), bool) or not isinstance(base.get(key), int):
            continue  # a word (formulation), a list of lengths: the op checks those
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"--shape {key}={value!r}: expected an integer")
        least = 0 if key in CONTEXT_KEYS else 1
        if not least <= value <= MAX_SIZE:
            raise ValueError(f"--shape {key}={value}: expected an integer from {least} to {MAX_SIZE}")
    q, kv = shape.get("q_heads"), shape.get("kv_heads")
    if isinstance(q, int) and isinstance(kv, int) and q % kv:
        raise ValueError(f"--shape q_heads={q}, kv_heads={kv}: q_heads must be a multiple of kv_heads")


def resolve_preset(name: str):
    """A model preset by name; dashes optional (``llama3-8b`` is ``llama-3-8b``)."""
    for preset in MODEL_PRESETS.values():
        if preset.name.replace("-", "") == name.replace("-", ""):
            return preset
    raise ValueError(f"unknown preset {name!r}; known: {', '.join(sorted(MODEL_PRESETS))}")


def op_shape(spec, preset, batch=None, context=None, overrides=None, variant=None) -> dict:
    """The op's first bench shape for `preset`, with --batch, --context and
    --shape applied (--batch sets batch, else rows, else tokens); `variant`
    ({key: value}) picks one of a key's several --shape values."""
    base = spec.bench_shapes(preset, False)[0]
    shape = dict(base)
    for key in BATCH_KEYS:
        if batch is not None and key in shape:
            shape[key] = batch
            break
    for key in CONTEXT_KEYS:
        if context is not None and key in shape:
            shape[key] = context
            break
    overrides = {k: v for k, v in (overrides or {}).items() if k in base}  # keys of other ops listed
    for key, values in overrides.items():
        shape[key] = (variant or {}).get(key, values[0])
    check_shape(spec.name, base, shape, overrides)
    return shape


def op_variants(spec, preset, batch=None, context=None, overrides=None) -> list[tuple[str, dict]]:
    """(label, shape) per value of the first --shape key of the op's shape
    given several values (``--shape sinks=0,1``: the op with and without,
    compiled in one run); else the op's one shape, labelled by its name."""
    base = spec.bench_shapes(preset, False)[0]
    several = [(k, v) for k, v in (overrides or {}).items() if k in base and len(v) > 1]
    if not several:
        return [(spec.name, op_shape(spec, preset, batch, context, overrides))]
    key, values = several[0]
    return [(f"{spec.name}[{key}={value}]", op_shape(spec, preset, batch, context, overrides, {key: value}))
            for value in values]  # fmt: skip


def _main_loop(cost: dict):
    return cost["loops"][0]["instructions"] if cost["loops"] else None


def _row(op, impl, result) -> dict:
    spec = result["spec"]
    row = {"op": op, "impl": impl, "kernel": spec.name}
    if not result["ok"]:
        return {**row, "error": result["error"].strip().splitlines()[-1]}
    from ..introspect.sass import kernel_cost

    cost = kernel_cost(result)
    items = spec.loop_items
    loop = _main_loop(cost)
    return {
        **row,
        "regs": cost["regs"],
        "spill_bytes": cost["spill_bytes"],
        "smem_bytes": cost["smem_bytes"],
        "num_warps": cost["num_warps"],
        "num_stages": cost["num_stages"],
        "occupancy": cost["occupancy"],
        "occupancy_unit": cost["occupancy_unit"],
        "sass_total": cost["sass_total"],
        "sass_loop": loop,
        "items_per_loop": items,
        "sass_per_item": round(loop / items, 2) if loop and items else None,
        "loops": [loop["instructions"] for loop in cost["loops"]],
        "sass_per_token": _per_token(spec, cost),
        "constexprs": {k: v for k, v in spec.constexprs.items() if k.isupper() or k.startswith("BLOCK")},
    }


def _per_token(spec, cost):
    """Warp-instructions per token of one call (`KernelSpec.work`: programs x
    warps x what a program executes, `sass.executed_per_program`), or None."""
    from ..introspect.sass import executed_per_program

    work = spec.work or {}
    executed = executed_per_program(cost, work.get("trips")) if work.get("tokens") else None
    return None if executed is None else round(work["programs"] * cost["num_warps"] * executed / work["tokens"], 1)


def _baselines(kind: str) -> dict:
    """SGLang's `inspect_baselines` / `traffic_baselines` / `launcher_baselines`, or {} without SGLang."""
    import importlib.util

    if importlib.util.find_spec("sglang") is None:
        return {}
    from ..sglang_plugin.tools import baselines  # imports no SGLang until a table is asked for

    return getattr(baselines, kind)()


def inspect_ops(names, target: Target, preset, dtype, batch=None, context=None, overrides=None,
                compare=(), traffic=False, compilations=False, launcher_us=False, compile=True,
                programs=False) -> dict:  # fmt: skip
    from ..ops.spec import all_specs
    from ..introspect import aot_target, compile_ahead_of_time

    specs = all_specs()
    families = {s.family for s in specs.values()}
    names = [n for name in names for n in ([s.name for s in specs.values() if s.family == name]
                                           if name in families else [name])]  # fmt: skip
    unknown = [n for n in names if n not in specs]
    if unknown:
        raise ValueError(f"unknown op {unknown}; ops: {', '.join(specs)}")
    unplanned = [n for n in names if specs[n].kernels is None]
    if unplanned:
        raise ValueError(f"{', '.join(unplanned)}: the spec does not plan its kernels (OpSpec.kernels)")
    known = {k for n in names for k in specs[n].bench_shapes(preset, False)[0]}
    unknown = sorted(set(overrides or {}) - known)
    if unknown:  # as bench: a key no listed op has is a typo, not a no-op
        raise ValueError(f"--shape {unknown[0]}: no such key in the shape of {', '.join(names)} "
                         f"(keys: {', '.join(sorted(known))})")
    sglang = _baselines("inspect_baselines") if "sglang" in compare else {}
    if "sglang" in compare and not sglang:
        raise ValueError("--compare sglang needs SGLang installed (run in the sglang environment)")

    report = {"target": f"{target.name}:{target.arch}", "compiled_for": aot_target(target), "preset": preset.name,
              "dtype": dtype_name(dtype), "ops": {}, "kernels": []}  # fmt: skip
    jobs, entries = [], []
    with targeting(target):
        for name in names:
            for label, shape in op_variants(specs[name], preset, batch, context, overrides):
                entries.append((label, name))
                report["ops"][label] = {"shape": shape}
                jobs += [(label, name, "ours", k) for k in specs[name].kernels(shape, dtype, None)]
                if name in sglang:
                    jobs += [(label, name, "sglang", k) for k in sglang[name](shape, dtype)]
    results = compile_ahead_of_time([(k, aot_target(target)) for *_, k in jobs], artifacts=True) if compile else []
    for (label, name, impl, _), result in zip(jobs, results):
        row = _row(name, impl, result)
        report["kernels"].append(row)
        report["ops"][label].setdefault("kernels", []).append(row)

    for label, name in entries:
        extras = report["ops"][label]
        shape = extras["shape"]
        rows = extras.get("kernels", [])
        per_token = {impl: [r.get("sass_per_token") for r in rows if r["impl"] == impl] for impl in ("ours", "sglang")}
        if any(per_token.values()) and all(None not in v for v in per_token.values()):  # every kernel counted
            extras["sass_per_token"] = {impl: round(sum(v), 1) for impl, v in per_token.items() if v}
        if traffic:
            sg = _baselines("traffic_baselines") if compare else {}
            with targeting(target):
                extras["bytes_per_call"] = {
                    **({"ours": specs[name].traffic(shape, dtype)} if specs[name].traffic else {}),
                    **({"sglang": sg[name](shape, dtype)} if name in sg else {}),
                }
        if programs:
            sg = _baselines("programs_baselines") if compare else {}
            with targeting(target):
                extras["programs"] = {
                    **({"ours": specs[name].programs(shape, dtype)} if specs[name].programs else {}),
                    **({"sglang": sg[name](shape, dtype)} if name in sg else {}),
                }
        if compilations and name in generation_ops():
            # --shape keys a generation's shapes leave out (kv_dtype) hold for the whole generation
            fixed = {k: shape[k] for k in (overrides or {}) if k in shape}
            extras["compilations"] = generation_compilations(name, specs[name], target, preset, dtype,
                                                             sglang.get(name), fixed)  # fmt: skip
        if launcher_us:
            sglang_call = _baselines("launcher_baselines").get(name) if compare else None
            extras["launcher_us"] = launcher_overhead(name, specs[name], target, shape, dtype, sglang_call)
            extras["launcher_us_binder"] = launcher_overhead(name, specs[name], target, shape, dtype, sglang_call,
                                                             below_binder=True)  # fmt: skip
    return report


def generation_compilations(name, spec, target, preset, dtype, sglang_plan=None, fixed=None) -> dict:
    """Compilations over a generation of `preset`; `fixed`: shape keys the
    generation's shapes do not vary (``kv_dtype``), added to each."""
    from .compilations import count_compilations, generation_shapes

    def shapes():
        return ({**(fixed or {}), **s} for s in generation_shapes(name, preset))  # the generation's own keys win

    out = {}
    with targeting(target):
        out["ours"] = count_compilations(lambda s, d: spec.kernels(s, d, None), shapes(), dtype)
        if sglang_plan is not None:  # over the same pool (its plans read kv_dtype too)
            out["sglang"] = count_compilations(sglang_plan, shapes(), dtype)
    return out


def launcher_overhead(name, spec, target, shape, dtype, sglang_call=None, below_binder=False) -> dict:
    """Python microseconds per call, launches stubbed, on CPU tensors of the
    shape (the target's configs and capabilities), ours and SGLang's in
    interleaved rounds. `below_binder`: the stub sits under Triton's binder
    (`introspect.launches.stubbed_below_binder`: specialisation and cache
    lookup counted), which needs compiled-mode kernels (no TRITON_INTERPRET);
    else at ``kernel.run()``."""
    from ..introspect.launches import compare_launchers_us

    cpu = Target(target.name, target.arch, "cpu", target.reason)
    with targeting(cpu):
        case = spec.make_case(shape, dtype, "cpu")
        calls = {"ours": case.call or (lambda: case.run(None))}
        if sglang_call is not None:
            calls["sglang"] = sglang_call(shape, dtype, "cpu")
        # a yardstick for this machine's speed, measured alongside
        calls["torch.empty"] = lambda: torch.empty((8, 4096), dtype=dtype)
        return {impl: round(us, 2) for impl, us in compare_launchers_us(calls, below_binder=below_binder).items()}


def format_report(report: dict) -> str:
    lines = [f"# {report['target']} (compiled for {report['compiled_for']}), {report['preset']}, {report['dtype']}"]
    header = ("impl", "kernel", "regs", "spill", "smem", "warps", "stages", "occ", "sass", "loop", "items", "per item",
              "loops", "per token")  # fmt: skip
    for name, op in report["ops"].items():
        lines.append("")
        lines.append(f"## {name} " + " ".join(f"{k}={v}" for k, v in op["shape"].items() if not isinstance(v, list)))
        rows = [header] if op.get("kernels") else []
        for r in op.get("kernels", []):
            if "error" in r:
                rows.append((r["impl"], r["kernel"], "error: " + r["error"][:80]))
                continue
            rows.append((r["impl"], r["kernel"], r["regs"], r["spill_bytes"], r["smem_bytes"], r["num_warps"],
                         r["num_stages"], r["occupancy"], r["sass_total"], r["sass_loop"] or "-",
                         r["items_per_loop"] or "-", r["sass_per_item"] or "-", ",".join(map(str, r["loops"])) or "-",
                         r.get("sass_per_token") or "-"))
        widths = [max([len(str(row[i])) for row in rows if i < len(row)] or [0]) for i in range(len(header))]
        lines += ["  ".join(str(v).rjust(w) if i > 1 else str(v).ljust(w) for i, (v, w) in enumerate(zip(row, widths)))
                  for row in rows]  # fmt: skip
        for key, unit in (("bytes_per_call", "bytes per call"), ("programs", "stage-1 programs with work per call"),
                          ("sass_per_token", "warp-instructions per token, all kernels of a call"),
                          ("compilations", "compilations over a generation"),
                          ("launcher_us", "Python us per launcher call, launches stubbed at run()"),
                          ("launcher_us_binder", "Python us per launcher call, Triton's binder and cache lookup "
                                                 "counted (launch stubbed below them)")):  # fmt: skip
            if op.get(key):
                values = op[key]
                text = ", ".join(f"{impl} {value}" for impl, value in values.items())
                if key != "compilations" and {"ours", "sglang"} <= set(values) and values["sglang"]:
                    text += f" (ours / sglang = {values['ours'] / values['sglang']:.3f})"
                lines.append(f"{unit}: {text}")
    if report["kernels"]:
        lines.append("")
        lines.append(f"occupancy: {report['kernels'][0].get('occupancy_unit', '')}; loops: instructions per "
                     "iteration of each loop in program order (the first is the main one); items: what one "
                     "main-loop iteration covers (keys for attention); per token: warp-instructions one call executes "
                     "per token (straight-line code once, each loop its trips)")  # fmt: skip
    return "\n".join(lines)


def main(argv) -> int:
    parser = argparse.ArgumentParser(prog="kunlun-triton inspect", description=__doc__.split("\n\n")[0])
    parser.add_argument("ops", nargs="+", help="op or family names whose spec plans its kernels")
    parser.add_argument("--target", default="cuda:sm_90", help="cuda:sm_90 | hip:gfx942 | kunlun:p800")
    parser.add_argument("--preset", default=DEFAULT_PRESET, help=f"model preset ({', '.join(MODEL_PRESETS)})")
    parser.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    parser.add_argument("--batch", type=int, help="requests (decode/extend) or rows/tokens")
    parser.add_argument("--context", type=int, help="context length (decode) or cached prefix (extend)")
    parser.add_argument("--shape", action="append", metavar="KEY=V", help="set any key of the op's shape")
    parser.add_argument("--compare", action="append", default=[], choices=["sglang"], help="also SGLang's kernels")
    parser.add_argument("--traffic", action="store_true", help="bytes one call moves (ops with a model of it)")
    parser.add_argument("--programs", action="store_true", help="stage-1 programs with work per call (decode)")
    parser.add_argument("--compilations", action="store_true", help="distinct compilations over a generation")
    parser.add_argument("--launcher-us", action="store_true", help="Python us per launcher call, launch stubbed")
    parser.add_argument("--no-compile", action="store_true", help="skip the kernels' machine code (extras only)")
    parser.add_argument("--json", metavar="FILE", help="write the report as JSON")
    args = parser.parse_args(argv)
    from .arguments import output_file_problem

    problem = output_file_problem("--json", args.json)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        target = parse_target(args.target)
        preset = resolve_preset(args.preset)
        for value, flag, least in ((args.batch, "--batch", 1), (args.context, "--context", 0)):
            if value is not None and not least <= value <= MAX_SIZE:
                raise ValueError(f"{flag} must be >= {least} and <= {MAX_SIZE}, got {value}")
        report = inspect_ops(args.ops, target, preset, DTYPES[args.dtype], args.batch, args.context,
                             parse_shapes(args.shape), args.compare, args.traffic, args.compilations,
                             args.launcher_us, not args.no_compile, args.programs)  # fmt: skip
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_report(report))
    if args.json:
        try:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1, default=str)
        except OSError as exc:
            print(f"error: --json {args.json}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    return 1 if any("error" in r for r in report["kernels"]) else 0
