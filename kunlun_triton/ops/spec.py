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
  (`kunlun_triton.introspect.KernelSpec`), computed by the same code the
  launcher uses to pick its constexprs; the lowering tests and
  ``kunlun-triton inspect`` compile these;
- ``traffic(shape, dtype)``: bytes one call moves as launched on the
  active target (scratch included), where the op has a model of it;
- ``programs(shape, dtype)``: the programs of its first (split) launch that
  have work, as the active target's config splits it (decode);
- ``config_keys``: every upper-case key (and ``formulation``) its configs
  may set, with what the kernel requires of it (`runtime.config_keys`); the
  launch options in `LAUNCH_KEYS` come on top. Config files are checked
  against these when a launcher first looks a config up through them
  (`CONFIG_RULES`, passed as ``get_config(..., rules=CONFIG_RULES)``; None:
  nothing checked for the op). Defaults live in ``autotune_configs/default.yaml``
  only: an explicit ``config=`` is laid over the file's answer
  (`runtime.config.with_defaults`), so no launcher restates a default.

The specs are the one registry of ops: every list of ops derives from them
(``tests/ops/test_registry.py`` checks what cannot derive, such as the plain
imports of ``kunlun_triton.ops``). Besides the tools' needs a spec declares:

- ``function``: the public op itself (``name`` is its ``__name__``);
- ``lookup_dims``: the dimensions its config lookup takes (``by_shape``
  rules may bound only these; tune writes rules over them);
