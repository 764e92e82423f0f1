"""The launcher of `tree_speculative_sampling_target_only`: SGLang's verify
step for sampled requests under speculative decoding (EAGLE, STANDALONE,
NGRAM: ``eagle_utils.eagle_sample``), one launch of
`tree_kernels.tree_speculative_sampling_kernel` (the rule is there).

Same arguments in the same order as SGLang's (sgl_kernel's)
``tree_speculative_sampling_target_only``, with the same dtypes: int32
``predicts`` [bs * D], ``accept_index`` [bs, S], ``accept_token_num`` [bs]
written in place; int64 ``candidates`` and the ``retrive_*`` tree [bs, D];
fp32 coins [bs, D] and [bs]; fp32 ``target_probs`` and ``draft_probs``
[bs, D, vocab] (``draft_probs`` written where a draft is rejected). Returns
None, as SGLang's does. ``deterministic`` is taken for the signature: every
call is deterministic here (fixed blocks and reduction order, the config
looked up by the vocabulary only).

Checked mode validates shapes, dtypes, the device, thresholds in [0, 1],
tokens in the vocabulary, ``retrive_index`` inside ``predicts``, and a tree
the walk cannot loop in (pointers in [-1, D), never back to the root, each
node reached by at most one pointer): one device sync. Unchecked, a bad
tree or token reads and writes out of bounds.
"""

from __future__ import annotations

import torch

from ...runtime import capabilities, launch_options, plan_cache, use_triton
from ..launch import KernelLaunch, constexpr_args, run_keywords
from ..validation import checked_mode, require_number, require_same, require_same_device, require_tensor
from . import reference, tree_kernels
from .ops import _DTYPES, _config, _looked_up_config, _next_pow2, _raise_if_any

OP = "tree_speculative_sampling_target_only"
_INT64, _INT32, _FP32 = (torch.int64,), (torch.int32,), (torch.float32,)
# (argument, dtypes, shape as letters of (bs, D, S, V, bs*D)): SGLang's TensorMatcher rules.
_ARGS = (
    ("predicts", _INT32, "P"), ("accept_index", _INT32, "bS"), ("accept_token_num", _INT32, "b"),
    ("candidates", _INT64, "bD"), ("retrive_index", _INT64, "bD"), ("retrive_next_token", _INT64, "bD"),
    ("retrive_next_sibling", _INT64, "bD"), ("uniform_samples", _FP32, "bD"),
    ("uniform_samples_for_final_sampling", _FP32, "b"), ("target_probs", _FP32, "bDV"), ("draft_probs", _FP32, "bDV"),
)  # fmt: skip


def _check(tensors: dict, threshold_single, threshold_acc) -> None:
    for name, dtypes, letters in _ARGS:
        require_tensor(OP, name, tensors[name], dtypes=dtypes, ndim=len(letters))
        if not tensors[name].is_contiguous():
            raise ValueError(f"{OP}: {name} must be contiguous, got strides {tensors[name].stride()}")
    require_same_device(OP, **tensors)
    batch, draft = tensors["candidates"].shape
    spec, vocab = tensors["accept_index"].shape[1], tensors["target_probs"].shape[2]
    sizes = {"b": batch, "D": draft, "S": spec, "V": vocab, "P": batch * draft}
    for name, _, letters in _ARGS:
        require_same(OP, f"{name}'s shape and [{', '.join(letters)}]", **{name: tuple(tensors[name].shape),
                     "expected": tuple(sizes[c] for c in letters)})  # fmt: skip
    if min(draft, spec, vocab) < 1:
        raise ValueError(f"{OP}: draft tokens, speculative tokens and vocab must be >= 1, got {draft}, {spec}, {vocab}")
    require_number(OP, "threshold_single", threshold_single, minimum=0.0, maximum=1.0)
    require_number(OP, "threshold_acc", threshold_acc, minimum=0.0, maximum=1.0)
    if batch == 0:
        return
    nxt, sib = tensors["retrive_next_token"], tensors["retrive_next_sibling"]
    pointers = torch.cat([nxt, sib], dim=1)
    # in-degree over both pointer kinds: a walk from the root never meets a
    # node twice when no node has two incoming pointers and none points at the root
    reached = torch.zeros(batch, draft + 1, dtype=torch.int64, device=nxt.device)
    reached.scatter_add_(1, torch.where(pointers >= 0, pointers, draft).clamp(max=draft), torch.ones_like(pointers))
    cand, index = tensors["candidates"], tensors["retrive_index"]
    _raise_if_any(OP, [(name, bad.any(dim=1), rule) for name, bad, rule in (
        ("candidates", (cand < 0) | (cand >= vocab), f"token ids in [0, {vocab})"),
        ("retrive_index", (index < 0) | (index >= batch * draft), f"rows of predicts, in [0, {batch * draft})"),
        ("retrive_next_token", (nxt < -1) | (nxt >= draft) | (nxt == 0), f"node ids in [1, {draft}) or -1"),
        ("retrive_next_sibling", (sib < -1) | (sib >= draft) | (sib == 0), f"node ids in [1, {draft}) or -1"),
        ("the draft tree", reached[:, :draft] > 1, "a tree: no node is the child or sibling of two nodes"),
    )])  # fmt: skip


