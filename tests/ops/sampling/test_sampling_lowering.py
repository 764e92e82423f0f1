"""Every sampling kernel compiles ahead of time for CUDA sm_90 and HIP gfx942."""

from kunlun_triton.testing import KernelSpec, assert_lowers

MODULE = "kunlun_triton.ops.sampling.kernels"


def _sample_spec(dtype: str, block_r: int, block_v: int, one_tile: bool) -> KernelSpec:
    return KernelSpec(
        f"{MODULE}:sample_kernel",
        {
            "logits_ptr": f"*{dtype}", "temperature_ptr": "*fp32", "top_k_ptr": "*i32", "top_p_ptr": "*fp32",
            "min_p_ptr": "*fp32", "seed_ptr": "*i64", "position_ptr": "*i64", "out_ptr": "*i64",
            "n_rows": "i32", "vocab": "i32", "row_stride": "i32",
            "BLOCK_R": "constexpr", "BLOCK_V": "constexpr", "ONE_TILE": "constexpr",
        },
        {"BLOCK_R": block_r, "BLOCK_V": block_v, "ONE_TILE": one_tile},
    )


def _renorm_spec(dtype: str, one_tile: bool) -> KernelSpec:
    return KernelSpec(
        f"{MODULE}:renorm_probs_kernel",
        {
            "probs_ptr": f"*{dtype}", "top_k_ptr": "*i32", "top_p_ptr": "*fp32", "min_p_ptr": "*fp32",
            "out_ptr": f"*{dtype}", "n_rows": "i32", "vocab": "i32", "row_stride": "i32", "out_row_stride": "i32",
            "BLOCK_R": "constexpr", "BLOCK_V": "constexpr", "ONE_TILE": "constexpr",
        },
        {"BLOCK_R": 1, "BLOCK_V": 1024, "ONE_TILE": one_tile},
    )


def test_sampling_kernels_lower_for_cuda_and_hip():
    specs = [
        KernelSpec(
            f"{MODULE}:greedy_kernel",
            {"logits_ptr": "*bf16", "out_ptr": "*i64", "n_rows": "i32", "vocab": "i32", "row_stride": "i32",
             "BLOCK_R": "constexpr", "BLOCK_V": "constexpr"},
            {"BLOCK_R": 1, "BLOCK_V": 2048},
        ),
        _sample_spec("fp32", 1, 2048, False),  # the shipped cuda config
        _sample_spec("bf16", 1, 1024, False),
        _sample_spec("fp16", 4, 256, True),  # several rows, one tile
        _renorm_spec("fp32", False),
        _renorm_spec("fp32", True),
    ]
    assert_lowers(specs)
