"""`store_kv`: write new tokens' K/V into their KV-pool slots."""

from __future__ import annotations

import triton

from ..kernels.attention.store_kv import store_kv_kernel
from ..reference.attention import store_kv_reference
from ..runtime import get_config, launch_options, use_triton
from .attention.validate import check_slots, checked_mode, require_same, require_same_device, require_tensor

OP = "store_kv"


def store_kv(k, v, k_buffer, v_buffer, out_cache_loc, check: bool = True) -> None:
    """k_buffer[out_cache_loc[t]] = k[t] and v_buffer[out_cache_loc[t]] = v[t].

    k [tokens, kv_heads, head_dim] and v [tokens, kv_heads, v_head_dim] may
    have strided tokens and heads (views into a fused projection); values are
    cast to the pool's dtype. out_cache_loc [tokens] int32/int64 slot ids,
    which must be distinct (the write order of duplicates is unspecified);
    checked mode verifies they lie in the pool.
    """
    for name, t in (("k", k), ("v", v), ("k_buffer", k_buffer), ("v_buffer", v_buffer)):
        require_tensor(OP, name, t, 3)
    require_tensor(OP, "out_cache_loc", out_cache_loc, 1, float_data=False)
    require_same(OP, "k_buffer and v_buffer slot/head counts", k_buffer=tuple(k_buffer.shape[:2]), v_buffer=tuple(v_buffer.shape[:2]))
    require_same(OP, "k's shape and (tokens, pool kv heads, pool head dim)", k=tuple(k.shape),
                 expected=(out_cache_loc.numel(), k_buffer.shape[1], k_buffer.shape[2]))
    require_same(OP, "v's shape and (tokens, pool kv heads, pool v head dim)", v=tuple(v.shape),
                 expected=(out_cache_loc.numel(), v_buffer.shape[1], v_buffer.shape[2]))
    require_same_device(OP, k=k, v=v, k_buffer=k_buffer, v_buffer=v_buffer, out_cache_loc=out_cache_loc)
    if checked_mode(check):
        check_slots(OP, "out_cache_loc", out_cache_loc, k_buffer.shape[0])
    tokens, heads = k.shape[0], k.shape[1]
    if tokens == 0:
        return
    if not use_triton(OP, k, v, k_buffer, v_buffer, out_cache_loc):
        store_kv_reference(k, v, k_buffer, v_buffer, out_cache_loc)
        return
    config = get_config(OP, row_width=heads * k.shape[2], tokens=tokens)
    per_program = int(config.get("TOKENS_PER_PROGRAM", 4))
    width = heads * max(k.shape[2], v.shape[2])
    block_c = min(triton.next_power_of_2(width), int(config.get("MAX_BLOCK_C", 1024)))
    store_kv_kernel[(triton.cdiv(tokens, per_program),)](
        k, v, k_buffer, v_buffer, out_cache_loc, tokens,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_buffer.stride(0), k_buffer.stride(1), v_buffer.stride(0), v_buffer.stride(1),
        HEADS=heads, K_DIM=k.shape[2], V_DIM=v.shape[2],
        TOKENS_PER_PROGRAM=per_program, BLOCK_C=block_c,
        **launch_options(config),
    )
