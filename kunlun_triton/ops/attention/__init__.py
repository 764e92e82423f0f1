"""Paged attention over a KV pool of token slots (SGLang's layout and
metadata conventions, so the SGLang backend stays a thin adapter).

- `store_kv`: write new tokens' K/V into their pool slots.
- `decode_attention`: one query token per request, split-KV with a
  log-sum-exp merge.
- `extend_attention`: new tokens attend to their cached prefix and causally
  to each other (prefill, chunked prefill, radix-cache hits).

Each op's module holds its ``@triton.jit`` kernels and its launcher;
`tiles` holds the device functions they share, `shared` the launchers'
common checks and the per-target formulation (``tl.dot`` or ``tl.sum``,
``formulation: dot | sum`` in ``autotune_configs/``).
"""

from .decode_attention import decode_attention
from .extend_attention import extend_attention
from .shared import FORMULATIONS
from .store_kv import store_kv

__all__ = ["FORMULATIONS", "decode_attention", "extend_attention", "store_kv"]
