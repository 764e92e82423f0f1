"""Target verify (speculative decoding): extend_attention with a draft tree's
custom mask (SGLang's layout) against two oracles: the torch reference fed
the same mask, and, independent of any mask code, plain causal attention
over each draft token's own path (its ancestors, then itself) after the
same cached prefix. Random trees of any fan-out and chains (topk 1);
masked draft tokens carry large K / V so a leak would dominate; the prefix
columns and the entries above the diagonal hold junk (never read). MHA,
GQA, MLA's split head dim and fp8 pools; both formulations; bad masks
raise before anything is written; the mask is one constexpr (one more
compilation, none per shape)."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from strategies import DEVICE

from kunlun_triton.introspect.launches import count_specializations
from kunlun_triton.introspect.paged import extend_batch
from kunlun_triton.ops import extend_attention
from kunlun_triton.ops.attention import reference
from kunlun_triton.runtime import Target, targeting
from kunlun_triton.testing import assert_close

FORMULATIONS = ("dot", "sum")


def random_parents(n: int, topk: int, gen: torch.Generator) -> list[int]:
    """A draft tree of n tokens listed parents first: token 0 is the root
    (the last verified token), token i's parent one of the earlier tokens
    with fewer than `topk` children (topk 1: a chain)."""
    parents, children = [-1], [0] * n
    for i in range(1, n):
        open_ = [j for j in range(i) if children[j] < topk]
        j = open_[int(torch.randint(len(open_), (1,), generator=gen))]
        parents.append(j)
        children[j] += 1
    return parents


def path(parents, i) -> list[int]:
    """Token i's ancestors, root first, then i."""
    out = []
    while i >= 0:
        out.append(i)
        i = parents[i]
    return out[::-1]


def tree_block(parents, prefix: int, gen: torch.Generator, junk_above: bool = True) -> torch.Tensor:
    """The E x (P + E) mask block: row i sees its path. The prefix columns and
    the strict upper triangle are random junk, which neither the kernel nor
    the reference reads (prefix: SGLang's skip_prefix_custom_mask; above the
    diagonal: a tree lists parents first, causal order)."""
    n = len(parents)
    block = torch.randint(0, 2, (n, prefix + n), generator=gen, dtype=torch.uint8).bool()
    tree = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        tree[i, path(parents, i)] = True
    keep = torch.ones(n, n, dtype=torch.bool).tril() if junk_above else torch.ones(n, n, dtype=torch.bool)
    block[:, prefix:] = torch.where(keep, tree, block[:, prefix:])
    return block


def verify_case(prefix_lens, parents_list, *, q_heads=4, kv_heads=2, head_dim=32, v_head_dim=None,
                dtype=torch.float16, page_size=1, seed=0, lead=0, mask_dtype=torch.bool, loud=True,
                junk_above=True):  # fmt: skip
    """An ExtendBatch of the draft tokens, its (custom_mask, mask_indptr), the
    mask starting `lead` entries into its buffer. With `loud`, every draft
    token's K is scaled by 3 and V by 10, so a masked token that leaked
    into a row would move its output by far more than the tolerance."""
    extend = [len(p) for p in parents_list]
    b = extend_batch(prefix_lens, extend, q_heads=q_heads, kv_heads=kv_heads, head_dim=head_dim,
                     v_head_dim=v_head_dim, dtype=dtype, page_size=page_size, seed=seed, device=DEVICE)  # fmt: skip
    if loud:
        b.k_extend = (b.k_extend.float() * 3).to(dtype)
        b.v_extend = (b.v_extend.float() * 10).to(dtype)
    gen = torch.Generator().manual_seed(seed + 7)
    blocks = [tree_block(p, n, gen, junk_above).flatten() for p, n in zip(parents_list, prefix_lens)]
    junk = torch.randint(0, 2, (lead,), generator=gen, dtype=torch.uint8).bool()
    mask = torch.cat([junk, *blocks]).to(mask_dtype).to(DEVICE)
    starts = torch.tensor([lead] + [x.numel() for x in blocks]).cumsum(0).to(torch.int32).to(DEVICE)
    return b, mask, starts


