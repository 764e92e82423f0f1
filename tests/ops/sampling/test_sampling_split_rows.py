"""`sample` and `greedy` with each row split over many programs: the draw's
statistics at vocabularies of several blocks (151936 and non-powers of two),
bitwise reproducibility across batch order and size, and the device-free
cost properties the design promises (programs at batch 1, bytes loaded per
row, counted under the interpreter).

Oracles: the float64 sort-based reference (`reference.filtered_probs`) with
chi-square tests (false-failure rate ALPHA per test, seeds fixed), the same
row sampled alone, and counts of the interpreter's loads.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from stats import chi_square_p_value
from strategies import DEVICE

from kunlun_triton.introspect.interpreter_counts import count_loads
from kunlun_triton.ops import sampling as api
from kunlun_triton.ops.sampling import ops
from kunlun_triton.ops.sampling import reference as ref
from kunlun_triton.runtime import get_config
from kunlun_triton.testing import shipped_target

ALPHA = 1e-5
VOCAB = 151936


def _peaked(batch, vocab, seed, lifted=24):
    """A language-model-like row: a Gaussian floor and a few tokens far above it."""
    gen = torch.Generator().manual_seed(seed)
    logits = 1.5 * torch.randn(batch, vocab, generator=gen)
    ids = torch.randperm(vocab, generator=gen)[:lifted]
    logits[:, ids] += torch.rand(lifted, generator=gen) * 8 + 2
    return logits


def _ref_probs(logits, temp, top_k, top_p, min_p):
    one = lambda v: torch.tensor([v], device=DEVICE)  # noqa: E731
    vocab = logits.shape[1]
    return ref.filtered_probs(logits[:1], one(temp), one(top_k if top_k > 0 else vocab), one(top_p), one(min_p))[0]


def test_a_batch_of_one_spreads_over_many_programs():
    cuda = shipped_target("cuda")
    config = ops._config("sample", VOCAB, get_config("sample", target=cuda, vocab=VOCAB))
    plan = ops.sample_plan(1, VOCAB, config, target=cuda)
    n_blocks, launches = plan.n_blocks, plan.launches
    grids = {name: grid for name, grid, _ in launches}
    assert grids["block_stats_kernel"][0] * grids["block_stats_kernel"][1] >= 64
    assert grids["pivot_kernel"][0] * grids["pivot_kernel"][1] >= 64
    # the cut depends on the vocabulary only: every row of every batch uses the same blocks
    assert {ops.sample_plan(b, VOCAB, config, target=cuda).n_blocks for b in (1, 7, 300)} == {n_blocks}


def test_the_interpreter_runs_the_plan():
    logits = _peaked(5, 5003, seed=1)
    config = {"BLOCK_R": 4, "BLOCK_V": 512}
    with count_loads(logits) as counts:
        api.sample(logits, 0.8, 40, 0.9, 0.05, seeds=torch.arange(5), config=config)
    launches = ops.sample_plan(5, 5003, ops._config("sample", 5003, config)).launches
    assert counts.launches == [(name, grid[0] * (grid[1] if len(grid) > 1 else 1)) for name, grid, _ in launches]
    assert counts.launches[0] == ("block_stats_kernel", 10 * 2)


MIXES = st.tuples(
    st.sampled_from([0.3, 0.7, 1.0, 1.8]),  # temperature
    st.sampled_from([-1, 1, 5, 50, 300, 1000, 2047, 5000]),  # top_k
    st.sampled_from([1.0, 0.99, 0.9, 0.5, 0.1]),  # top_p
    st.sampled_from([0.0, 0.0, 0.01, 0.1, 0.5]),  # min_p
)


@settings(max_examples=4)
@given(mixes=st.lists(MIXES, min_size=6, max_size=6), peaked=st.booleans(), seed=st.integers(0, 2**16))
def test_each_row_is_read_at_most_six_times(mixes, peaked, seed):
    """Bytes loaded from the logits per row, for any mix of filters, on
    Gaussian and peaked rows of 32 blocks of 2048 (the GPU block size)."""
    vocab = 32 * 2048 - 77
    batch = len(mixes)
    logits = _peaked(batch, vocab, seed) if peaked else 2 * torch.randn(batch, vocab, generator=torch.Generator().manual_seed(seed))
    temps, top_ks, top_ps, min_ps = (torch.tensor(v, device=DEVICE) for v in zip(*mixes))
    row_bytes = vocab * logits.element_size()
    with count_loads(logits, row_bytes) as counts:
        tokens = api.sample(logits, temps, top_ks, top_ps, min_ps, seeds=torch.arange(batch) + seed,
                            config={"BLOCK_R": 8, "BLOCK_V": 2048})  # fmt: skip
    assert max(counts.bytes_by_row.values()) <= 6 * row_bytes, {r: b / row_bytes for r, b in counts.bytes_by_row.items()}
    allowed = ref.filtered_probs(logits, temps, torch.where(top_ks < 1, vocab, top_ks), top_ps, min_ps)
    assert (allowed.gather(1, tokens.view(-1, 1)) > 0).all()


def test_temperature_only_and_greedy_read_each_row_once():
    vocab = 8 * 2048 + 5
    logits = 2 * torch.randn(4, vocab, generator=torch.Generator().manual_seed(3))
    config = {"BLOCK_R": 4, "BLOCK_V": 2048}
    for run in (lambda: api.sample(logits, 0.7, -1, 1.0, 0.0, seeds=1, config=config),
                lambda: api.greedy(logits, config=config)):  # fmt: skip
        with count_loads(logits) as counts:
            run()
        # one read of every row, plus (sample) the winner's logit to check it
        assert 4 * vocab * 4 <= counts.bytes <= 4 * vocab * 4 + 4 * 4
        assert [name for name, _ in counts.launches] == ["block_stats_kernel", "combine_kernel"]


# name: (vocab, BLOCK_V, logits, temperature, top_k, top_p, min_p); each case
# hits another way to a decision: the blocks' top values alone (small top-k,
# peaked top-p), the whole-row winner, pivot rounds (large top-k, flat top-p).
STAT_CASES = {
    "1000/128 top-k 7": (1000, 128, "peaked", 1.0, 7, 1.0, 0.0),
    "1000/128 top-k 300": (1000, 128, "flat", 0.8, 300, 1.0, 0.0),
    "1000/128 top-p 0.7": (1000, 128, "flat", 1.2, -1, 0.7, 0.0),
    "5003/512 joint": (5003, 512, "peaked", 0.9, 40, 0.9, 0.02),
    "5003/512 min-p": (5003, 512, "flat", 1.0, -1, 1.0, 0.3),
    "151936/2048 joint": (VOCAB, 2048, "peaked", 1.3, 12, 0.95, 0.0),
}


@pytest.mark.parametrize("name", sorted(STAT_CASES))
def test_split_rows_draw_from_the_reference_distribution(name):
    vocab, block_v, kind, temp, top_k, top_p, min_p = STAT_CASES[name]
    draws = 256 if vocab == VOCAB else 2048
    row = _peaked(1, vocab, seed=vocab) if kind == "peaked" else torch.randn(1, vocab, generator=torch.Generator().manual_seed(vocab))
    if vocab == VOCAB:  # a handful of tokens hold the mass: enough draws per cell
        row = row - 12.0
        row[0, torch.arange(6) * 25000 + 11] = torch.tensor([4.0, 3.5, 3.3, 3.0, 2.2, 1.0])
    logits = row.to(DEVICE).expand(draws, vocab).contiguous()
    positions = torch.arange(draws, device=DEVICE) * 5 + 3
    tokens = api.sample(logits, temp, top_k, top_p, min_p, seeds=20240607, positions=positions,
                        config={"BLOCK_R": min(draws, 256 if vocab < VOCAB else 64), "BLOCK_V": block_v})  # fmt: skip
    probs = _ref_probs(logits, temp, top_k, top_p, min_p)
    assert (probs[tokens] > 0).all(), "a token outside the kept set was drawn"
    assert chi_square_p_value(torch.bincount(tokens, minlength=vocab), probs) > ALPHA


def _mixed_rows(vocab):
    """12 rows that take every path: greedy, temperature only, small and
    large top-k, top-p, min-p, joint, NaN and all -inf rows."""
    logits = _peaked(12, vocab, seed=7)
    logits[3] = 2 * torch.randn(vocab, generator=torch.Generator().manual_seed(8))
    logits[9, ::3] = float("nan")
    logits[10] = float("-inf")
    temps = torch.tensor([0.0, 0.7, 1.0, 0.7, 1.3, 0.9, 1.0, 0.5, 0.8, 1.0, 1.0, 2.0])
    top_ks = torch.tensor([-1, -1, 5, 1000, -1, 50, -1, 20, 3000, 10, 4, 1], dtype=torch.int32)
    top_ps = torch.tensor([1.0, 1.0, 1.0, 0.95, 0.6, 0.9, 1.0, 0.8, 1.0, 0.9, 1.0, 1.0])
    min_ps = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 0.05, 0.2, 0.0, 0.01, 0.0, 0.0, 0.0])
    seeds = torch.arange(12, dtype=torch.int64) * 7919 + 5
    positions = torch.arange(12, dtype=torch.int64) + 1000
    return logits, (temps, top_ks, top_ps, min_ps, seeds, positions)


@pytest.mark.parametrize("vocab", [5003, VOCAB])
def test_a_rows_token_is_bitwise_the_same_in_any_batch(vocab):
    """Alone, in another order, next to other rows (which may need more
    rounds or none): the same token, with the config the op looks up."""
    logits, params = _mixed_rows(vocab)
    rows = range(12) if vocab < VOCAB else (1, 3, 5)
    pick = torch.tensor(list(rows))
    logits, params = logits[pick].contiguous(), [p[pick] for p in params]
    batch = api.sample(logits, *params)
    perm = torch.randperm(len(pick), generator=torch.Generator().manual_seed(1))
    assert torch.equal(api.sample(logits[perm], *(p[perm] for p in params)), batch[perm])
    doubled = api.sample(torch.cat([logits, logits.flip(0)]), *(torch.cat([p, p.flip(0)]) for p in params))
    assert torch.equal(doubled, torch.cat([batch, batch.flip(0)]))
    for i in range(len(pick)) if vocab < VOCAB else (0,):
        assert torch.equal(api.sample(logits[i : i + 1], *(p[i : i + 1] for p in params)), batch[i : i + 1])
    if vocab < VOCAB:
        assert batch[list(rows).index(10)] == 0  # no finite logit: token 0
        assert batch[list(rows).index(9)] % 3 != 0  # NaN never drawn
        assert torch.equal(batch[[0, 11]], torch.argmax(logits[[0, 11]], dim=1))


def test_greedy_split_rows_pick_the_lowest_id_of_a_tie():
    vocab = 5003
    logits = torch.randn(4, vocab, generator=torch.Generator().manual_seed(2))
    logits[0, [4000, 700, 2500]] = 9.0  # tie across three blocks
    logits[1, :] = float("nan")
    logits[1, 4999] = -1.0
    logits[2, :] = float("-inf")
    logits[3, [5002, 0]] = float("inf")
    expected = [700, 4999, 0, 0]
    for config in (None, {"BLOCK_R": 1, "BLOCK_V": 512}, {"BLOCK_R": 4, "BLOCK_V": 1024}):
        assert api.greedy(logits, config=config).tolist() == expected
        assert api.sample(logits, 0.0, -1, 1.0, 0.0, config=config).tolist() == expected
