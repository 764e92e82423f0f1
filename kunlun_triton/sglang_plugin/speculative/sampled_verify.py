"""Sampled speculative verify on our kernels: EAGLE, STANDALONE and NGRAM.

A request with temperature > 0 reaches SGLang's ``eagle_sample`` sampling
branch, which calls ``tree_speculative_sampling_target_only`` (rejection
sampling over the draft tree) after ``top_k_renorm_prob`` /
``top_p_renorm_prob``. Off CUDA, SGLang 0.5.23 binds all three to ``None``
(``sglang.kernels.ops.speculative.verify_sampling``,
``sglang.kernels.ops.sampling.renorm``): the first sampled request killed the
scheduler with ``'NoneType' object is not callable``. On our platform the
names are bound to the sampling family's Triton launchers, which take SGLang's
arguments as SGLang passes them (keywords for the tree op, ``(probs, top_ks)``
/ ``(probs, top_ps)`` for the renorms).

The names are module globals of ``eagle_utils`` read at call time, so
rebinding them there serves every caller of ``eagle_sample``; the defining
modules are rebound too, for code that imports them later. SGLang's
``HookRegistry`` is not used: patching a ``None`` original would rebind every
``None`` global of every loaded module. Scope: platform.
"""

from __future__ import annotations

import importlib

from ...ops import top_k_renorm_probs, top_p_renorm_probs, tree_speculative_sampling_target_only

# (module, name) -> ours; the first module is the one eagle_sample reads.
BINDINGS = {
    ("sglang.srt.speculative.eagle_utils", "tree_speculative_sampling_target_only"):
        tree_speculative_sampling_target_only,
    ("sglang.srt.speculative.eagle_utils", "top_k_renorm_prob"): top_k_renorm_probs,
    ("sglang.srt.speculative.eagle_utils", "top_p_renorm_prob"): top_p_renorm_probs,
    ("sglang.kernels.ops.speculative.verify_sampling", "tree_speculative_sampling_target_only"):
        tree_speculative_sampling_target_only,
    ("sglang.kernels.ops.sampling.renorm", "top_k_renorm_prob"): top_k_renorm_probs,
    ("sglang.kernels.ops.sampling.renorm", "top_p_renorm_prob"): top_p_renorm_probs,
}  # fmt: skip


def bind_sampled_verify() -> list[str]:
    """Rebind SGLang's sampled-verify names to ours; returns what was bound
    (a module missing from an older SGLang of the window is passed over)."""
    bound = []
    for (module_name, name), ours in BINDINGS.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        setattr(module, name, ours)
        bound.append(f"{module_name}.{name}")
    return bound
