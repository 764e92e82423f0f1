"""`moe_topk`: the router of a mixture-of-experts layer in one kernel.

Per token (a program takes ROWS tokens, every expert of each in one tile):

    score_e  = softmax(logits)_e  or  sigmoid(logits_e)
    choice_e = score_e + bias_e                         (bias optional)

With groups (E split into G equal groups), group g scores the sum of its two
best choices when a bias is given, else its best; the TOPK_GROUP best groups
stay and the other groups' experts drop out. Then K rounds of "take the
best remaining choice, the lowest expert id among equals" pick the experts
(no sort: K <= 32 rounds of a max and a min over the tile). The weights are
the picked experts' scores, divided by their sum when renormalizing
(+ 1e-20, SGLang's epsilon), times routed_scaling_factor. All maths fp32.
NaN choices never win (they count as -inf); checked mode rejects NaN logits.

``scoring="topk_softmax"`` (gpt-oss: HF's GptOssTopKRouter, the router's
bias already in the logits): the K rounds pick the largest LOGITS and the
weights are the softmax over those K logits only,

    w_k = exp(l_k - l_best) / sum_j exp(l_j - l_best)      (j over the K picked)

the same as softmax-then-renormalise wherever no score underflows; where
logits lie more than ~100 apart the full softmax rounds the losers' scores
to 0 and ties them, and only the logits still order them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ...runtime import launch_options, plan_cache, use_triton
from ..spec import explicit_config, lookup_config
from ..launch import KernelLaunch, constexpr_args, run_keywords
from ..validation import (
    checked_mode,
    power_of_two_at_most,
    require_choice,
    require_number,
    require_same_device,
    require_tensor,
)
from . import reference

OP = "moe_topk"
SCORINGS = ("softmax", "sigmoid", "topk_softmax")
MAX_TOP_K = 32
MAX_EXPERTS = 1024
MAX_TILE = 8192  # ROWS x BLOCK_E fp32 values held per program
NO_CHOICE = tl.constexpr(float("-inf"))


@triton.jit
def _scores(x, SIGMOID: tl.constexpr):
    """softmax over the row or elementwise sigmoid, fp32; x is -inf on padding."""
    if SIGMOID:
        e = tl.exp(-tl.abs(x))
        return tl.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    else:
        top = tl.max(x, 1)
        top = tl.where(top == float("-inf"), 0.0, top)  # a row of -inf: zeros, not NaN
        p = tl.exp(x - top[:, None])
        total = tl.sum(p, 1)[:, None]
        return p / tl.where(total > 0.0, total, 1.0)


@triton.jit
def _keep_best_groups(choice, experts, in_range,
                      ROWS: tl.constexpr, BLOCK_E: tl.constexpr, GROUP_SIZE: tl.constexpr, GROUPS: tl.constexpr,
                      BLOCK_G: tl.constexpr, TOPK_GROUP: tl.constexpr, TOP2: tl.constexpr):  # fmt: skip
    """`choice` with the experts outside the TOPK_GROUP best groups at -inf."""
    group_of = experts // GROUP_SIZE
    groups = tl.arange(0, BLOCK_G)[None, :]
    group_score = tl.full([ROWS, BLOCK_G], NO_CHOICE, tl.float32)
    for g in tl.static_range(GROUPS):
        member = in_range & (group_of == g)
        best = tl.max(tl.where(member, choice, NO_CHOICE), 1)
        if TOP2:
            first = tl.min(tl.where(member & (choice == best[:, None]), experts, BLOCK_E), 1)
            best += tl.max(tl.where(member & (experts != first[:, None]), choice, NO_CHOICE), 1)
        group_score = tl.where(groups == g, best[:, None], group_score)
    open_group = (groups < GROUPS) & (group_score == group_score)
    keep = tl.zeros([ROWS, BLOCK_E], tl.int32)
    for _ in tl.static_range(TOPK_GROUP):
        top = tl.max(tl.where(open_group, group_score, NO_CHOICE), 1)
        pick = tl.min(tl.where(open_group & (group_score == top[:, None]), groups, BLOCK_G), 1)
        keep = tl.where(group_of == pick[:, None], 1, keep)
        open_group = open_group & (groups != pick[:, None])
    return tl.where(keep != 0, choice, NO_CHOICE)


@triton.jit(do_not_specialize=["n_tokens"])
def moe_topk_kernel(
    logits_ptr,
    bias_ptr,
    weights_ptr,
    ids_ptr,
    n_tokens,
    logits_stride,
    scaling,
    E: tl.constexpr,
    BLOCK_E: tl.constexpr,
    TOP_K: tl.constexpr,
    BLOCK_K: tl.constexpr,
    ROWS: tl.constexpr,
    SIGMOID: tl.constexpr,
    LOGIT_TOPK: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    GROUPS: tl.constexpr,
    BLOCK_G: tl.constexpr,
    TOPK_GROUP: tl.constexpr,
    RENORMALIZE: tl.constexpr,
    SCALE: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    experts = tl.arange(0, BLOCK_E)[None, :]
    row_ok = rows < n_tokens
    in_range = experts < E
    mask = row_ok & in_range
    x = tl.load(logits_ptr + rows.to(tl.int64) * logits_stride + experts, mask=mask)
    x = tl.where(mask, x.to(tl.float32), float("-inf"))  # padding must be -inf whatever the target
    if LOGIT_TOPK:  # choose on the logits; the weights below: their softmax over the K
        scores = x
    else:
        scores = _scores(x, SIGMOID)
    choice = scores
    if HAS_BIAS:
        bias = tl.load(bias_ptr + experts, mask=in_range)
        choice = scores + tl.where(in_range, bias.to(tl.float32), 0.0)
    choice = tl.where(choice == choice, choice, NO_CHOICE)  # NaN never wins
    if GROUPS > 0:
        choice = _keep_best_groups(choice, experts, in_range, ROWS, BLOCK_E, E // GROUPS, GROUPS, BLOCK_G,
                                   TOPK_GROUP, HAS_BIAS)  # fmt: skip

    slots = tl.arange(0, BLOCK_K)[None, :]
    weights = tl.zeros([ROWS, BLOCK_K], tl.float32)
    ids = tl.zeros([ROWS, BLOCK_K], tl.int32)
    open_expert = in_range
    for k in tl.static_range(TOP_K):
        top = tl.max(tl.where(open_expert, choice, NO_CHOICE), 1)
        pick = tl.min(tl.where(open_expert & (choice == top[:, None]), experts, BLOCK_E), 1)
        picked = experts == pick[:, None]
        weights = tl.where(slots == k, tl.sum(tl.where(picked, scores, 0.0), 1)[:, None], weights)
        ids = tl.where(slots == k, pick[:, None], ids)
        open_expert = open_expert & (experts != pick[:, None])
    if LOGIT_TOPK:  # slot 0 holds the best logit; slots >= TOP_K drop out
        p = tl.where(slots < TOP_K, tl.exp(weights - tl.max(tl.where(slots == 0, weights, NO_CHOICE), 1)[:, None]), 0.0)
        weights = p / tl.sum(p, 1)[:, None]
    elif RENORMALIZE:
        weights = weights / (tl.sum(weights, 1)[:, None] + 1e-20)  # slots >= TOP_K hold 0
    if SCALE:
        weights = weights * scaling
    out = rows.to(tl.int64) * TOP_K + slots
    out_mask = row_ok & (slots < TOP_K)
    tl.store(weights_ptr + out, weights, mask=out_mask)
    tl.store(ids_ptr + out, ids, mask=out_mask)


def _validate_tensors(router_logits, correction_bias):
    require_tensor(OP, "router_logits", router_logits, ndim=2)
    experts = router_logits.shape[1]
    if correction_bias is not None:
        require_tensor(OP, "correction_bias", correction_bias, ndim=1)
        if correction_bias.shape[0] != experts:
            raise ValueError(f"{OP}: correction_bias has {correction_bias.shape[0]} entries but there are "
                             f"{experts} experts")  # fmt: skip
    require_same_device(OP, router_logits=router_logits, correction_bias=correction_bias)
    if router_logits.shape[0] and bool((torch.isnan(router_logits) | (router_logits == float("inf"))).any()):
        raise ValueError(f"{OP}: router_logits holds NaN or +inf")


@plan_cache
def _plan(experts, top_k, scoring, has_bias, num_expert_group, topk_group, scaled, renormalize, config=None):
    """(top_k, ROWS, the kernel's constexprs by name, its `KernelLaunch`) of
    a shape class,
    its scalar arguments validated: resolved once per class, target and
    config directory (an explicit `config` builds afresh), so a call pays
    neither lookup nor checks."""
    if not 1 <= experts <= MAX_EXPERTS:
        raise ValueError(f"{OP}: router_logits must have 1..{MAX_EXPERTS} experts (columns), got {experts}")
    top_k = require_number(OP, "top_k", top_k, minimum=1, maximum=min(experts, MAX_TOP_K), integer=True)
    require_choice(OP, "scoring", scoring, SCORINGS)
    if (num_expert_group is None) != (topk_group is None):
        raise ValueError(f"{OP}: num_expert_group and topk_group go together, got {num_expert_group} and {topk_group}")
    groups = 0
    if num_expert_group is not None:
        groups = require_number(OP, "num_expert_group", num_expert_group, minimum=1, maximum=experts, integer=True)
        if experts % groups:
            raise ValueError(f"{OP}: num_expert_group = {groups} does not divide the {experts} experts")
        topk_group = require_number(OP, "topk_group", topk_group, minimum=1, maximum=groups, integer=True)
        if top_k > topk_group * (experts // groups):
            raise ValueError(f"{OP}: top_k = {top_k} exceeds the {topk_group * (experts // groups)} experts "
                             f"of the topk_group = {topk_group} kept groups")  # fmt: skip
        if has_bias and experts // groups < 2:
            raise ValueError(f"{OP}: with a correction_bias a group scores its top 2 experts; groups of "
                             f"{experts // groups} expert cannot")  # fmt: skip
    if scoring == "topk_softmax" and (has_bias or groups or not renormalize):
        raise ValueError(f"{OP}: scoring='topk_softmax' (gpt-oss) takes no correction_bias and no expert groups, and "
                         "its weights are normalised (renormalize=True)")  # fmt: skip
    config = lookup_config(OP, num_experts=experts) if config is None else \
        explicit_config(OP, config, num_experts=experts)  # fmt: skip
    block_e = triton.next_power_of_2(experts)
    rows = max(1, min(power_of_two_at_most(config["ROWS_PER_PROGRAM"]), MAX_TILE // block_e))
    meta = dict(E=experts, BLOCK_E=block_e, TOP_K=top_k, BLOCK_K=triton.next_power_of_2(top_k), ROWS=rows,
                SIGMOID=scoring == "sigmoid", LOGIT_TOPK=scoring == "topk_softmax", HAS_BIAS=has_bias, GROUPS=groups,
                BLOCK_G=triton.next_power_of_2(max(groups, 1)), TOPK_GROUP=topk_group or 0,
                RENORMALIZE=renormalize, SCALE=scaled)  # fmt: skip
    launch = KernelLaunch(moe_topk_kernel, constexpr_args(moe_topk_kernel, **meta), run_keywords(launch_options(config)))
    return top_k, rows, meta, launch


def moe_topk(
    router_logits: torch.Tensor,
    top_k: int,
    *,
    renormalize: bool = True,
    scoring: str = "softmax",
    correction_bias: torch.Tensor | None = None,
    num_expert_group: int | None = None,
    topk_group: int | None = None,
    routed_scaling_factor: float | None = None,
    check: bool = True,
    config: dict | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Route each token to its `top_k` experts (SGLang's semantics, see the module doc).

    router_logits [T, E] (any float dtype; rows may be strided). Returns
    (topk_weights fp32 [T, K], topk_ids int32 [T, K]), best choice first,
    ties to the lower expert id. `correction_bias` [E] shifts the choice
    only (DeepSeek-V3's e_score_correction_bias); `num_expert_group` /
    `topk_group` restrict the choice to the best groups. ``scoring``:
    "softmax", "sigmoid", or "topk_softmax" (gpt-oss: the K largest logits,
    weighted by the softmax over those K; see the module doc). The scalar
    arguments are validated once per shape class; checked mode (`check`,
    ``KUNLUN_TRITON_CHECK``) also validates the tensors and rejects NaN and
    +inf logits (a sync).
    """
    if checked_mode(check):
        _validate_tensors(router_logits, correction_bias)
    tokens, experts = router_logits.shape
    scaled = routed_scaling_factor is not None
    if type(top_k) is not int:  # 2.0 would share 2's cached plan
        top_k = require_number(OP, "top_k", top_k, minimum=1, integer=True)
    args = (experts, top_k, scoring, correction_bias is not None, num_expert_group, topk_group, scaled, bool(renormalize))
    top_k, rows, _, launch = _plan(*args) if config is None else _plan.uncached(*args, config)
    scaling = require_number(OP, "routed_scaling_factor", routed_scaling_factor, above=0.0) if scaled else 1.0
    weights = router_logits.new_empty(tokens, top_k, dtype=torch.float32)
    ids = router_logits.new_empty(tokens, top_k, dtype=torch.int32)
    if tokens == 0:
        return weights, ids
    if not use_triton(OP, router_logits, correction_bias):
        return reference.moe_topk(router_logits, top_k, renormalize=renormalize, scoring=scoring,
                                  correction_bias=correction_bias, num_expert_group=num_expert_group,
                                  topk_group=topk_group, routed_scaling_factor=routed_scaling_factor)  # fmt: skip
    launch((-(-tokens // rows),), router_logits, router_logits if correction_bias is None else correction_bias, weights,
           ids, tokens, router_logits.stride(0), scaling)  # fmt: skip
    return weights, ids
