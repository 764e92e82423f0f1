"""The renorm ops' launchers: `top_k_renorm_probs`, `top_p_renorm_probs`,
`min_p_renorm_probs` and `renorm_probs`, one launch of
`renorm_kernels.renorm_probs_kernel` each (its math and rules there).

Their parameters are checked and broadcast as `sample`'s (`ops`), a filter
left out is neutral (top_k -1, top_p 1.0, min_p 0.0), and the torch fallback
is `reference.renorm_probs`.
"""

from __future__ import annotations

import torch

from ...runtime import capabilities, launch_options, plan_cache, use_triton
from ..launch import KernelLaunch, constexpr_args, run_keywords
from ..validation import checked_mode
from . import reference, renorm_kernels
from .ops import _DTYPES, _check_matrix, _config, _constant_rows, _looked_up_config, _per_row, _raise_if_any



def _renorm(op: str, probs, top_ks, top_ps, min_ps, check: bool, config: dict | None) -> torch.Tensor:
    checked = checked_mode(check)
    if checked:
        _check_matrix(op, "probs", probs)
    batch, vocab = probs.shape
    device = probs.device
    check_rows = checked and batch
    checks = []  # (name, bad rows, rule): built only when checked (each is a device op)
    if top_ks is not None:
        top_ks = _per_row(op, "top_ks", top_ks, batch, device, "int", checked)
        if check_rows:
            checks.append(("top_ks", (top_ks < 1) & (top_ks != -1), ">= 1 (or -1 for no top-k)"))
    else:
        top_ks = _constant_rows(-1, batch, torch.int64, device)
    if top_ps is not None:
        top_ps = _per_row(op, "top_ps", top_ps, batch, device, "float", checked)
        if check_rows:
            checks.append(("top_ps", ~((top_ps > 0) & (top_ps <= 1)), "in (0, 1]"))
    else:
        top_ps = _constant_rows(1.0, batch, torch.float32, device)
    if min_ps is not None:
        min_ps = _per_row(op, "min_ps", min_ps, batch, device, "float", checked)
        if check_rows:
            checks.append(("min_ps", ~((min_ps >= 0) & (min_ps <= 1)), "in [0, 1]"))
    else:
        min_ps = _constant_rows(0.0, batch, torch.float32, device)
    if check_rows:
        _raise_if_any(op, checks)
    if not use_triton(op, probs):
        top_ks = torch.where((top_ks < 1) | (top_ks > vocab), vocab, top_ks)
        return reference.renorm_probs(probs, top_ks, top_ps, min_ps).to(probs.dtype)
    out = probs.new_empty(batch, vocab)
    if batch == 0:
        return out
    grid, launch = _cached_renorm_plan(op, batch, vocab) if config is None else \
        _renorm_plan(batch, vocab, _config(op, vocab, config))  # fmt: skip
    launch(grid, probs, top_ks, top_ps, min_ps, out, batch, vocab, probs.stride(0), out.stride(0))
    return out


def renorm_launch(batch: int, vocab: int, config: dict, target=None):
    """(grid, constexprs by name, launch options) of `renorm_probs_kernel`."""
    block_r, block_v = int(config["BLOCK_R"]), int(config["BLOCK_V"])
    constexprs = {"BLOCK_R": block_r, "BLOCK_V": block_v, "ONE_TILE": vocab <= block_v,
                  "IGNORES_OTHER": capabilities(target).load_ignores_other}  # fmt: skip
    return (-(-batch // block_r),), constexprs, launch_options(config, target)


def _renorm_plan(batch: int, vocab: int, config: dict):
    """(grid, `KernelLaunch`) of one renorm call."""
    grid, constexprs, options = renorm_launch(batch, vocab, config)
    kernel = renorm_kernels.renorm_probs_kernel
    return grid, KernelLaunch(kernel, constexpr_args(kernel, **constexprs), run_keywords(options))


@plan_cache
def _cached_renorm_plan(op: str, batch: int, vocab: int):
    return _renorm_plan(batch, vocab, _looked_up_config(op, vocab))


def renorm_kernel_specs(op: str, batch: int, vocab: int, dtype, config: dict | None, target=None) -> list:
    """The AOT compile spec of the one kernel a renorm op launches."""
    from ...introspect.aot import KernelSpec

    _, constexprs, _ = renorm_launch(batch, vocab, _config(op, vocab, config), target)
    t = _DTYPES[dtype]
    signature = {"probs_ptr": f"*{t}", "top_k_ptr": "*i64", "top_p_ptr": "*fp32", "min_p_ptr": "*fp32",
                 "out_ptr": f"*{t}", "n_rows": "i32", "vocab": "i32", "row_stride": "i32", "out_row_stride": "i32"}
    return [KernelSpec(f"{renorm_kernels.__name__}:renorm_probs_kernel", {**signature, **{k: "constexpr" for k in constexprs}},
                       constexprs)]  # fmt: skip


def top_k_renorm_probs(
    probs: torch.Tensor, top_ks, *, check: bool = True, config: dict | None = None
) -> torch.Tensor:
    """Keep each row's top_k largest probs (ties with the k-th all kept),
    zero the rest, renormalise. Same dtype as `probs`. top_k -1: keep all."""
    return _renorm("top_k_renorm_probs", probs, top_ks, None, None, check, config)


def top_p_renorm_probs(
    probs: torch.Tensor, top_ps, *, check: bool = True, config: dict | None = None
) -> torch.Tensor:
    """Keep the tokens whose more-likely tokens hold <= top_p of the row's
    mass (ties kept together), zero the rest, renormalise."""
    return _renorm("top_p_renorm_probs", probs, None, top_ps, None, check, config)


def min_p_renorm_probs(
    probs: torch.Tensor, min_ps, *, check: bool = True, config: dict | None = None
) -> torch.Tensor:
    """Keep the tokens with prob >= min_p * the row's top prob, renormalise."""
    return _renorm("min_p_renorm_probs", probs, None, None, min_ps, check, config)


def renorm_probs(
    probs: torch.Tensor, top_ks=None, top_ps=None, min_ps=None, *, check: bool = True, config: dict | None = None
) -> torch.Tensor:
    """All three filters at once, with `sample`'s joint rules. NaN and
    negative probabilities count as zero, +inf as the largest float."""
    return _renorm("renorm_probs", probs, top_ks, top_ps, min_ps, check, config)
