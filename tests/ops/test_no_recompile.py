"""Serving a generation compiles each kernel once: no constexpr and no
specialised integer depends on the batch size, the context length or the
token count (those would recompile mid-serving and defeat CUDA graphs).

Every shape of a generation runs through the public ops with Triton's
launches stubbed (`kunlun_triton.introspect.launches.count_specializations`
binds each launch as Triton's launcher does and counts distinct compile
keys); tensors live on the meta device, so a 16k-token pool costs nothing.
"""

import pytest
import torch

from kunlun_triton import ops
from kunlun_triton.introspect.launches import count_specializations
from kunlun_triton.runtime import Target, targeting
from kunlun_triton.tools.presets import MODEL_PRESETS

LLAMA = MODEL_PRESETS["llama-3-8b"]
MAX_CONTEXT, MAX_BATCH = 16384, 256
# Every context length on the GPU target; Kunlun (other constexprs, same code) every 13th.
TARGETS = (pytest.param(Target("cuda", "sm_90", "meta", "test"), 1, id="cuda"),
           pytest.param(Target("kunlun", "p800", "meta", "test"), 13, id="kunlun"))  # fmt: skip


def meta(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device="meta")


def _decode_step(batch: int, total: int, pool):
    """One decode step of `batch` requests holding `total` keys in all."""
    q = meta(batch, LLAMA.num_heads, LLAMA.head_dim)
    ops.decode_attention(q, pool, pool, torch.empty_like(q), meta(batch + 1, dtype=torch.int32),
                         meta(total, dtype=torch.int32), LLAMA.head_dim**-0.5, check=False)  # fmt: skip


@pytest.mark.parametrize("target, step", TARGETS)
def test_a_generation_compiles_each_attention_kernel_once(target, step):
    pool = meta(MAX_CONTEXT * MAX_BATCH // 4, LLAMA.num_kv_heads, LLAMA.head_dim)
    contexts = range(1, MAX_CONTEXT + 1, step)
    with targeting(target), count_specializations() as counter:
        for context in contexts:  # batch 1, every length
            _decode_step(1, context, pool)
        for batch in range(1, MAX_BATCH + 1):  # every batch size
            _decode_step(batch, batch * 1000, pool)
        heads = (LLAMA.num_heads, LLAMA.num_kv_heads, LLAMA.head_dim)
        for extend, prefix, batch in ((1, 0, 1), (7, 0, 1), (8192, 0, 1), (8192, 8192, 1), (5, 100, 3), (17, 0, 64)):
            tokens = extend * batch
            q, k = meta(tokens, heads[0], heads[2]), meta(tokens, heads[1], heads[2])
            ops.extend_attention(q, k, torch.empty_like(k), torch.empty_like(q), pool, pool,
                                 meta(batch + 1, dtype=torch.int32), meta(batch + 1, dtype=torch.int32),
                                 meta(prefix * batch, dtype=torch.int32), extend, LLAMA.head_dim**-0.5, check=False)  # fmt: skip
    launches = dict(counter.launches)
    assert launches["kunlun_triton.ops.attention.decode_kernels:decode_partial_kernel"] == len(contexts) + MAX_BATCH
    assert counter.compilations() == {
        "kunlun_triton.ops.attention.decode_kernels:decode_merge_kernel": 1,
        "kunlun_triton.ops.attention.decode_kernels:decode_partial_kernel": 1,
        "kunlun_triton.ops.attention.extend_kernels:extend_kernel": 1,
    }


@pytest.mark.parametrize("target", [p.values[0] for p in TARGETS], ids=lambda t: t.name)
def test_row_ops_compile_at_most_twice_over_any_token_count(target):
    """A config may pick other tiles for decode-sized and prefill-sized calls
    (`by_shape` rules): at most two variants, never one per token count."""
    hidden, inter = LLAMA.hidden_size, LLAMA.intermediate_size
    weight = meta(hidden)
    cache = meta(4096, LLAMA.head_dim, dtype=torch.float32)
    pool = meta(1 << 16, LLAMA.num_kv_heads, LLAMA.head_dim)
    with targeting(target), count_specializations() as counter:
        for tokens in list(range(1, MAX_BATCH + 1)) + [1000, 4096, 8192]:
            x = meta(tokens, hidden)
            ops.rms_norm(x, weight)
            ops.fused_add_rms_norm(x, torch.empty_like(x), weight)
            ops.silu_and_mul(meta(tokens, 2 * inter))
            kv_width = LLAMA.num_kv_heads * LLAMA.head_dim
            q, k, v = meta(tokens, hidden + 2 * kv_width).split([hidden, kv_width, kv_width], -1)  # a fused qkv
            ops.rotary_embedding(meta(tokens, dtype=torch.int64), q, k, LLAMA.head_dim, cache, True,
                                 check_positions=False)  # fmt: skip
            kv = v.view(tokens, LLAMA.num_kv_heads, LLAMA.head_dim)
            ops.store_kv(kv, kv, pool, pool, meta(tokens, dtype=torch.int64), check=False)
    compilations = counter.compilations()
    assert len(compilations) == 5, compilations
    assert max(compilations.values()) <= 2, compilations
