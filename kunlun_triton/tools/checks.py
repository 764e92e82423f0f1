"""What the tools run, built from the op specs (`kunlun_triton.ops.spec`).

`doctor_checks`, `bench_cases` and `tune_tasks` turn every `OpSpec` into
the records `doctor`, `bench` and `tune` run; no tool holds per-op code.
A tool-specific extra (the allocator's serving trace) builds the same
records itself.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import namedtuple
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..ops import spec as op_spec
from ..ops.spec import OpSpec, resolve_config
from ..runtime import capabilities, run_dtype
from ..runtime.dtypes import dtype_name
from ..runtime.tolerances import max_abs_error, tolerance
from .presets import PRESET_FIELDS


@dataclass
class OpCheck:
    """One op on one small input: `run` calls the public op, `reference` the
    torch oracle; `compare(out, ref)` returns (error, ok)."""

    op: str
    run: Callable[[], object]
    reference: Callable[[], object]
    compare: Callable[[object, object], tuple[float, bool]]
    dtype: torch.dtype = torch.float32


@dataclass
class BenchCase:
    """One shape of one op. `build()` makes the inputs (only when the case
    runs, so one case's tensors live at a time) and returns ``(impls,
    bytes_moved, flops)``, impls being no-argument thunks by name. `baseline`
    names the impl the others are compared with (ratio = baseline time /
    impl time, so > 1 means faster)."""

    family: str
    op: str
    params: dict
    build: Callable[[], tuple[dict, int, int]]
    baseline: str = "torch"
    x_axis: str = ""  # the param to plot against (e.g. "context_len")
    tags: dict = field(default_factory=dict)


TuneTask = namedtuple("TuneTask", "op shape make_thunk candidates")


def select_specs(names, extra_families=()) -> list:
    """The specs named (op or family names; none: every op). Unknown names
    raise ValueError listing what exists."""
    specs = op_spec.all_specs()
    families = list(dict.fromkeys([s.family for s in specs.values()] + list(extra_families)))
    unknown = [n for n in names if n not in families and n not in specs]
    if unknown:
        raise ValueError(f"unknown op family or op {unknown}; families: {', '.join(families)}; ops: {', '.join(specs)}")
    return [s for s in specs.values() if not names or s.family in names or s.name in names]


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def compare_close(out, ref, dtype, scale: float = 1.0) -> tuple[float, bool]:
    """(max abs error, within the dtype's tolerance) over every output tensor."""
    atol, rtol = tolerance(dtype, scale)
    err, ok = 0.0, True
    for a, b in zip(_as_tuple(out), _as_tuple(ref)):
        err = max(err, max_abs_error(a, b))
        ok = ok and a.shape == b.shape and torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol, equal_nan=True)
    return err, ok


def comparer(spec: OpSpec, dtype) -> Callable[[object, object], tuple[float, bool]]:
    if spec.compare is not None:
        return lambda out, ref: spec.compare(out, ref, dtype)
    return lambda out, ref: compare_close(out, ref, dtype, spec.tolerance_scale)


def run_and_reference(spec: OpSpec, shape: dict, dtype, device, config=None):
    """The op's output and the reference's on the same values (two fresh
    builds of the case, since ops may write their inputs)."""
    out = spec.make_case(shape, dtype, device).run(config)
    ref = spec.make_case(shape, dtype, device).reference()
    return out, ref


def doctor_checks(specs, device) -> list[OpCheck]:
    checks = []
    for spec in specs:
        for shape, dtype in spec.doctor:
            checks.append(OpCheck(
                spec.name,
                run=lambda s=spec, sh=shape, d=dtype: s.make_case(sh, d, device).run(None),
                reference=lambda s=spec, sh=shape, d=dtype: s.make_case(sh, d, device).reference(),
                compare=comparer(spec, dtype), dtype=dtype,
            ))  # fmt: skip
    return checks


def _check_sweep_values(shapes: list[dict], sweep: dict) -> None:
    """Each ``--shape`` value must be what the shapes hold for that key: a
    whole number for a count (>= 1, or >= 0 where a shape itself has 0, e.g.
    ``prefix_len``), a finite number > 0 for a real; ValueError otherwise."""
    for key, values in sweep.items():
        held = [shape[key] for shape in shapes if key in shape]
        if not held or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in held):
            continue  # not a number here: passed as given
        if all(isinstance(v, int) for v in held):
            least = 0 if 0 in held else 1
            bad = [v for v in values if isinstance(v, bool) or not isinstance(v, int) or v < least]
            expected = f"whole numbers >= {least}"
        else:
            bad = [v for v in values if isinstance(v, bool) or not isinstance(v, (int, float))
                   or not math.isfinite(v) or v <= 0]  # fmt: skip
            expected = "finite numbers > 0"
        if bad:
            raise ValueError(f"--shape {key}={','.join(map(str, values))}: {key} takes {expected}, got {bad[0]!r}")


