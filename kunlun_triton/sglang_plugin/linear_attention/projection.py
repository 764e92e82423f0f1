"""The split of a gated-delta-net layer's input projections, on ``ops.gdn_split_qkvzba``.

SGLang 0.5.23's GDN layers cut their two input projections into q | k | v
(the conv's input), z (the output norm's gate), b and a (the gates) with its
own Triton kernels (``sglang/kernels/ops/attention/triton_gdn_fused_proj.py``),
called from the models, outside the GDN backend our ``gdn.py`` hooks:

- ``Qwen3GatedDeltaNet.forward`` (``srt/models/qwen3_next.py``) calls
  ``fused_qkvzba_split_reshape_cat`` (Qwen3-Next's interleaved checkpoint)
  whenever value heads / key heads is 1, 2 or 4 and SGLang's CPU engine is
  off (``_is_cpu``: ``SGLANG_USE_CPU_ENGINE=1``, never set by the platform);
- Qwen3.5's ``forward`` (``srt/models/qwen3_5.py``) calls
  ``fused_qkvzba_split_reshape_cat_contiguous`` for those ratios (and 3 when
  ``_is_cuda``), except in an extend batch when ``_is_cuda``, where it takes
  strided views (``qwen3_5_gdn_prefill_projection_views``: no kernel), and
  in decode when ``_is_cuda`` and ``SGLANG_ENABLE_GDN_DECODE_FUSED_PROJ_CONV``
  (the fused projection + conv, a tuple ``mixed_qkv`` gdn.py would leave to
  SGLang: the platform sets that variable to 0 for GDN models, rules.py). In
  development mode ``_is_cuda`` is False (no CUDA
  device), so both models run the split in decode and extend alike;
  SGLang's GDN backend binds the contiguous one too (for its fused-decode
  fallback).

The AROUND hooks below target the defining module's names. SGLang's
``HookRegistry`` sets the wrapper there and rebinds every module already
holding the original (``from ... import``: qwen3_next, qwen3_5,
gdn_backend), and a module imported later imports the wrapper. Each hook runs
our op (same outputs bit for bit, in the dispatch report as
``gdn_split_qkvzba``) on tensor inputs, and SGLang's kernel on anything else.
Scope: platform (armed by ``hook_hybrid_models``). Test:
tests/sglang_plugin/test_sglang_qwen3_next.py (the dispatch report of both
models' serving); the op against SGLang's kernels:
tests/ops/linear_attention/test_gdn_split_qkvzba_sglang.py.
"""

from __future__ import annotations

import torch

_MODULE = "sglang.kernels.ops.attention.triton_gdn_fused_proj"
SPLIT_HOOK = f"{_MODULE}.fused_qkvzba_split_reshape_cat"
CONTIGUOUS_SPLIT_HOOK = f"{_MODULE}.fused_qkvzba_split_reshape_cat_contiguous"


def _split(layout: str, original, mixed_qkvz, mixed_ba, num_heads_qk, num_heads_v, head_qk, head_v):
    if not (isinstance(mixed_qkvz, torch.Tensor) and isinstance(mixed_ba, torch.Tensor)):
        return original(mixed_qkvz, mixed_ba, num_heads_qk, num_heads_v, head_qk, head_v)
    from kunlun_triton import ops

    from ..platform.mode import dev_mode

    return ops.gdn_split_qkvzba(mixed_qkvz, mixed_ba, num_heads_qk, num_heads_v, head_qk, head_v, layout,
                                check=dev_mode())  # fmt: skip


def split_interleaved(original, mixed_qkvz, mixed_ba, num_heads_qk, num_heads_v, head_qk, head_v):
    """AROUND ``fused_qkvzba_split_reshape_cat`` (Qwen3-Next; SGLang's parameter names)."""
    return _split("interleaved", original, mixed_qkvz, mixed_ba, num_heads_qk, num_heads_v, head_qk, head_v)


def split_contiguous(original, mixed_qkvz, mixed_ba, num_heads_qk, num_heads_v, head_qk, head_v):
    """AROUND ``fused_qkvzba_split_reshape_cat_contiguous`` (Qwen3.5)."""
    return _split("contiguous", original, mixed_qkvz, mixed_ba, num_heads_qk, num_heads_v, head_qk, head_v)


HOOKS = {SPLIT_HOOK: split_interleaved, CONTIGUOUS_SPLIT_HOOK: split_contiguous}