def path_oracle(b, parents_list, dtype):
    """Row i of request r = causal attention of the path of i over the same
    prefix (the reference without any mask: a different code path)."""
    out = torch.zeros(b.q_extend.shape[0], b.q_extend.shape[1], b.v_extend.shape[2], dtype=torch.float32)
    q0 = 0
    for r, parents in enumerate(parents_list):
        for i in range(len(parents)):
            rows = torch.tensor([q0 + j for j in path(parents, i)], device=DEVICE)
            n = rows.numel()
            o = torch.empty(n, b.q_extend.shape[1], b.v_extend.shape[2], dtype=torch.float32, device=DEVICE)
            pool = b.pool
            indptr = torch.tensor([0, int(pool.kv_indptr[r + 1] - pool.kv_indptr[r])], dtype=torch.int32, device=DEVICE)
            res = reference.extend_attention(b.q_extend[rows], b.k_extend[rows], b.v_extend[rows], o, pool.k_buffer,
                                             pool.v_buffer, torch.tensor([0, n], dtype=torch.int32, device=DEVICE),
                                             indptr, pool.slots(r), n, b.sm_scale)  # fmt: skip
            out[q0 + i] = res[-1].cpu()
        q0 += len(parents)
    return out.to(dtype).to(DEVICE)


@pytest.mark.parametrize("formulation", FORMULATIONS)
def test_tree_rows_equal_causal_attention_over_their_own_paths(formulation):
    gen = torch.Generator().manual_seed(3)
    parents_list = [random_parents(7, 3, gen), random_parents(10, 2, gen), random_parents(4, 1, gen)]
    b, mask, starts = verify_case([21, 0, 35], parents_list, dtype=torch.float32, page_size=4, seed=5, lead=11)
    out = extend_attention(*b.args(), formulation=formulation, custom_mask=mask, mask_indptr=starts)
    assert_close(out, path_oracle(b, parents_list, torch.float32))
    # and the causal answer differs: the mask mattered at this scale
    causal = reference.extend_attention(*b.args())
    assert (causal.float() - out.float()).abs().max() > 1.0


@pytest.mark.parametrize("formulation", FORMULATIONS)
@given(
    drafts=st.lists(st.integers(1, 12), min_size=1, max_size=3),
    topk=st.sampled_from([1, 2, 4, 8]),
    prefix_cap=st.integers(0, 40),
    heads=st.sampled_from([(4, 2), (2, 2), (8, 1)]),
    head_dim=st.sampled_from([16, 40, 64]),
    dtype=st.sampled_from([torch.float16, torch.bfloat16, torch.float32]),
    page_size=st.sampled_from([1, 16]),
    mask_dtype=st.sampled_from([torch.bool, torch.uint8]),
    lead=st.integers(0, 5),
    seed=st.integers(0, 2**16),
)
def test_verify_matches_reference(formulation, drafts, topk, prefix_cap, heads, head_dim, dtype, page_size,
                                  mask_dtype, lead, seed):  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    parents_list = [random_parents(n, topk, gen) for n in drafts]
    prefix = [int(torch.randint(prefix_cap + 1, (1,), generator=gen)) for _ in drafts]
    b, mask, starts = verify_case(prefix, parents_list, q_heads=heads[0], kv_heads=heads[1], head_dim=head_dim,
                                  dtype=dtype, page_size=page_size, seed=seed, lead=lead, mask_dtype=mask_dtype)  # fmt: skip
    out = extend_attention(*b.args(), formulation=formulation, custom_mask=mask, mask_indptr=starts)
    want = reference.extend_attention(*b.args(), custom_mask=mask, mask_indptr=starts)
    assert_close(out, want, scale=2, msg=f"prefix {prefix} trees {parents_list}")


