"""Hypothesis strategies for the kernel tests: shapes, dtypes, strided rows,
paged KV layouts. Every tensor they build lives on `DEVICE`, the active
target's device (the CPU under the interpreter, the GPU on a GPU machine).

Sizes are small on purpose: tests run under the Triton interpreter on CPU.
Widths always include the non-power-of-two cases that break tiling (13, 96,
and a model-sized 5120 drawn rarely).
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from kunlun_triton.introspect.paged import decode_batch, extend_batch
from kunlun_triton.runtime import FLOAT_DTYPES, current_target

DEVICE = current_target().device_type
AWKWARD_WIDTHS = (1, 13, 64, 96, 127, 128, 200)
PAGE_SIZES = (1, 16, 64, 128)
HEAD_DIMS = (13, 64, 80, 96, 128, 256)
# (kv_heads, group): MHA, GQA, an odd group, MQA
HEAD_LAYOUTS = ((2, 1), (2, 4), (1, 3), (1, 8))


def float_dtypes():
    return st.sampled_from(FLOAT_DTYPES)


def widths(max_width: int = 256, include_large: bool = True):
    """Row widths: awkward small ones, any in range, and now and then 5120."""
    small = st.one_of(st.sampled_from([w for w in AWKWARD_WIDTHS if w <= max_width]), st.integers(1, max_width))
    return st.one_of(small, st.just(5120)) if include_large else small


def row_counts(max_rows: int = 9):
    return st.integers(1, max_rows)


@st.composite
def row_tensors(draw, width=None, dtype=None, max_rows: int = 9, strided=None):
    """A 2-D ``[rows, width]`` tensor whose rows may be strided (a view into a
    wider buffer: last dim contiguous, row stride > width), as ops see when
    they are handed a slice of a fused projection."""
    rows = draw(row_counts(max_rows))
    width = draw(widths()) if width is None else width
    dtype = draw(float_dtypes()) if dtype is None else dtype
    strided = draw(st.booleans()) if strided is None else strided
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    pad = draw(st.integers(1, 7)) if strided else 0
    base = torch.randn(rows, width + pad, generator=gen, dtype=torch.float32).to(dtype).to(DEVICE)
    return base[:, :width]


def seeds():
    return st.integers(0, 2**31 - 1)


# ---- paged attention layouts (`kunlun_triton.introspect.paged`) ----


def page_sizes():
    return st.sampled_from(PAGE_SIZES)


def head_layouts():
    """(kv_heads, group) pairs: MHA, GQA, odd group, MQA."""
    return st.sampled_from(HEAD_LAYOUTS)


def ragged_lengths(max_batch: int = 4, max_len: int = 40, min_len: int = 0):
    return st.lists(st.integers(min_len, max_len), min_size=1, max_size=max_batch)


@st.composite
def _common(draw, dtype, head_dim, max_len):
    kv_heads, group = draw(head_layouts())
    return dict(
        dtype=draw(st.sampled_from(FLOAT_DTYPES)) if dtype is None else dtype,
        head_dim=draw(st.sampled_from(HEAD_DIMS)) if head_dim is None else head_dim,
        kv_heads=kv_heads,
        q_heads=kv_heads * group,
        page_size=draw(page_sizes()),
        seed=draw(st.integers(0, 2**31 - 1)),
        logit_cap=draw(st.sampled_from([0.0, 0.0, 5.0])),
        sliding_window=draw(st.sampled_from([None, None, draw(st.integers(1, max_len))])),
        shared_prefix_pages=draw(st.sampled_from([0, 0, 1])),
        device=DEVICE,
    )


@st.composite
def decode_cases(draw, dtype=None, head_dim=None, max_batch: int = 4, max_len: int = 40):
    """A decode batch: ragged context lengths (0 allowed), scrambled paged slots."""
    kw = draw(_common(dtype, head_dim, max_len))
    lens = draw(ragged_lengths(max_batch, max_len))
    return decode_batch(lens, **kw)


@st.composite
def extend_cases(draw, dtype=None, head_dim=None, max_batch: int = 3, max_prefix: int = 40, max_extend: int = 24):
    """An extend batch: ragged prefixes (0 allowed) and extends (0 allowed)."""
    kw = draw(_common(dtype, head_dim, max_prefix + max_extend))
    prefix = draw(ragged_lengths(max_batch, max_prefix))
    extend = draw(st.lists(st.integers(0, max_extend), min_size=len(prefix), max_size=len(prefix)))
    return extend_batch(prefix, extend, **kw)


# ---- mixture of experts (`kunlun_triton.ops.moe`) ----

# Routings fused_experts must get right: random choices, every token to one
# expert (the same K experts for every token), a few experts taking
# everything (the rest get no token), and any ids at all (a token may list
# an expert twice).
ROUTINGS = ("random", "all_to_one", "few_experts", "any")


@st.composite
def moe_cases(draw, dtype=None, max_tokens: int = 24):
    """Inputs of fused_experts: x [T, H] (rows may be strided), W13 [E, 2I, H],
    W2 [E, H, I], weights [T, K] and ids [T, K] (int32 or int64), with
    non-power-of-two H and I and the routing kinds of ROUTINGS."""
    dtype = draw(float_dtypes()) if dtype is None else dtype
    experts = draw(st.sampled_from([1, 2, 3, 8, 13, 64]))
    top_k = draw(st.integers(1, min(experts, 4)))
    tokens = draw(st.integers(1, max_tokens))
    hidden = draw(st.sampled_from([13, 40, 96]))
    inter = draw(st.sampled_from([8, 24, 33]))
    routing = draw(st.sampled_from(ROUTINGS))
    gen = torch.Generator().manual_seed(draw(seeds()))
    if routing == "all_to_one":  # every token to the same expert(s): one expert per slot column
        ids = torch.randperm(experts, generator=gen)[:top_k].repeat(tokens, 1)
    elif routing == "few_experts":
        used = torch.randperm(experts, generator=gen)[: max(1, experts // 4)]
        ids = used[torch.randint(0, used.numel(), (tokens, top_k), generator=gen)]
    elif routing == "any":
        ids = torch.randint(0, experts, (tokens, top_k), generator=gen)
    else:
        ids = torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(tokens)])
    ids = ids.to(draw(st.sampled_from([torch.int32, torch.int64])))
    weights = torch.rand(tokens, top_k, generator=gen)
    pad = draw(st.sampled_from([0, 0, 5]))
    x = torch.randn(tokens, hidden + pad, generator=gen)[:, :hidden]
    w13 = torch.randn(experts, 2 * inter, hidden, generator=gen) / hidden**0.5
    w2 = torch.randn(experts, hidden, inter, generator=gen) / inter**0.5
    return dict(
        hidden_states=x.to(dtype).to(DEVICE),
        w13=w13.to(dtype).to(DEVICE),
        w2=w2.to(dtype).to(DEVICE),
        topk_weights=weights.to(DEVICE),
        topk_ids=ids.to(DEVICE),
        activation=draw(st.sampled_from(["silu", "gelu", "gelu_tanh"])),
        apply_router_weight_on_input=draw(st.sampled_from([False, False, True])),
    )


@st.composite
def router_logits(draw, max_tokens: int = 16):
    """(logits [T, E], top_k, kwargs of moe_topk). Logits and biases sit on
    coarse grids, so scores are either exactly tied (ties must go to the
    lower expert id) or far apart."""
    experts = draw(st.sampled_from([1, 4, 6, 16, 60, 64, 256]))
    tokens = draw(st.integers(1, max_tokens))
    gen = torch.Generator().manual_seed(draw(seeds()))
    levels = draw(st.sampled_from([3, 9, 25]))  # few levels: many exact ties
    logits = (torch.randint(0, levels, (tokens, experts), generator=gen) - levels // 2).float() / 4
    kwargs = {"scoring": draw(st.sampled_from(["softmax", "sigmoid"])), "renormalize": draw(st.booleans())}
    if draw(st.booleans()):
        kwargs["correction_bias"] = (torch.randint(-4, 5, (experts,), generator=gen).float() / 8).to(DEVICE)
    group_counts = [g for g in (2, 4, 8) if experts % g == 0 and experts // g >= 2]
    if group_counts and draw(st.booleans()):
        groups = draw(st.sampled_from(group_counts))
        kwargs["num_expert_group"] = groups
        kwargs["topk_group"] = draw(st.integers(1, groups))
        max_k = kwargs["topk_group"] * (experts // groups)
    else:
        max_k = experts
    if draw(st.booleans()):
        kwargs["routed_scaling_factor"] = draw(st.sampled_from([0.5, 2.5]))
    top_k = draw(st.integers(1, min(max_k, 8)))
    dtype = draw(float_dtypes())
    return logits.to(dtype).to(DEVICE), top_k, kwargs
