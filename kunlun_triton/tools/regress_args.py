"""`kunlun-triton regress`'s checks before anything starts, and its result lines.

Every argument and the golden file are checked before a tokenizer is read or an
engine started (an engine start is a minute or more): each problem is one line
``error: ...`` naming the flag, all of them at once, exit status 2, no
traceback. `--model` is a checkpoint directory (any: an operator's 7B or 14B)
or a known model's name (`kunlun-triton models list`), fetched first.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

USAGE_ERROR = 2
DTYPES = ("auto", "float32", "float", "bfloat16", "float16", "half")


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x) -> bool:
    return (_is_int(x) or isinstance(x, float)) and math.isfinite(x)


def model_errors(value: str, known: tuple) -> list:
    """Problems with --model: a local checkpoint directory, or a known model's name."""
    path = Path(value).expanduser()
    if value in known and not path.exists():
        return []
    if not path.exists():
        return [f"--model {value}: no such local directory (and not a known model: {', '.join(known)}); "
                "regress reads a local checkpoint"]
    if not path.is_dir():
        return [f"--model {value}: not a directory"]
    if not (path / "config.json").is_file():
        return [f"--model {value}: no config.json there (not a checkpoint directory)"]
    return []


def golden_shape_errors(data, where: str) -> list:
    """Problems with a golden file's content (what `regress --record` writes)."""
    if not isinstance(data, dict):
        return [f"{where}: expected a JSON object, got {type(data).__name__}"]
    errors = []
    if not (_is_int(data.get("max_new_tokens")) and data["max_new_tokens"] >= 1):
        errors.append(f"{where}: \"max_new_tokens\" must be an integer >= 1, got {data.get('max_new_tokens')!r}")
    cases = data.get("cases")
    if not isinstance(cases, dict) or not cases:
        return errors + [f"{where}: \"cases\" must be a non-empty object of case name -> recorded case"]
    for name, case in cases.items():
        at = f"{where}: case {name!r}"
        if not isinstance(case, dict):
            errors.append(f"{at}: expected an object, got {type(case).__name__}")
            continue
        for key in ("input_ids", "output_ids"):
            ids = case.get(key)
            if not (isinstance(ids, list) and ids and all(_is_int(i) and i >= 0 for i in ids)):
                errors.append(f"{at}: \"{key}\" must be a non-empty list of token ids")
        top = case.get("top5")
        ok = isinstance(top, list) and all(
            isinstance(step, list) and step and all(isinstance(e, list) and len(e) == 2 and _is_int(e[0])
                                                    and _is_number(e[1]) for e in step) for step in top)  # fmt: skip
        if not ok:
            errors.append(f"{at}: \"top5\" must be a list (one per step) of non-empty lists of [token id, logprob]")
        elif isinstance(case.get("output_ids"), list) and len(top) != len(case["output_ids"]):
            errors.append(f"{at}: {len(top)} top5 steps for {len(case['output_ids'])} output ids")
    return errors


def read_golden(path: Path):
    """(the golden file's data or None, its problems)."""
    if not path.is_file():
        return None, [f"--golden {path} is not a file (record one first with --record)"]
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        return None, [f"--golden {path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"]
    except (OSError, UnicodeDecodeError) as exc:
        return None, [f"--golden {path}: cannot be read ({getattr(exc, 'strerror', None) or exc})"]
    errors = golden_shape_errors(data, f"--golden {path}")
    return (None if errors else data), errors


def record_errors(path: Path) -> list:
    if path.exists() or path.is_symlink():
        return [f"--golden {path} exists; refusing to overwrite it (remove it first)"]
    parent = path.absolute().parent
    if not parent.is_dir():
        return [f"--golden {path}: the directory {parent} does not exist"]
    if not os.access(parent, os.W_OK | os.X_OK):
        return [f"--golden {path}: the directory {parent} is not writable"]
    return []


def check(args, known_models: tuple, known_cases: tuple):
    """(golden data or None, [problems]) for regress' parsed arguments."""
    errors = model_errors(args.model, known_models)
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = [n for n in names if n not in known_cases]
    if unknown or not names:
        errors.append(f"--cases: unknown {', '.join(unknown) or repr(args.cases)}; known: {', '.join(known_cases)}")
    if args.max_new_tokens < 1:
        errors.append(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if args.tp_size < 1:
        errors.append(f"--tp-size must be >= 1, got {args.tp_size}")
    if not (math.isfinite(args.atol) and args.atol >= 0):
        errors.append(f"--atol must be a finite number of nats >= 0, got {args.atol}")
    if args.dtype not in DTYPES:
        errors.append(f"--dtype {args.dtype!r}: expected one of {', '.join(DTYPES)}")
    golden = None
    if args.record:
        errors += record_errors(Path(args.golden))
    else:
        golden, problems = read_golden(Path(args.golden))
        errors += problems
    return golden, errors


def result_line(name: str, problems: list, case: dict) -> str:
    """One case's verdict with its TTFT and TPOT (information, never compared)."""
    tpot = case.get("tpot_s")
    timing = f"TTFT {case['ttft_s']:.3f} s  TPOT " + (f"{tpot:.3f} s" if tpot is not None else "-")
    return f"{name:<12} {'FAIL' if problems else 'pass'}  {timing}" + (f"  ({len(problems)} problem(s))"
                                                                        if problems else "")
