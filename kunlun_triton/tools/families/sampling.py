"""Sampling family for `kunlun-triton doctor` and `bench`: sample, greedy,
top_k / top_p / min_p renorm probs.

Doctor: greedy must equal the reference argmax exactly; renormalised probs
must match the float64 sort-based reference; `sample` draws N_DRAWS tokens
from one row (distinct positions) and must stay inside the reference's
support and pass a chi-square test against its distribution (error column:
total-variation distance between the empirical and the reference
distribution; a correct sampler fails the check with probability ALPHA).

Bench: `sample` with SGLang's default-ish filters (temperature 0.7, top-k 50,
top-p 0.9, min-p 0.05 on a quarter of the rows) over batch x vocabulary,
against the fp32 sort + cumsum + multinomial torch path ("torch") and, when
sglang imports, SGLang's own pytorch sampler ("sglang"). Bytes are one read
of the logits (the ideal), so GB/s says how far from one pass a call is.
"""

from __future__ import annotations


import torch

from ...ops import greedy, min_p_renorm_probs, sample, top_k_renorm_probs, top_p_renorm_probs
from ...reference import sampling as reference
from ...runtime import current_target
from ..checks import BenchCase, OpCheck
from ..presets import shape_values
from . import sglang_baseline
from ._lazy import LazyInputs

