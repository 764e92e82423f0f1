"""Every attention kernel lowers ahead of time for CUDA sm_90 and HIP gfx942,
both formulations, several head dims, fp16 and bf16."""

import pytest

from kunlun_triton.testing import KernelSpec, assert_lowers

K = "kunlun_triton.ops.attention"


def decode_specs(dtype, head_dim, use_dot):
    block_d = max(16, 1 << (head_dim - 1).bit_length())
    partial = KernelSpec(
        f"{K}.decode_attention:decode_partial_kernel",
        {"q_ptr": f"*{dtype}", "k_buffer_ptr": f"*{dtype}", "v_buffer_ptr": f"*{dtype}", "kv_indptr_ptr": "*i32",
         "kv_indices_ptr": "*i32", "part_out_ptr": "*fp32", "part_lse_ptr": "*fp32", "sm_scale": "fp32",
         "num_q_heads": "i32", **{n: "i32" for n in ("q_stride_b", "q_stride_h", "kb_stride_s", "kb_stride_h",
                                                     "vb_stride_s", "vb_stride_h")},
         **{n: "constexpr" for n in ("GROUP", "HEAD_DIM", "V_DIM", "BLOCK_H", "BLOCK_D", "BLOCK_DV", "BLOCK_N",
                                     "SPLITS", "LOGIT_CAP", "WINDOW", "USE_DOT", "DOT_FP32")}},
        {"GROUP": 4, "HEAD_DIM": head_dim, "V_DIM": head_dim, "BLOCK_H": 16 if use_dot else 4, "BLOCK_D": block_d,
         "BLOCK_DV": block_d, "BLOCK_N": 32 if use_dot else 16, "SPLITS": 8, "LOGIT_CAP": 30.0, "WINDOW": 0,
         "USE_DOT": use_dot, "DOT_FP32": False},
    )
    merge = KernelSpec(
        f"{K}.decode_attention:decode_merge_kernel",
        {"part_out_ptr": "*fp32", "part_lse_ptr": "*fp32", "o_ptr": f"*{dtype}", "num_q_heads": "i32",
         "o_stride_b": "i32", "o_stride_h": "i32",
         **{n: "constexpr" for n in ("GROUP", "V_DIM", "BLOCK_DV", "SPLITS", "BLOCK_S")}},
        {"GROUP": 4, "V_DIM": head_dim, "BLOCK_DV": block_d, "SPLITS": 8, "BLOCK_S": 8},
    )
    return [partial, merge]


def extend_spec(dtype, head_dim, use_dot, window=0):
    block_d = max(16, 1 << (head_dim - 1).bit_length())
    strides = ("q_stride_t", "q_stride_h", "ke_stride_t", "ke_stride_h", "ve_stride_t", "ve_stride_h", "o_stride_t",
               "o_stride_h", "kb_stride_s", "kb_stride_h", "vb_stride_s", "vb_stride_h")
    return KernelSpec(
        f"{K}.extend_attention:extend_kernel",
        {**{n: f"*{dtype}" for n in ("q_ptr", "k_extend_ptr", "v_extend_ptr", "o_ptr", "k_buffer_ptr", "v_buffer_ptr")},
         "qo_indptr_ptr": "*i32", "kv_indptr_ptr": "*i32", "kv_indices_ptr": "*i32", "sm_scale": "fp32",
         **{n: "i32" for n in strides},
         **{n: "constexpr" for n in ("GROUP", "HEAD_DIM", "V_DIM", "BLOCK_M", "BLOCK_N", "BLOCK_D", "BLOCK_DV",
                                     "LOGIT_CAP", "WINDOW", "USE_DOT", "DOT_FP32")}},
        {"GROUP": 4, "HEAD_DIM": head_dim, "V_DIM": head_dim, "BLOCK_M": 64 if use_dot else 16,
         "BLOCK_N": 64 if use_dot else 16, "BLOCK_D": block_d, "BLOCK_DV": block_d, "LOGIT_CAP": 0.0,
         "WINDOW": window, "USE_DOT": use_dot, "DOT_FP32": False},
    )


def store_kv_spec(dtype):
    return KernelSpec(
        f"{K}.store_kv:store_kv_kernel",
        {"k_ptr": f"*{dtype}", "v_ptr": f"*{dtype}", "k_buffer_ptr": f"*{dtype}", "v_buffer_ptr": f"*{dtype}",
         "loc_ptr": "*i64", "num_tokens": "i32",
         **{n: "i32" for n in ("k_stride_t", "k_stride_h", "v_stride_t", "v_stride_h", "kb_stride_s", "kb_stride_h",
                               "vb_stride_s", "vb_stride_h")},
         **{n: "constexpr" for n in ("HEADS", "K_DIM", "V_DIM", "TOKENS_PER_PROGRAM", "BLOCK_C")}},
        {"HEADS": 8, "K_DIM": 128, "V_DIM": 128, "TOKENS_PER_PROGRAM": 4, "BLOCK_C": 1024},
    )


@pytest.mark.parametrize("use_dot", [True, False], ids=["dot", "sum"])
def test_attention_kernels_lower(use_dot):
    specs = [store_kv_spec("fp16")] if use_dot else [store_kv_spec("bf16")]
    for dtype, head_dim in (("fp16", 128), ("bf16", 80), ("fp16", 13)):
        specs += decode_specs(dtype, head_dim, use_dot)
        specs.append(extend_spec(dtype, head_dim, use_dot, window=0 if head_dim != 80 else 64))
    assert_lowers(specs)
