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
on the torch fallback alike. Without ``seeds``, seeds are drawn from
``generator`` (or torch's default generator on the logits' device), so runs
repeat from the generator's state.

Bad values: NaN logits are never drawn, +inf logits act as the largest
finite float32. A row with no finite logit returns token 0 (SGLang's choice
when sampling fails) without disturbing the other rows; ``strict=True``
raises instead (one device sync). Parameter values out of range raise
ValueError before any kernel runs (one device sync; ``check_values=False``
skips it when the caller has validated, as SGLang's sampling params do).
"""

from __future__ import annotations

import numbers

import torch

from ...runtime import get_config, launch_options, use_triton
from ..validation import require_tensor
from . import kernels, reference


def _check_matrix(op: str, name: str, t) -> None:
    require_tensor(op, name, t, ndim=2)
    if t.shape[1] == 0:
        raise ValueError(f"{op}: {name} has an empty vocabulary dimension")


def _per_row(op: str, name: str, value, batch: int, device, kind: str) -> torch.Tensor:
    """`value` (a number or a [batch] tensor) as a contiguous [batch] tensor:
    kind "float" -> float32, "int32" / "int64" -> that integer type."""
    dtype = {"float": torch.float32, "int32": torch.int32, "int64": torch.int64}[kind]
    if isinstance(value, numbers.Number) and not isinstance(value, bool):
        if kind != "float" and not isinstance(value, numbers.Integral):
            raise TypeError(f"{op}: {name} must be an integer, got {value!r}")
        return torch.full((batch,), value, dtype=dtype, device=device)
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a number or a torch.Tensor, got {type(value).__name__}")
    if value.dim() != 1 or value.shape[0] != batch:
        raise ValueError(f"{op}: {name} must have shape [{batch}] (one per row), got {tuple(value.shape)}")
    if value.device != torch.device(device):
        raise ValueError(f"{op}: {name} is on {value.device} but the {'probs' if 'renorm' in op else 'logits'} are on {device}")
    if kind == "float" and not value.dtype.is_floating_point:
        raise TypeError(f"{op}: {name} must be a floating-point tensor, got {value.dtype}")
    if kind != "float" and (value.dtype.is_floating_point or value.dtype == torch.bool or value.is_complex()):
        raise TypeError(f"{op}: {name} must be an integer tensor, got {value.dtype}")
    return value.to(dtype).contiguous()


def _raise_if_any(op: str, checks) -> None:
    """One device sync for all value checks: [(name, bad_mask, rule)]."""
    if not checks:
        return
    flags = torch.stack([bad.any() for _, bad, _ in checks]).tolist()
    for (name, bad, rule), flag in zip(checks, flags):
        if flag:
            rows = torch.nonzero(bad).flatten()[:8].tolist()
            raise ValueError(f"{op}: {name} must be {rule}; rows {rows} are not")


def _launch_grid(rows: int, config: dict):
    return ((rows + config["BLOCK_R"] - 1) // config["BLOCK_R"],)


def _config(op: str, batch: int, vocab: int, config: dict | None) -> dict:
    # Defaults when no YAML names them; autotune_configs/ has the real ones.
    found = get_config(op, batch=batch, vocab=vocab) if config is None else config
    return {"BLOCK_R": 1, "BLOCK_V": 1024, **found}


def _meta(config: dict, vocab: int) -> dict:
    # ONE_TILE: the row fits one tile, so the threshold search loads it once.
    block_v = config["BLOCK_V"]
    return {"BLOCK_R": config["BLOCK_R"], "BLOCK_V": block_v, "ONE_TILE": vocab <= block_v, **launch_options(config)}


def greedy(logits: torch.Tensor, *, config: dict | None = None) -> torch.Tensor:
    """argmax per row of [batch, vocab] logits, ties to the lowest id; int64
    [batch]. NaN is never chosen; a row of only -inf/NaN gives 0."""
    _check_matrix("greedy", "logits", logits)
    batch, vocab = logits.shape
    if not use_triton("greedy", logits):
        return reference.greedy(logits)
    out = torch.empty(batch, dtype=torch.int64, device=logits.device)
    if batch == 0:
        return out
    config = _config("greedy", batch, vocab, config)
    kernels.greedy_kernel[_launch_grid(batch, config)](
        logits, out, batch, vocab, logits.stride(0), BLOCK_R=config["BLOCK_R"], BLOCK_V=config["BLOCK_V"],
        **launch_options(config),
    )
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
    check_values: bool = True,
    strict: bool = False,
    config: dict | None = None,
) -> torch.Tensor:
    """One next token per row; returns int64 token ids, shape [batch].

    logits: [batch, vocab] float32/float16/bfloat16, last dim contiguous.
    temperatures (>= 0), top_ks (>= 1, or -1 for no top-k; values past the
    vocabulary keep everything), top_ps (in (0, 1]), min_ps (in [0, 1]):
    one per row (a [batch] tensor) or one number for all rows.
    seeds, positions: int per row; with seeds, the token is a pure function
    of (seed, position, row). positions default to 0. Without seeds, seeds
    come from `generator` (or the default generator of the logits' device).
    See the module docstring for the filter order and bad rows.
    """
    op = "sample"
    _check_matrix(op, "logits", logits)
    batch, vocab = logits.shape
    device = logits.device
    temperatures = _per_row(op, "temperatures", temperatures, batch, device, "float")
    top_ks = _per_row(op, "top_ks", top_ks, batch, device, "int64")
    top_ps = _per_row(op, "top_ps", top_ps, batch, device, "float")
    min_ps = _per_row(op, "min_ps", min_ps, batch, device, "float")
    if seeds is None:
        seeds = _draw_seeds(batch, device, generator)
    seeds = _per_row(op, "seeds", seeds, batch, device, "int64")
    positions = _per_row(op, "positions", 0 if positions is None else positions, batch, device, "int64")
    if check_values and batch:
        _raise_if_any(
            op,
            [
                ("temperatures", ~(temperatures >= 0) | torch.isinf(temperatures), "finite and >= 0"),
                ("top_ks", (top_ks < 1) & (top_ks != -1), ">= 1 (or -1 for no top-k)"),
                ("top_ps", ~((top_ps > 0) & (top_ps <= 1)), "in (0, 1]"),
                ("min_ps", ~((min_ps >= 0) & (min_ps <= 1)), "in [0, 1]"),
            ]
        )
    if strict and batch:
        _raise_if_any(op, [("logits", ~(logits > float("-inf")).any(dim=1), "a row with a finite or +inf value")])
    # -1 and anything past the vocabulary mean "no top-k"; int32 from here.
    top_ks = torch.where((top_ks < 1) | (top_ks > vocab), vocab, top_ks).to(torch.int32)
    if not use_triton(op, logits):
        return reference.sample(logits, temperatures, top_ks, top_ps, min_ps, seeds, positions)
    out = torch.empty(batch, dtype=torch.int64, device=device)
    if batch == 0:
        return out
    config = _config(op, batch, vocab, config)
    kernels.sample_kernel[_launch_grid(batch, config)](
        logits, temperatures, top_ks, top_ps, min_ps, seeds, positions,
        out, batch, vocab, logits.stride(0), **_meta(config, vocab),
    )
    return out


def _draw_seeds(batch: int, device, generator) -> torch.Tensor:
    """Fresh 63-bit seeds from `generator` (its own device) or the default
    generator of `device`."""
    gen_device = generator.device if generator is not None else device
    seeds = torch.randint(0, 2**63 - 1, (batch,), dtype=torch.int64, device=gen_device, generator=generator)
    return seeds.to(device)


def _renorm(op: str, probs, top_ks, top_ps, min_ps, check_values: bool, config: dict | None) -> torch.Tensor:
    _check_matrix(op, "probs", probs)
    batch, vocab = probs.shape
    device = probs.device
    checks = []
    if top_ks is not None:
        top_ks = _per_row(op, "top_ks", top_ks, batch, device, "int64")
        checks.append(("top_ks", (top_ks < 1) & (top_ks != -1), ">= 1 (or -1 for no top-k)"))
        top_ks = torch.where((top_ks < 1) | (top_ks > vocab), vocab, top_ks)
    else:
        top_ks = torch.full((batch,), vocab, dtype=torch.int64, device=device)
    if top_ps is not None:
        top_ps = _per_row(op, "top_ps", top_ps, batch, device, "float")
        checks.append(("top_ps", ~((top_ps > 0) & (top_ps <= 1)), "in (0, 1]"))
    else:
        top_ps = torch.ones(batch, dtype=torch.float32, device=device)
    if min_ps is not None:
        min_ps = _per_row(op, "min_ps", min_ps, batch, device, "float")
        checks.append(("min_ps", ~((min_ps >= 0) & (min_ps <= 1)), "in [0, 1]"))
    else:
        min_ps = torch.zeros(batch, dtype=torch.float32, device=device)
    if check_values and batch:
        _raise_if_any(op, checks)
    top_ks = top_ks.to(torch.int32)
    if not use_triton(op, probs):
        return reference.renorm_probs(probs, top_ks, top_ps, min_ps).to(probs.dtype)
    out = torch.empty((batch, vocab), dtype=probs.dtype, device=device)
    if batch == 0:
        return out
    config = _config(op, batch, vocab, config)
    kernels.renorm_probs_kernel[_launch_grid(batch, config)](
        probs, top_ks, top_ps, min_ps, out, batch, vocab, probs.stride(0), out.stride(0), **_meta(config, vocab)
    )
    return out


def top_k_renorm_probs(
    probs: torch.Tensor, top_ks, *, check_values: bool = True, config: dict | None = None
) -> torch.Tensor:
    """Keep each row's top_k largest probs (ties with the k-th all kept),
    zero the rest, renormalise. Same dtype as `probs`. top_k -1: keep all."""
    return _renorm("top_k_renorm_probs", probs, top_ks, None, None, check_values, config)


def top_p_renorm_probs(
    probs: torch.Tensor, top_ps, *, check_values: bool = True, config: dict | None = None
) -> torch.Tensor:
    """Keep the tokens whose more-likely tokens hold <= top_p of the row's
    mass (ties kept together), zero the rest, renormalise."""
    return _renorm("top_p_renorm_probs", probs, None, top_ps, None, check_values, config)


def min_p_renorm_probs(
    probs: torch.Tensor, min_ps, *, check_values: bool = True, config: dict | None = None
) -> torch.Tensor:
    """Keep the tokens with prob >= min_p * the row's top prob, renormalise."""
    return _renorm("min_p_renorm_probs", probs, None, None, min_ps, check_values, config)


def renorm_probs(
    probs: torch.Tensor, top_ks=None, top_ps=None, min_ps=None, *, check_values: bool = True, config: dict | None = None
) -> torch.Tensor:
    """All three filters at once, with `sample`'s joint rules."""
    return _renorm("renorm_probs", probs, top_ks, top_ps, min_ps, check_values, config)
