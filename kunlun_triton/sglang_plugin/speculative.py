"""Speculative decoding on the kunlun platform (SGLang 0.5.23): what the
platform serves, the draft model's attention backends, and why graphs are off.

SGLang builds a draft model's attention from a fixed map of backend names
(``speculative/draft_utils.py:DraftBackendFactory``); an AROUND hook on its
``_create_backend`` adds ``kunlun_triton``: the draft extend (v2) runs our
`KunlunTritonAttnBackend`, the draft's multi-step decode runs
`KunlunMultiStepDraftBackend`: one of our backends per draft step, each fed
the kv indices of that step by SGLang's own index builder (the same
``generate_draft_decode_kv_indices`` Triton kernel SGLang's Triton backend
uses: bookkeeping, not attention), so every attention op is ours.

Graphs: the verify and draft phases run eagerly. Our backend captures plain
decode only (init_forward_metadata_out_graph); with --speculative-algorithm
the platform turns decode graphs off (`apply_speculative_defaults`) and
answers None for the draft graph runners. See docs/speculative.md.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("kunlun_triton.sglang_plugin")

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


def _multi_step_base():
    from sglang.srt.layers.attention.triton_backend import TritonMultiStepDraftBackend

    return TritonMultiStepDraftBackend


def make_multi_step_draft_backend(model_runner, topk: int, speculative_num_steps: int):
    """The draft's multi-step decode: SGLang's container (its index builder,
    its per-step loop), our backend for every step."""
    import torch
    from sglang.srt.runtime_context import get_parallel, get_schedule
    from sglang.srt.speculative.spec_utils import resolve_draft_decode_window

    from .attention import KunlunTritonAttnBackend

    class KunlunMultiStepDraftBackend(_multi_step_base()):
        def __init__(self, model_runner, topk, speculative_num_steps):  # noqa: D401 (SGLang's fields, our backends)
            self.topk = topk
            self.speculative_num_steps = speculative_num_steps
            max_bs = model_runner.req_to_token_pool.size * topk
            self.kv_indptr = torch.zeros((speculative_num_steps, max_bs + 1), dtype=torch.int32,
                                         device=model_runner.device)  # fmt: skip
            self.attn_backends = [KunlunTritonAttnBackend(model_runner) for _ in range(speculative_num_steps - 1)]
            self.max_context_len = self.attn_backends[0].max_context_len
            self.num_head = model_runner.model_config.get_max_num_attention_heads() // get_parallel().attn_tp_size
            self.device = model_runner.device
            self.req_to_token_pool = model_runner.req_to_token_pool
            self.pool_len = model_runner.req_to_token_pool.req_to_token.shape[1]
            self.page_size = get_schedule().page_size
            self.draft_window_size, self.draft_sink_size = resolve_draft_decode_window(model_runner)
            self.kv_index_translator = model_runner.kv_index_translator
            self.token_to_kv_pool = model_runner.token_to_kv_pool
            self.sliding_window_size = model_runner.sliding_window_size
            if self.sliding_window_size is not None and self.sliding_window_size > 0:
                raise NotImplementedError("kunlun_triton attention: a sliding-window draft model "
                                          "(multi-step draft decode) is not supported")  # fmt: skip
            self.window_rail = False
            self.window_kv_indptr = None
            self.cuda_graph_window_kv_indices = None

        def init_cuda_graph_state(self, max_bs, max_num_tokens):
            raise NotImplementedError("kunlun_triton attention: draft decode graphs are not captured "
                                      "(speculative decoding runs eagerly)")  # fmt: skip

    return KunlunMultiStepDraftBackend(model_runner, topk, speculative_num_steps)


def draft_backends(original, self, backend_name, backend_map, error_template, stamps_children=False):
    """AROUND hook on ``DraftBackendFactory._create_backend``: ``kunlun_triton``
    among the draft backends (decode: the multi-step container, called with
    stamps_children; draft extend: our backend)."""
    from .attention import KunlunTritonAttnBackend
    from .install import ATTENTION_BACKEND

    backend_map = dict(backend_map)
    if stamps_children:
        backend_map[ATTENTION_BACKEND] = lambda: (
            ATTENTION_BACKEND,
            make_multi_step_draft_backend(self.draft_model_runner, self.topk, self.speculative_num_steps),
        )
    else:
        backend_map[ATTENTION_BACKEND] = lambda: (ATTENTION_BACKEND, KunlunTritonAttnBackend(self.draft_model_runner))
    return original(self, backend_name, backend_map, error_template, stamps_children)


# -- EAGLE tree construction and greedy verification ---------------------------
# SGLang 0.5.23 builds the draft tree and walks it at verify with CUDA, CPU
# (sgl_kernel) or NPU kernels and refuses out-of-tree platforms
# (`reject_out_of_tree_path`); its portable Triton versions (the XPU path) run
# on every target with a Triton compiler, ours included. Scope: platform.

TREE_BUILD_HOOK = "sglang.kernels.ops.speculative.spec_tree.build_tree_kernel_efficient_func"
TREE_VERIFY_HOOK = "sglang.kernels.ops.speculative.spec_tree.verify_tree_greedy_func"


def build_tree_triton(original, parent_list, top_scores_index, seq_lens, tree_mask, positions, retrieve_index,
                      retrieve_next_token, retrieve_next_sibling, topk, spec_steps, num_verify_tokens,
                      tree_mask_mode):  # fmt: skip
    """AROUND hook: SGLang's Triton tree builder (tree_mask, positions and the
    retrieve_* walks, in place)."""
    from sglang.kernels.ops.speculative.spec_tree import sgl_build_tree_kernel_triton

    sgl_build_tree_kernel_triton(parent_list, top_scores_index, seq_lens, tree_mask, positions, retrieve_index,
                                 retrieve_next_token, retrieve_next_sibling, topk, spec_steps, num_verify_tokens,
                                 tree_mask_mode)  # fmt: skip


def verify_tree_greedy_triton(original, predicts, accept_index, accept_token_num, candidates, retrieve_index,
                              retrieve_next_token, retrieve_next_sibling, target_predict, topk=-1):  # fmt: skip
    """AROUND hook: SGLang's Triton greedy tree walk (the longest path of
    drafts equal to the target's argmax)."""
    from sglang.kernels.ops.speculative.spec_tree import verify_tree_greedy_triton as walk

    walk(predicts=predicts, accept_index=accept_index, accept_token_num=accept_token_num, candidates=candidates,
         retrieve_index=retrieve_index, retrieve_next_token=retrieve_next_token,
         retrieve_next_sibling=retrieve_next_sibling, target_predict=target_predict)  # fmt: skip
    return predicts, accept_index, accept_token_num


# -- what each speculative phase ran (the dispatch report's "speculative") -----
# Counted by our attention backend per layer call (this scheduler process):
# target_verify (extend_attention with the tree mask, or causal for a chain),
# draft_extend (extend_attention), draft_decode (decode_attention), store_kv
# in each; "forwards" and "requests" count the phase's batches and their rows.

_PHASES: dict = {}


def note_forward(phase: str, requests: int) -> None:
    entry = _PHASES.setdefault(phase, {"forwards": 0, "requests": 0, "ops": {}})
    entry["forwards"] += 1
    entry["requests"] += int(requests)


def note_op(phase: str, op: str) -> None:
    ops = _PHASES.setdefault(phase, {"forwards": 0, "requests": 0, "ops": {}})["ops"]
    ops[op] = ops.get(op, 0) + 1


def speculative_report() -> dict:
    """{phase: {"forwards", "requests", "ops": {op: layer calls}}}."""
    return {phase: {**entry, "ops": dict(entry["ops"])} for phase, entry in _PHASES.items()}


def reset_speculative_report() -> None:
    _PHASES.clear()
