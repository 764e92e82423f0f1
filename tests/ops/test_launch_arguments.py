"""Launchers pass constexprs by position (`kunlun_triton.ops.launch`):
Triton binds keyword arguments at more than twice the cost of positional
ones, on every launch of every layer. Each op's doctor cases run with the
launches recorded, as the GPU target and Kunlun would plan them: no launch
names a constexpr by keyword, and Triton's own binder of the kernel's
signature gives every constexpr parameter (upper-case, by this package's
convention) a value. Whether each value is the right one, the ops' tests
against their references say.
"""

import pytest
import torch

from kunlun_triton.introspect.launches import record_launches, spec_of_launch
from kunlun_triton.ops.launch import constexpr_args
from kunlun_triton.ops.norm import kernels as norm_kernels
from kunlun_triton.ops.spec import all_specs
from kunlun_triton.runtime import Target, targeting

SPECS = all_specs()
TARGETS = (pytest.param(Target("cuda", "sm_90", "cpu", "test"), id="cuda"),
           pytest.param(Target("kunlun", "p800", "cpu", "test"), id="kunlun"))  # fmt: skip


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_launch_passes_its_constexprs_by_position(name, target):
    spec = SPECS[name]
    launches = []
    with targeting(target):
        for shape, dtype in spec.doctor:
            case = spec.make_case(shape, dtype, "cpu")
            launches += record_launches(lambda: case.run(None))
    assert launches, f"{name} launched nothing"
    for kernel, args, kwargs in launches:
        label = kernel.fn.__name__
        named = sorted(k for k in kwargs if k[:1].isupper())
        assert not named, f"{name}: {label} gets constexprs by keyword: {named}"
        # (an integer argument equal to 1 is specialised into a constexpr too)
        constexprs = {k for k in spec_of_launch(kernel, args, kwargs).constexprs if k[:1].isupper()}
        assert constexprs == {p for p in kernel.arg_names if p[:1].isupper()}, (label, constexprs)


def test_constexpr_args_orders_by_the_signature_and_refuses_a_mismatch():
    kernel = norm_kernels.rms_norm_kernel
    assert constexpr_args(kernel, LOAD_IGNORES_OTHER=False, ROWS_PER_PROGRAM=4, BLOCK_COLS=64, N_COLS=48) == (
        48, 64, 4, False)
    with pytest.raises(TypeError, match="rms_norm_kernel"):
        constexpr_args(kernel, N_COLS=48, BLOCK_COLS=64, ROWS_PER_PROGRAM=4)  # one missing
    with pytest.raises(TypeError, match="rms_norm_kernel"):
        constexpr_args(kernel, N_COLS=48, BLOCK_COLS=64, ROWS_PER_PROGRAM=4, LOAD_IGNORES_OTHER=False, EXTRA=1)
