"""`tree_speculative_sampling_target_only`: SGLang's verify step for sampled
requests under speculative decoding.

Oracles: `reference.tree_speculative_sampling_target_only`, a host loop in
float64 written from the rule (not from the kernel), compared exactly:
with target probabilities that are multiples of 1/64 and coins that are odd
multiples of 1/512, every sum, product and comparison is exact in fp32 and
float64 alike and no coin ties a boundary, so accept/emit must agree to the
bit. Statistics: with drafts that disagree with the target, the first emitted
token follows the root's target distribution and the token after an
accepted draft follows that node's (chi-square, fixed seeds). Greedy: a
one-hot target emits exactly the argmax path whatever the coins.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from stats import chi_square_p_value
from strategies import DEVICE

from kunlun_triton.ops import sampling as api
from kunlun_triton.ops.sampling import reference as ref
from kunlun_triton.ops.sampling.spec import TREE_PARENTS, tree_inputs

ALPHA = 1e-4
OUTPUTS = ("predicts", "accept_index", "accept_token_num")


@st.composite
def trees(draw, max_nodes=8):
    """Parents of a draft tree (node 0 the root, each parent earlier): chains,
    stars and anything between."""
    nodes = draw(st.integers(1, max_nodes))
    shape = draw(st.sampled_from(["chain", "star", "any"]))
    if shape == "chain":
        return [-1] + list(range(nodes - 1))
    if shape == "star":
        return [-1] + [0] * (nodes - 1)
    return [-1] + [draw(st.integers(0, i - 1)) for i in range(1, nodes)]


def _depth(parents):
    depth = [0] * len(parents)
    for i in range(1, len(parents)):
        depth[i] = depth[parents[i]] + 1
    return max(depth)


def _layout(parents, batch):
    draft = len(parents)
    parts = [ref.tree_layout(parents, b * draft) for b in range(batch)]
    return [torch.stack([p[i] for p in parts]) for i in range(3)]


def _dyadic_probs(gen, batch, draft, vocab):
    counts = torch.zeros(batch, draft, vocab)
    for _ in range(64):  # 64 units of mass, most on a few tokens
        likely = torch.randint(0, min(vocab, 5), (batch, draft, 1), generator=gen)
        spread = torch.randint(0, vocab, (batch, draft, 1), generator=gen)
        pick = torch.where(torch.rand(batch, draft, 1, generator=gen) < 0.7, likely, spread)
        counts.scatter_add_(2, pick, torch.ones(batch, draft, 1))
    return counts / 64


def _dyadic_inputs(gen, parents, batch, vocab, spec, draft_mass=False):
    """Exactly representable inputs: probs k/64 (many zeros), coins (2k+1)/512,
    drafts half from the parent's likely tokens (so paths get accepted);
    draft_probs 0 (SGLang's) or, with `draft_mass`, k/64 as well."""
    draft = len(parents)
    target = _dyadic_probs(gen, batch, draft, vocab)
    draft_probs = _dyadic_probs(gen, batch, draft, vocab) if draft_mass else torch.zeros_like(target)
    candidates = torch.randint(0, min(vocab, 6), (batch, draft), generator=gen)
    coins = (2 * torch.randint(0, 256, (batch, draft), generator=gen) + 1) / 512
    final = (2 * torch.randint(0, 256, (batch,), generator=gen) + 1) / 512
    index, first_child, sibling = _layout(parents, batch)
    return [torch.zeros(batch * draft, dtype=torch.int32), torch.full((batch, spec), -1, dtype=torch.int32),
            torch.zeros(batch, dtype=torch.int32), candidates, index, first_child, sibling, coins, final, target,
            draft_probs]  # fmt: skip


def _run_both(args, thresholds=(1.0, 1.0), config=None):
    ours = [a.clone().to(DEVICE) for a in args]
    theirs = [a.clone() for a in args]
    api.tree_speculative_sampling_target_only(*ours, *thresholds, config=config)
    ref.tree_speculative_sampling_target_only(*theirs, *thresholds)
    return [t.cpu() for t in ours], theirs


@given(
    parents=trees(),
    batch=st.integers(1, 4),
    vocab=st.sampled_from([3, 8, 13, 40]),
    spec_extra=st.integers(-2, 1),
    thresholds=st.sampled_from([(1.0, 1.0), (0.25, 1.0), (1.0, 0.5), (0.5, 0.25), (0.0, 1.0)]),
    draft_mass=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_matches_the_float64_oracle_exactly(parents, batch, vocab, spec_extra, thresholds, draft_mass, seed):
    """Every output SGLang's kernel writes: predicts, accept_index,
    accept_token_num, and the rejected drafts' entries in draft_probs.
    accept_index's width S from 1 up to past the tree's depth + 1; draft
    probs SGLang's zeros or not (subtracted except for the bonus token)."""
    spec = max(1, _depth(parents) + 1 + spec_extra)
    args = _dyadic_inputs(torch.Generator().manual_seed(seed), parents, batch, vocab, spec, draft_mass)
    ours, theirs = _run_both(args, thresholds)
    for name, a, b in zip(OUTPUTS + ("draft_probs",), ours[:3] + ours[10:], theirs[:3] + theirs[10:]):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("vocab, config", [(300, None), (300, {"BLOCK_R": 2, "BLOCK_V": 64}),
                                           (13, {"BLOCK_R": 2, "BLOCK_V": 4}), (40, {"BLOCK_R": 1, "BLOCK_V": 8})])
def test_rows_wider_than_a_tile_match_the_oracle(vocab, config):
    """Rows over several tiles: the draw's crossing tile and the bisection
    inside it (tiles of 4 and 8: the first and the last lane of a tile are
    drawn often); odd batch against BLOCK_R 2; draft mass subtracted."""
    gen = torch.Generator().manual_seed(7)
    for _ in range(4):
        args = _dyadic_inputs(gen, list(TREE_PARENTS), 5, vocab, 4, draft_mass=True)
        ours, theirs = _run_both(args, config=config)
        for name, a, b in zip(OUTPUTS, ours[:3], theirs[:3]):
            assert torch.equal(a, b), name


def test_softmax_targets_agree_where_no_coin_is_on_a_boundary():
    """Ordinary fp32 softmax probs (sums rounded differently from float64):
    every request whose oracle answer does not move when the coins move by
    2e-6 (fp32 rounding is ~1e-7 here) must match exactly, and nearly all
    are such."""
    batch, vocab = 64, 500
    args = list(tree_inputs(batch, vocab, "cpu", seed=3))
    ours, theirs = _run_both(args, config={"BLOCK_R": 4, "BLOCK_V": 128})
    stable = torch.ones(batch, dtype=torch.bool)
    for delta in (-2e-6, 2e-6):
        moved = [a.clone() for a in args]
        moved[7], moved[8] = (moved[7] + delta).clamp(0, 0.999), (moved[8] + delta).clamp(0, 0.999)
        ref.tree_speculative_sampling_target_only(*moved)
        stable &= (moved[0].view(batch, -1) == theirs[0].view(batch, -1)).all(1) & (moved[2] == theirs[2])
    assert stable.sum() >= 0.9 * batch
    assert torch.equal(ours[0].view(batch, -1)[stable], theirs[0].view(batch, -1)[stable])
    assert torch.equal(ours[1][stable], theirs[1][stable]) and torch.equal(ours[2][stable], theirs[2][stable])
    assert (ours[2] > 0).any() and (ours[2] == 0).any()  # both accepting and rejecting requests


def _replicated(parents, target_rows, tokens, n, spec, seed):
    """n copies of one request with fresh coins from `seed`."""
    gen = torch.Generator().manual_seed(seed)
    draft = len(parents)
    index, first_child, sibling = _layout(parents, n)
    target = target_rows.view(1, draft, -1).expand(n, -1, -1).contiguous()
    return [torch.zeros(n * draft, dtype=torch.int32), torch.full((n, spec), -1, dtype=torch.int32),
            torch.zeros(n, dtype=torch.int32), torch.tensor(tokens).view(1, -1).expand(n, -1).contiguous(),
            index, first_child, sibling, torch.rand(n, draft, generator=gen), torch.rand(n, generator=gen),
            target, torch.zeros_like(target)]  # fmt: skip


def test_emitted_tokens_follow_the_target_when_the_draft_disagrees():
    """Root children draft tokens the target finds unlikely (and one it finds
    likely), each with children of their own. 6000 requests: the first
    emitted token ~ q_root, and after an accepted child x the next token ~ q_x
    (chi-square); the residual draw never repeats a rejected sibling."""
    vocab, n = 10, 6000
    gen = torch.Generator().manual_seed(11)
    parents = [-1, 0, 0, 0, 1, 1, 2]
    target = torch.softmax(torch.randn(len(parents), vocab, generator=gen) * 1.5, dim=-1)
    order = target[0].argsort()
    tokens = [0, int(order[-2]), int(order[0]), int(order[1]), 3, 4, 5]  # one likely draft, two unlikely
    args = _replicated(parents, target, tokens, n, spec=3, seed=12)
    out = [a.to(DEVICE) for a in args]
    api.tree_speculative_sampling_target_only(*out)
    predicts, accept_index, count = (t.cpu() for t in out[:3])
    first = predicts.view(n, -1)[:, 0].long()
    assert chi_square_p_value(torch.bincount(first, minlength=vocab), target[0].double()) > ALPHA
    for child in (1,):  # the likely draft: accepted often enough to test what follows it
        took = (count >= 1) & (accept_index[:, 1] == torch.arange(n) * len(parents) + child)
        following = predicts.view(n, -1)[took, child].long()
        assert following.numel() > 100
        assert chi_square_p_value(torch.bincount(following, minlength=vocab), target[child].double()) > ALPHA


def test_chain_bonus_token_follows_the_leaf_target():
    """A chain accepted to its end (S = depth + 1): the bonus token is drawn
    from the last node's target with no draft subtracted."""
    vocab, n = 8, 3000
    parents = [-1, 0, 1]
    target = torch.full((3, vocab), 0.005)
    target[0, 5] = target[1, 6] = 1 - 0.005 * (vocab - 1)  # the drafts 5, 6 are nearly sure
    target[2] = torch.softmax(torch.arange(vocab, dtype=torch.float32) / 3, dim=0)
    args = _replicated(parents, target, [0, 5, 6], n, spec=3, seed=5)
    out = [a.to(DEVICE) for a in args]
    api.tree_speculative_sampling_target_only(*out)
    predicts, count = out[0].cpu().view(n, -1), out[2].cpu()
    full = count == 2
    assert full.sum() > 0.8 * n
    bonus = predicts[full, 2].long()
    assert chi_square_p_value(torch.bincount(bonus, minlength=vocab), target[2].double()) > ALPHA


@settings(max_examples=8)
@given(parents=trees(), batch=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_a_one_hot_target_emits_the_greedy_path(parents, batch, seed):
    """Greedy stays lossless: with the target's mass on one token per node,
    any coins give the path of drafts equal to the argmax, then the argmax."""
    gen = torch.Generator().manual_seed(seed)
    vocab, draft = 6, len(parents)
    spec = _depth(parents) + 1
    best = torch.randint(0, vocab, (batch, draft), generator=gen)
    target = torch.nn.functional.one_hot(best, vocab).float()
    args = _dyadic_inputs(gen, parents, batch, vocab, spec)
    args[9], args[10] = target, torch.zeros_like(target)
    args[3] = torch.where(torch.rand(batch, draft, generator=gen) < 0.6, best[:, [max(p, 0) for p in parents]],
                          torch.randint(0, vocab, (batch, draft), generator=gen))  # fmt: skip
    out = [a.to(DEVICE) for a in args]
    api.tree_speculative_sampling_target_only(*out)
    for b in range(batch):
        node, path, emitted = 0, [0], []
        while True:  # follow the child whose draft is the argmax
            child = next((c for c in range(1, draft) if parents[c] == node and args[3][b, c] == best[b, node]), None)
            if child is None or len(path) == spec:
                break
            emitted.append(int(best[b, node]))
            node = child
            path.append(child)
        emitted.append(int(best[b, node]))
        assert out[2][b].item() == len(path) - 1
        assert out[1][b, : len(path)].tolist() == [b * draft + p for p in path]
        assert [out[0][b * draft + p].item() for p in path] == emitted


def test_a_request_draws_the_same_alone_in_any_batch():
    """Reproducible per request: given its coins (SGLang derives them from the
    request's seed), a request's outputs do not depend on the batch around it
    or its place in it."""
    batch, draft = 6, len(TREE_PARENTS)
    args = [a.to(DEVICE) for a in tree_inputs(batch, 300, DEVICE, seed=9)]
    config = {"BLOCK_R": 4, "BLOCK_V": 64}
    together = [a.clone() for a in args]
    api.tree_speculative_sampling_target_only(*together, config=config)
    order = torch.tensor([4, 0, 5, 2, 1, 3])
    for rows in (order, torch.tensor([2])):
        picked = [a[rows].clone() if a.dim() > 1 or a.numel() == batch else a for a in args]
        picked[0] = torch.zeros(len(rows) * draft, dtype=torch.int32, device=DEVICE)
        picked[4] = (torch.arange(len(rows), device=DEVICE) * draft).view(-1, 1) + torch.arange(draft, device=DEVICE)
        api.tree_speculative_sampling_target_only(*picked, config=config)
        assert torch.equal(picked[0].view(len(rows), -1), together[0].view(batch, -1)[rows])
        accept = torch.where(together[1] >= 0, together[1] % draft, -1)[rows]
        assert torch.equal(torch.where(picked[1] >= 0, picked[1] % draft, -1), accept)
        assert torch.equal(picked[2], together[2][rows])


@pytest.mark.parametrize("break_it, message", [
    (lambda a: a.__setitem__(3, a[3].to(torch.int32)), "candidates has dtype"),
    (lambda a: a.__setitem__(9, a[9][:, :, :-1].contiguous()), "draft_probs's shape"),
    (lambda a: a.__setitem__(1, a[1][:, :0].contiguous()), "must be >= 1"),
    (lambda a: a[3].__setitem__((1, 2), 1000), "candidates must be token ids"),
    (lambda a: a[5].__setitem__((0, 1), 0), "retrive_next_token must be node ids"),
    (lambda a: a[6].__setitem__((0, 6), 2), "a tree: no node is the child or sibling of two nodes"),
    (lambda a: a[4].__setitem__((0, 0), 99), "retrive_index must be rows of predicts"),
    (lambda a: a.append(1.5), "threshold_single must be <= 1"),
])  # fmt: skip
def test_bad_input_is_a_named_error_and_writes_nothing(break_it, message):
    args = list(tree_inputs(2, 1000, DEVICE))
    break_it(args)
    before = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    with pytest.raises((TypeError, ValueError), match=message):
        api.tree_speculative_sampling_target_only(*args)
    assert all(torch.equal(a, b) for a, b in zip(args, before) if isinstance(a, torch.Tensor))


def test_empty_batch_and_a_root_only_tree():
    args = [a.to(DEVICE) for a in tree_inputs(0, 50, DEVICE)]
    api.tree_speculative_sampling_target_only(*args)
    gen = torch.Generator().manual_seed(1)
    ours, theirs = _run_both(_dyadic_inputs(gen, [-1], 3, 9, 1))
    for name, a, b in zip(OUTPUTS, ours[:3], theirs[:3]):
        assert torch.equal(a, b), name


def test_a_draft_without_target_mass_is_never_accepted():
    """threshold_single 0 accepts any draft the target gives mass to, but not
    one it gives none (SGLang's has_target_mass guard): the zero-mass first
    child is skipped for its sibling, whatever the coins."""
    vocab, parents = 6, [-1, 0, 0]
    target = torch.tensor([[0.0, 0.5, 0.5, 0, 0, 0]] * 3)
    args = _replicated(parents, target, [0, 0, 2], 16, spec=2, seed=3)
    ours, theirs = _run_both(args, thresholds=(0.0, 1.0))
    assert ours[2].eq(1).all() and ours[1][:, 1].eq(torch.arange(16) * 3 + 2).all()
    for name, a, b in zip(OUTPUTS, ours[:3], theirs[:3]):
        assert torch.equal(a, b), name
