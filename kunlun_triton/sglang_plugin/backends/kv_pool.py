"""KV pool and paged allocator classes handed to SGLang by the platform.

- ``KunlunMHATokenToKVPool``: SGLang's ``MHATokenToKVPool`` (same buffers,
  ``[size + page_size, kv_heads, head_dim]`` per layer, slot 0 padding) whose
  KV writes go through our ``store_kv`` kernel.
- ``KunlunMLATokenToKVPool``: SGLang's ``MLATokenToKVPool`` (one latent
  "head" per token: ``kv_lora_rank`` latent values then ``qk_rope_head_dim``
  rope values, ``[size + page_size, 1, kv_lora_rank + rope]``; V is a view of
  the latent part) whose latent writes go through ``store_kv``, the latent
  and rope parts as its two halves.
- An fp8 KV cache (``--kv-cache-dtype fp8_e4m3 | fp8_e5m2``: SGLang keeps
  the bytes in a uint8 buffer and hands out ``float8`` views) is written by
  ``store_kv``'s integer encoder with the layer's k_scale / v_scale and read
  by the attention kernels' integer decoder: no FP8 type or hardware needed.
- ``paged_allocator_cls()``: ``kunlun_triton.memory.PagedKVAllocator`` (block
  pool with reference counts) with SGLang's allocator base class, used when
  ``page_size > 1``. ``KUNLUN_TRITON_ALLOCATOR=sglang`` keeps SGLang's own.
"""

from __future__ import annotations

import functools

import torch
from sglang.srt.mem_cache.memory_pool import HybridLinearKVPool, MHATokenToKVPool, MLATokenToKVPool

from ..platform.mode import dev_mode


FP8_KV_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def full_attention_pool(pool):
    """The pool that stores a hybrid model's full-attention K/V (Qwen3-Next's
    HybridLinearKVPool wraps one MHA pool and translates layer ids in
    get_key_buffer / set_kv_buffer, so callers keep the wrapper for those)."""
    return pool.full_kv_pool if isinstance(pool, HybridLinearKVPool) else pool


def fp8_pool(pool) -> bool:
    """True when `pool` keeps K/V as fp8 bytes (SGLang's fp8 KV cache: uint8
    storage, float8 views from get_key_buffer / get_value_buffer)."""
    pool = full_attention_pool(pool)
    return pool.dtype in FP8_KV_DTYPES and getattr(pool, "store_dtype", pool.dtype) == torch.uint8


def _plain_storage(pool) -> bool:
    pool = full_attention_pool(pool)
    return getattr(pool, "store_dtype", pool.dtype) == pool.dtype or fp8_pool(pool)


def plain_pool(pool) -> bool:
    """True when `pool` stores K/V in the model dtype or as fp8 bytes, NHD layout."""
    pool = full_attention_pool(pool)
    return (
        isinstance(pool, MHATokenToKVPool)
        and not getattr(pool, "is_quantized_kv_cache", False)
        and _plain_storage(pool)
        and getattr(pool, "kv_cache_layout", "nhd") == "nhd"
    )


def plain_mla_pool(pool) -> bool:
    """True when `pool` is an MLA latent pool in the model dtype or fp8 bytes (no DSA layout)."""
    return (
        isinstance(pool, MLATokenToKVPool)
        and _plain_storage(pool)
        and not getattr(pool, "use_dsa", False)
        and not getattr(pool, "dsa_kv_cache_store_fp8", False)
        and pool.kv_cache_dim == pool.kv_lora_rank + pool.qk_rope_head_dim
    )


def accepts_values(pool, *tensors) -> bool:
    """Whether `store_kv` takes these K/V as they are: the pool's dtype, or
    any compute dtype for an fp8 pool (store_kv encodes)."""
    pool = full_attention_pool(pool)
    dtype = tensors[0].dtype
    if any(t.dtype != dtype for t in tensors):
        return False
    return dtype == pool.dtype or (fp8_pool(pool) and dtype in (torch.float32, torch.float16, torch.bfloat16))


