"""Next-token sampling: greedy, temperature, top-k, top-p, min-p; seeded.

Semantics (SGLang's pytorch sampling backend, see `reference.sampling`):

1. ``x = logits / temperature``; a row with temperature 0 or top_k 1 is
   greedy: ``argmax(logits)``, ties to the lowest token id.
2. top-k and top-p together, on ``softmax(x)`` before either filter (SGLang's
   joint order): keep a token when fewer than top_k tokens are more likely
   and the mass of the tokens more likely than it is <= top_p. Tokens tied
   with the last kept value are all kept.
3. min-p: keep a token when its prob >= min_p * the top prob.
4. draw from the kept tokens in proportion to their probs (Gumbel-max).

The draw is a pure function of (seed, position, the row's logits and
parameters): the same in any batch order or composition, on the kernel and
on the torch fallback alike (the kernels cut every row into the same blocks,
set by the vocabulary alone). Without ``seeds``, seeds are drawn from
``generator`` (or torch's default generator on the logits' device), so runs
repeat from the generator's state.

Bad values: NaN logits are never drawn, +inf logits act as the largest
finite float32 (several +inf share the draw evenly). Logits of any finite
magnitude work: the kernels subtract the row max before dividing by the
temperature. A row with no finite logit returns token 0 (SGLang's choice
when sampling fails) without disturbing the other rows; ``strict=True``
raises instead (one device sync). Checked mode (``check=True``, the
default, and not ``KUNLUN_TRITON_CHECK=0``) validates the inputs and raises
ValueError for parameter values out of range before any kernel runs (one
device sync). ``check=False`` skips both when the caller has validated, as
SGLang's sampling params do: per-row tensors of the right dtype are then
taken as they are (their shape, device and contiguity are the caller's
promise), and numbers and other dtypes are still converted.

Launch plan (`sample_plan`, also what `OpSpec.kernels` compiles): see
`kernels` for the passes. A filter given as a plain number that filters
nothing (top_k -1, top_p 1.0, min_p 0.0) is switched off at compile time,
so temperature-only batches run two launches and never a pivot round;
temperature 0 or top_k 1 as a number runs `greedy`'s two launches.
"""

from __future__ import annotations

import numbers
import operator
from dataclasses import dataclass

import torch

from ...runtime import capabilities, current_target, launch_options, plan_cache, use_triton
from ..spec import explicit_config, lookup_config
from ..launch import KernelLaunch, LaunchSequence, constexpr_args, run_keywords
from ..validation import checked_mode, require_tensor
from . import kernels, pivot_kernels, reference

TOP_R = 4  # a block's largest values handed to stage 2 (S covers top-k <= ~70 at vocab 152k)
PIVOTS = 4  # keys a pivot round evaluates per read of the row
ROUNDS = 1  # pivot rounds launched; the last one finishes any row left (module docstring)
_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.int32: "i32", torch.int64: "i64"}


def _check_matrix(op: str, name: str, t) -> None:
    require_tensor(op, name, t, ndim=2)
    if t.shape[1] == 0:
        raise ValueError(f"{op}: {name} has an empty vocabulary dimension")


_constants: dict = {}


def _constant_rows(value, batch: int, dtype, device) -> torch.Tensor:
    """A cached read-only [batch] tensor of `value` (kernels never write
    their parameter tensors), so a number costs no allocation per call."""
    key = (value, batch, dtype, device)
    found = _constants.get(key)
    if found is None:
        if len(_constants) > 256:
            _constants.clear()
        found = _constants[key] = torch.full((batch,), value, dtype=dtype, device=device)
    return found


_KIND_DTYPES = {"float": (torch.float32,), "int": (torch.int32, torch.int64)}


