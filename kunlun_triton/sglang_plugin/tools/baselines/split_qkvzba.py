"""SGLang 0.5.23's split of a gated-delta-net layer's input projections
(``sglang.kernels.ops.attention.triton_gdn_fused_proj``) as ahead-of-time
compile specs, launched as its models call them on an H100 / H200, for
``kunlun-triton inspect gdn_split_qkvzba --compare sglang``:
``fused_qkvzba_split_reshape_cat`` (Qwen3-Next, the interleaved layout) and
``fused_qkvzba_split_reshape_cat_contiguous`` (Qwen3.5), a program per
(token, key head), one warp. Their launchers read nothing of the machine on
CUDA (``_is_hip`` / aiter only pick HIP's options), so a stubbed call on meta
tensors plans them as on the card. Each spec carries ``work`` (programs,
tokens) for inspect's warp-instructions per token.

Importing this module imports sglang (ImportError when absent).
"""

from __future__ import annotations

import dataclasses

import torch
from sglang.kernels.ops.attention import triton_gdn_fused_proj

from kunlun_triton.ops.linear_attention.spec_shapes import model_dims


def _sglangs(layout: str):
    fn = (triton_gdn_fused_proj.fused_qkvzba_split_reshape_cat if layout == "interleaved"
          else triton_gdn_fused_proj.fused_qkvzba_split_reshape_cat_contiguous)  # fmt: skip
    return getattr(fn, "__wrapped__", fn)  # SGLang's own where the platform's hook has replaced the name


def gdn_split_qkvzba_inspect_specs(shape, dtype):
    """SGLang's split for ``tokens`` tokens in the shape's layout (default interleaved)."""
    from kunlun_triton.introspect.launches import record_launches, spec_of_launch

    d = model_dims(shape)
    h, hv, k, v, tokens = d["key_heads"], d["value_heads"], d["key_dim"], d["value_dim"], shape["tokens"]
    qkvz = torch.empty(tokens, 2 * h * k + 2 * hv * v, dtype=dtype, device="meta")
    ba = torch.empty(tokens, 2 * hv, dtype=dtype, device="meta")
    split = _sglangs(shape.get("layout", "interleaved"))
    launches = record_launches(lambda: split(qkvz, ba, h, hv, k, v))
    return [dataclasses.replace(spec_of_launch(*launch), work={"programs": tokens * h, "tokens": tokens, "trips": ()})
            for launch in launches]  # fmt: skip
