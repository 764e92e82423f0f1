"""Mixture-of-experts family: the router and the routed experts.

- `moe_topk`: softmax/sigmoid scores, correction bias, grouped top-k,
  renormalisation and routed scaling in one kernel (SGLang's semantics).
- `fused_experts`: token-to-expert alignment without atomics (`align`), the
  W13 GEMM with act-and-mul fused into its epilogue, the W2 GEMM with the
  routing weight fused, and the sum over the K choices; float, W8A8-INT8
  and MXFP4 experts (`mxfp4`: decoded in the GEMM loops), with gpt-oss's
  biases, interleaved gate/up rows and clamped SwiGLU as epilogue options.
- `dequantize_mxfp4` (pure torch, `reference`): MXFP4 blocks and scales to
  bf16/fp32, for converters writing gpt-oss's experts in another format.

Each op's module holds its ``@triton.jit`` kernels and its launcher; `tiles`
holds the device functions they share (masked loads, the ``tl.dot`` /
``tl.sum`` matmul step, activations).
"""

from .fused_experts import fused_experts
from .moe_topk import moe_topk
from .reference import dequantize_mxfp4

__all__ = ["dequantize_mxfp4", "fused_experts", "moe_topk"]
