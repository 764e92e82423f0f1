"""`kunlun-triton tune OP`: search launch configs on this device and write
the winners where the runtime looks for them.

The search space is each op's spec (`kunlun_triton.ops.spec`):
``tune_candidates(quick)`` at ``tune_shapes(preset, quick)``. A task is one
shape of one op, keyed by the dims the op looks its config up by. Each
candidate runs through the public op with ``config=`` the looked-up config
overlaid by the candidate (exactly what the runtime returns once the
candidate is written to a tuned file), first once against the torch
reference: a candidate that computes the wrong thing fails and never wins.

Each candidate is timed with `timing.time_call` (median of synchronised
repeats, wall clock where events are unreliable); the fastest per shape wins.
The winners go to ``<target>-<arch>.yaml`` (e.g. ``cuda-sm_90.yaml``) in the
output directory, as ``by_shape`` rules with ``source: tuned``: along each
dimension that varies, a shape gets the config tuned at the smallest tuned
value at or above it, so every shape between the tuned ones is covered. The
op's plain ``config`` is the most frequent winner, repeated as a last rule
matching every shape (a rule of a less specific file would otherwise beat a
plain config here). An existing file is never
touched without ``--force``; with it, the tuned ops replace their entries and
every other op's entry is kept.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections import Counter
from pathlib import Path

import yaml

from ..runtime import clear_config_cache
from ..runtime.config import read_yaml
from .arguments import (USAGE_ERROR, environment_problem, ignored_flags, non_negative_int, output_dir_problem,
                        positive_int)
from .checks import TuneTask, tune_tasks, unused_keys_message, unused_shape_keys
from .presets import DEFAULT_PRESET, MODEL_PRESETS, PRESET_FIELDS, parse_shapes, presets_for
from .report import ProgressBar
from .timing import time_call


class TuneError(RuntimeError):
    """Nothing to tune, nothing ran, or the output file is in the way."""


def collect_tasks(names, preset_name: str, args) -> list[TuneTask]:
    """Tasks of the named ops or families (``all``: every tunable op)."""
    from ..ops import spec as op_spec
    from ..runtime import current_target

    specs = op_spec.all_specs()
    tunable = [s for s in specs.values() if s.tune_candidates is not None]
    chosen = [s for s in tunable if "all" in names or s.name in names or s.family in names]
    if not chosen:
        raise TuneError(f"nothing to tune for {' '.join(names)}; tunable ops: {', '.join(s.name for s in tunable)}")
    shapes = getattr(args, "shapes", None) or {}
    sweep = {k: v for k, v in shapes.items() if k not in PRESET_FIELDS}
    quick = bool(getattr(args, "quick", False))
    unused = unused_shape_keys(chosen, MODEL_PRESETS[preset_name], quick, shapes,
                               lambda s: s.tune_shapes or s.bench_shapes)
    refusal = _untunable_message(chosen, MODEL_PRESETS[preset_name], quick, unused)
    if refusal:
        raise ValueError(refusal)
    if unused:
        raise ValueError(unused_keys_message(unused, quick))
    tasks, seen = [], set()
    for preset in presets_for(MODEL_PRESETS[preset_name], shapes):
        for task in tune_tasks(chosen, preset, quick, sweep, current_target().device_type):
            key = (task.op, repr(sorted(task.shape.items())))
            if key not in seen:
                seen.add(key)
                tasks.append(task)
    return tasks


def _untunable_message(chosen, preset, quick: bool, unused: list[str]) -> str:
    """Why ``--shape`` keys the ops' bench shapes have but their tune shapes
    leave out (kv_dtype, custom_mask) are refused, or "": no config lookup
    tells their values apart, so a config tuned at one would serve all."""
    keys = [k for k in unused if k not in PRESET_FIELDS]
    ops = [s for s in chosen if any(k in shape for k in keys for shape in s.bench_shapes(preset, quick))]
    if not ops:
        return ""
    keys = [k for k in keys if any(k in shape for s in ops for shape in s.bench_shapes(preset, quick))]
    looked_up = "; ".join(f"{s.name} by {', '.join(s.lookup_dims)}" for s in ops)
    return (f"--shape {', '.join(f'{k}=...' for k in keys)}: configs are looked up by ({looked_up}), which no "
            f"value of it changes, so a config tuned at one value would serve them all; tune without it "
            f"(bench and inspect measure it)")  # fmt: skip


def tune_task(task: TuneTask, warmup: int, repeat: int) -> dict:
    """Time every candidate; ``{op, shape, winner, time_us, trials}``."""
    trials = []
    for config in task.candidates:
        try:
            thunk = task.make_thunk(dict(config))
            timing = time_call(thunk, warmup=warmup, repeat=repeat)
            trials.append({"config": dict(config), "time_us": timing.median_s * 1e6})
        except Exception as exc:  # a config the kernel rejects is just not a candidate
            trials.append({"config": dict(config), "time_us": None, "error": f"{type(exc).__name__}: {exc}"[:200]})
    timed = [t for t in trials if t["time_us"] is not None]
    best = min(timed, key=lambda t: t["time_us"]) if timed else None
    return {
        "op": task.op,
        "shape": dict(task.shape),
        "winner": best["config"] if best else None,
        "time_us": best["time_us"] if best else None,
        "trials": trials,
    }


def _bounds(values: list) -> dict:
    """Sorted distinct value -> (min, max) of the interval it covers: a value
    covers everything above the previous one, up to itself; the smallest
    has no lower bound and the largest no upper bound."""
    distinct = sorted(set(values))
    out = {}
    for i, v in enumerate(distinct):
        lo = None if i == 0 else (distinct[i - 1] + 1 if isinstance(v, int) else (distinct[i - 1] + v) / 2)
        hi = None if i == len(distinct) - 1 else v
        out[v] = (lo, hi)
    return out


def build_entry(results: list[dict], note: str = "") -> dict:
    """The YAML entry of one op from its per-shape results."""
    results = [r for r in results if r["winner"] is not None]
    counts = Counter(tuple(sorted(r["winner"].items())) for r in results)
    entry: dict = {"source": "tuned", "config": dict(counts.most_common(1)[0][0])}
    if note:
        entry["notes"] = note
    # The runtime takes the first matching by_shape rule of the most specific
    # file before any plain config, so a less specific file's rule would beat
    # this file's plain config: end with a rule that matches every shape.
    catch_all = {"when": {}, "config": dict(entry["config"])}
    if len(counts) == 1:
        entry["by_shape"] = [catch_all]
        return entry
    dims = sorted({d for r in results for d in r["shape"]})
    # by_shape bounds are numeric; a family tuning per dtype etc. keys ops apart
    varying = [
        d for d in dims
        if len({r["shape"].get(d) for r in results}) > 1
        and all(isinstance(r["shape"].get(d), (int, float)) for r in results)
    ]
    bounds = {d: _bounds([r["shape"][d] for r in results]) for d in varying}
    rules = []
    for r in sorted(results, key=lambda r: tuple(r["shape"][d] for d in varying)):
        when = {}
        for d in varying:
            lo, hi = bounds[d][r["shape"][d]]
            if lo is not None:
                when[f"{d}_min"] = lo
            if hi is not None:
                when[f"{d}_max"] = hi
        # cells of the grid of tuned values are disjoint, so a cell whose
        # winner is the op's plain config needs no rule
        if r["winner"] != entry["config"]:
            rules.append({"when": when, "config": dict(r["winner"])})
    entry["by_shape"] = rules + [catch_all]
    return entry


def config_file(output_dir: Path, target) -> Path:
    name = f"{target.name}-{target.arch}.yaml" if target.arch else f"{target.name}.yaml"
    return Path(output_dir) / name


def merged_document(path: Path, entries: dict, target, meta_note: str) -> dict:
    """The file's contents after the tuned `entries` replace their ops."""
    from ..ops.spec import CONFIG_RULES
    from ..runtime.config import validate

    data = {"version": 1, "target": target.name, "arch": target.arch, "notes": meta_note, "ops": {}}
    if path.exists():
        existing = read_yaml(path) or {}  # a ConfigError naming the file, not "<unicode string>"
        validate(existing, path, CONFIG_RULES)
        data = {**existing, "version": 1}
        data.setdefault("ops", {})
        data["ops"] = dict(data.get("ops") or {})
    data["ops"].update(entries)
    validate(data, path, CONFIG_RULES)  # the values against each op's keys too
    return data