@pytest.mark.parametrize("formulation", FORMULATIONS)
def test_a_chain_is_the_causal_extend(formulation):
    """topk 1: each draft token sees every earlier one, so the masked call
    equals the plain causal call (both on the Triton path)."""
    parents_list = [[-1] + list(range(5)), [-1] + list(range(2))]
    b, mask, starts = verify_case([40, 3], parents_list, dtype=torch.float32, page_size=16, seed=8)
    out = extend_attention(*b.args(), formulation=formulation, custom_mask=mask, mask_indptr=starts)
    assert_close(out, extend_attention(*b.args(), formulation=formulation))


@pytest.mark.parametrize("formulation", FORMULATIONS)
def test_more_draft_tokens_than_a_row_block(formulation):
    """40 draft tokens: several query blocks (VERIFY_BLOCK_M 16 where the
    causal extend would take 64 rows a block), a mask read across tiles."""
    gen = torch.Generator().manual_seed(9)
    parents_list = [random_parents(40, 4, gen), random_parents(3, 1, gen)]
    b, mask, starts = verify_case([13, 50], parents_list, dtype=torch.float32, page_size=16, seed=9)
    out = extend_attention(*b.args(), formulation=formulation, custom_mask=mask, mask_indptr=starts,
                           config={"formulation": formulation, "BLOCK_M": 64, "BLOCK_N": 16, "VERIFY_BLOCK_M": 16})  # fmt: skip
    assert_close(out, path_oracle(b, parents_list, torch.float32))


@pytest.mark.parametrize("formulation", FORMULATIONS)
def test_mla_latent_pool_with_a_tree(formulation):
    """MLA in small: one latent head of 64 + 16 (split head dim), V a view of K."""
    gen = torch.Generator().manual_seed(4)
    parents_list = [random_parents(6, 2, gen), random_parents(5, 1, gen)]
    b, mask, starts = verify_case([9, 17], parents_list, q_heads=4, kv_heads=1, head_dim=80, v_head_dim=64, seed=4)
    b.pool.v_buffer = b.pool.k_buffer[..., :64]
    b.v_extend = b.k_extend[..., :64]
    out = extend_attention(*b.args(), formulation=formulation, custom_mask=mask, mask_indptr=starts)
    assert_close(out, reference.extend_attention(*b.args(), custom_mask=mask, mask_indptr=starts), scale=2)


