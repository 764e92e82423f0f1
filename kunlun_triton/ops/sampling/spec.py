"""Specs of the sampling ops for doctor, bench and tune (see `ops.spec`).

`sample` is checked against the reference draw: the reference uses the same
counter-based Gumbel noise, so the tokens must agree (up to fp32 vs float64
breaking a near-tie differently, at most 2% of rows) and every token must be
inside the reference's kept set. `greedy` must equal the reference argmax
exactly; the renormalising filters must match the float64 sort-based
reference. The statistical tests of the draw live in tests/ops/sampling.

Bench: `sample` with SGLang's default-ish filters (temperature 0.7, top-k 50,
top-p 0.9, min-p 0.05 on a quarter of the rows) over batch x vocabulary,
against the fp32 sort + cumsum + multinomial torch path (the "torch" column
is `reference.sort_based_sample`, SGLang's own method) and, where FlashInfer
is installed on a GPU, its ``top_k_top_p_sampling_from_logits`` (the
"flashinfer" column). Bytes are one read of the logits (the ideal), so GB/s
says how far from one pass a call is.

`kernels` (for the lowering tests and ``kunlun-triton inspect``) is the
launch plan of the op at a shape (`ops.sample_plan`), as AOT compile specs.
"""

from __future__ import annotations

import torch

from ...runtime.config_keys import TILE
from ..spec import OpCase, OpSpec, baselines
from . import ops, reference, renorm, tree_sampling
from .ops import greedy, sample
from .renorm import min_p_renorm_probs, renorm_probs, top_k_renorm_probs, top_p_renorm_probs
from .tree_sampling import tree_speculative_sampling_target_only

MAX_MISMATCH = 0.02


def _logits(batch, vocab, dtype, device, seed=0):
    gen = torch.Generator().manual_seed(seed * 7919 + batch * 7 + vocab)
    return (2 * torch.randn(batch, vocab, generator=gen)).to(dtype).to(device)


def _params(batch, device):
    """SGLang's default-ish filters: temperature 0.7, top-k 50, top-p 0.9,
    min-p 0.05 on every fourth row, distinct seeds."""
    temps = torch.full((batch,), 0.7, device=device)
    top_ks = torch.full((batch,), 50, dtype=torch.int32, device=device)
    top_ps = torch.full((batch,), 0.9, device=device)
    min_ps = torch.zeros(batch, device=device)
    min_ps[::4] = 0.05
    seeds = torch.arange(batch, dtype=torch.int64, device=device) + 1000
    positions = torch.full((batch,), 77, dtype=torch.int64, device=device)
    return temps, top_ks, top_ps, min_ps, seeds, positions


def compare_draws(out, ref, dtype) -> tuple[float, bool]:
    """(fraction of rows off the reference draw, ok): every token kept by the
    reference, and at most MAX_MISMATCH of the rows drawing another token."""
    tokens, (expected, allowed) = out.cpu(), (ref[0].cpu(), ref[1].cpu())
    inside = bool((allowed.gather(1, tokens.view(-1, 1)) > 0).all())
    mismatch = (tokens != expected).double().mean().item() if tokens.numel() else 0.0
    return mismatch, inside and mismatch <= max(MAX_MISMATCH, 1.0 / max(tokens.numel(), 1))


def compare_exact(out, ref, dtype) -> tuple[float, bool]:
    mismatch = (out.cpu() != ref.cpu()).double().mean().item() if out.numel() else 0.0
    return mismatch, mismatch == 0.0


