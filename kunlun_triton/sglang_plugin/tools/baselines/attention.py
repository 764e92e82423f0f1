"""SGLang 0.5.23's own Triton paged attention, called with our op signatures
so benchmarks and comparison tests run it on the same inputs.

Importing this module imports sglang (ImportError when absent). SGLang's
decode takes preallocated split scratch and a per-request split count; the
`sglang_decode` factory allocates them once and computes the counts with
SGLang's own heuristic (as its backend does once per step; the maximum is
SGLang's default ``--triton-attention-num-kv-splits`` = 8). An fp8 pool
(``kv_dtype=fp8_*`` in the shape) is passed as its backend passes one: the
pool's fp8 buffers with the layer's float k / v scales.
"""

from __future__ import annotations

import torch
from kunlun_triton.ops.attention.kv_dtype import elt as _elt
from kunlun_triton.ops.attention.kv_dtype import kv_scales, pool_dtype, pool_scales
from sglang.kernels.ops.attention.decode_attention import decode_attention_fwd
from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd

SGLANG_DEFAULT_KV_SPLITS = 8
H200_SMS = 132  # device_core_count SGLang's backend reads on an H100/H200 (sm_90)
SGLANG_MIN_BLOCK_KV = 32  # _MIN_BLOCK_KV in sglang/kernels/ops/attention/decode_attention.py
# SGLang's backend caps an MLA model's splits by its context length
# (`_mla_decode_kv_splits_cap`): DeepSeek-V3's, what the MLA rows are planned at.
MLA_CONTEXT_LEN = 163840


def is_mla(k_buffer, v_buffer) -> bool:
    """SGLang's MLA pool: V is the latent part of K's rows (its backend then passes has_mla)."""
    return v_buffer.shape[-1] < k_buffer.shape[-1] and v_buffer.data_ptr() == k_buffer.data_ptr()