@pytest.mark.parametrize("fp8_dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_pool_with_a_tree(fp8_dtype):
    gen = torch.Generator().manual_seed(6)
    parents_list = [random_parents(8, 3, gen), random_parents(4, 1, gen)]
    b, mask, starts = verify_case([30, 12], parents_list, page_size=4, seed=6)
    k_scale, v_scale = 0.05, 2.5
    b.pool.k_buffer = (b.pool.k_buffer.float().cpu() / k_scale).to(fp8_dtype).to(DEVICE)
    b.pool.v_buffer = (b.pool.v_buffer.float().cpu() / v_scale).to(fp8_dtype).to(DEVICE)
    out = extend_attention(*b.args(), custom_mask=mask, mask_indptr=starts, k_scale=k_scale, v_scale=v_scale)
    want = reference.extend_attention(*b.args(), k_scale=k_scale, v_scale=v_scale, custom_mask=mask,
                                      mask_indptr=starts)  # fmt: skip
    assert_close(out, want, scale=2)


def test_a_masked_inf_never_reaches_a_row():
    """Non-finite values of masked draft tokens (0 * inf is NaN) stay out;
    the rows whose path holds them turn non-finite."""
    parents = [-1, 0, 0, 1, 2]  # two branches: 0-1-3 and 0-2-4
    b, mask, starts = verify_case([6], [parents], dtype=torch.float32, seed=2, loud=False)
    b.v_extend[2] = float("inf")  # token 2: on the paths of 2 and 4 only
    out = extend_attention(*b.args(), custom_mask=mask, mask_indptr=starts, formulation="dot")
    assert torch.isfinite(out[[0, 1, 3]]).all()
    assert not torch.isfinite(out[[2, 4]]).all(dim=-1).any()
    want = reference.extend_attention(*b.args(), custom_mask=mask, mask_indptr=starts)
    assert_close(out[[0, 1, 3]], want[[0, 1, 3]])


@pytest.mark.sglang
@pytest.mark.parametrize("formulation", FORMULATIONS)
@pytest.mark.parametrize("kv_heads, group, head_dim", [(2, 1, 64), (2, 4, 128)])
def test_verify_matches_sglangs_extend_with_its_custom_mask(formulation, kv_heads, group, head_dim):
    """SGLang's own extend_attention_fwd on the same tree masks (theirs honours
    entries above the diagonal within a row block: the masks here have none)."""
    from kunlun_triton.sglang_plugin.tools.baselines.attention import sglang_extend

    gen = torch.Generator().manual_seed(head_dim)
    parents_list = [random_parents(8, 4, gen), random_parents(5, 1, gen), random_parents(12, 2, gen)]
    b, mask, starts = verify_case([20, 0, 37], parents_list, q_heads=kv_heads * group, kv_heads=kv_heads,
                                  head_dim=head_dim, page_size=16, seed=head_dim, junk_above=False)  # fmt: skip
    ours = extend_attention(*b.args(), formulation=formulation, custom_mask=mask, mask_indptr=starts)
    theirs = sglang_extend(*b.args(), custom_mask=mask, mask_indptr=starts.to(torch.int64))()
    assert_close(ours, theirs, scale=2)


def _bad(case, **changes):
    b, mask, starts = case
    kwargs = {"custom_mask": mask, "mask_indptr": starts, **changes}
    return b.args(), kwargs


@pytest.mark.parametrize(
    "changes, error, pattern",
    [
        (dict(mask_indptr=None), ValueError, "custom_mask was given without mask_indptr"),
        (dict(custom_mask=None), ValueError, "mask_indptr was given without custom_mask"),
        (dict(custom_mask="mask"), TypeError, "custom_mask must be a torch.Tensor"),
        (dict(custom_mask=torch.ones(200, dtype=torch.float16, device=DEVICE)), TypeError, "custom_mask has dtype torch.float16"),
        (dict(custom_mask=torch.ones(10, 20, dtype=torch.bool, device=DEVICE)), ValueError, "custom_mask must have 1 dims"),
        (dict(mask_indptr=torch.tensor([0.0, 1.0, 2.0], device=DEVICE)), TypeError, "mask_indptr has dtype torch.float32"),
        (dict(mask_indptr=torch.tensor([0, 27], dtype=torch.int32, device=DEVICE)), ValueError, "mask_indptr must have batch \\+ 1 = 3"),
        (dict(mask_indptr=torch.tensor([0, 27, 999], dtype=torch.int32, device=DEVICE)), ValueError,
         r"mask_indptr\[-1\] = 999 exceeds len\(custom_mask\)"),
        (dict(mask_indptr=torch.tensor([0, 28, 29], dtype=torch.int32, device=DEVICE)), ValueError,
         "mask_indptr gives request 0 a mask of 28 entries; its extend_len x \\(prefix_len \\+ extend_len\\) is 3 x 9"),
        (dict(sliding_window=4), ValueError, "custom_mask with a sliding_window is not supported"),
        (dict(unified_kv=True), ValueError, "custom_mask with unified_kv is not supported"),
        # metadata-only checks hold with checks off too (the kernel would ignore the mask there)
        (dict(unified_kv=True, check=False), ValueError, "custom_mask with unified_kv is not supported"),
        (dict(mask_indptr=None, check=False), ValueError, "custom_mask was given without mask_indptr"),
    ],
)
def test_bad_masks_raise_naming_the_argument_and_write_nothing(changes, error, pattern):
    case = verify_case([6, 1], [[-1, 0, 0], [-1]], seed=1, loud=False)  # sizes 3 x 9 = 27, 1 x 2 = 2
    args, kwargs = _bad(case, **changes)
    o = args[3]
    o.fill_(7.0)
    with pytest.raises(error, match=pattern):
        extend_attention(*args, **kwargs)
    assert (o == 7.0).all()


def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device="meta")