def sample_case(shape, dtype, device) -> OpCase:
    batch, vocab = shape["batch"], shape["vocab"]
    logits = _logits(batch, vocab, dtype, device)
    params = _params(batch, device)
    temps, top_ks, top_ps, min_ps, seeds, positions = params

    def ref():
        return (reference.sample(logits, temps, top_ks, top_ps, min_ps, seeds, positions),
                reference.filtered_probs(logits, temps, top_ks, top_ps, min_ps))  # fmt: skip

    baselines = {"torch": lambda: reference.sort_based_sample(logits, temps, top_ks, top_ps, min_ps)}
    flashinfer = _flashinfer_sampler(logits)
    if flashinfer is not None:
        baselines["flashinfer"] = lambda: flashinfer(logits / temps.view(-1, 1), top_ks, top_ps)
    return OpCase(
        run=lambda config: sample(logits, *params, check=False, config=config),
        reference=ref,
        dims={"vocab": vocab},
        bytes_moved=logits.numel() * logits.element_size(),
        args=(logits, *params),
        # the float64 oracle is no baseline: SGLang's sort-based path is
        time_reference=False,
        baselines=baselines,
    )


def _flashinfer_sampler(logits):
    """FlashInfer's ``top_k_top_p_sampling_from_logits`` where it is
    installed and the logits are on a GPU (the issue's yardstick), else None."""
    if logits.device.type != "cuda":
        return None
    try:
        from flashinfer.sampling import top_k_top_p_sampling_from_logits
    except Exception:  # not installed, or built for another torch
        return None
    return top_k_top_p_sampling_from_logits


def greedy_case(shape, dtype, device) -> OpCase:
    logits = _logits(shape["batch"], shape["vocab"], dtype, device)
    if shape.get("tie"):
        logits[0, [5, shape["vocab"] - 100]] = 50.0  # a tie: the lowest id wins
    return OpCase(
        run=lambda config: greedy(logits, check=False, config=config),
        reference=lambda: reference.greedy(logits),
        dims={"vocab": shape["vocab"]},
        bytes_moved=logits.numel() * logits.element_size(),
        args=(logits,),
        time_reference=False,
        baselines={"torch": lambda: torch.argmax(logits, dim=1)},
    )


def _renorm_case(op, filters):
    def make(shape, dtype, device) -> OpCase:
        batch, vocab = shape["batch"], shape["vocab"]
        probs = torch.softmax(_logits(batch, vocab, torch.float32, device, seed=1), dim=1).to(dtype)
        top_ks = torch.tensor([1, 2, 7, 50, vocab - 1, vocab, -1, 3, 20], device=device).repeat(batch)[:batch]
        top_ps = torch.linspace(0.1, 1.0, batch, device=device)
        min_ps = torch.linspace(0.0, 0.9, batch, device=device)
        given = {"top_ks": top_ks, "top_ps": top_ps, "min_ps": min_ps}
        given = {k: v for k, v in given.items() if k in filters}
        every = torch.full((batch,), vocab, device=device)
        full = {"top_ks": torch.where(top_ks < 1, vocab, top_ks) if "top_ks" in filters else every,
                "top_ps": top_ps if "top_ps" in filters else torch.ones(batch, device=device),
                "min_ps": min_ps if "min_ps" in filters else torch.zeros(batch, device=device)}  # fmt: skip
        return OpCase(
            run=lambda config: op(probs, *given.values(), check=False, config=config),
            reference=lambda: reference.renorm_probs(probs, full["top_ks"], full["top_ps"], full["min_ps"]).to(dtype),
            dims={"vocab": vocab},
            bytes_moved=2 * probs.numel() * probs.element_size(),
            args=(probs, *given.values()),
        )

    return make


def _vocabs(preset, quick):
    return [1000] if quick else sorted({32000, 128256, 151936, preset.vocab_size})


def sample_shapes(preset, quick):
    return [{"vocab": v, "batch": b} for v in _vocabs(preset, quick) for b in ([4] if quick else [1, 16, 64, 256])]


def renorm_shapes(preset, quick):
    return [{"vocab": v, "batch": b} for v in _vocabs(preset, quick) for b in ([9] if quick else [16, 256])]


def tune_candidates(quick):
    if quick:  # one tile per row, and two tiles per row
        return [{"BLOCK_R": 4, "BLOCK_V": v} for v in (1024, 512)]
    return [{"BLOCK_R": r, "BLOCK_V": v} for r in (1, 2, 4, 8) for v in (1024, 2048, 4096, 8192) if r * v <= 16384]


