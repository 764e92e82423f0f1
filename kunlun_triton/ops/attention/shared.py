"""What the attention launchers share: the formulation a call uses (and how
its tl.dot operands are typed), the launch plan (every constexpr and launch
option a config implies, built once per shape class), and the KV pool
checks."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...runtime import capabilities, compute_units, launch_options
from ..launch import run_keywords
from ..validation import require_choice, require_number, require_same, require_tensor
from .fp8 import KV_POOL_DTYPES

FORMULATIONS = ("dot", "sum")
MERGE_TILE = 2048
INT32_LIMIT = 2**31


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for ints (``triton.cdiv`` costs microseconds on the host)."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def needs_int64(*tensors) -> bool:
    """Whether element offsets into any of `tensors` can pass 2**31 (then the
    kernels index in int64; a pool's size is fixed, so this never flips
    mid-serving)."""
    for t in tensors:
        if t.numel() >= INT32_LIMIT:
            return True
    return False


@dataclass(frozen=True)
class Formulation:
    use_dot: bool
    dot_fp32: bool  # upcast dot operands to fp32 (fp32 inputs; bf16 where bf16 dot is wrong)

    @property
    def name(self) -> str:
        return "dot" if self.use_dot else "sum"


def choose_formulation(op: str, dtype: torch.dtype, config: dict, override: str | None) -> Formulation:
    """``tl.dot`` or ``tl.sum`` of broadcast products: the call's `override`,
    else the config's ``formulation``, else dot where the target has it (the
    Kunlun compiler breaks on ``tl.dot -> softmax -> tl.dot``)."""
    caps = capabilities()
    name = override or config.get("formulation") or ("dot" if caps.has_dot else "sum")
    if name not in FORMULATIONS:
        raise ValueError(f"{op}: formulation must be one of {FORMULATIONS}, got {name!r}")
    use_dot = name == "dot"
    dot_fp32 = use_dot and (dtype == torch.float32 or (dtype == torch.bfloat16 and not caps.dot_bf16))
    return Formulation(use_dot, dot_fp32)


def dim_block(size: int, form: Formulation) -> int:
    """Padded power-of-two tile for a head dim (tl.dot needs at least 16)."""
    block = next_power_of_2(max(size, 1))
    return max(block, 16) if form.use_dot else block


def dim_split(size: int, form: Formulation) -> tuple[int, int]:
    """(BLOCK_D, BLOCK_DPE): the q.k head dim as one padded power-of-two tile
    (BLOCK_DPE = 0), or, where that pads, as a power-of-two head (BLOCK_D, no
    mask) plus a tail tile (BLOCK_DPE, masked only if it pads): MLA's 576 =
    512 latent + 64 rope is two exact tiles instead of 1024 (SGLang's MLA
    decode splits the same way); 80 = 64 + 16, 192 = 128 + 64."""
    whole = dim_block(size, form)
    head = 1 << (max(int(size), 1).bit_length() - 1)  # largest power of two <= size
    tail = dim_block(size - head, form) if size > head else 0
    if tail and head >= (16 if form.use_dot else 1) and head + tail < whole:
        return head, tail
    return whole, 0


@dataclass(frozen=True)
class AttentionPlan:
    """Everything a launch derives from its config, dtype and head shape."""

    use_dot: bool
    dot_fp32: bool
    block_m: int  # extend: query rows per program
    block_n: int  # keys per tile
    block_h: int  # decode: query heads of a group per program (padded; at most MAX_BLOCK_H real ones)
    block_d: int  # q.k head dim tile (the head part, when split)
    block_dpe: int  # the tail tile of a split q.k head dim (MLA's rope part), 0 when not split
    block_dv: int
    merge_block_h: int  # decode stage 2: heads per program, padded (no dot there)
    merge_block_dv: int
    min_split_tokens: int  # decode split policy (see decode_attention)
    target_programs: int  # PROGRAMS_PER_UNIT x the target's SMs / CUs / clusters
    max_kv_splits: int
    # decode: with one split per request, stage 1 writes the output itself
    # and the merge is not launched (the interpreter's plan: one launch
    # fewer per layer; compiled targets keep one kernel specialization)
    direct_single_split: bool
    # decode: where a request takes one split, one program folds BATCH_ROWS
    # (request, kv head) rows at once (`decode_batch`, the interpreter's plan:
    # it pays per tile op, not per element); 0 on compiled targets
    batch_rows: int
    load_ignores_other: bool
    # an fp8 pool's tiles decoded times a run-time unit, not a constant
    # (``FP8_RUNTIME_UNIT`` in the op's config; `fp8.fp8_unit`)
    fp8_runtime_unit: bool
    # decode: K loaded [keys, head dim] as V is (``K_KEY_MAJOR``); whole tiles'
    # slot ids loaded one tile ahead (``PREFETCH_SLOTS``)
    k_key_major: bool
    prefetch_slots: bool
    launch: dict


def attention_plan(op: str, config: dict, dtype, head_dim: int, v_dim: int, group: int, formulation) -> AttentionPlan:
    form = choose_formulation(op, dtype, config, formulation)
    # Every key below comes from the op's config (looked up, or explicit over
    # autotune_configs/default.yaml, their one home); decode has no query-row
    # tile (BLOCK_M) and extend no split policy.
    decode = op == "decode_attention"
    block_n = int(config["BLOCK_N"])
    block_m = block_n if decode else int(config["BLOCK_M"])
    # decode: a program takes at most MAX_BLOCK_H heads of a group (MLA's 128 q
    # heads on one latent head would otherwise hold a [128, 576] q tile: the
    # programs split the group, each re-reading the group's K/V, as SGLang's
    # grouped decode does with 16).
    max_block_h = next_power_of_2(max(int(config.get("MAX_BLOCK_H", 16)), 1))
    block_h = merge_block_h = min(next_power_of_2(group), max_block_h)
    # The merge holds a [heads, v_dim] fp32 sum and a partial tile: at most
    # MERGE_TILE values each (16 per thread at 4 warps), so MLA's 512-wide V
    # merges 4 heads a program (sm_90: 167 registers at 16 heads, SGLang's
    # one-head merge 28), while head dim 128 keeps its 16.
    merge_block_h = max(1, min(merge_block_h, MERGE_TILE // next_power_of_2(v_dim)))
    if form.use_dot:  # tl.dot tiles are at least 16 x 16
        block_m, block_n, block_h = max(block_m, 16), max(block_n, 16), max(block_h, 16)
    return AttentionPlan(
        use_dot=form.use_dot,
        dot_fp32=form.dot_fp32,
        block_m=block_m,
        block_n=block_n,
        block_h=block_h,
        block_d=dim_split(head_dim, form)[0],
        block_dpe=dim_split(head_dim, form)[1],
        block_dv=dim_block(v_dim, form),
        merge_block_h=merge_block_h,
        merge_block_dv=next_power_of_2(v_dim),
        min_split_tokens=max(int(config["MIN_SPLIT_TOKENS"]), 1) if decode else 0,
        target_programs=max(int(config["PROGRAMS_PER_UNIT"]) * compute_units(), 1) if decode else 0,
        max_kv_splits=max(int(config["MAX_KV_SPLITS"]), 1) if decode else 0,
        direct_single_split=bool(config["DIRECT_SINGLE_SPLIT"]) if decode else False,
        batch_rows=max(int(config["BATCH_ROWS"]), 0) if decode else 0,
        load_ignores_other=capabilities().load_ignores_other,
        fp8_runtime_unit=bool(config.get("FP8_RUNTIME_UNIT", 0)),
        k_key_major=bool(config.get("K_KEY_MAJOR", 0)) if decode else False,
        prefetch_slots=bool(config.get("PREFETCH_SLOTS", 0)) if decode else False,
        launch=run_keywords(launch_options(config)),
    )


def latent_view(k_buffer, v_buffer) -> bool:
    """Whether V is the first v_dim values of K's rows, as SGLang's MLA pool
    hands them over (``v = kv[..., :kv_lora_rank]``): then a kernel can take
    V from the K tile it loaded. Meta tensors (ahead-of-time planning) share
    no addresses (all 0), so there the view's base tells. (Addresses first:
    two reads settle the common case, separate K and V.)"""
    if (v_buffer.data_ptr() != k_buffer.data_ptr() or v_buffer.stride() != k_buffer.stride()
            or v_buffer.dtype != k_buffer.dtype or v_buffer.storage_offset() != k_buffer.storage_offset()):
        return False
    if k_buffer.device.type == "meta":
        return v_buffer._base is not None and v_buffer._base is (k_buffer._base if k_buffer._base is not None else k_buffer)
    return True


def check_formulation(op: str, formulation) -> None:
    """A call's `formulation` (None: the config's, else the target's): checked
    up front, so a bad one is refused even where no kernel runs."""
    if formulation is not None:
        require_choice(op, "formulation", formulation, FORMULATIONS)


def check_sinks(op: str, sinks, q_heads: int, device) -> None:
    """Attention sinks as SGLang's Triton backend passes them: one logit per
    query head, a 1-D float tensor (gpt-oss keeps them bf16 for that backend,
    fp32 for others) of q_heads entries on the query's device."""
    if sinks is None:
        return
    require_tensor(op, "sinks", sinks, ndim=1)  # a float dtype, contiguous
    require_same(op, "sinks' length and the query heads", sinks=sinks.shape[0], q_heads=q_heads)
    if sinks.device != device:
        raise ValueError(f"{op}: sinks are on {sinks.device} but the query is on {device}")