def tree_launch(draft: int, vocab: int, config: dict, target=None):
    """(constexprs by name, launch options) of the kernel."""
    block_v = int(config["BLOCK_V"])
    constexprs = {"BLOCK_R": int(config["BLOCK_R"]), "BLOCK_V": block_v, "BLOCK_D": _next_pow2(draft),
                  "LOG_V": block_v.bit_length() - 1, "IGNORES_OTHER": capabilities(target).load_ignores_other}  # fmt: skip
    return constexprs, launch_options(config, target)


def _plan(draft: int, vocab: int, config: dict):
    constexprs, options = tree_launch(draft, vocab, config)
    kernel = tree_kernels.tree_speculative_sampling_kernel
    return int(config["BLOCK_R"]), KernelLaunch(kernel, constexpr_args(kernel, **constexprs), run_keywords(options))


@plan_cache
def _cached_plan(draft: int, vocab: int):
    return _plan(draft, vocab, _looked_up_config(OP, vocab))


def tree_kernel_specs(batch: int, draft: int, spec: int, vocab: int, config: dict | None, target=None) -> list:
    """The AOT compile spec of the one kernel a call launches."""
    from ...introspect.aot import KernelSpec

    constexprs, _ = tree_launch(draft, vocab, _config(OP, vocab, config), target)
    pointers = {"predicts": "i32", "accept_index": "i32", "accept_num": "i32", "candidates": "i64",
                "retrive_index": "i64", "next_token": "i64", "next_sibling": "i64", "coins": "fp32",
                "final_coins": "fp32", "target": "fp32", "draft": "fp32"}  # fmt: skip
    signature = {f"{name}_ptr": f"*{t}" for name, t in pointers.items()}
    signature.update({"n_rows": "i32", "num_spec": "i32", "num_draft": "i32", "vocab": "i32",
                      "threshold_single": "fp32", "threshold_acc": "fp32"})  # fmt: skip
    signature.update({k: "constexpr" for k in constexprs})
    return [KernelSpec(f"{tree_kernels.__name__}:tree_speculative_sampling_kernel", signature, constexprs)]


def tree_speculative_sampling_target_only(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    uniform_samples: torch.Tensor,
    uniform_samples_for_final_sampling: torch.Tensor,
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    threshold_single: float = 1.0,
    threshold_acc: float = 1.0,
    deterministic: bool = True,
    *,
    check: bool = True,
    config: dict | None = None,
) -> None:
    """Verify each request's draft tree against the target's probabilities
    and sample the token after the accepted path (module docstring;
    the rule: `tree_kernels`). Writes predicts, accept_index,
    accept_token_num (and draft_probs) in place; returns None."""
    args = (predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
            retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs, draft_probs)  # fmt: skip
    if checked_mode(check):
        _check(dict(zip((a[0] for a in _ARGS), args)), threshold_single, threshold_acc)
    batch, draft = candidates.shape
    vocab = target_probs.shape[-1]
    if not use_triton(OP, target_probs):
        return reference.tree_speculative_sampling_target_only(*args, threshold_single, threshold_acc, deterministic)
    if batch == 0:
        return None
    block_r, launch = _cached_plan(draft, vocab) if config is None else _plan(draft, vocab, _config(OP, vocab, config))
    launch((-(-batch // block_r),), *args, batch, accept_index.shape[1], draft, vocab, float(threshold_single),
           max(float(threshold_acc), 1e-9))  # fmt: skip
    return None