def _per_row(op: str, name: str, value, batch: int, device, kind: str, check: bool = True) -> torch.Tensor:
    """`value` (a number or a [batch] tensor) as a contiguous [batch] tensor:
    kind "float" -> float32; "int" -> int32 or int64 as given (numbers: int64).
    Unchecked, a tensor of such a dtype is taken as it is."""
    if value.__class__ is torch.Tensor and value.dtype in _KIND_DTYPES[kind] and (
            not check or (value.shape == (batch,) and value.device == device and value.is_contiguous())):  # fmt: skip
        return value  # the common case (SGLang's), in a few attribute reads
    if _is_number(value):
        if kind != "float" and not isinstance(value, numbers.Integral):
            raise TypeError(f"{op}: {name} must be an integer, got {value!r}")
        if kind == "float":
            return _constant_rows(float(value), batch, torch.float32, device)
        if not -(2**63) <= value < 2**63:  # torch.full would raise a bare OverflowError
            raise ValueError(f"{op}: {name} must fit in int64, got {value}")
        return _constant_rows(int(value), batch, torch.int64, device)
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a number or a torch.Tensor, got {type(value).__name__}")
    if value.dim() != 1 or value.shape[0] != batch:
        raise ValueError(f"{op}: {name} must have shape [{batch}] (one per row), got {tuple(value.shape)}")
    if value.device != device:
        raise ValueError(f"{op}: {name} is on {value.device} but the {'probs' if 'renorm' in op else 'logits'} are on {device}")
    if kind == "float":
        if not value.dtype.is_floating_point:
            raise TypeError(f"{op}: {name} must be a floating-point tensor, got {value.dtype}")
        return value if value.dtype == torch.float32 and value.is_contiguous() else value.float().contiguous()
    if value.dtype.is_floating_point or value.dtype == torch.bool or value.is_complex():
        raise TypeError(f"{op}: {name} must be an integer tensor, got {value.dtype}")
    if value.dtype in (torch.int32, torch.int64) and value.is_contiguous():
        return value
    return value.to(torch.int64).contiguous()


def _raise_if_any(op: str, checks) -> None:
    """One device sync for all value checks: [(name, bad_mask, rule)]."""
    if not checks:
        return
    flags = torch.stack([bad.any() for _, bad, _ in checks]).tolist()
    for (name, bad, rule), flag in zip(checks, flags):
        if flag:
            rows = torch.nonzero(bad).flatten()[:8].tolist()
            raise ValueError(f"{op}: {name} must be {rule}; rows {rows} are not")


@plan_cache
def _looked_up_config(op: str, vocab: int) -> dict:
    return lookup_config(op, vocab=vocab)


def _config(op: str, vocab: int, config: dict | None) -> dict:
    """The launch config: `config`, or the one looked up by the vocabulary
    only (a row's blocks, hence its arithmetic, never depend on the batch);
    an explicit one over ``default.yaml`` (the one home of defaults)."""
    if config is not None:
        return explicit_config(op, config, vocab=vocab)
    return _looked_up_config(op, vocab)


def _next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def scratch_words(batch: int, n_blocks: int, top_r: int = TOP_R) -> int:
    """4-byte words of scratch a `sample`/`greedy` call allocates (the
    layout is `kernels._sections`)."""
    ns = batch * n_blocks
    return ns * (4 + 2 * top_r + 4 * PIVOTS) + (2 + kernels.ST_FIELDS.value) * batch


@dataclass(frozen=True)
class SamplePlan:
    n_blocks: int  # vocabulary blocks per row
    # (kernel name, grid, constexprs and launch options by name): what
    # `OpSpec.kernels` compiles and scripts/sampling_counts.py counts
    launches: list
    scratch_words: int  # 4-byte words of scratch (`scratch_words`)
    sampling: bool  # False: greedy's launches (argmax), which read no sampling parameter
    # what a call launches: each kernel with its constexprs and options, its
    # grid and its pick of `_CALL_ARGS` (`ops.launch`)
    calls: LaunchSequence


