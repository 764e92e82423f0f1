"""Speculative decoding on the kunlun platform (SGLang 0.5.23): what the
platform serves, the server's speculative shape, and why graphs are off.
The draft model's attention backends: ``draft.py``; the per-phase counters
the attention backend keeps: ``phases.py``.

Graphs: the verify and draft phases run eagerly. Our backend captures plain
decode only (init_forward_metadata_out_graph); with --speculative-algorithm
the platform turns decode graphs off (`apply_speculative_defaults`) and
answers None for the draft graph runners. See docs/speculative.md.
"""

from __future__ import annotations

import logging

from ..platform.names import LOGGER

logger = logging.getLogger(LOGGER)

# what the kunlun_triton attention backend serves (SGLang's algorithm names)
SPECULATIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "STANDALONE", "NGRAM")
# SGLang aliases resolved before the platform is asked ("NEXTN" becomes EAGLE)
_ALIASES = {"NEXTN": "EAGLE"}


def algorithm_name(algorithm) -> str | None:
    if algorithm is None:
        return None
    name = getattr(algorithm, "name", algorithm)
    name = str(name).upper()
    return None if name == "NONE" else _ALIASES.get(name, name)


def serves(algorithm) -> bool:
    return algorithm_name(algorithm) in SPECULATIVE_ALGORITHMS


def speculative_shape() -> tuple:
    """(algorithm, topk, num_steps, num_draft_tokens) of the server's
    speculative decoding; (None, 0, 0, 0) without it or outside an engine."""
    from sglang.srt.runtime_context import get_spec

    try:
        spec = get_spec()
        algo = spec.speculative_algorithm
    except Exception:  # no server context (a backend built outside an engine)
        return None, 0, 0, 0
    if not algo or str(algo).upper() == "NONE":
        return None, 0, 0, 0
    return (str(algo).upper(), int(spec.speculative_eagle_topk or 0), int(spec.speculative_num_steps or 0),
            int(spec.speculative_num_draft_tokens or 0))  # fmt: skip


def chain_verify(algorithm, topk: int, num_steps: int, num_draft_tokens: int) -> bool:
    """The verify tree is a chain, so its mask is exactly causal: an
    EAGLE-family draft (EAGLE, EAGLE3, STANDALONE) with topk 1 drafts
    num_steps tokens after the verified one. NGRAM's trees are built from
    corpus matches: always masked."""
    return algorithm in ("EAGLE", "EAGLE3", "STANDALONE") and topk == 1 and num_draft_tokens == num_steps + 1


def apply_speculative_defaults(server_args) -> None:
    """Speculative decoding runs its verify and draft phases eagerly on the
    kunlun platform: our backend has no verify / draft-extend graph metadata
    yet, so decode graphs are turned off (said once) rather than captured
    for one phase and refused in another."""
    if not algorithm_name(getattr(server_args, "speculative_algorithm", None)):
        return
    if not getattr(server_args, "disable_cuda_graph", False):
        logger.info("kunlun-triton: speculative decoding runs eagerly (no verify / draft graphs); "
                    "decode graphs off")  # fmt: skip
    try:
        from sglang.srt.model_executor.cuda_graph_config import Backend, Phase, with_phase

        config = getattr(server_args, "cuda_graph_config", None)
        if config is not None:
            config = with_phase(config, Phase.DECODE, backend=Backend.DISABLED)
            server_args.cuda_graph_config = with_phase(config, Phase.PREFILL, backend=Backend.DISABLED)
    except ImportError:  # older SGLang of the window: the flag alone
        pass
    server_args.disable_cuda_graph = True


def speculative_cache_locs(*, req_pool_indices, req_to_token, start_offset, end_offset, batch_size,
                           draft_token_num, device):  # fmt: skip
    """The platform's ``get_speculative_cache_locs_fn`` (SGLang's
    ``assign_extend_cache_locs_func`` on an out-of-tree platform, which
    otherwise returns None there: the verify of a tree then has no write
    slots): request b's slots req_to_token[b, start_offset[b]:end_offset[b]],
    packed. Every request has draft_token_num of them (end - start), so it is
    one gather, no host value."""
    import torch

    rows = req_pool_indices[:batch_size].to(torch.int64).view(-1, 1)
    cols = start_offset[:batch_size].to(torch.int64).view(-1, 1) + torch.arange(
        draft_token_num, dtype=torch.int64, device=req_to_token.device)  # fmt: skip
    return req_to_token[rows, cols].reshape(-1).to(device=device, dtype=torch.int64)