def window_constexpr(op: str, sliding_window) -> int:
    """SGLang's sliding_window_size (window_left): None, 0 or -1 disables."""
    if sliding_window is None:
        return 0
    window = require_number(op, "sliding_window", sliding_window, minimum=-1, integer=True)
    return max(window, 0)


def check_kv_pool(op: str, q_heads: int, head_dim: int, k_buffer, v_buffer, q_name: str) -> int:
    """Pool shape rules shared by decode and extend ([slots, kv_heads, dim]);
    returns the GQA group size."""
    require_tensor(op, "k_buffer", k_buffer, dtypes=KV_POOL_DTYPES, ndim=3)
    require_tensor(op, "v_buffer", v_buffer, dtypes=KV_POOL_DTYPES, ndim=3)
    require_same(op, "slot counts and kv head counts of the pools",
                 k_buffer=tuple(k_buffer.shape[:2]), v_buffer=tuple(v_buffer.shape[:2]))  # fmt: skip
    require_same(op, "head dims of the query and the key pool", **{q_name: head_dim, "k_buffer": k_buffer.shape[2]})
    kv_heads = k_buffer.shape[1]
    if kv_heads == 0 or q_heads % kv_heads:
        raise ValueError(f"{op}: {q_name} has {q_heads} heads, not a multiple of the pool's {kv_heads} kv heads")
    return q_heads // kv_heads
