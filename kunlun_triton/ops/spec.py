"""What the tools know about an op, declared once, next to the op.

Each op family's ``spec.py`` lists an `OpSpec` per op. `doctor`, `bench` and
`tune` iterate `all_specs()` and hold no per-op code of their own:

- ``make_case(shape, dtype, device)`` builds one input of the op, the same
  values every time for the same arguments (in-place ops get fresh tensors
  per build), as an `OpCase`: ``run(config)`` calls the public op with an
  explicit launch config (``None``: looked up), ``reference()`` the torch
  oracle, each returning the tensors to compare; ``dims`` are the
  dimensions the op looks its config up by; ``bytes_moved`` is what an ideal
  kernel reads and writes once (for GB/s);
- ``doctor``: small (shape, dtype) pairs checked against the reference;
- ``bench_shapes(preset, quick)``: shapes from a model preset;
- ``tune_candidates(quick)``: the launch configs `kunlun-triton tune` tries
  at ``tune_shapes(preset, quick)`` (default: the bench shapes), those
  ``tune_keep(candidate, shape)`` rejects left out;
- ``kernels(shape, dtype, config)``: the kernels the op launches for a
  shape under a config, as ahead-of-time compile specs
  (`kunlun_triton.testing.KernelSpec`), computed by the same code the
  launcher uses to pick its constexprs; the lowering tests and
  ``kunlun-triton inspect`` compile these;
- ``traffic(shape, dtype)``: bytes one call moves as launched on the
  active target (scratch included), where the op has a model of it;
- ``config_keys``: every upper-case key (and ``formulation``) its configs
  may set, with what the kernel requires of it (`runtime.config_keys`); the
  launch options in `LAUNCH_KEYS` come on top. Config files are checked
  against these when read (None: nothing checked for the op).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..runtime.config_keys import COUNT, FLAG, NON_NEGATIVE, TILE, ConfigKey, choice

FAMILIES = ("norm", "activation", "logits", "rope", "attention", "sampling", "moe", "quant")

# Lower-case launch options any op's config may carry (`capabilities.launch_options`
# hands each target the ones it understands).
LAUNCH_KEYS = {
    "num_warps": TILE,
    "num_stages": NON_NEGATIVE,
    # AMD
    "waves_per_eu": NON_NEGATIVE,
    "matrix_instr_nonkdim": NON_NEGATIVE,
    "kpack": choice(1, 2),
    # Kunlun
    "buffer_size_limit": COUNT,
    "isCloseOffsetAnalysis": FLAG,
    "isCloseCoreTiling": FLAG,
    "isCloseUnrollControl": FLAG,
    "isCloseVectorization": FLAG,
}
FORMULATION = choice("dot", "sum")


@dataclass
class OpCase:
    run: Callable[[dict | None], object]
    reference: Callable[[], object]
    dims: dict
    bytes_moved: int = 0
    flops: int = 0
    args: tuple = ()  # the op's positional inputs, for other implementations (SGLang's) to run on
    time_reference: bool = True  # bench times `reference` as "torch" (False: too slow, or not the baseline)
    baselines: dict[str, Callable[[], object]] = field(default_factory=dict)  # more impls for bench to time
    # The op alone, on inputs it may overwrite (an in-place op's `run` copies
    # them first): what `kunlun-triton inspect --launcher-us` times. Default: run(None).
    call: Callable[[], object] | None = None


@dataclass(frozen=True)
class OpSpec:
    name: str  # the op: public function, config key, dispatch-report key, bench row
    family: str
    make_case: Callable[[dict, torch.dtype, str], OpCase]
    doctor: tuple  # ((shape, dtype), ...)
    bench_shapes: Callable[[object, bool], list[dict]]
    bench_dtype: torch.dtype = torch.bfloat16
    tune_candidates: Callable[[bool], list[dict]] | None = None
    tune_shapes: Callable[[object, bool], list[dict]] | None = None  # default: bench_shapes
    tune_keep: Callable[[dict, dict], bool] | None = None  # (candidate, shape): worth timing?
    # (out, ref) -> (error, ok) where outputs are random or exact; default:
    # per-dtype tolerance (scaled by `tolerance_scale`)
    compare: Callable[[object, object, torch.dtype], tuple[float, bool]] | None = None
    tolerance_scale: float = 1.0
    x_axis: str = ""
    kernels: Callable[[dict, torch.dtype, dict], list] | None = None
    traffic: Callable[[dict, torch.dtype], int] | None = None
    config_keys: dict[str, ConfigKey] | None = None  # what its configs may set (+ LAUNCH_KEYS)


def family_specs(family: str) -> list[OpSpec]:
    return list(importlib.import_module(f"kunlun_triton.ops.{family}.spec").SPECS)


def all_specs(families=FAMILIES) -> dict[str, OpSpec]:
    """``{op name: spec}`` over the families, in family order."""
    return {spec.name: spec for family in families for spec in family_specs(family)}


def config_key_rules(families=FAMILIES) -> dict:
    """``{op: {key: ConfigKey} or None}`` for `runtime.config_keys`: each op's
    declared keys plus the launch options. A family whose specs fail to import
    leaves its ops unchecked (that failure shows when the op itself is used)."""
    from . import FAMILY_OF

    rules = {}
    for family in families:
        try:
            specs = family_specs(family)
        except Exception:  # noqa: BLE001 - the op's own import reports it
            rules.update({op: None for op, fam in FAMILY_OF.items() if fam == family})
            continue
        for spec in specs:
            rules[spec.name] = None if spec.config_keys is None else {**LAUNCH_KEYS, **spec.config_keys}
    return rules


def resolve_config(spec_name: str, dims: dict, overlay: dict | None = None) -> dict:
    """The config the op would look up for `dims`, with `overlay` on top: what
    the runtime returns once `overlay` is written to a tuned file."""
    from ..runtime import get_config

    return {**get_config(spec_name, **dims), **(overlay or {})}


def planned_kernels(name: str, shape: dict, dtype, target, config: dict | None = None) -> list:
    """The AOT compile specs (`KernelSpec`) of op `name` for `shape` as
    `target` (a `runtime.Target`) would launch it: its configs (or `config`)
    and capabilities pick the constexprs. What the lowering tests and
    ``kunlun-triton inspect`` compile."""
    from ..runtime import targeting

    spec = all_specs()[name]
    if spec.kernels is None:
        raise ValueError(f"{name}: its spec does not plan its kernels (OpSpec.kernels)")
    with targeting(target):
        return spec.kernels(shape, dtype, config)