FAMILY = "sampling"
N_DRAWS = 512
ALPHA = 1e-6


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor, min_expected: float = 5.0) -> float:
    """Pearson goodness of fit of `counts` to `probs`; sparse cells pooled."""
    expected = probs.double().cpu() * counts.sum()
    counts = counts.double().cpu()
    big = expected >= min_expected
    observed = torch.cat([counts[big], counts[~big].sum().view(1)])
    expected = torch.cat([expected[big], expected[~big].sum().view(1)])
    keep = expected > 0
    stat = ((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum()
    dof = max(int(keep.sum()) - 1, 1)
    return torch.special.gammaincc(torch.tensor(dof / 2.0, dtype=torch.float64), stat / 2).item()


def _compare_draws(tokens, probs) -> tuple[float, bool]:
    tokens, probs = tokens.cpu(), probs.cpu()
    counts = torch.bincount(tokens, minlength=probs.numel())[: probs.numel()]
    tv = 0.5 * (counts.double() / counts.sum() - probs).abs().sum().item()
    inside = bool((probs[tokens] > 0).all()) and tokens.max().item() < probs.numel()
    return tv, inside and chi_square_p_value(counts, probs) > ALPHA


def _compare_exact(out, ref) -> tuple[float, bool]:
    mismatch = (out.cpu() != ref.cpu()).double().mean().item()
    return mismatch, mismatch == 0.0


def _logits(batch, vocab, dtype, device, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (2 * torch.randn(batch, vocab, generator=gen)).to(dtype).to(device)


def doctor_checks(device) -> list[OpCheck]:
    checks = []
    for dtype in (torch.float32, torch.bfloat16):
        logits = _logits(33, 1000, dtype, device)
        logits[0, [5, 900]] = 50.0  # a tie: lowest id
        checks.append(OpCheck("greedy", lambda x=logits: greedy(x), lambda x=logits: reference.greedy_tokens(x),
                              dtype=dtype, compare=_compare_exact))  # fmt: skip

    probs = torch.softmax(_logits(9, 1000, torch.float32, device, seed=1), dim=1)
    n = probs.shape[0]
    top_ks = torch.tensor([1, 2, 7, 50, 999, 1000, -1, 3, 20], device=device)
    top_ps = torch.linspace(0.1, 1.0, n, device=device)
    min_ps = torch.linspace(0.0, 0.9, n, device=device)
    every, whole, no_min = torch.full_like(top_ks, 1000), torch.ones_like(top_ps), torch.zeros_like(min_ps)
    checks += [
        OpCheck("top_k_renorm_probs", lambda: top_k_renorm_probs(probs, top_ks),
                lambda: reference.renorm_probs(probs, torch.where(top_ks < 1, 1000, top_ks), whole, no_min).float()),
        OpCheck("top_p_renorm_probs", lambda: top_p_renorm_probs(probs, top_ps),
                lambda: reference.renorm_probs(probs, every, top_ps, no_min).float()),
        OpCheck("min_p_renorm_probs", lambda: min_p_renorm_probs(probs, min_ps),
                lambda: reference.renorm_probs(probs, every, whole, min_ps).float()),
    ]  # fmt: skip

    vocab = 64
    row = _logits(1, vocab, torch.float32, device, seed=2)
    logits = row.expand(N_DRAWS, vocab).contiguous()
    positions = torch.arange(N_DRAWS, device=device)
    params = (0.8, 20, 0.9, 0.02)
    checks.append(
        OpCheck(
            "sample",
            lambda: sample(logits, *params, seeds=12345, positions=positions),
            lambda: reference.filtered_probs(
                row.cpu(), torch.tensor([params[0]]), torch.tensor([params[1]]),
                torch.tensor([params[2]]), torch.tensor([params[3]]),
            )[0],
            compare=_compare_draws,
        )
    )  # fmt: skip
    return checks


def _make_inputs(batch, vocab, device):
    gen = torch.Generator().manual_seed(batch * 7 + vocab)
    logits = (2 * torch.randn(batch, vocab, generator=gen)).to(device)
    temps = torch.full((batch,), 0.7, device=device)
    top_ks = torch.full((batch,), 50, dtype=torch.int32, device=device)
    top_ps = torch.full((batch,), 0.9, device=device)
    min_ps = torch.zeros(batch, device=device)
    min_ps[::4] = 0.05
    seeds = torch.arange(batch, dtype=torch.int64, device=device) + 1000
    positions = torch.full((batch,), 77, dtype=torch.int64, device=device)
    return logits, temps, top_ks, top_ps, min_ps, seeds, positions


def bench_cases(preset, args):
    device = current_target().device_type
    quick = getattr(args, "quick", False)
    sglang = sglang_baseline("sampling")
    default_vocabs = [1000] if quick else sorted({32000, 128256, 151936, preset.vocab_size})
    for vocab in shape_values(args, "vocab", default_vocabs):
        for batch in shape_values(args, "batch", [4] if quick else [1, 16, 64, 256]):
            inputs = LazyInputs(lambda b=batch, v=vocab: _make_inputs(b, v, device))
            params = {"vocab": vocab, "batch": batch, "dtype": "float32"}
            moved = batch * vocab * 4

            def ours(i=inputs):
                logits, temps, top_ks, top_ps, min_ps, seeds, positions = i.get()
                return sample(logits, temps, top_ks, top_ps, min_ps, seeds, positions, check_values=False)

            def torch_path(i=inputs):
                logits, temps, top_ks, top_ps, min_ps, _, _ = i.get()
                return reference.sort_based_sample(logits, temps, top_ks, top_ps, min_ps)

            impls = {"triton": ours, "torch": torch_path}
            if sglang is not None:

                def sglang_path(i=inputs):
                    logits, temps, top_ks, top_ps, min_ps, _, _ = i.get()
                    return sglang.sglang_torch_sample(logits, temps, top_ks, top_ps, min_ps, True)

                impls["sglang"] = sglang_path
            yield BenchCase(FAMILY, "sample", params, impls, bytes_moved=moved, x_axis="batch")
            yield BenchCase(
                FAMILY, "greedy", dict(params),
                {"triton": lambda i=inputs: greedy(i.get()[0]), "torch": lambda i=inputs: torch.argmax(i.get()[0], dim=1)},
                bytes_moved=moved, x_axis="batch",
            )  # fmt: skip


# ---- `kunlun-triton tune` hook ----
# One config (op "sampling", looked up by batch and vocab) serves every
# sampling op: `sample` is timed; the check runs sample, greedy and
# renorm_probs with the candidate against the reference.


def _check_sampling(inputs, config):
    """``check(tokens)`` of `sample`'s draws; greedy and renorm_probs are
    checked right away (the caller holds the candidate injected)."""
    from ...ops import renorm_probs
    from ...testing import assert_close

    logits, temps, top_ks, top_ps, min_ps, seeds, positions = inputs
    if not torch.equal(greedy(logits), reference.greedy_tokens(logits)):
        raise AssertionError(f"greedy with {config} is not the argmax")
    probs = torch.softmax(logits, dim=1)
    assert_close(renorm_probs(probs, top_ks, top_ps, min_ps, check_values=False),
                 reference.renorm_probs(probs, top_ks, top_ps, min_ps).float(), msg=f"renorm_probs with {config}")  # fmt: skip
    allowed = reference.filtered_probs(logits, temps, top_ks, top_ps, min_ps)
    expected = reference.sample(logits, temps, top_ks, top_ps, min_ps, seeds, positions)

    def check(tokens):
        if not bool((allowed.gather(1, tokens.view(-1, 1)) > 0).all()):
            raise AssertionError(f"sample with {config} drew a filtered-out token")
        # fp32 and the float64 reference may break a near-tie differently
        if int((tokens != expected).sum()) > max(1, tokens.numel() // 50):
            raise AssertionError(f"sample with {config} disagrees with the reference draw")

    return check


def tune_space(preset, args):
    from ...ops.sampling import CONFIG_OP
    from ._tuning import checked_thunk, config_injected, grid, with_warps

    quick = getattr(args, "quick", False)
    device = current_target().device_type
    if quick:  # one tile per row, and two tiles per row
        candidates = grid(BLOCK_R=(4,), BLOCK_V=(1024, 512))
    else:
        candidates = grid(lambda c: c["BLOCK_R"] * c["BLOCK_V"] <= 16384, BLOCK_R=(1, 2, 4, 8), BLOCK_V=(1024, 2048, 4096, 8192))
    candidates = with_warps(candidates, quick)

    def make_thunk(batch, vocab, config):
        inputs = _make_inputs(batch, vocab, device)
        with config_injected(sample, CONFIG_OP, config):
            check = _check_sampling(inputs, config)
        return checked_thunk(sample, CONFIG_OP, config, lambda: sample(*inputs, check_values=False), check)

    return [
        (CONFIG_OP, {"batch": batch, "vocab": vocab}, lambda c, b=batch, v=vocab: make_thunk(b, v, c), candidates)
        for vocab in shape_values(args, "vocab", [1000] if quick else [preset.vocab_size])
        for batch in shape_values(args, "batch", [4] if quick else [1, 16, 64, 256])
    ]