def write_document(path: Path, data: dict) -> None:
    header = (
        f"# {path.stem}: written by `kunlun-triton tune`; looked up <target>-<arch>.yaml, then\n"
        "# <target>.yaml, then default.yaml (kunlun_triton/runtime/config.py).\n"
    )
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(header + text)
    tmp.replace(path)
    clear_config_cache()  # this process may look the new values up right away


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kunlun-triton tune", description=__doc__.split("\n\n")[0])
    p.add_argument("op", nargs="+", help="op names, family names, or 'all'")
    p.add_argument("--preset", choices=sorted(MODEL_PRESETS), default=DEFAULT_PRESET)
    p.add_argument("--shape", action="append", metavar="KEY=V[,V...]", help="as for bench (repeatable)")
    p.add_argument("--quick", action="store_true", help="tiny shapes and search (CPU, CI)")
    p.add_argument("--output-dir", metavar="DIR", help="default: the shipped autotune_configs/")
    p.add_argument("--force", action="store_true", help="merge into an existing file")
    p.add_argument("--dry-run", action="store_true", help="print the YAML instead of writing it")
    p.add_argument("--warmup", type=non_negative_int, help="untimed runs per config (default 2; --quick: 1)")
    p.add_argument("--repeat", type=positive_int, help="timed runs per config, median kept (default 7; --quick: 3)")
    return p


