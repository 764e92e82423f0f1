"""SGLang out-of-tree platform plugin: ``SGLANG_PLATFORM=kunlun``.

The seam, by where data flows (docs/design.md, "the SGLang seam"):

- ``install.py``: the one table of every place we touch SGLang, applied once;
- ``platform/``: what SGLang asks first: activation (the entry points below),
  the platform classes, server-argument defaults, the version window,
  conflicts with other distributions, the mode (``mode.py``: development mode
  state), our names inside SGLang (``names.py``), the request guard,
  SGLang's per-model rules as they apply here (``model_rules.py``);
- ``backends/``: what SGLang's model runner calls per step: attention,
  sampling, the KV pool (and paged allocator);
- ``layers/``: forward hooks on SGLang's layers: fused ops, MoE,
  quantization, collectives, batch invariance;
- ``speculative/``: speculative decoding (algorithms served, draft
  backends, tree kernels, NGRAM, accept counters, per-phase counters);
- ``report.py``: the dispatch report (which implementation each op ran);
- ``tools/``: SGLang-side tools (``serve``, ``regress``, tiny checkpoints,
  ``baselines``: SGLang's kernels timed and compiled beside ours).

Entry points, declared in pyproject.toml (kept at this package's top level):
`activate`, `activate_alternate` (``sglang.srt.platforms``) and `register`
(``sglang.srt.plugins``), from ``platform/activation.py``. Every SGLang
import in kunlun-triton lives under this package; importing the package
imports no SGLang.
"""

from .platform.activation import (
    UnsupportedSGLangVersion,
    activate,
    activate_alternate,
    check_sglang_version,
    register,
    sglang_version,
)
from .platform.mode import dev_mode
from .platform.versions import SUPPORTED_SGLANG_VERSIONS, WINDOW

__all__ = [
    "SUPPORTED_SGLANG_VERSIONS",
    "UnsupportedSGLangVersion",
    "WINDOW",
    "activate",
    "activate_alternate",
    "check_sglang_version",
    "dev_mode",
    "register",
    "sglang_version",
]