def mla_kv_splits_cap(base: int, sm_count: int, max_context_len: int) -> int:
    """`_mla_decode_kv_splits_cap` of SGLang's Triton backend, mirrored on the
    host (the module imports the whole server): an MLA model's max splits."""
    if sm_count <= 0:
        return base
    pow2 = lambda n: 1 << max(int(n) - 1, 0).bit_length()  # noqa: E731
    return max(base, min(pow2(sm_count), pow2(-(-max_context_len // SGLANG_MIN_BLOCK_KV))))


def backend_launch(mla: bool, target=None) -> dict:
    """How SGLang's Triton backend launches decode on `target` (default: the
    active one): ``max_kv_splits`` (8, an MLA model's cap for the target's
    SMs), ``use_pdl`` (sm_90 and newer: `is_arch_support_pdl`), ``has_mla``."""
    from kunlun_triton.runtime import capabilities, compute_units, current_target

    target = target or current_target()
    caps = capabilities(target)
    sms = compute_units(target) if caps.device and not caps.platform_card else H200_SMS  # a GPU's own count
    splits = mla_kv_splits_cap(SGLANG_DEFAULT_KV_SPLITS, sms, MLA_CONTEXT_LEN) if mla else SGLANG_DEFAULT_KV_SPLITS
    if mla and target.name == "hip" and target.arch == "gfx942":
        splits = min(splits, 256)  # its gfx942 pin
    pdl = target.name == "cuda" and target.arch.startswith("sm_") and int(target.arch[3:5]) >= 90
    return {"max_kv_splits": splits, "use_pdl": pdl, "has_mla": mla, "sms": sms}


def sglang_decode(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, sm_scale, logit_cap=0.0,
                  max_kv_splits: int | None = None, k_scale: float = 1.0, v_scale: float = 1.0):
    """A no-argument callable running SGLang's decode_attention_fwd into `o`
    as its Triton backend launches it on the active target
    (`backend_launch`: int64 kv_indices, PDL on sm_90, has_mla and the MLA
    split cap for an MLA pool), with the per-request split counts it
    computes once per step (`sglang_num_kv_splits`, for this device's SMs)."""
    batch, heads = q.shape[0], q.shape[1]
    launch = backend_launch(is_mla(k_buffer, v_buffer))
    max_kv_splits = max_kv_splits or launch["max_kv_splits"]
    logits = torch.empty(batch, heads, max_kv_splits, v_buffer.shape[-1], dtype=torch.float32, device=q.device)
    lse = torch.empty(batch, heads, max_kv_splits, dtype=torch.float32, device=q.device)
    lens = (kv_indptr[1:] - kv_indptr[:-1]).tolist()  # set-up, not timed: SGLang's scheduler has them
    cores = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else launch["sms"]
    counts = sglang_num_kv_splits(lens, heads, k_buffer.shape[1], max_kv_splits, cores) if lens else []
    splits = torch.tensor(counts, dtype=torch.int32, device=q.device).reshape(batch)
    kv_indices = kv_indices.to(torch.int64)  # its backend's dtype (set-up, not timed)
    pdl = launch["use_pdl"]  # the target's (a stubbed launch on CPU tensors binds it as on the card)

    def run():
        decode_attention_fwd(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, logits, lse, splits, max_kv_splits,
                             sm_scale, k_scale, v_scale, logit_cap=logit_cap, has_mla=launch["has_mla"], use_pdl=pdl)
        return o

    return run


def sglang_extend(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices,
                  max_len_extend, sm_scale, logit_cap=0.0, sliding_window=None, custom_mask=None, mask_indptr=None,
                  k_scale: float = 1.0, v_scale: float = 1.0):
    """A no-argument callable running SGLang's extend_attention_fwd (causal;
    with `custom_mask` / `mask_indptr`, target verify as its Triton backend
    runs it) into `o_extend`. `sliding_window` is SGLang's
    sliding_window_size."""
    window = sliding_window if sliding_window and sliding_window > 0 else -1

    def run():
        extend_attention_fwd(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr, kv_indptr,
                             kv_indices, custom_mask, True, mask_indptr, max_len_extend, k_scale, v_scale,
                             sm_scale=sm_scale, logit_cap=logit_cap, sliding_window_size=window)
        return o_extend

    return run


def decode_baseline(case):
    """SGLang's decode on a `decode_attention` bench case (its own output buffer)."""
    q, k_buffer, v_buffer, o, kv_indptr, kv_indices, sm_scale = case.args[:7]
    return sglang_decode(q, k_buffer, v_buffer, torch.empty_like(o), kv_indptr, kv_indices, sm_scale,
                         **pool_scales(k_buffer, v_buffer))  # fmt: skip


def extend_baseline(case):
    """SGLang's extend on an `extend_attention` bench case (its own output buffer)."""
    q, k, v, o, *rest = case.args
    return sglang_extend(q, k, v, torch.empty_like(o), *rest, **pool_scales(rest[0], rest[1]))


# ---- ahead-of-time specs of SGLang's kernels (`kunlun-triton inspect --compare sglang`)
#
# SGLang's launchers pick their constexprs from module globals set at import
# from the machine (`_is_hip`, `_is_cuda`, `CUDA_CAPABILITY`). To plan the
# launches SGLang would make on another target, those globals are set to that
# target's values for the duration of one stubbed call on meta tensors; the
# launcher code itself runs unchanged.

_DECODE_MODULE = "sglang.kernels.ops.attention.decode_attention"
_EXTEND_MODULE = "sglang.kernels.ops.attention.extend_attention"


def _target_globals(target) -> dict:
    """{module: {global: value}} SGLang computes at import on `target`."""
    if target.name == "hip":
        gfx95 = target.arch.startswith("gfx95")
        return {_DECODE_MODULE: {"_is_hip": True, "_is_gfx1250": False},
                _EXTEND_MODULE: {"_is_cuda": False, "_is_hip": True, "_is_gfx95": gfx95, "_is_gfx1250": False}}
    major, minor = (int(target.arch[3]), int(target.arch[4:] or 0)) if target.arch.startswith("sm_") else (9, 0)
    return {_DECODE_MODULE: {"_is_hip": False, "_is_gfx1250": False},
            _EXTEND_MODULE: {"_is_cuda": True, "CUDA_CAPABILITY": (major, minor), "_is_hip": False, "_is_gfx95": False,
                             "_is_gfx1250": False}}  # fmt: skip


def _as_on_target(call):
    """`kernel_specs` of ``call()`` with SGLang's target globals for the active target."""
    import contextlib
    import importlib
    from unittest import mock

    from kunlun_triton.runtime import current_target
    from kunlun_triton.introspect.launches import meta_kernel_specs, with_loop_items

    with contextlib.ExitStack() as stack:
        for module, values in _target_globals(current_target()).items():
            mod = importlib.import_module(module)
            for name, value in values.items():
                stack.enter_context(mock.patch.object(mod, name, value, create=True))
        specs = meta_kernel_specs(call)
    return with_loop_items(specs, {"_fwd_grouped_kernel_stage1": "BLOCK_N", "_fwd_kernel_stage1": "BLOCK_N",
                                   "_fwd_kernel": "BLOCK_N_PREFIX"})  # fmt: skip


def _meta(*shape, dtype):
    return torch.empty(shape, dtype=dtype, device="meta")


def decode_inspect_specs(shape, dtype, max_kv_splits: int | None = None):
    """SGLang's decode kernels (grouped stage 1 or MHA stage 1, stage 2) for a
    `decode_attention` shape, launched as its Triton backend launches them
    on the active target (`backend_launch`: int64 kv_indices, PDL on sm_90,
    has_mla with the MLA split cap for an MLA shape)."""
    lens = shape.get("lens") or [shape["context_len"]] * shape["batch"]
    batch, total = len(lens), sum(lens)
    q_heads, kv_heads, head_dim = shape["q_heads"], shape["kv_heads"], shape["head_dim"]
    v_dim = shape.get("v_head_dim", head_dim)  # MLA: V is the latent part of K's rows
    q, o = _meta(batch, q_heads, head_dim, dtype=dtype), _meta(batch, q_heads, v_dim, dtype=dtype)
    slots = total + shape.get("page_size", 1)
    k_buffer = _meta(slots, kv_heads, head_dim, dtype=pool_dtype(shape, dtype))
    v_buffer = k_buffer[..., :v_dim] if v_dim < head_dim else _meta(slots, kv_heads, v_dim, dtype=k_buffer.dtype)
    scales = {"k_scale": 1.0, "v_scale": 1.0, **kv_scales(shape)}
    launch = backend_launch(v_dim < head_dim)
    max_kv_splits = max_kv_splits or launch["max_kv_splits"]
    indptr, indices = _meta(batch + 1, dtype=torch.int32), _meta(total, dtype=torch.int64)
    logits = _meta(batch, q_heads, max_kv_splits, v_dim, dtype=torch.float32)
    lse = _meta(batch, q_heads, max_kv_splits, dtype=torch.float32)
    splits = _meta(batch, dtype=torch.int32)
    return _as_on_target(lambda: decode_attention_fwd(q, k_buffer, v_buffer, o, indptr, indices, logits, lse, splits,
                                                      max_kv_splits, head_dim**-0.5, scales["k_scale"],
                                                      scales["v_scale"], has_mla=launch["has_mla"],
                                                      use_pdl=launch["use_pdl"]))  # fmt: skip


def extend_inspect_specs(shape, dtype):
    """SGLang's extend kernel for an `extend_attention` shape (causal; with
    ``custom_mask=1`` in the shape, target verify's tree mask)."""
    from kunlun_triton.ops.attention.spec import verify_mask

    prefix = shape.get("prefix_lens") or [shape["prefix_len"]] * shape["batch"]
    extend = shape.get("extend_lens") or [shape["extend_len"]] * shape["batch"]
    q_heads, kv_heads, head_dim = shape["q_heads"], shape["kv_heads"], shape["head_dim"]
    v_dim = shape.get("v_head_dim", head_dim)
    tokens, cached = sum(extend), sum(prefix)
    q, o = _meta(tokens, q_heads, head_dim, dtype=dtype), _meta(tokens, q_heads, v_dim, dtype=dtype)
    slots = cached + tokens + shape.get("page_size", 1)
    k = _meta(tokens, kv_heads, head_dim, dtype=dtype)
    k_buffer = _meta(slots, kv_heads, head_dim, dtype=pool_dtype(shape, dtype))
    if v_dim < head_dim:  # MLA: its model passes k_nope (a copy) and its pool the latent view; V loaded either way
        v, v_buffer = _meta(tokens, kv_heads, v_dim, dtype=dtype), k_buffer[..., :v_dim]
    else:
        v, v_buffer = _meta(tokens, kv_heads, v_dim, dtype=dtype), _meta(slots, kv_heads, v_dim, dtype=k_buffer.dtype)
    qo_indptr, kv_indptr = _meta(len(extend) + 1, dtype=torch.int32), _meta(len(prefix) + 1, dtype=torch.int32)
    kv_indices = _meta(cached, dtype=torch.int64)  # its backend's dtype
    masks = verify_mask(prefix, extend, "meta", meta=True) if shape.get("custom_mask") else (None, None)
    run = sglang_extend(q, k, v, o, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices, max(extend), head_dim**-0.5,
                        custom_mask=masks[0], mask_indptr=masks[1], **kv_scales(shape))  # fmt: skip
    return _as_on_target(run)


# ---- SGLang's split counts and bytes per decode call


def sglang_num_kv_splits(lens, num_head: int, num_kv_head: int, max_kv_splits: int = SGLANG_DEFAULT_KV_SPLITS,
                         device_core_count: int = H200_SMS) -> list[int]:  # fmt: skip
    """The per-request split counts SGLang's Triton backend computes each
    decode step (`get_num_kv_splits_triton` in
    sglang/kernels/ops/attention/metadata.py, mirrored on the host)."""
    import math

    cdiv = lambda a, b: -(-a // b)  # noqa: E731
    max_len, min_len = max(lens), min(lens)
    if max_len * 8 < min_len * 10:
        min_len = max_len
    splits_1 = min(cdiv(max_len, max(min_len, 1)), max_kv_splits)
    chunk_1 = cdiv(max_len, splits_1)
    cores = int(device_core_count * max(math.log2(max_len / 64.0) if max_len > 0 else 0.0, 1.0))
    group = num_head // num_kv_head
    token_grid = len(lens) * (num_head if group == 1 else cdiv(num_head, min(16, group)))
    splits_2 = min(cdiv(cores, token_grid), max_kv_splits)
    chunk_2 = cdiv(max_len, splits_2)
    return [max(cdiv(n, chunk_1), cdiv(n, chunk_2)) for n in lens]


def _mla_shape(shape) -> bool:
    return shape.get("v_head_dim", shape["head_dim"]) < shape["head_dim"]


def _sglang_used_splits(shape) -> list[int]:
    """Non-empty splits per request of SGLang's decode on `shape` (its stage 1
    skips empty splits; MIN_BLOCK_KV = 32 rounds a split's length)."""
    lens = shape.get("lens") or [shape["context_len"]] * shape["batch"]
    launch = backend_launch(_mla_shape(shape))
    used = []
    for n, splits in zip(lens, sglang_num_kv_splits(lens, shape["q_heads"], shape["kv_heads"],
                                                    launch["max_kv_splits"], launch["sms"])):  # fmt: skip
        per_split = -(-(-(-n // splits)) // SGLANG_MIN_BLOCK_KV) * SGLANG_MIN_BLOCK_KV  # cdiv(cdiv(n, s), 32) * 32
        used.append(-(-n // per_split) if n else 0)
    return used


def decode_inspect_programs(shape, dtype) -> int:
    """Stage-1 programs of one SGLang decode call that have keys to fold: its
    grouped kernel's grid is (batch, cdiv(heads, min(16, group)), splits), the
    MHA kernel's (batch, heads, splits)."""
    heads, kv_heads = shape["q_heads"], shape["kv_heads"]
    group = heads // kv_heads
    per_split = heads if group == 1 else -(-heads // min(16, group))
    return per_split * sum(_sglang_used_splits(shape))


def decode_inspect_traffic(shape, dtype) -> int:
    """Bytes one SGLang decode call moves (its stage 1 skips empty splits;
    MIN_BLOCK_KV = 32 rounds a split's length)."""
    from kunlun_triton.ops.attention.decode_splits import decode_traffic

    lens = shape.get("lens") or [shape["context_len"]] * shape["batch"]
    q_heads, kv_heads, head_dim = shape["q_heads"], shape["kv_heads"], shape["head_dim"]
    used = _sglang_used_splits(shape)
    v_dim = shape.get("v_head_dim", head_dim)  # MLA: has_mla takes V from the loaded K tile
    return decode_traffic(lens, q_heads, kv_heads, head_dim, v_dim, _elt(dtype), used, _elt(pool_dtype(shape, dtype)),
                          v_in_k=_mla_shape(shape), index_elt=8)  # its int64 kv_indices  # fmt: skip


def extend_inspect_traffic(shape, dtype) -> int:
    """Bytes one SGLang extend call moves from L2 into its programs
    (`extend_inputs.extend_traffic` at its BLOCK_M for the active target): its
    kernel loads V's tile next to K's, MLA's latent included, and reads int64
    kv_indices."""
    from kunlun_triton.ops.attention.extend_inputs import extend_traffic

    prefix = shape.get("prefix_lens") or [shape["prefix_len"]] * shape["batch"]
    extend = shape.get("extend_lens") or [shape["extend_len"]] * shape["batch"]
    block_m = extend_inspect_specs(shape, dtype)[0].constexprs["BLOCK_M"]
    return extend_traffic(prefix, extend, shape["q_heads"], shape["head_dim"], shape.get("v_head_dim", shape["head_dim"]),
                          _elt(dtype), block_m, kv_elt=_elt(pool_dtype(shape, dtype)), index_elt=8)  # fmt: skip


def decode_launcher_call(shape, dtype, device):
    """SGLang's ``decode_attention_fwd`` on a decode shape, buffers and split
    counts allocated once (per step, in its backend)."""
    from kunlun_triton.ops.attention.spec import decode_attention_case

    case = decode_attention_case(shape, dtype, device)
    q, k_buffer, v_buffer, o, kv_indptr, kv_indices, sm_scale = case.args[:7]
    return sglang_decode(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, sm_scale, **kv_scales(shape))


def extend_launcher_call(shape, dtype, device):
    """SGLang's ``extend_attention_fwd`` on an extend shape."""
    from kunlun_triton.ops.attention.spec import extend_attention_case

    return sglang_extend(*extend_attention_case(shape, dtype, device).args, **kv_scales(shape))
