"""Every place kunlun-triton touches SGLang (0.5.23's names; the older releases
of the window map onto them in versions.py), in one table, applied once.

A `Touchpoint` names what it installs, its kind, the SGLang object it
touches (public API or private), what of ours it reaches, and its scope:

- ``plugin``: the general plugin (``sglang.srt.plugins`` entry point) runs
  in every SGLang process, whichever platform is active; these must only
  add choices (a backend name, a forward under our dispatch key) or step
  aside when our platform is not the active one;
- ``platform``: applied by the platform's ``init_backend`` only, when the
  kunlun platform is the active one (the collective hooks would otherwise
  take over another platform's tensor parallelism);
- ``sglang``: SGLang applies it itself (entry points, and the classes our
  platform hands back when SGLang asks); listed so the table is complete.

What each one does (its ``apply``) is in `install_steps`.
`install(scope)` applies each touchpoint of the scope that is not applied
yet (one check: the `_applied` set of this process), registering hooks with
SGLang's own ``HookRegistry`` and applying them once at the end.
`kunlun-triton serve` prints its routing plan from this table.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

from .install_steps import (
    BATCH_INVARIANT_HOOK,
    DRAFT_BACKEND_HOOK,
    INTERNAL_STATE_HOOK,
    RPC_HOOK,
    SAMPLING_HASH_HOOK,
    SEED_HOOK,
    SOFTCAP_HOOK,
    accept_deterministic_inference,
    add_attention_backend,
    bind_sampled_verify,
    hook_batch_invariant_mode,
    hook_collectives,
    hook_deepseek_draft_head,
    hook_draft_backends,
    hook_gpt_oss_dtype,
    hook_int8_quantization,
    hook_internal_state,
    hook_logit_softcap,
    hook_model_rules,
    hook_ngram_tree,
    hook_report_rpc,
    hook_request_guard,
    hook_request_seeds,
    hook_spec_accept,
    hook_spec_tree,
    register_fused_forwards,
    register_moe_forwards,
    register_sampling_backend,
)
from .layers.dp_attention import hook_dp_attention
from .linear_attention import hook_hybrid_models
from .platform.names import ATTENTION_BACKEND, LOGGER, SAMPLING_BACKEND

logger = logging.getLogger(LOGGER)


@dataclass(frozen=True)
class Touchpoint:
    name: str
    kind: str  # entry point | registration | hook | fused-op forward | subclass
    sglang: str  # the SGLang object touched
    what: str  # what of ours it reaches (the ops it routes to: `routes`)
    scope: str  # plugin | platform | sglang
    apply: Callable[[], None] | None = None

    @property
    def routes(self) -> str:
        """What of ours it reaches, ending with the ops that route through it
        (the op specs say so: `OpSpec.sglang_forward`, `OpSpec.sglang`)."""
        ops = served_ops(self.name)
        return f"{self.what} -> {', '.join(ops)}" if ops else self.what


def served_ops(touchpoint: str) -> tuple[str, ...]:
    """The ops `touchpoint` routes to, from the op specs (`ops.spec.served_by`)."""
    # Function-level: reading the specs imports every op family, whose kernels
    # Triton decorates for the mode in force; this module is read while SGLang
    # resolves its platform, before development mode may set TRITON_INTERPRET.
    from ..ops.spec import served_by

    return served_by(touchpoint)


def __getattr__(name: str) -> str:
    """``ATTENTION_OPS`` and ``FUSED_OPS``: the ops of those touchpoints, as
    one string, derived from the specs when first asked (see `served_ops`)."""
    touchpoint = {"ATTENTION_OPS": "attention backend", "FUSED_OPS": "fused ops"}.get(name)
    if touchpoint is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return ", ".join(served_ops(touchpoint))


TOUCHPOINTS = (
    Touchpoint("platform plugin", "entry point", "sglang.srt.platforms: kunlun, kunlun_triton",
               "kunlun_triton.sglang_plugin:activate (SGLANG_PLATFORM=kunlun), :activate_alternate "
               "(SGLANG_PLATFORM=kunlun_triton, when another distribution also claims kunlun)", "sglang"),
    Touchpoint("general plugin", "entry point", "sglang.srt.plugins: kunlun",
               "kunlun_triton.sglang_plugin:register (this table, scope plugin)", "sglang"),
    Touchpoint("platform classes", "subclass", "sglang.srt.platforms.interface.SRTPlatform",
               "KunlunPlatform / KunlunDevPlatform (device, defaults, dtype policy)", "sglang"),
    Touchpoint("attention backend", "registration", "attention_registry.register_attention_backend",
               f"--attention-backend {ATTENTION_BACKEND}", "plugin", add_attention_backend),
    Touchpoint("deterministic inference", "registration",
               "choices.add_deterministic_attention_backend_choices, add_radix_supported_..._choices",
               f"--enable-deterministic-inference with --attention-backend {ATTENTION_BACKEND} (radix cache kept): "
               "fixed decode split tiles, unified extend", "plugin", accept_deterministic_inference),
    Touchpoint("per-model rules", "hook",
               "arg_groups.model_hook.attention_backends_of, arg_groups.overrides._invoke_provider (AROUND)",
               "gpt-oss's list of attention backends with sinks and sliding windows reads ours as SGLang's "
               "Triton one; its MXFP4 bf16 override yields to an explicit --dtype (platform/model_rules.py; "
               "its MoE runner pinned to triton there too)", "plugin", hook_model_rules),
    Touchpoint("gpt-oss serving dtype", "hook", "models.gpt_oss.GptOssForCausalLM.__init__ (AROUND)",
               "gpt-oss's attention and router built in the serving dtype, not the checkpoint's "
               "(platform/model_rules.py)", "platform", hook_gpt_oss_dtype),
    Touchpoint("batch-invariant ops", "hook", f"{BATCH_INVARIANT_HOOK}, {SAMPLING_HASH_HOOK} (AROUND)",
               "development mode: host row-GEMV + SGLang's log-softmax/mean kernels for CPU, SGLang's Triton "
               "sampling hash on host tensors; a card: SGLang's own", "platform", hook_batch_invariant_mode),
    Touchpoint("sampling backend", "registration", "sampler.register_sampler_backend",
               f"--sampling-backend {SAMPLING_BACKEND}", "plugin", register_sampling_backend),
    Touchpoint("fused ops", "fused-op forward", "BaseFusedOp.register_oot_forward (dispatch key kunlun)",
               "RMSNorm, SiluAndMul, GeluAndMul, RotaryEmbedding(+subclasses)", "plugin",
               register_fused_forwards),
    Touchpoint("MoE layers", "fused-op forward",
               "BaseFusedOp.register_oot_forward (dispatch key kunlun): moe.topk.TopK, "
               "quantization.unquant.UnquantizedFusedMoEMethod",
               "the router, unquantized FusedMoE experts (shared experts stay dense)",
               "plugin", register_moe_forwards),
    Touchpoint("MXFP4 experts", "registration",
               "quantization.QUANTIZATION_METHODS['mxfp4'] (added at the platform's activation, once that module "
               "has loaded), SRTPlatform.get_quantization_config",
               "gpt-oss's MXFP4 checkpoints: experts kept 4-bit, decoded in fused_experts' GEMM loops "
               "(use_mxfp4_w4a16)", "sglang"),
    Touchpoint("MoE support check", "platform hook", "SRTPlatform.apply_server_args_defaults / post_load_model",
               "a clear error at start for MoE a2a backends, non-triton MoE runners and quantized MoE", "sglang"),
    Touchpoint("W8A8-INT8 quantization", "hook",
               "quantization.w8a8_int8.W8A8Int8LinearMethod.apply, W8A8Int8MoEMethod.apply / .create_weights "
               "(AROUND)", "--quantization w8a8_int8: linear layers (quantize the activations, then the int8 GEMM), "
               "int8 experts (use_int8_w8a8; gpt-oss's biases)", "platform", hook_int8_quantization),
    Touchpoint("final-logit soft-capping", "hook", f"{SOFTCAP_HOOK} (AROUND)",
               "the logits processor's final_logit_softcapping (Gemma-2)", "platform",
               hook_logit_softcap),
    Touchpoint("speculative decoding", "platform hook",
               "SRTPlatform.supports_speculative_algorithm / supports_speculative_draft_attention_backend / "
               "get_default_speculative_draft_attention_backend",
               "EAGLE, EAGLE3, STANDALONE, NGRAM on --attention-backend kunlun_triton (target verify with the "
               "tree mask, draft extend); the rest refused at start naming the algorithm", "sglang"),
    Touchpoint("draft attention backends", "hook", f"{DRAFT_BACKEND_HOOK} (AROUND)",
               "the draft model's extend and multi-step decode", "plugin",
               hook_draft_backends),
    Touchpoint("EAGLE tree kernels", "hook",
               "spec_tree.build_tree_kernel_efficient_func, spec_tree.verify_tree_greedy_func (AROUND)",
               "SGLang's portable Triton tree builder and greedy tree walk (its XPU path; in-tree refuses "
               "out-of-tree platforms)", "platform", hook_spec_tree),
    Touchpoint("sampled speculative verify", "binding",
               "eagle_utils.tree_speculative_sampling_target_only / top_k_renorm_prob / top_p_renorm_prob (None "
               "off CUDA: rebound, not hooked)",
               "a sampled request's tree verify (EAGLE, STANDALONE, NGRAM through eagle_sample): rejection "
               "sampling over the draft tree after the top-k / top-p renormalisation", "platform",
               bind_sampled_verify),
    Touchpoint("NGRAM tree bookkeeping", "hook",
               "reconstruct_tree.reconstruct_indices_from_tree_mask_func (AROUND; the module imported with an "
               "import-time stand-in for sgl_kernel.speculative where sgl_kernel cannot load)",
               "SGLang's Triton reconstruct_indices_from_tree_mask_triton (its XPU path): draft positions and "
               "tree links from the n-gram tree mask", "platform", hook_ngram_tree),
    Touchpoint("DeepSeek MTP draft", "hook", "models.deepseek_v2.DeepseekV2ForCausalLM.set_embed_and_head (AROUND)",
               "the target's embedding and head shared with the NextN draft, then the platform's empty_cache / "
               "synchronize (SGLang calls torch.cuda's unconditionally)", "platform", hook_deepseek_draft_head),
    Touchpoint("accept length", "hook", "output_streamer._GenerationStreamAccumulator.accept (AROUND)",
               "each finished request's spec_verify_ct / spec_num_correct_drafts -> the dispatch report's "
               "accept length", "platform", hook_spec_accept),
    Touchpoint("request guard", "hook",
               "io_struct.GenerateReqInput.normalize_batch_and_arguments, "
               "TokenizerManager._validate_one_request (BEFORE)",
               "HTTP 400 naming the field for requests that would kill the scheduler (top_k >= 2**31, n < 1, "
               "token ids outside the vocabulary, logprob counts < 0 or above it); kunlun platform only",
               "plugin", hook_request_guard),
    Touchpoint("request seeds", "hook", f"{SEED_HOOK} (AFTER)",
               "a per-request sampling seed for the kunlun_triton sampler", "plugin", hook_request_seeds),
    Touchpoint("dispatch report (server)", "hook", f"{INTERNAL_STATE_HOOK} (AFTER)",
               "GET /server_info internal_states[*].kunlun_triton", "plugin", hook_internal_state),
    Touchpoint("dispatch report (engine)", "hook", f"{RPC_HOOK} (AROUND)",
               "Engine.collective_rpc('kunlun_triton_dispatch_report') on every rank", "plugin", hook_report_rpc),
    Touchpoint("KV pool", "subclass", "memory_pool.MHATokenToKVPool (get_kv_pool_cls)",
               "KunlunMHATokenToKVPool: KV writes", "sglang"),
    Touchpoint("paged allocator", "subclass", "allocator.base.BaseTokenToKVPoolAllocator (get_paged_allocator_cls)",
               "kunlun_triton.memory.PagedKVAllocator (page_size > 1)", "sglang"),
    Touchpoint("hybrid linear attention", "hook", "gdn_backend.GDNAttnBackend.forward_decode/_extend, fla gated "
               "norms, Qwen3GatedDeltaNet.__init__, triton_gdn_fused_proj.fused_qkvzba_split_reshape_cat(_contiguous) "
               "(AROUND)", "linear_attention/", "platform", hook_hybrid_models),
    Touchpoint("collectives", "hook", "parallel_state.GroupCoordinator.{all_reduce, all_gather, ...} (AROUND)",
               "kunlun_triton.comm.TPCommunicator (tp_size > 1)", "platform", hook_collectives),
    Touchpoint("DP attention", "hook", "dp_attention.memcpy, ForwardBatch.prepare_mlp_sync_batch (AROUND)",
               "SGLang's slice copy for the gather; token counts unpinned off a card", "platform", hook_dp_attention),
)  # fmt: skip

_applied: set[str] = set()


def install(scope: str) -> list[str]:
    """Apply the touchpoints of `scope` ("plugin" or "platform") not applied
    yet in this process; returns the names applied now."""
    from sglang.srt.plugins.hook_registry import HookRegistry

    done = []
    for point in TOUCHPOINTS:
        if point.scope == scope and point.apply is not None and point.name not in _applied:
            point.apply()
            _applied.add(point.name)
            done.append(point.name)
    if done:
        HookRegistry.apply_hooks()
        logger.debug("kunlun-triton installed into SGLang (%s): %s", scope, ", ".join(done))
    return done


def applied() -> set[str]:
    return set(_applied)