def test_the_mask_adds_one_compilation_and_none_per_shape():
    """Verify steps at every draft count, prefix and batch compile the masked
    kernel once; causal calls keep their one compilation (the mask is the
    CUSTOM_MASK constexpr and its two pointers, nothing per shape)."""
    q_heads, kv_heads, head_dim = 32, 8, 128
    pool = _meta(1 << 16, kv_heads, head_dim)
    cases = [(e, p, b) for e in (1, 2, 4, 8, 16, 63) for p in (0, 1, 17, 1000, 4097) for b in (1, 3, 64)]
    with targeting(Target("cuda", "sm_90", "meta", "test")), count_specializations() as counter:
        for extend, prefix, batch in cases:
            tokens = extend * batch
            q, k = _meta(tokens, q_heads, head_dim), _meta(tokens, kv_heads, head_dim)
            args = (q, k, torch.empty_like(k), torch.empty_like(q), pool, pool, _meta(batch + 1, dtype=torch.int32),
                    _meta(batch + 1, dtype=torch.int32), _meta(prefix * batch, dtype=torch.int32), extend,
                    head_dim**-0.5)  # fmt: skip
            extend_attention(*args, check=False)
            extend_attention(*args, check=False, custom_mask=_meta(batch * extend * (prefix + extend), dtype=torch.bool),
                             mask_indptr=_meta(batch + 1, dtype=torch.int64))  # fmt: skip
    assert counter.compilations() == {"kunlun_triton.ops.attention.extend_kernels:extend_kernel": 2}


VERIFY_SHAPE = {"batch": 4, "prefix_len": 300, "extend_len": 8, "q_heads": 32, "kv_heads": 8, "head_dim": 128,
                "custom_mask": True}  # fmt: skip
MLA_VERIFY_SHAPE = {"batch": 2, "prefix_len": 500, "extend_len": 8, "q_heads": 16, "kv_heads": 1, "head_dim": 576,
                    "v_head_dim": 512, "custom_mask": True}  # fmt: skip


@pytest.mark.lowering
def test_verify_kernels_lower_without_spills():
    """The masked extend as each target's config plans it (VERIFY_BLOCK_M):
    cuda sm_90, hip gfx942 and Kunlun's plan (on sm_90) over a bf16 and an
    fp8 pool, with no spills; MLA's 576-wide heads lower everywhere and keep
    everything in registers on sm_90 (on gfx942 the causal MLA extend
    already spills: not the mask's doing)."""
    from kunlun_triton.introspect import compile_ahead_of_time
    from kunlun_triton.introspect.sass import kernel_cost
    from kunlun_triton.ops.spec import planned_kernels
    from kunlun_triton.testing import LOWERING_TARGETS, aot_target

    jobs, spill_free = [], []
    for target in LOWERING_TARGETS:
        shapes = [VERIFY_SHAPE, {**VERIFY_SHAPE, "kv_dtype": "fp8_e4m3"}, MLA_VERIFY_SHAPE]
        for shape in shapes:
            for spec in planned_kernels("extend_attention", shape, torch.bfloat16, target):
                assert spec.constexprs["CUSTOM_MASK"] is True, spec.label
                jobs.append((spec, aot_target(target)))
                spill_free.append(shape is not MLA_VERIFY_SHAPE or target.name == "cuda")
    assert {t.name for t in LOWERING_TARGETS} >= {"cuda", "hip"}
    for result, no_spills in zip(compile_ahead_of_time(jobs, artifacts=True), spill_free):
        assert result["ok"], f"{result['spec'].label} on {result['target']}: {result.get('error')}"
        if no_spills:
            cost = kernel_cost(result)
            assert cost["spill_bytes"] == 0, f"{result['spec'].label} on {result['target']}: {cost}"


