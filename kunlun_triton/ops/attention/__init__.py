"""Paged attention over a KV pool of token slots (SGLang's layout and
metadata conventions, so the SGLang backend stays a thin adapter).

- `decode_attention`: one query token per request, split-KV with a
  log-sum-exp merge.
- `extend_attention`: new tokens attend to their cached prefix and causally
  to each other (prefill, chunked prefill, radix-cache hits).

Both choose a formulation per target from ``autotune_configs/``
(``formulation: dot | sum``); see `kunlun_triton.kernels.attention`.
"""

from .decode import decode_attention
from .extend import extend_attention
from .formulation import FORMULATIONS

__all__ = ["FORMULATIONS", "decode_attention", "extend_attention"]