def expand(shapes: list[dict], sweep: dict) -> list[dict]:
    """`shapes` with each key of `sweep` that a shape has replaced by each of
    its values (``--shape batch=1,8``), duplicates dropped. A value of the
    wrong kind for the key is a ValueError (`_check_sweep_values`)."""
    _check_sweep_values(shapes, sweep)
    out, seen = [], set()
    for shape in shapes:
        keys = [k for k in sweep if k in shape]
        for values in itertools.product(*(sweep[k] for k in keys)):
            new = {**shape, **dict(zip(keys, values))}
            key = repr(sorted(new.items()))
            if key not in seen:
                seen.add(key)
                out.append(new)
    return out


def _bumped(value):
    return value + 1 if isinstance(value, int) else value * 2 + 1


def unused_shape_keys(specs, preset, quick: bool, shapes: dict, shapes_of, extra_keys=()) -> list[str]:
    """The ``--shape`` keys that would change nothing for `specs`: a swept
    key none of their shapes has, or a preset field none of them reads
    (found by changing the field and comparing the shapes; under ``--quick``
    the shapes are fixed and read no field). `shapes_of(spec)` is the
    spec's ``(preset, quick) -> shapes``; `extra_keys` are used elsewhere."""
    unused = []
    for key in shapes:
        if key in extra_keys:
            continue
        if key in PRESET_FIELDS:
            other = dataclasses.replace(preset, **{key: _bumped(getattr(preset, key))})
            if all(shapes_of(s)(other, quick) == shapes_of(s)(preset, quick) for s in specs):
                unused.append(key)
        elif not any(key in shape for s in specs for shape in shapes_of(s)(preset, quick)):
            unused.append(key)
    return unused


def unused_keys_message(unused: list[str], quick: bool) -> str:
    why = " (--quick runs fixed small shapes that read no model preset field)" if quick and any(
        k in PRESET_FIELDS for k in unused) else ""
    keys = ", ".join(f"{k}=..." for k in unused)
    return f"--shape {keys} changes nothing for the selected ops{why}; drop it or pick ops whose shapes have it"


def bench_cases(specs, preset, quick: bool, sweep: dict, device: str, baselines: dict) -> list[BenchCase]:
    """One case per spec and bench shape; `baselines` maps an op to
    ``{impl name: fn(case) -> thunk}`` (SGLang's kernels)."""
    cases = []
    for spec in specs:
        dtype = run_dtype(spec.bench_dtype)
        for shape in expand(spec.bench_shapes(preset, quick), sweep):

            def build(spec=spec, shape=shape, dtype=dtype):
                case = spec.make_case(shape, dtype, device)
                impls = {"triton": lambda: case.run(None)}
                if case.time_reference:
                    impls["torch"] = case.reference
                impls.update(case.baselines)
                for name, make in baselines.get(spec.name, {}).items():
                    impls[name] = make(case)
                return impls, case.bytes_moved, case.flops

            params = {**{k: v for k, v in shape.items() if not isinstance(v, (list, dict))}, "dtype": dtype_name(dtype)}
            cases.append(BenchCase(spec.family, spec.name, params, build, x_axis=spec.x_axis))
    return cases


def _with_warps(candidates: list[dict], quick: bool) -> list[dict]:
    """Each candidate at 4 and 8 warps where num_warps means something on
    this target (not under ``--quick``, nor where a candidate names its own)."""
    if quick or not capabilities().num_warps_meaningful:
        return candidates
    return [c if "num_warps" in c else {**c, "num_warps": w} for c in candidates for w in (4, 8)]


def _dedupe(candidates: list[dict]) -> list[dict]:
    seen, out = set(), []
    for c in candidates:
        key = repr(sorted(c.items()))
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def tune_tasks(specs, preset, quick: bool, sweep: dict, device: str) -> list[TuneTask]:
    """Per spec and tune shape: the lookup dims (what ``get_config`` sees),
    the candidates, and ``make_thunk(candidate)``: it runs the op once with
    the candidate overlaid on the looked-up config and compares it with the
    reference (raising when wrong: a wrong config never wins), then returns
    the thunk to time."""
    tasks = []
    for spec in specs:
        if spec.tune_candidates is None:
            continue
        dtype = run_dtype(spec.bench_dtype)
        shapes = expand((spec.tune_shapes or spec.bench_shapes)(preset, quick), sweep)
        for shape in shapes:
            candidates = _with_warps(spec.tune_candidates(quick), quick)
            if not capabilities().num_warps_meaningful:
                candidates = [{k: v for k, v in c.items() if k != "num_warps"} for c in candidates]
            candidates = _dedupe([c for c in candidates if spec.tune_keep is None or spec.tune_keep(c, shape)])
            dims = spec.make_case(shape, dtype, device).dims  # what the op looks its config up by

            def make_thunk(candidate, spec=spec, shape=shape, dtype=dtype, dims=dims):
                config = resolve_config(spec.name, dims, candidate)
                out, ref = run_and_reference(spec, shape, dtype, device, config)
                err, ok = comparer(spec, dtype)(out, ref)
                if not ok:
                    raise AssertionError(f"{spec.name} with {candidate} disagrees with the reference (error {err:.3g})")
                case = spec.make_case(shape, dtype, device)
                return lambda: case.run(config)

            tasks.append(TuneTask(spec.name, dims, make_thunk, candidates))
    return tasks
