"""The KV cache's dtype in the attention ops' shapes: ``kv_dtype``.

The bench and inspect shapes of the ops that read or write a KV pool
(`store_kv`, `decode_attention`, `extend_attention`) carry ``kv_dtype``:
``auto`` (the pool holds the model's compute dtype) or one of SGLang's
``--kv-cache-dtype`` fp8 words, so ``kunlun-triton inspect --shape
kv_dtype=fp8_e4m3`` (compile, ``--traffic``, ``--launcher-us``) and
``kunlun-triton bench --shape kv_dtype=fp8_e4m3`` measure the fp8 pool.

An fp8 case's pool holds the bytes of value / scale (torch's cast), read
and written with `CASE_SCALES`: not 1.0, so tune's check against the
reference exercises the scales; powers of two, so dividing a bf16 / fp16
pool by them is exact and needs no fp32 copy of a many-GB pool.
"""

from __future__ import annotations

import torch

# SGLang's --kv-cache-dtype words the kernels serve besides "auto" (docs/fp8-kv-cache.md)
KV_DTYPES = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
KV_DTYPE_WORDS = ("auto", *KV_DTYPES)
CASE_SCALES = {"k_scale": 0.5, "v_scale": 0.25}


def pool_dtype(shape: dict, dtype: torch.dtype) -> torch.dtype:
    """The pool's dtype for `shape`'s ``kv_dtype`` (absent: ``auto``, the compute `dtype`)."""
    name = shape.get("kv_dtype", "auto")
    if name == "auto":
        return dtype
    if not isinstance(name, str) or name not in KV_DTYPES:
        raise ValueError(f"--shape kv_dtype={name}: expected one of {', '.join(KV_DTYPE_WORDS)} "
                         "(SGLang's --kv-cache-dtype words; auto: the model dtype)")  # fmt: skip
    return KV_DTYPES[name]


def kv_scales(shape: dict) -> dict:
    """The ``k_scale`` / ``v_scale`` keywords an fp8 case passes (none for
    ``auto``); MLA's (V a view of K's rows): k_scale for the whole latent row."""
    if shape.get("kv_dtype", "auto") == "auto":
        return {}
    latent = shape.get("v_head_dim", shape["head_dim"]) < shape["head_dim"]
    return {**CASE_SCALES, "v_scale": CASE_SCALES["k_scale"]} if latent else dict(CASE_SCALES)


def pool_scales(k_buffer, v_buffer) -> dict:
    """`kv_scales` of a case's pool (its fp8 dtype says the case quantized
    it): what another implementation given the case's buffers must pass."""
    if k_buffer.dtype not in KV_DTYPES.values():
        return {}
    return kv_scales({"kv_dtype": "fp8", "head_dim": k_buffer.shape[-1], "v_head_dim": v_buffer.shape[-1]})


def elt(dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def quantize_pool(pool, shape: dict, dtype: torch.dtype) -> None:
    """Turn a `introspect.paged.PagedPool` built in the compute dtype into
    `shape`'s pool in place: fp8 bytes of value / scale; an MLA pool's V (a
    view of K's first values) stays a view of the new K."""
    target = pool_dtype(shape, dtype)
    if target == dtype:
        return
    latent = pool.v_buffer.data_ptr() == pool.k_buffer.data_ptr() and pool.v_buffer.shape[-1] < pool.k_buffer.shape[-1]
    scales = kv_scales(shape)
    pool.k_buffer = (pool.k_buffer / scales["k_scale"]).to(target)
    if latent:
        pool.v_buffer = pool.k_buffer[..., : pool.v_buffer.shape[-1]]
    else:
        pool.v_buffer = (pool.v_buffer / scales["v_scale"]).to(target)


def meta(*shape, dtype):
    return torch.empty(shape, dtype=dtype, device="meta")


def meta_kv_pool(slots, kv_heads, head_dim, v_dim, dtype):
    """K and V rows on the meta device; with a smaller v_dim, V is the first
    v_dim values of K's rows (SGLang's MLA latent pool: a strided view, as
    the kernels get it)."""
    k = meta(slots, kv_heads, head_dim, dtype=dtype)
    return k, (k[..., :v_dim] if v_dim < head_dim else meta(slots, kv_heads, v_dim, dtype=dtype))
