"""Final-logit soft-capping: `logit_softcap(logits, cap)` rewrites logits
[..., vocab] in place with cap * tanh(logits / cap) and returns them.

Same contract as SGLang's ``softcap_inplace_logits`` (the logits processor's
``final_logit_softcapping``, Gemma-2's 30.0): float logits, any leading dims,
rows may be strided (a slice of a wider logits buffer), last dim contiguous.
"""

from __future__ import annotations

import torch

from ...runtime import plan_cache, use_triton
from ..spec import explicit_config, lookup_config
from ..row_tiles import TilePlan, row_tile_plan
from ..validation import as_rows, checked_mode, require_number, require_tensor
from . import kernels, reference

OP = "logit_softcap"


@plan_cache
def _cached_plan(vocab: int, rows: int) -> TilePlan:
    return row_tile_plan(kernels.logit_softcap_kernel, vocab, lookup_config(OP, vocab_size=vocab, rows=rows))


def logit_softcap(logits: torch.Tensor, cap: float, *, check: bool = True, config: dict | None = None) -> torch.Tensor:
    """logits <- cap * tanh(logits / cap), in place (cap > 0); returns `logits`.
    ``check=False`` (or ``KUNLUN_TRITON_CHECK=0``) skips the input checks."""
    if checked_mode(check):
        require_tensor(OP, "logits", logits, min_ndim=1)
        cap = require_number(OP, "cap", cap, above=0.0)
    cap = float(cap)
    rows = as_rows(OP, "logits", logits, writable=True)
    if not use_triton(OP, logits):
        return reference.logit_softcap(logits, cap)
    n_rows, vocab = rows.shape
    if n_rows == 0 or vocab == 0:
        return logits
    if config is None:
        plan = _cached_plan(vocab, n_rows)
    else:
        plan = row_tile_plan(kernels.logit_softcap_kernel, vocab,
                             explicit_config(OP, config, vocab_size=vocab, rows=n_rows))  # fmt: skip
    grid = (-(-n_rows // plan.rows_per_program), -(-vocab // plan.block_cols))
    plan.launch(grid, rows, n_rows, vocab, rows.stride(0), cap)
    return logits
