"""The draft model's attention backends (SGLang 0.5.23).

SGLang builds a draft model's attention from a fixed map of backend names
(``speculative/draft_utils.py:DraftBackendFactory``); an AROUND hook on its
``_create_backend`` adds ``kunlun_triton``: the draft extend (v2) runs our
`KunlunTritonAttnBackend`, the draft's multi-step decode runs
`KunlunMultiStepDraftBackend`: one of our backends per draft step, each fed
the kv indices of that step by SGLang's own index builder (the same
``generate_draft_decode_kv_indices`` Triton kernel SGLang's Triton backend
uses: bookkeeping, not attention), so every attention op is ours.
"""

from __future__ import annotations

import torch
from sglang.srt.runtime_context import get_parallel, get_schedule
from sglang.srt.speculative.spec_utils import resolve_draft_decode_window

from ..platform.names import ATTENTION_BACKEND


def make_multi_step_draft_backend(model_runner, topk: int, speculative_num_steps: int):
    """The draft's multi-step decode: SGLang's container (its index builder,
    its per-step loop), our backend for every step."""
    # Function-level: SGLang's Triton backend and ours (with its kernels) load
    # only when a draft model is built on kunlun_triton, not in every process
    # this module's hook is installed in.
    from sglang.srt.layers.attention.triton_backend import TritonMultiStepDraftBackend

    from ..backends.attention import KunlunTritonAttnBackend

    class KunlunMultiStepDraftBackend(TritonMultiStepDraftBackend):
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
    # Function-level: this hook is installed in every SGLang process (plugin
    # scope, whichever platform is active); our backend and its kernels load
    # only when a draft model is built on it.
    from ..backends.attention import KunlunTritonAttnBackend

    backend_map = dict(backend_map)
    if stamps_children:
        backend_map[ATTENTION_BACKEND] = lambda: (
            ATTENTION_BACKEND,
            make_multi_step_draft_backend(self.draft_model_runner, self.topk, self.speculative_num_steps),
        )
    else:
        backend_map[ATTENTION_BACKEND] = lambda: (ATTENTION_BACKEND, KunlunTritonAttnBackend(self.draft_model_runner))
    return original(self, backend_name, backend_map, error_template, stamps_children)
