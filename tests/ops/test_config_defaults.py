"""Defaults have one home, ``autotune_configs/default.yaml``: an explicit
``config=`` that leaves a key out launches exactly what the file's full
answer launches (the launcher fills the key from the file, never from a
default of its own). Every op, every key its default.yaml answer sets, one
key left out at a time; the launches are recorded (kernel, grid, scalar
arguments, tensor shapes, constexprs, launch options), not run."""

import pytest
import torch

from kunlun_triton.introspect.launches import record_launches
from kunlun_triton.ops.spec import all_specs
from kunlun_triton.runtime import Target, targeting
from kunlun_triton.runtime.config import default_config

SPECS = all_specs()
CUDA = Target("cuda", "sm_90", "cpu", "test")  # a target whose plans use every key (formulations, tiles)


def _frozen(value):
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), tuple(value.stride()), value.dtype)
    if isinstance(value, (tuple, list)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    return value


def _launches(spec, shape, dtype, config) -> list:
    case = spec.make_case(shape, dtype, "cpu")
    with targeting(CUDA):
        launches = record_launches(lambda: case.run(config), with_grid=True)
    return [(kernel.fn.__name__, _frozen(grid), _frozen(args), _frozen(kwargs)) for kernel, args, kwargs, grid in launches]


@pytest.mark.parametrize("name", sorted(SPECS))
def test_a_partial_config_launches_what_the_file_does(name):
    spec = SPECS[name]
    shape, dtype = spec.doctor[0]
    dims = spec.make_case(shape, dtype, "cpu").dims
    full = default_config(name, **dims)
    assert full, f"default.yaml has no answer for {name}"
    expected = _launches(spec, shape, dtype, full)
    assert expected, f"{name} launched nothing"
    assert _launches(spec, shape, dtype, {}) == expected, f"{name}: config={{}} differs from default.yaml's answer"
    for key in full:
        partial = {k: v for k, v in full.items() if k != key}
        assert _launches(spec, shape, dtype, partial) == expected, f"{name}: config without {key} differs from the file"