- ``generation_shapes(preset, max_context, max_batch, step)``: the shapes one
  generation of a model meets (`tools.compilations` counts the compilations
  over them; None: the op is not on a decoder's per-token path);
- ``graph_capture``: the op runs inside a captured decode graph (SGLang's
  CUDA graphs): with checks off its doctor case never syncs with the host
  (tests/sglang_plugin/test_sglang_decode_graph.py runs each so; decode
  attention is captured through the backend's workspace, tested there too);
- ``batch_invariant``: a row's result is bitwise the same alone and inside a
  batch (deterministic inference; tests/ops/test_batch_invariance.py);
- ``sglang_forward``: the SGLang layer whose fused-op forward the op serves
  (the install table's "fused ops" touchpoint routes exactly these); ""
  where it is reached another way (a backend, a hook);
- ``sglang``: the other touchpoints of the install table
  (``sglang_plugin/install.py``) that route to the op: "attention backend",
  "sampling backend", "MoE layers", ... (`served_by` answers per touchpoint;
  the table's routes and the plugin's op lists are derived from these);
- ``sglang_baselines``: SGLang's own kernels for the op's job, by what the
  tools do with them (``bench``, ``inspect``, ``traffic``, ``programs``,
  ``launcher``), as ``"module:function"`` under
  ``sglang_plugin/tools/baselines/`` (a string: the kernels never import SGLang).

A family's ``spec.py`` also lists its public helpers (``HELPERS``: the
decode step's workspace, say) that ``kunlun_triton.ops`` exports next to the ops.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..runtime.config_keys import COUNT, FLAG, NON_NEGATIVE, TILE, ConfigKey, choice

# The op families, in the order the tools list them: each is a folder
# ``ops/<family>/`` whose ``spec.py`` holds ``SPECS`` (the registry test
# checks that every such folder is listed here).
FAMILIES = ("norm", "activation", "logits", "rope", "attention", "sampling", "moe", "quant", "linear_attention")

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
    programs: Callable[[dict, torch.dtype], int] | None = None  # stage-1 programs with work, per call
    config_keys: dict[str, ConfigKey] | None = None  # what its configs may set (+ LAUNCH_KEYS)
    # -- the registry (module docstring) --
    function: Callable | None = None  # the public op (its __name__ is `name`)
    lookup_dims: tuple[str, ...] = ()  # what get_config(name, ...) is given
    generation_shapes: Callable[[object, int, int, int], Iterable[dict]] | None = None
    graph_capture: bool = False  # runs in a captured decode graph: no host sync with checks off
    batch_invariant: bool = False  # a row's result does not depend on its batch
    sglang_forward: str = ""  # the SGLang layer whose fused-op forward it serves
    # the install table's touchpoints (SGLang backends, layers, hooks) that route to it
    sglang: tuple[str, ...] = ()
    # SGLang's kernels for the same job: kind (bench | inspect | traffic | programs
    # | launcher) -> "module:function" under sglang_plugin/tools/baselines/
    sglang_baselines: Mapping[str, str] = field(default_factory=dict)


def family_specs(family: str) -> list[OpSpec]:
    return list(importlib.import_module(f"kunlun_triton.ops.{family}.spec").SPECS)


def all_specs(families=FAMILIES) -> dict[str, OpSpec]:
    """``{op name: spec}`` over the families, in family order."""
    return {spec.name: spec for family in families for spec in family_specs(family)}


def family_helpers(family: str) -> tuple:
    """The public helpers a family exports next to its ops (its spec's ``HELPERS``)."""
    return tuple(getattr(importlib.import_module(f"kunlun_triton.ops.{family}.spec"), "HELPERS", ()))


def specs_where(predicate: Callable[[OpSpec], object], families=FAMILIES) -> tuple[str, ...]:
    """Names of the ops whose spec satisfies `predicate`, in family order."""
    return tuple(name for name, spec in all_specs(families).items() if predicate(spec))


FUSED_OPS_TOUCHPOINT = "fused ops"  # the install table's touchpoint of the `sglang_forward` ops


def served_by(touchpoint: str, families=FAMILIES) -> tuple[str, ...]:
    """The ops the install table's `touchpoint` routes to, in family order:
    those with an `OpSpec.sglang_forward` for "fused ops", else those whose
    `OpSpec.sglang` names it."""
    if touchpoint == FUSED_OPS_TOUCHPOINT:
        return specs_where(lambda s: s.sglang_forward, families)
    return specs_where(lambda s: touchpoint in s.sglang, families)


# A baseline's function in sglang_plugin/tools/baselines/<module>.py: <stage>_<suffix>.
BASELINE_SUFFIXES = {"bench": "baseline", "inspect": "inspect_specs", "traffic": "inspect_traffic",
                     "programs": "inspect_programs", "launcher": "launcher_call"}  # fmt: skip


def baselines(where: str, *kinds: str) -> dict[str, str]:
    """`OpSpec.sglang_baselines` for SGLang's kernels of `where` ("module:stage",
    e.g. "attention:decode"), one per kind: ``{kind: "module:<stage>_<suffix>"}``."""
    module, _, stage = where.partition(":")
    return {kind: f"{module}:{stage}_{BASELINE_SUFFIXES[kind]}" for kind in kinds}


def with_baseline(kind: str, families=FAMILIES) -> dict[str, str]:
    """``{op: "module:function"}``: the ops with an SGLang baseline of `kind`."""
    return {name: spec.sglang_baselines[kind] for name, spec in all_specs(families).items()
            if kind in spec.sglang_baselines}  # fmt: skip


def config_key_rules(families=FAMILIES) -> dict:
    """``{op: {key: ConfigKey} or None}``: each op's declared keys plus the
    launch options (None: the op declares none; nothing is checked)."""
    return {spec.name: None if spec.config_keys is None else {**LAUNCH_KEYS, **spec.config_keys}
            for spec in all_specs(families).values()}  # fmt: skip


class _ConfigRules(Mapping):
    """`config_key_rules()` built on first use: what launchers hand
    `runtime.get_config` (``rules=CONFIG_RULES``) so a config file is checked
    against every op's keys when first read, while the runtime imports no op."""

    def __init__(self):
        self._rules: dict | None = None

    def _built(self) -> dict:
        if self._rules is None:
            self._rules = config_key_rules()
        return self._rules

    def __getitem__(self, op):
        return self._built()[op]

    def __iter__(self):
        return iter(self._built())

    def __len__(self):
        return len(self._built())


CONFIG_RULES = _ConfigRules()


def lookup_config(op: str, target=None, **dims) -> dict:
    """What a launcher looks up for `op` at `dims` (`runtime.get_config`),
    the config files checked against every op's keys when first read."""
    from ..runtime.config import get_config

    return get_config(op, target, rules=CONFIG_RULES, **dims)


def explicit_config(op: str, config: dict, **dims) -> dict:
    """An explicit ``config=`` as a launcher runs it: over ``default.yaml``'s
    answer at `dims` (`runtime.config.with_defaults`), the one home of defaults.
    A `config` that is not a dict of keys the op takes, with values its
    kernels accept, raises naming the op and key (`check_call_config`)."""
    from ..runtime.config import with_defaults
    from ..runtime.config_keys import check_call_config

    check_call_config(op, config, CONFIG_RULES.get(op))
    return with_defaults(op, config, rules=CONFIG_RULES, **dims)


def resolve_config(spec_name: str, dims: dict, overlay: dict | None = None) -> dict:
    """The config the op would look up for `dims`, with `overlay` on top: what
    the runtime returns once `overlay` is written to a tuned file."""
    return {**lookup_config(spec_name, **dims), **(overlay or {})}


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
