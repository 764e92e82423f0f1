"""Paged attention over a KV pool of token slots (SGLang's layout and
metadata conventions, so the SGLang backend stays a thin adapter).

- `store_kv`: write new tokens' K/V into their pool slots.
- `decode_attention`: one query token per request, split-KV with a
  log-sum-exp merge; `decode_workspace` makes a step's partial buffers and
  split plan once for every layer (split counts are decided on the device,
  per request; `split_tile_size` fixes the split length for batch-invariant
  results); `build_kv_indices` writes a step's kv_indptr / kv_indices
  from SGLang's request table on the device (a captured decode graph).
- `extend_attention`: new tokens attend to their cached prefix and causally
  to each other (prefill, chunked prefill, radix-cache hits).

Each op's module holds its ``@triton.jit`` kernels and its launcher;
`tiles` holds the device functions they share, `shared` the launchers'
common checks and the per-target formulation (``tl.dot`` or ``tl.sum``,
``formulation: dot | sum`` in ``autotune_configs/``).
"""

from .decode_attention import decode_attention
from .decode_splits import DecodeWorkspace, decode_split_plan, decode_workspace
from .extend_attention import extend_attention
from .kv_indices import build_kv_indices
from .shared import FORMULATIONS
from .store_kv import store_kv

__all__ = [
    "FORMULATIONS",
    "DecodeWorkspace",
    "build_kv_indices",
    "decode_attention",
    "decode_split_plan",
    "decode_workspace",
    "extend_attention",
    "store_kv",
]
