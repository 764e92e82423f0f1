"""Mixture-of-experts family: the router and the routed experts.

- `moe_topk`: softmax/sigmoid scores, correction bias, grouped top-k,
  renormalisation and routed scaling in one kernel (SGLang's semantics).
- `fused_experts`: token-to-expert alignment without atomics (`align`), the
  W13 GEMM with act-and-mul fused into its epilogue, the W2 GEMM with the
  routing weight fused, and the sum over the K choices.

Each op's module holds its ``@triton.jit`` kernels and its launcher; `tiles`
holds the device functions they share (masked loads, the ``tl.dot`` /
``tl.sum`` matmul step, activations).
"""

from .fused_experts import fused_experts
from .moe_topk import moe_topk

__all__ = ["fused_experts", "moe_topk"]
