"""The op specs are the one registry of ops (`kunlun_triton.ops.spec`): every
list of ops derives from them, and what cannot derive is checked here against
them: the package's plain imports, the families, the fused-op forwards the
SGLang plugin lists, and the dimensions each launcher really looks its
config up by (recorded from the lookups a call makes, not read off the spec)."""

from pathlib import Path

import pytest

import kunlun_triton.ops as ops
from kunlun_triton.ops import spec as op_spec
from kunlun_triton.runtime import config as runtime_config
from kunlun_triton.runtime.config import clear_config_cache

SPECS = op_spec.all_specs()


def test_every_family_folder_is_registered():
    folders = {p.parent.name for p in Path(op_spec.__file__).parent.glob("*/spec.py")}
    assert folders == set(op_spec.FAMILIES)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_spec_declares_the_public_function(name):
    spec = SPECS[name]
    assert spec.function is not None, f"{name}: OpSpec.function is not set"
    assert spec.function.__name__ == name
    assert getattr(ops, name) is spec.function, f"kunlun_triton.ops.{name} is not the spec's function"
    assert spec.lookup_dims, f"{name}: OpSpec.lookup_dims is empty"


def test_package_exports_exactly_the_specs_ops_and_helpers():
    helpers = [h for family in op_spec.FAMILIES for h in op_spec.family_helpers(family)]
    for helper in helpers:
        assert getattr(ops, helper.__name__) is helper
    assert sorted(ops.__all__) == sorted([*SPECS, *(h.__name__ for h in helpers)])


def test_plugin_fused_ops_are_the_specs_with_an_sglang_forward():
    from kunlun_triton.sglang_plugin import install  # imports no SGLang at module level

    declared = op_spec.specs_where(lambda s: s.sglang_forward)
    assert tuple(install.FUSED_OPS.split(", ")) == declared


@pytest.mark.parametrize("name", sorted(SPECS))
def test_launcher_looks_up_by_the_declared_dims_with_the_rules(name, monkeypatch, device):
    """A call's config lookups name the spec's `lookup_dims` (what tune writes
    `by_shape` rules over) and bring the key rules (so the files it reads
    are checked); the op's case says the same dims."""
    spec = SPECS[name]
    lookups = []
    real = runtime_config.get_config

    def recording(op, target=None, *, rules=None, **shape):
        lookups.append((op, rules, set(shape)))
        return real(op, target, rules=rules, **shape)

    monkeypatch.setattr(runtime_config, "get_config", recording)
    clear_config_cache()  # plans are cached per shape class: make this call look up
    try:
        shape, dtype = spec.doctor[0]
        case = spec.make_case(shape, dtype, device)
        case.run(None)
    finally:
        clear_config_cache()
    mine = [(rules, dims) for op, rules, dims in lookups if op == name]
    assert mine, f"{name} looked no config up"
    for rules, dims in mine:
        assert rules is op_spec.CONFIG_RULES, f"{name}: get_config without rules=CONFIG_RULES"
        assert dims == set(spec.lookup_dims), (name, dims)
    assert set(case.dims) == set(spec.lookup_dims)


def test_every_sglang_touchpoint_a_spec_names_is_in_the_install_table():
    """`OpSpec.sglang` names touchpoints of the install table (the routes and
    op lists derive from them: a typo would serve nothing, silently)."""
    from kunlun_triton.sglang_plugin import install  # imports no SGLang at module level

    names = {point.name for point in install.TOUCHPOINTS}
    for name, spec in SPECS.items():
        assert set(spec.sglang) <= names, (name, set(spec.sglang) - names)
    assert op_spec.FUSED_OPS_TOUCHPOINT in names
    assert set(op_spec.served_by("attention backend")) == set(install.ATTENTION_OPS.split(", "))
