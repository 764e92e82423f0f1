"""MLA extend reads each latent tile once (issue 24): where V is the latent
part of K's rows (SGLang's MLA pool, ``v = kv[..., :kv_lora_rank]``; the
plugin passes the new tokens' V as the same view of their K rows), the
prefix and the new-token loops take V from the K tile they loaded
(V_IN_K / NEW_V_IN_K), as decode does. Answers against the torch reference
(cached prefix + new tokens, page sizes, MLA head counts, fp8 pool, target
verify's custom mask, hidden non-finite latents), the constexprs compiled
for every target, and the bytes the interpreter reads from the latent:
one K row per (program, key), V never re-read."""

import pytest
import torch

from strategies import DEVICE

from kunlun_triton.introspect import compile_ahead_of_time
from kunlun_triton.introspect.interpreter_counts import count_loads
from kunlun_triton.introspect.paged import extend_batch
from kunlun_triton.introspect.sass import kernel_cost
from kunlun_triton.ops import extend_attention
from kunlun_triton.ops.attention import reference
from kunlun_triton.ops.attention.extend_inputs import extend_traffic
from kunlun_triton.ops.attention.spec import verify_mask
from kunlun_triton.ops.spec import planned_kernels
from kunlun_triton.runtime import Target, current_target
from kunlun_triton.testing import LOWERING_TARGETS, aot_target, assert_close

# 80 = 64 latent + 16 rope splits as 64 + 16 exactly as 576 = 512 + 64 does
# (`shared.dim_split`), at a fraction of the interpreter's time.
LATENT, ROPE = 64, 16
SM90 = Target("cuda", "sm_90", "meta", "test")


def _mla(prefix, extend, *, q_heads=16, latent=LATENT, rope=ROPE, page_size=1, dtype=torch.float16, seed=0,
         latent_extend=True):  # fmt: skip
    b = extend_batch(prefix, extend, q_heads=q_heads, kv_heads=1, head_dim=latent + rope, v_head_dim=latent,
                     dtype=dtype, page_size=page_size, seed=seed, device=DEVICE)  # fmt: skip
    b.pool.v_buffer = b.pool.k_buffer[..., :latent]
    if latent_extend:
        b.v_extend = b.k_extend[..., :latent]
    b.sm_scale = 192**-0.5  # DeepSeek scales by the un-absorbed q.k dim (128 + 64)
    return b


@pytest.mark.parametrize("formulation", ["dot", "sum"])
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("q_heads", [1, 16])
def test_mla_extend_matches_the_reference(formulation, page_size, q_heads):
    b = _mla([0, 37, 21], [5, 19, 40], q_heads=q_heads, page_size=page_size, seed=page_size + q_heads)
    out = extend_attention(*b.args(), formulation=formulation)
    assert_close(out, reference.extend_attention(*b.args()), scale=2)


def test_mla_extend_at_deepseek_dims_with_128_heads():
    b = _mla([33], [6], q_heads=128, latent=512, rope=64, seed=3)
    assert_close(extend_attention(*b.args()), reference.extend_attention(*b.args()), scale=2)


def test_new_tokens_v_not_a_view_is_loaded():
    """The pool is the latent, the new tokens' V a separate tensor holding
    other values: the prefix takes V from K, the new tokens must load theirs."""
    b = _mla([25, 9], [14, 30], latent_extend=False, seed=5)
    assert not torch.equal(b.v_extend, b.k_extend[..., :LATENT])
    assert_close(extend_attention(*b.args()), reference.extend_attention(*b.args()), scale=2)


def test_a_v_at_another_offset_is_still_loaded_as_v():
    """V = K[..., ROPE:] shares K's storage but not its first values."""
    b = _mla([30], [20], seed=6)
    b.pool.v_buffer = b.pool.k_buffer[..., ROPE:]
    b.v_extend = b.k_extend[..., ROPE:]
    assert_close(extend_attention(*b.args()), reference.extend_attention(*b.args()), scale=2)