def tune(args) -> dict:
    """Run the search for parsed `args`; returns ``{path, document, results, failed}``."""
    from ..runtime import current_target
    from ..runtime.config import shipped_config_dir
    from .presets import device_name

    target = current_target()
    path = config_file(Path(args.output_dir) if args.output_dir else shipped_config_dir(), target)
    if path.exists() and not args.force and not args.dry_run:
        raise TuneError(f"{path} exists; pass --force to merge the tuned ops into it (other ops are kept)")
    if path.exists():
        read_yaml(path)  # a corrupt file to merge into fails now, not after the search
    tasks = collect_tasks(args.op, args.preset, args)
    quick = getattr(args, "quick", False)
    warmup = (1 if quick else 2) if getattr(args, "warmup", None) is None else args.warmup
    repeat = (3 if quick else 7) if getattr(args, "repeat", None) is None else args.repeat
    bar = ProgressBar(len(tasks))
    results = []
    for i, task in enumerate(tasks):
        bar.update(i, f"{task.op} {task.shape} ({len(task.candidates)} configs)")
        results.append(tune_task(task, warmup, repeat))
    bar.update(len(tasks), "done")
    bar.close()
    stamp = datetime.date.today().isoformat()
    note = f"tuned {stamp} on {device_name()} ({target.name} {target.arch}), preset {args.preset}"
    by_op: dict[str, list] = {}
    for r in results:
        by_op.setdefault(r["op"], []).append(r)
    failed = sorted(op for op, rs in by_op.items() if all(r["winner"] is None for r in rs))
    entries = {op: build_entry(rs, note) for op, rs in by_op.items() if op not in failed}
    if not entries:
        raise TuneError(f"every candidate failed for {', '.join(failed)}: " + _first_error(results))
    document = merged_document(path, entries, target, note)
    return {"path": path, "document": document, "results": results, "failed": failed}


def _first_error(results) -> str:
    return next((t["error"] for r in results for t in r["trials"] if t.get("error")), "?")


def main(argv=None) -> int:
    """Exit status 0 when every op got a tuned config, 1 when one did not
    (the others are still written) or nothing ran, 2 for a bad command line
    or environment (one line, nothing run)."""
    args = build_parser().parse_args(argv)
    problem = args.dry_run and ignored_flags(args, "--dry-run (it writes nothing)", {"--force": "force"})
    problem = problem or (not args.dry_run and output_dir_problem("--output-dir", args.output_dir))
    problem = problem or environment_problem()
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return USAGE_ERROR
    try:
        args.shapes = parse_shapes(args.shape)
        out = tune(args)
    except TuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:  # --shape keys or values, a malformed config file in the way
        print(f"error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    for r in out["results"]:
        winner = r["winner"] if r["winner"] is not None else "(every candidate failed)"
        t = f"{r['time_us']:.1f} us" if r["time_us"] is not None else "-"
        print(f"{r['op']:<24} {r['shape']}  ->  {winner}  {t}")
    if args.dry_run:
        print(yaml.safe_dump(out["document"], sort_keys=False, default_flow_style=None, width=100))
    else:
        write_document(out["path"], out["document"])
        print(f"wrote {out['path']}")
    if out["failed"]:
        print(f"error: every candidate failed for {', '.join(out['failed'])}, nothing written for "
              f"{'it' if len(out['failed']) == 1 else 'them'}: {_first_error(out['results'])}", file=sys.stderr)
        return 1
    return 0
