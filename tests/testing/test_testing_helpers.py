"""The public kernel-testing helpers: tolerances, assert_close, AOT lowering."""

import textwrap

import pytest
import torch

from kunlun_triton.introspect import compile_ahead_of_time
from kunlun_triton.testing import KernelSpec, assert_close, assert_lowers, tolerance

TOY_KERNELS = textwrap.dedent(
    '''
    import triton
    import triton.language as tl

    @triton.jit
    def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)
    '''
)
SIGNATURE = {"x_ptr": "*fp16", "y_ptr": "*fp16", "n": "i32", "BLOCK": "constexpr"}


@pytest.fixture
def toy_module(tmp_path, monkeypatch):
    (tmp_path / "toy_kernels.py").write_text(TOY_KERNELS)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return "toy_kernels:scale_kernel"


@pytest.mark.lowering
def test_aot_lowers_for_cuda_and_hip(toy_module):
    results = compile_ahead_of_time([KernelSpec(toy_module, SIGNATURE, {"BLOCK": 128})])
    assert {r["target"] for r in results} == {"cuda", "hip"}
    assert all(r["ok"] for r in results), results
    by_target = {r["target"]: r["asm"] for r in results}
    assert "ptx" in by_target["cuda"] and "amdgcn" in by_target["hip"]


def test_aot_reports_a_kernel_that_only_the_interpreter_accepts(toy_module):
    # tl.arange needs a power-of-two length on real targets.
    with pytest.raises(AssertionError, match="scale_kernel.*BLOCK=13.*cuda"):
        assert_lowers([KernelSpec(toy_module, SIGNATURE, {"BLOCK": 13})])


def test_tolerances_grow_with_dtype_precision():
    assert tolerance(torch.float32) < tolerance(torch.float16) < tolerance(torch.bfloat16)
    with pytest.raises(KeyError):
        tolerance(torch.int8)


def test_assert_close_uses_dtype_tolerance():
    expected = torch.ones(4, dtype=torch.float16)
    assert_close(expected + 1e-3, expected)
    with pytest.raises(AssertionError, match="ones: max abs error 0.00977"):
        assert_close(expected + 1e-2, expected, msg="ones")
    with pytest.raises(AssertionError):
        assert_close(expected.float() + 1e-3, expected.float())