@pytest.mark.parametrize("fp8_dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_mla_extend_over_an_fp8_latent_pool(fp8_dtype):
    """An fp8 latent pool (store_kv's bytes): V decoded from the K bytes with
    v_scale, against the reference fed the same pool."""
    b = _mla([26, 7], [9, 17], seed=7)
    scale = 0.5
    b.pool.k_buffer = (b.pool.k_buffer.float().cpu() / scale).to(fp8_dtype).to(DEVICE)
    b.pool.v_buffer = b.pool.k_buffer[..., :LATENT]
    out = extend_attention(*b.args(), k_scale=scale, v_scale=scale)
    assert_close(out, reference.extend_attention(*b.args(), k_scale=scale, v_scale=scale), scale=2)


@pytest.mark.parametrize("formulation", ["dot", "sum"])
def test_mla_target_verify_with_a_custom_mask(formulation):
    prefix, extend = [40, 3], [8, 16]
    b = _mla(prefix, extend, seed=8)
    mask, starts = verify_mask(prefix, extend, DEVICE)
    out = extend_attention(*b.args(), formulation=formulation, custom_mask=mask, mask_indptr=starts)
    want = reference.extend_attention(*b.args(), custom_mask=mask, mask_indptr=starts)
    assert_close(out, want, scale=2)


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_a_hidden_bad_latent_never_reaches_a_row(bad):
    """A non-finite latent value of new token `row` (its K and its V at once):
    rows before it cannot see it and stay finite and exact; rows from it on
    see it (a NaN score or value): not finite. The screening comes from the
    K tile itself (no V tile is loaded)."""
    b = _mla([11], [23], q_heads=4, dtype=torch.float32, seed=9)
    row = 13
    b.k_extend[row, 0, 5] = bad
    want = reference.extend_attention(*b.args())
    for formulation in ("dot", "sum"):
        out = extend_attention(*b.args(), formulation=formulation)
        assert torch.isfinite(out[:row]).all(), f"{formulation}: a hidden {bad} leaked"
        assert_close(out[:row], want[:row], scale=2)
        assert (~torch.isfinite(out[row:])).any(dim=-1).all(), f"{formulation}: a row that sees {bad} must show it"


DEEPSEEK_HEADS = {"q_heads": 16, "kv_heads": 1, "head_dim": 576, "v_head_dim": 512}
DEEPSEEK = {"batch": 2, "prefix_len": 500, "extend_len": 300, **DEEPSEEK_HEADS}


def test_the_planned_mla_launch_takes_v_from_k_everywhere():
    mla = DEEPSEEK
    for target in [*LOWERING_TARGETS, SM90, current_target()]:
        [spec] = planned_kernels("extend_attention", mla, torch.bfloat16, target)
        assert spec.constexprs["V_IN_K"] is True and spec.constexprs["NEW_V_IN_K"] is True, target
        [plain] = planned_kernels("extend_attention", {**mla, "head_dim": 128, "v_head_dim": 128}, torch.bfloat16,
                                  target)  # fmt: skip
        assert plain.constexprs["V_IN_K"] is False and plain.constexprs["NEW_V_IN_K"] is False, target


def test_the_latent_is_read_once_per_program_and_key():
    """Interpreter byte counts: with V the latent view, every program reads
    each prefix key's K row once from the pool and nothing more (V comes
    from the tile), and each new key up to its last row once from k_extend;
    with V a separate copy it also reads V's rows (what SGLang's extend
    does). `extend_traffic` (inspect's model) counts the same K / V bytes."""
    prefix, extend, heads, head_dim = 45, 37, 2, LATENT + ROPE
    b = _mla([prefix], [extend], q_heads=heads, dtype=torch.float32, seed=10)
    with count_loads(b.pool.k_buffer) as pool, count_loads(b.k_extend) as new:
        extend_attention(*b.args())
    shape = {"batch": 1, "prefix_len": prefix, "extend_len": extend, "q_heads": heads, "kv_heads": 1,
             "head_dim": head_dim, "v_head_dim": LATENT}  # fmt: skip
    [spec] = planned_kernels("extend_attention", shape, torch.float32, current_target())
    block_m = spec.constexprs["BLOCK_M"]
    blocks = -(-extend // block_m)
    assert pool.launches == [("extend_kernel", heads * blocks)]
    elt = 4
    assert pool.bytes == heads * blocks * prefix * head_dim * elt, "the pool's latent is read more than once"
    # the new tokens' causal diagonal is screened for non-finite values: the
    # latent read once more there, in a plain layout (cached on a GPU)
    new_keys = sum(min((j + 1) * block_m, extend) for j in range(blocks))
    assert heads * new_keys * head_dim * elt <= new.bytes <= heads * new_keys * (head_dim + LATENT) * elt

    copy = _mla([prefix], [extend], q_heads=heads, dtype=torch.float32, seed=10, latent_extend=False)
    copy.pool.v_buffer = copy.pool.k_buffer[..., :LATENT].clone()
    with (count_loads(copy.pool.k_buffer) as k_only, count_loads(copy.pool.v_buffer) as v_rows,
          count_loads(copy.k_extend) as new_k, count_loads(copy.v_extend) as new_v):  # fmt: skip
        extend_attention(*copy.args())
    assert k_only.bytes == pool.bytes and v_rows.bytes == heads * blocks * prefix * LATENT * elt
    assert new.bytes == new_k.bytes + new_v.bytes - heads * new_keys * LATENT * elt, "V loaded besides the check"

    once = extend_traffic([prefix], [extend], heads, head_dim, LATENT, elt, block_m, v_in_k=True, new_v_in_k=True)
    twice = extend_traffic([prefix], [extend], heads, head_dim, LATENT, elt, block_m)
    assert twice - once == v_rows.bytes + heads * new_keys * LATENT * elt


@pytest.mark.lowering
@pytest.mark.parametrize("kv_dtype", ["auto", "fp8_e4m3", "fp8_e5m2"])
def test_shipped_mla_configs_do_not_spill(kv_dtype):
    """Every target's MLA plans (decode, extend and target verify's extend),
    the latent read once, over a model-dtype or an fp8 pool, compile without
    spills (Kunlun's on sm_90, the proxy for its local memory). bf16 extend:
    sm_90 32 x 32 195 registers, gfx942 64 x 32 407 (64 x 64 spilled 2688
    bytes), Kunlun 4 x 4 233; an fp8 pool (docs/decode-occupancy.md, "MLA
    extend"): gfx942 extend 64 x 16 375 (e4m3 spilled 60 bytes of scalar
    registers before its tiles were decoded compare-free), sm_90 decode 248
    (1192 bytes before). The fp8 decode's per-target choices are pinned:
    e4m3's NaN code by arithmetic on gfx942 only, the unit at run time
    (FP8_RUNTIME_UNIT) on gfx942, a constant in Kunlun's plans, none on
    sm_90, whose own fp8 conversion reads the pool (KV_FORMAT 3 / 4;
    ops/attention/fp8.py, the targets' files)."""
    run_time_unit = {("hip", "decode_partial_kernel"): True, ("hip", "extend_kernel"): True,
                     ("cuda", "decode_partial_kernel"): False, ("cuda", "extend_kernel"): False,
                     ("kunlun", "decode_partial_kernel"): False, ("kunlun", "extend_kernel"): False}  # fmt: skip
    shapes = [("decode_attention", {"batch": 4, "context_len": 2000, **DEEPSEEK_HEADS}),
              *(("extend_attention", {**DEEPSEEK, "custom_mask": mask}) for mask in (False, True))]  # fmt: skip
    jobs = []
    for target in LOWERING_TARGETS:
        for op, shape in shapes:
            for spec in planned_kernels(op, {**shape, "kv_dtype": kv_dtype}, torch.bfloat16, target):
                if spec.name == "decode_merge_kernel" and kv_dtype != "auto":
                    continue  # the merge reads fp32 partials whatever the pool: compiled with "auto"
                if "V_IN_K" in spec.constexprs:
                    assert spec.constexprs["V_IN_K"] is True, (spec.label, target)
                    fp8 = kv_dtype != "auto"
                    assert spec.constexprs["FP8_RUNTIME_UNIT"] is (fp8 and run_time_unit[target.name, spec.name])
                    assert spec.constexprs["FP8_NAN_ARITH"] is (fp8 and target.name == "hip"), (spec.label, target)
                jobs.append((spec, aot_target(target)))
    assert len(jobs) == len(LOWERING_TARGETS) * (4 if kv_dtype == "auto" else 3)
    for result in compile_ahead_of_time(jobs, artifacts=True):
        assert result["ok"], result.get("error")
        assert kernel_cost(result)["spill_bytes"] == 0, (result["spec"].label, result["target"], kernel_cost(result))