def test_verify_plans_its_own_row_tile_and_leaves_the_causal_plan_alone():
    """sm_90: VERIFY_BLOCK_M 32 rows with the mask, the causal extend keeps
    its 128; the two plans differ in BLOCK_M and CUSTOM_MASK only."""
    from kunlun_triton.ops.spec import planned_kernels
    from kunlun_triton.testing import LOWERING_TARGETS

    cuda = next(t for t in LOWERING_TARGETS if t.name == "cuda")
    (verify,) = planned_kernels("extend_attention", VERIFY_SHAPE, torch.bfloat16, cuda)
    (causal,) = planned_kernels("extend_attention", {**VERIFY_SHAPE, "custom_mask": False}, torch.bfloat16, cuda)
    assert (verify.constexprs["BLOCK_M"], causal.constexprs["BLOCK_M"]) == (32, 128)
    assert (verify.constexprs["CUSTOM_MASK"], causal.constexprs["CUSTOM_MASK"]) == (True, False)
    differ = {k for k in causal.constexprs if causal.constexprs[k] != verify.constexprs[k]}
    assert differ == {"BLOCK_M", "CUSTOM_MASK"}


@pytest.mark.sglang
@pytest.mark.parametrize("target", [Target("cuda", "sm_90", "meta", "test"), Target("hip", "gfx942", "meta", "test")],
                         ids=["sm_90", "gfx942"])  # fmt: skip
@pytest.mark.parametrize("draft_tokens", [8, 64])
def test_verify_costs_no_more_than_sglangs_per_key(target, draft_tokens):
    """`inspect --compare sglang --shape custom_mask=1` (Llama-3-8B layer, bf16,
    8 or 64 draft tokens over 4096 cached): no spills, and a request's verify
    costs no more instructions per key than SGLang's extend with its custom
    mask (docs/speculative.md): per (request, head), ceil(E / rows) programs,
    each running the prefix loop over the 4096 cached keys and the masked loop
    over the E draft tokens' keys (ours: the first pass's last loop; SGLang's:
    its extend loop)."""
    from kunlun_triton.tools.inspect_kernels import inspect_ops, resolve_preset

    prefix = 4096
    report = inspect_ops(["extend_attention"], target, resolve_preset("llama-3-8b"), torch.bfloat16, batch=8,
                         context=prefix, overrides={"extend_len": [draft_tokens], "custom_mask": [1]},
                         compare=("sglang",))  # fmt: skip
    kernels = report["ops"]["extend_attention"]["kernels"]
    (ours,), (theirs,) = ([k for k in kernels if k["impl"] == impl] for impl in ("ours", "sglang"))
    assert ours["constexprs"]["CUSTOM_MASK"] and theirs["constexprs"]["USE_CUSTOM_MASK"]
    assert ours["spill_bytes"] == 0, ours

    def per_request_head(kernel, rows, masked_loop):
        keys = kernel["items_per_loop"]
        program = -(-prefix // keys) * kernel["loops"][0] + -(-draft_tokens // keys) * masked_loop
        return -(-draft_tokens // rows) * program

    ours_cost = per_request_head(ours, ours["constexprs"]["BLOCK_M"], ours["loops"][len(ours["loops"]) // 2 - 1])
    theirs_cost = per_request_head(theirs, theirs["constexprs"]["BLOCK_M"], max(theirs["loops"][1:]))
    assert ours_cost <= theirs_cost, (ours_cost, theirs_cost, ours["loops"], theirs["loops"])