def tune_shapes(preset, quick):
    # One batch per vocabulary: configs are looked up by the vocabulary only
    # (a row's draw must not depend on its batch), so one winner per vocab.
    vocab = 1000 if quick else preset.vocab_size
    return [{"vocab": vocab, "batch": 4 if quick else 64}]


def sample_kernels(shape, dtype, config):
    """The kernels `sample` launches at `shape` (every filter on: the bench's case)."""
    plan = ops.sample_plan(shape["batch"], shape["vocab"], ops._config("sample", shape["vocab"], config))
    return ops.plan_kernel_specs(plan, ops.sample_arg_dtypes(dtype))


def greedy_kernels(shape, dtype, config):
    plan = ops.sample_plan(shape["batch"], shape["vocab"], ops._config("greedy", shape["vocab"], config),
                           sampling=False, top_k=False, top_p=False, min_p=False)  # fmt: skip
    return ops.plan_kernel_specs(plan, ops.greedy_arg_dtypes(dtype))


def _renorm_kernels(op_name):
    def kernels(shape, dtype, config):
        return renorm.renorm_kernel_specs(op_name, shape["batch"], shape["vocab"], dtype, config)

    return kernels


# A draft tree of 8 nodes, 4 levels (root; 3 children; 2, 1 grandchildren;
# one great-grandchild): branching and a chain, as EAGLE's top-k trees.
TREE_PARENTS = (-1, 0, 0, 0, 1, 1, 2, 4)
TREE_SPEC = 4  # accept_index's width: the tree's depth + 1


def tree_inputs(batch, vocab, device, seed=0, parents=TREE_PARENTS, spec=TREE_SPEC, agree=0.5):
    """The arguments of one `tree_speculative_sampling_target_only` call:
    fresh outputs as SGLang makes them (predicts 0, accept_index -1,
    draft_probs 0), a peaked target, and drafts that take the parent's most
    likely token with probability `agree` (else a random one)."""
    gen = torch.Generator().manual_seed(seed * 7919 + batch * 7 + vocab)
    draft = len(parents)
    layout = [reference.tree_layout(parents, b * draft) for b in range(batch)]
    index, first_child, sibling = (torch.stack([t[i] for t in layout]) if batch else torch.zeros(0, draft, dtype=torch.int64)
                                   for i in range(3))  # fmt: skip
    target = torch.softmax(3 * torch.randn(batch, draft, vocab, generator=gen), dim=-1)
    parent_rows = target[:, [max(p, 0) for p in parents]]
    random = torch.randint(0, vocab, (batch, draft), generator=gen)
    candidates = torch.where(torch.rand(batch, draft, generator=gen) < agree, parent_rows.argmax(-1), random)
    coins, final = torch.rand(batch, draft, generator=gen), torch.rand(batch, generator=gen)
    to = lambda t: t.to(device)  # noqa: E731
    return (to(torch.zeros(batch * draft, dtype=torch.int32)), to(torch.full((batch, spec), -1, dtype=torch.int32)),
            to(torch.zeros(batch, dtype=torch.int32)), to(candidates), to(index), to(first_child), to(sibling),
            to(coins), to(final), to(target), to(torch.zeros_like(target)))  # fmt: skip


def _fresh(args):
    """Copies of the in-place outputs (predicts, accept_index, accept_token_num, draft_probs)."""
    return tuple(a.clone() if i in (0, 1, 2, 10) else a for i, a in enumerate(args))


def compare_tree(out, ref, dtype) -> tuple[float, bool]:
    """(fraction of requests whose predicts, accept_index or count differ, ok):
    at most MAX_MISMATCH of them (fp32 sums against the float64 oracle can
    fall on either side of a coin)."""
    (pred, index, count), (r_pred, r_index, r_count) = ([t.cpu() for t in o] for o in (out, ref))
    batch = count.numel()
    if not batch:
        return 0.0, True
    differ = (pred.view(batch, -1) != r_pred.view(batch, -1)).any(1) | (index != r_index).any(1) | (count != r_count)
    mismatch = differ.double().mean().item()
    return mismatch, mismatch <= max(MAX_MISMATCH, 1.0 / batch)