def sample_plan(batch: int, vocab: int, config: dict, *, sampling=True, top_k=True, top_p=True, min_p=True,
                target=None) -> SamplePlan:  # fmt: skip
    """The launches of one `sample` (or, with ``sampling=False``, `greedy`)
    call on `target` (default: the current one). The launcher and
    `OpSpec.kernels` both read it."""
    target = target or current_target()
    block_r, block_v = int(config["BLOCK_R"]), int(config["BLOCK_V"])
    n_blocks = -(-vocab // block_v)
    filters = sampling and (top_k or top_p or min_p)
    common = {"BLOCK_R": block_r, "TOP_R": TOP_R if filters else 1, "PIVOTS": PIVOTS,
              "IGNORES_OTHER": capabilities(target).load_ignores_other}  # fmt: skip
    has = {"HAS_TOP_K": sampling and top_k, "HAS_TOP_P": sampling and top_p, "HAS_MIN_P": sampling and min_p}
    block_grid, row_grid = (n_blocks, -(-batch // block_r)), (-(-batch // block_r),)
    launches = [
        ("block_stats_kernel", block_grid, {**common, "BLOCK_V": block_v, "SAMPLING": sampling, "NEED_SUM": has["HAS_TOP_P"]}),
        ("combine_kernel", row_grid, {**common, "NB_PAD": _next_pow2(n_blocks), "SAMPLING": sampling, **has}),
    ]
    for r in range(ROUNDS if filters else 0):
        launches.append(("pivot_kernel", block_grid, {**common, "BLOCK_V": block_v, **has}))
        launches.append(("decide_kernel", row_grid, {**common, "BLOCK_V": block_v, "NB_PAD": _next_pow2(n_blocks),
                                                     **has, "LAST": r == ROUNDS - 1}))  # fmt: skip
    options = launch_options(config, target)
    keywords = run_keywords(options)
    calls = LaunchSequence([(KernelLaunch(_KERNELS[name], constexpr_args(_KERNELS[name], **meta), keywords), grid,
                             _ARG_GETTERS[sampling][name]) for name, grid, meta in launches],
                           len(_CALL_ARGS if sampling else _GREEDY_CALL_ARGS))  # fmt: skip
    launches = [(name, grid, {**meta, **options}) for name, grid, meta in launches]
    return SamplePlan(n_blocks, launches, scratch_words(batch, n_blocks, common["TOP_R"]), sampling, calls)


@plan_cache
def _cached_plan(op: str, batch: int, vocab: int, sampling: bool, top_k: bool, top_p: bool, min_p: bool) -> SamplePlan:
    return sample_plan(batch, vocab, _looked_up_config(op, vocab), sampling=sampling, top_k=top_k, top_p=top_p,
                       min_p=min_p)  # fmt: skip


_KERNELS = {"block_stats_kernel": kernels.block_stats_kernel, "combine_kernel": kernels.combine_kernel,
            "pivot_kernel": pivot_kernels.pivot_kernel, "decide_kernel": pivot_kernels.decide_kernel}  # fmt: skip
# Argument names of each kernel, in order (pointers end in _ptr in the kernels).
_ARGS = {
    "block_stats_kernel": ("logits", "temperature", "seed", "position", "scratch", "n_rows", "vocab", "row_stride", "n_blocks"),
    "combine_kernel": ("logits", "temperature", "top_k", "top_p", "min_p", "seed", "position", "scratch", "out",
                       "n_rows", "vocab", "row_stride", "n_blocks"),
    "pivot_kernel": ("logits", "temperature", "min_p", "seed", "position", "scratch", "n_rows", "vocab", "row_stride", "n_blocks"),
    "decide_kernel": ("logits", "temperature", "top_k", "top_p", "min_p", "seed", "position", "scratch", "out",
                      "n_rows", "vocab", "row_stride", "n_blocks"),
}  # fmt: skip
# A call gathers every argument once, in this order; each launch picks its own.
_CALL_ARGS = ("logits", "temperature", "top_k", "top_p", "min_p", "seed", "position", "scratch", "out", "n_rows", "vocab",
              "row_stride", "n_blocks")  # fmt: skip
# `greedy` has no sampling parameters: its output stands in for them (never
# read), so its calls gather (and the fast path keys) seven arguments, not 13.
_GREEDY_CALL_ARGS = ("logits", "scratch", "out", "n_rows", "vocab", "row_stride", "n_blocks")
_STAND_INS = {"temperature": "out", "top_k": "out", "top_p": "out", "min_p": "out", "seed": "out", "position": "out"}
_ARG_GETTERS = {
    sampling: {name: operator.itemgetter(*(call_args.index(a if sampling else _STAND_INS.get(a, a)) for a in args))
               for name, args in _ARGS.items()}
    for sampling, call_args in ((True, _CALL_ARGS), (False, _GREEDY_CALL_ARGS))
}  # fmt: skip


def _launch(plan: SamplePlan, batch, vocab, logits, temperature, top_k, top_p, min_p, seed, position, scratch,
            out) -> None:  # fmt: skip
    if plan.sampling:  # _CALL_ARGS
        plan.calls((logits, temperature, top_k, top_p, min_p, seed, position, scratch, out, batch, vocab,
                    logits.stride(0), plan.n_blocks))  # fmt: skip
    else:  # _GREEDY_CALL_ARGS: the parameters are never read
        plan.calls((logits, scratch, out, batch, vocab, logits.stride(0), plan.n_blocks))


def plan_kernel_specs(plan, dtypes: dict) -> list:
    """`KernelSpec`s (ahead-of-time compile specs) of a plan's launches;
    `dtypes` maps each tensor argument to its torch dtype."""
    from ...introspect.aot import KernelSpec

    scalar_types = {"n_rows": "i32", "vocab": "i32", "row_stride": "i32", "n_blocks": "i32"}
    specs = []
    for name, _, meta in plan.launches:
        signature = {a + ("_ptr" if a not in scalar_types else ""): scalar_types.get(a) or "*" + _DTYPES[dtypes[a]]
                     for a in _ARGS[name]}  # fmt: skip
        constexprs = {k: v for k, v in meta.items() if k[:1].isupper()}
        signature.update({k: "constexpr" for k in constexprs})
        specs.append(KernelSpec(f"{_KERNELS[name].fn.__module__}:{name}", signature, constexprs))
    return specs


def sample_arg_dtypes(logits_dtype, top_k_dtype=torch.int32) -> dict:
    """The dtype of each tensor argument `sample`'s kernels get (SGLang
    passes int32 top-k; a number becomes int64)."""
    return {"logits": logits_dtype, "temperature": torch.float32, "top_k": top_k_dtype, "top_p": torch.float32,
            "min_p": torch.float32, "seed": torch.int64, "position": torch.int64, "scratch": torch.int32,
            "out": torch.int64}  # fmt: skip


def greedy_arg_dtypes(logits_dtype) -> dict:
    """`greedy` passes its output for the parameters its kernels never read."""
    return {**{a: torch.int64 for a in ("temperature", "top_k", "top_p", "min_p", "seed", "position", "out")},
            "logits": logits_dtype, "scratch": torch.int32}  # fmt: skip


def _is_number(value) -> bool:
    kind = type(value)
    if kind is int or kind is float:  # the common cases first, without an ABC check
        return True
    if kind is torch.Tensor or kind is bool:
        return False
    return isinstance(value, numbers.Number) and not isinstance(value, (bool, torch.Tensor))


def _plan_flags(vocab: int, temperatures, top_ks, top_ps, min_ps) -> tuple[bool, bool, bool, bool]:
    """(sampling, top_k, top_p, min_p): what the host knows for every row
    from parameters given as plain numbers: a filter that keeps everything
    (top_k -1 or past the vocabulary, top_p 1, min_p 0) is compiled out, and
    temperature 0 or top_k 1 makes the whole batch greedy (no noise, no
    filters). Tensors (SGLang's call) switch nothing off."""
    if temperatures.__class__ is torch.Tensor and top_ks.__class__ is torch.Tensor \
            and top_ps.__class__ is torch.Tensor and min_ps.__class__ is torch.Tensor:  # fmt: skip
        return True, True, True, True
    greedy = (_is_number(temperatures) and temperatures == 0) or (_is_number(top_ks) and top_ks == 1)
    return (
        not greedy,
        not greedy and not (_is_number(top_ks) and (top_ks == -1 or top_ks >= vocab)),
        not greedy and not (_is_number(top_ps) and top_ps == 1.0),
        not greedy and not (_is_number(min_ps) and min_ps == 0.0),
    )


def greedy(logits: torch.Tensor, *, check: bool = True, config: dict | None = None) -> torch.Tensor:
    """argmax per row of [batch, vocab] logits, ties to the lowest id; int64
    [batch]. NaN is never chosen; a row of only -inf/NaN gives 0.
    ``check=False`` (or ``KUNLUN_TRITON_CHECK=0``) skips the input checks."""
    if checked_mode(check):
        _check_matrix("greedy", "logits", logits)
    batch, vocab = logits.shape
    if not use_triton("greedy", logits):
        return reference.greedy(logits)
    out = logits.new_empty(batch, dtype=torch.int64)
    if batch == 0:
        return out
    if config is None:
        plan = _cached_plan("greedy", batch, vocab, False, False, False, False)
    else:
        plan = sample_plan(batch, vocab, _config("greedy", vocab, config), sampling=False, top_k=False, top_p=False,
                           min_p=False)  # fmt: skip
    scratch = logits.new_empty(plan.scratch_words, dtype=torch.int32)
    _launch(plan, batch, vocab, logits, out, out, out, out, out, out, scratch, out)  # no sampling parameters to read
    return out


def sample(
    logits: torch.Tensor,
    temperatures,
    top_ks,
    top_ps,
    min_ps,
    seeds=None,
    positions=None,
    generator: torch.Generator | None = None,
    *,
    check: bool = True,
    strict: bool = False,
    config: dict | None = None,
) -> torch.Tensor:
    """One next token per row; returns int64 token ids, shape [batch].

    logits: [batch, vocab] float32/float16/bfloat16, last dim contiguous.
    temperatures (>= 0; +inf, SGLang's fp32 of 1e308, weighs every finite
    logit alike), top_ks (>= 1, or -1 for no top-k; values past the
    vocabulary keep everything), top_ps (in (0, 1]), min_ps (in [0, 1]):
    one per row (a [batch] tensor) or one number for all rows.
    seeds, positions: int per row; with seeds, the token is a pure function
    of (seed, position, row). positions default to 0. Without seeds, seeds
    come from `generator` (or the default generator of the logits' device).
    See the module docstring for the filter order, bad rows and `check`.
    """
    op = "sample"
    checked = checked_mode(check)
    if checked:
        _check_matrix(op, "logits", logits)
    batch, vocab = logits.shape
    device = logits.device
    flags = _plan_flags(vocab, temperatures, top_ks, top_ps, min_ps)
    temperatures = _per_row(op, "temperatures", temperatures, batch, device, "float", checked)
    top_ks = _per_row(op, "top_ks", top_ks, batch, device, "int", checked)
    top_ps = _per_row(op, "top_ps", top_ps, batch, device, "float", checked)
    min_ps = _per_row(op, "min_ps", min_ps, batch, device, "float", checked)
    if seeds is None:
        seeds = _draw_seeds(batch, device, generator)
    seeds = _per_row(op, "seeds", seeds, batch, device, "int", checked)
    positions = _per_row(op, "positions", 0 if positions is None else positions, batch, device, "int", checked)
    if checked and batch:
        _raise_if_any(
            op,
            [
                ("temperatures", ~(temperatures >= 0), ">= 0 (+inf: uniform over the finite logits)"),
                ("top_ks", (top_ks < 1) & (top_ks != -1), ">= 1 (or -1 for no top-k)"),
                ("top_ps", ~((top_ps > 0) & (top_ps <= 1)), "in (0, 1]"),
                ("min_ps", ~((min_ps >= 0) & (min_ps <= 1)), "in [0, 1]"),
            ]
        )
    if strict and batch:
        _raise_if_any(op, [("logits", ~(logits > float("-inf")).any(dim=1), "a row with a finite or +inf value")])
    if not use_triton(op, logits):
        return reference.sample(logits, temperatures, top_ks, top_ps, min_ps, seeds, positions)
    out = logits.new_empty(batch, dtype=torch.int64)
    if batch == 0:
        return out
    if config is None:
        plan = _cached_plan(op, batch, vocab, *flags)
    else:
        sampling, top_k, top_p, min_p = flags
        plan = sample_plan(batch, vocab, _config(op, vocab, config), sampling=sampling, top_k=top_k, top_p=top_p,
                           min_p=min_p)  # fmt: skip
    scratch = logits.new_empty(plan.scratch_words, dtype=torch.int32)
    if seeds.dtype != torch.int64:
        seeds = seeds.to(torch.int64)
    if positions.dtype != torch.int64:
        positions = positions.to(torch.int64)
    _launch(plan, batch, vocab, logits, temperatures, top_ks, top_ps, min_ps, seeds, positions, scratch, out)
    return out


def _draw_seeds(batch: int, device, generator) -> torch.Tensor:
    """Fresh 63-bit seeds from `generator` (its own device) or the default
    generator of `device`."""
    gen_device = generator.device if generator is not None else device
    seeds = torch.randint(0, 2**63 - 1, (batch,), dtype=torch.int64, device=gen_device, generator=generator)
    return seeds.to(device)