def store_latent_into_pool(pool, layer_id: int, loc: torch.Tensor, latent: torch.Tensor, check: bool,
                           k_scale=None) -> None:  # fmt: skip
    """Write latent [tokens, 1, kv_lora_rank + rope] to slots `loc` of one layer:
    ``store_kv`` with the latent part as its K and the rope part as its V
    (two views of the same cache row), so each value is written once; an
    fp8 pool gets both parts as fp8 of value / k_scale."""
    from kunlun_triton import ops

    buffer = pool.get_key_buffer(layer_id)
    rank = pool.kv_lora_rank
    latent = latent.view(-1, 1, buffer.shape[-1])
    ops.store_kv(latent[..., :rank], latent[..., rank:], buffer[..., :rank], buffer[..., rank:], loc, check=check,
                 k_scale=k_scale, v_scale=k_scale)  # fmt: skip


def store_kv_into_pool(pool, layer_id: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor, check: bool,
                       k_scale=None, v_scale=None) -> None:  # fmt: skip
    """Write k/v [tokens, kv_heads, dim] to slots `loc` of one layer with ops.store_kv
    (an fp8 pool: fp8 of k / k_scale and v / v_scale)."""
    from kunlun_triton import ops

    k_buffer = pool.get_key_buffer(layer_id)
    v_buffer = pool.get_value_buffer(layer_id)
    heads = k_buffer.shape[1]
    k = k.view(-1, heads, k_buffer.shape[2])
    v = v.view(-1, heads, v_buffer.shape[2])
    ops.store_kv(k, v, k_buffer, v_buffer, loc, check=check, k_scale=k_scale, v_scale=v_scale)


class KunlunMHATokenToKVPool(MHATokenToKVPool):
    """SGLang's MHA pool; plain and fp8 writes run our ``store_kv`` kernel."""

    def set_kv_buffer(
        self,
        layer,
        loc_info,
        cache_k,
        cache_v,
        k_scale=None,
        v_scale=None,
        layer_id_override=None,
        dcp_kv_mask=None,
    ):
        from sglang.srt.mem_cache.memory_pool import unwrap_write_loc

        # scales as numbers (a tensor scale would need a host read: SGLang's path)
        scalar = all(s is None or isinstance(s, (int, float)) for s in (k_scale, v_scale))
        simple = plain_pool(self) and dcp_kv_mask is None and scalar and accepts_values(self, cache_k, cache_v)
        if not fp8_pool(self) and (k_scale is not None or v_scale is not None):
            simple = False  # SGLang's semantics for scales on a model-dtype pool
        if not simple:
            return super().set_kv_buffer(
                layer, loc_info, cache_k, cache_v, k_scale, v_scale, layer_id_override, dcp_kv_mask
            )
        loc, _, _ = unwrap_write_loc(loc_info)
        layer_id = layer_id_override if layer_id_override is not None else layer.layer_id
        store_kv_into_pool(self, layer_id, loc, cache_k, cache_v, check=dev_mode(), k_scale=k_scale, v_scale=v_scale)


class KunlunMLATokenToKVPool(MLATokenToKVPool):
    """SGLang's MLA latent pool; plain and fp8 latent writes run our ``store_kv`` kernel
    (SGLang's MLA write takes no scales: its caller divided already)."""

    def set_kv_buffer(self, layer, loc_info, cache_k, cache_v, layer_id_override=None):
        from sglang.srt.mem_cache.memory_pool import unwrap_write_loc

        if not plain_mla_pool(self) or not accepts_values(self, cache_k) or cache_k.shape[-1] != self.kv_cache_dim:
            return super().set_kv_buffer(layer, loc_info, cache_k, cache_v, layer_id_override)
        loc, _, _ = unwrap_write_loc(loc_info)
        layer_id = layer_id_override if layer_id_override is not None else layer.layer_id
        store_latent_into_pool(self, layer_id, loc, cache_k, check=dev_mode())


@functools.lru_cache(maxsize=1)
def _kunlun_paged_allocator():
    from sglang.srt.mem_cache.allocator.base import BaseTokenToKVPoolAllocator

    from kunlun_triton.memory import PagedKVAllocator

    class KunlunPagedAllocator(PagedKVAllocator, BaseTokenToKVPoolAllocator):
        """kunlun_triton's block pool behind SGLang's allocator interface."""

        # PagedKVAllocator comes first in the MRO: its methods win; SGLang's
        # base supplies the scheduler-facing helpers it does not define.

    return KunlunPagedAllocator


def paged_allocator_cls():
    """Our paged allocator class, or None to keep SGLang's."""
    from kunlun_triton.runtime import env_choice

    if env_choice("KUNLUN_TRITON_ALLOCATOR", ("kunlun", "sglang"), "kunlun") == "sglang":
        return None
    try:
        return _kunlun_paged_allocator()
    except ImportError:
        return None