def tree_case(shape, dtype, device) -> OpCase:
    args = tree_inputs(shape["batch"], shape["vocab"], device)

    def run(config=None):
        fresh = _fresh(args)
        tree_speculative_sampling_target_only(*fresh, check=False, config=config)
        return fresh[:3]

    def ref():
        fresh = _fresh(args)
        reference.tree_speculative_sampling_target_only(*fresh)
        return fresh[:3]

    return OpCase(
        run=run,
        reference=ref,
        dims={"vocab": shape["vocab"]},
        # the ideal: one read of the chosen node's target and draft rows per request
        bytes_moved=2 * shape["batch"] * shape["vocab"] * 4,
        args=args,
        time_reference=False,  # a host loop, no baseline; SGLang's is CUDA C++ (sgl_kernel)
    )


def tree_shapes(preset, quick):
    return [{"vocab": v, "batch": b} for v in _vocabs(preset, quick) for b in ([2] if quick else [1, 16, 64])]


def tree_kernels(shape, dtype, config):
    return tree_sampling.tree_kernel_specs(shape["batch"], len(TREE_PARENTS), TREE_SPEC, shape["vocab"], config)


_DOCTOR_RENORM = (({"batch": 9, "vocab": 1000}, torch.float32),)
# Looked up by the vocabulary only: a row's blocks (and so its draw) never depend on the batch.
_TUNE = dict(tune_candidates=tune_candidates, tune_shapes=tune_shapes, bench_dtype=torch.float32, x_axis="batch",
             config_keys={"BLOCK_R": TILE, "BLOCK_V": TILE},  # rows per program (renorm), tokens per block
             lookup_dims=("vocab",))
SPECS = [
    OpSpec("sample", "sampling", sample_case, (({"batch": 33, "vocab": 1000}, torch.float32),), sample_shapes,
           compare=compare_draws, kernels=sample_kernels, function=sample, graph_capture=True,
           sglang=("sampling backend",), sglang_baselines=baselines("sampling:sample", "bench"), **_TUNE),
    OpSpec("greedy", "sampling", greedy_case,
           tuple(({"batch": 33, "vocab": 1000, "tie": True}, d) for d in (torch.float32, torch.bfloat16)),
           sample_shapes, compare=compare_exact, kernels=greedy_kernels, function=greedy, graph_capture=True,
           sglang=("sampling backend",), **_TUNE),
    OpSpec("top_k_renorm_probs", "sampling", _renorm_case(top_k_renorm_probs, ("top_ks",)), _DOCTOR_RENORM,
           renorm_shapes, kernels=_renorm_kernels("top_k_renorm_probs"), function=top_k_renorm_probs,
           sglang=("sampled speculative verify",), **_TUNE),
    OpSpec("top_p_renorm_probs", "sampling", _renorm_case(top_p_renorm_probs, ("top_ps",)), _DOCTOR_RENORM,
           renorm_shapes, kernels=_renorm_kernels("top_p_renorm_probs"), function=top_p_renorm_probs,
           sglang=("sampled speculative verify",), **_TUNE),
    OpSpec("min_p_renorm_probs", "sampling", _renorm_case(min_p_renorm_probs, ("min_ps",)), _DOCTOR_RENORM,
           renorm_shapes, kernels=_renorm_kernels("min_p_renorm_probs"), function=min_p_renorm_probs, **_TUNE),
    OpSpec("renorm_probs", "sampling", _renorm_case(renorm_probs, ("top_ks", "top_ps", "min_ps")), _DOCTOR_RENORM,
           renorm_shapes, kernels=_renorm_kernels("renorm_probs"), function=renorm_probs, **_TUNE),
    OpSpec("tree_speculative_sampling_target_only", "sampling", tree_case,
           (({"batch": 5, "vocab": 1000}, torch.float32),), tree_shapes, compare=compare_tree, kernels=tree_kernels,
           function=tree_speculative_sampling_target_only, sglang=("sampled speculative verify",), **_TUNE),
]  # fmt: skip
