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

`install(scope)` applies each touchpoint of the scope that is not applied
yet (one check: the `_applied` set of this process), registering hooks with
SGLang's own ``HookRegistry`` and applying them once at the end.
`kunlun-triton serve` prints its routing plan from this table.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

from .platform.names import ATTENTION_BACKEND, DISPATCH_KEY, LOGGER, SAMPLING_BACKEND
from .layers.dp_attention import hook_dp_attention

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


# -- what each touchpoint does ------------------------------------------------


def _hook(target: str, hook, kind: str) -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(target, hook, HookType[kind])


def _register_attention_backend() -> None:
    from sglang.srt.arg_groups.choices import ATTENTION_BACKEND_CHOICES, add_attention_backend_choices
    from sglang.srt.layers.attention.attention_registry import register_attention_backend

    if ATTENTION_BACKEND not in ATTENTION_BACKEND_CHOICES:
        add_attention_backend_choices([ATTENTION_BACKEND])

    @register_attention_backend(ATTENTION_BACKEND)
    def _create(runner):
        from .backends.attention import KunlunTritonAttnBackend

        return KunlunTritonAttnBackend(runner)


def _accept_deterministic_inference() -> None:
    from sglang.srt.arg_groups.choices import (
        DETERMINISTIC_ATTENTION_BACKEND_CHOICES,
        RADIX_SUPPORTED_DETERMINISTIC_ATTENTION_BACKEND,
        add_deterministic_attention_backend_choices,
        add_radix_supported_deterministic_attention_backend_choices,
    )

    if ATTENTION_BACKEND not in DETERMINISTIC_ATTENTION_BACKEND_CHOICES:
        add_deterministic_attention_backend_choices([ATTENTION_BACKEND])
    # Our extend is invariant to how the prefix was cached: keep the radix cache.
    if ATTENTION_BACKEND not in RADIX_SUPPORTED_DETERMINISTIC_ATTENTION_BACKEND:
        add_radix_supported_deterministic_attention_backend_choices([ATTENTION_BACKEND])


def register_cli_choices() -> None:
    """Our backend names among SGLang's argument choices, touching only
    ``srt/arg_groups/choices.py`` (plain lists and sets, no imports: safe while
    SGLang is still resolving its platform). The platform calls this when it
    activates: SGLang skips our general plugin whenever ``SGLANG_PLATFORM`` is
    set (``_get_excluded_dists``: we register two platform names), and
    ``--attention-backend kunlun_triton`` is parsed before any later hook."""
    from sglang.srt.arg_groups.choices import (
        ATTENTION_BACKEND_CHOICES,
        SAMPLING_BACKEND_CHOICES,
        add_attention_backend_choices,
    )

    if ATTENTION_BACKEND not in ATTENTION_BACKEND_CHOICES:
        add_attention_backend_choices([ATTENTION_BACKEND])
    SAMPLING_BACKEND_CHOICES.add(SAMPLING_BACKEND)
    _accept_deterministic_inference()


def _sglang_defines(*targets: str) -> bool:
    """Whether this SGLang has every module-level `target` (``module.name``): a
    hook on a name an older release of the window lacks is left out."""
    import importlib

    for target in targets:
        module_name, name = target.rsplit(".", 1)
        try:
            if not hasattr(importlib.import_module(module_name), name):
                return False
        except ImportError:
            return False
    return True


def _hook_model_allow_lists() -> None:
    from .platform.model_rules import ALLOW_LIST_HOOK, backends_for_allow_lists

    if _sglang_defines(ALLOW_LIST_HOOK):  # else an SGLang that checks backends otherwise: its lists stay
        _hook(ALLOW_LIST_HOOK, backends_for_allow_lists, "AROUND")


def _hook_gpt_oss_dtype() -> None:
    from .platform.model_rules import GPT_OSS_INIT_HOOK, build_in_serving_dtype

    _hook(GPT_OSS_INIT_HOOK, build_in_serving_dtype, "AROUND")


def _hook_batch_invariant_mode() -> None:
    from .layers.batch_invariant import enable_batch_invariant_mode, murmur_hash32

    _hook(BATCH_INVARIANT_HOOK, enable_batch_invariant_mode, "AROUND")
    _hook(SAMPLING_HASH_HOOK, murmur_hash32, "AROUND")


def _register_sampling_backend() -> None:
    from sglang.srt.layers.sampler import register_sampler_backend

    from .backends.sampler import create_sampler

    register_sampler_backend(SAMPLING_BACKEND, create_sampler)


def _register_fused_forwards() -> None:
    from .layers.fused_ops import register_fused_ops

    register_fused_ops(DISPATCH_KEY)


def _register_moe_forwards() -> None:
    from .layers.moe import register_moe_ops

    register_moe_ops(DISPATCH_KEY)


def _hook_request_seeds() -> None:
    from .backends.sampler import fill_request_seeds

    _hook(SEED_HOOK, fill_request_seeds, "AFTER")


def _hook_request_guard() -> None:
    from .platform.request_guard import NORMALIZE_HOOK, VALIDATE_HOOK, guard_normalize, guard_validate

    _hook(NORMALIZE_HOOK, guard_normalize, "BEFORE")
    _hook(VALIDATE_HOOK, guard_validate, "BEFORE")


def _hook_internal_state() -> None:
    from .report import add_report_to_internal_state

    _hook(INTERNAL_STATE_HOOK, add_report_to_internal_state, "AFTER")


def _hook_report_rpc() -> None:
    from .report import answer_report_rpc

    _hook(RPC_HOOK, answer_report_rpc, "AROUND")


def _hook_logit_softcap() -> None:
    from .layers.fused_ops import softcap_logits

    _hook(SOFTCAP_HOOK, softcap_logits, "AROUND")


def _hook_int8_quantization() -> None:
    from .layers.moe import int8_experts_apply
    from .layers.quantization import LINEAR_HOOK, MOE_HOOK, int8_linear_apply

    _hook(LINEAR_HOOK, int8_linear_apply, "AROUND")
    _hook(MOE_HOOK, int8_experts_apply, "AROUND")


def _hook_draft_backends() -> None:
    from .speculative.draft import draft_backends

    _hook(DRAFT_BACKEND_HOOK, draft_backends, "AROUND")


def _hook_spec_accept() -> None:
    from .speculative.accept import ACCEPT_HOOK, count_finished_request

    _hook(ACCEPT_HOOK, count_finished_request, "AROUND")


def _hook_deepseek_draft_head() -> None:
    from .speculative.draft_models import SET_EMBED_AND_HEAD_HOOK, set_embed_and_head_on_platform

    _hook(SET_EMBED_AND_HEAD_HOOK, set_embed_and_head_on_platform, "AROUND")


def _hook_spec_tree() -> None:
    from .speculative.tree import TREE_BUILD_HOOK, TREE_VERIFY_HOOK, build_tree_triton, verify_tree_greedy_triton

    if not _sglang_defines(TREE_BUILD_HOOK, TREE_VERIFY_HOOK):
        return  # SGLang 0.5.21 keeps its tree kernels in eagle_utils: left as they are
    _hook(TREE_BUILD_HOOK, build_tree_triton, "AROUND")
    _hook(TREE_VERIFY_HOOK, verify_tree_greedy_triton, "AROUND")


def _bind_sampled_verify() -> None:
    # Function-level: it imports the op families (see `served_ops`).
    from .speculative.sampled_verify import bind_sampled_verify

    bind_sampled_verify()


def _hook_ngram_tree() -> None:
    from .speculative.ngram import RECONSTRUCT_HOOK, import_reconstruct_tree, reconstruct_tree_triton

    module = import_reconstruct_tree()
    if not hasattr(module, RECONSTRUCT_HOOK.rsplit(".", 1)[1]):
        return  # SGLang 0.5.21: no dispatcher there (its NGRAM worker picks the op itself): left as it is
    _hook(RECONSTRUCT_HOOK, reconstruct_tree_triton, "AROUND")


def _hook_collectives() -> None:
    from .layers.collectives import COORDINATOR, HOOKS

    for method, hook in HOOKS.items():
        _hook(f"{COORDINATOR}.{method}", hook, "AROUND")


SEED_HOOK = "sglang.srt.sampling.sampling_batch_info.SamplingBatchInfo.from_schedule_batch"
INTERNAL_STATE_HOOK = "sglang.srt.managers.scheduler.Scheduler.get_internal_state"
RPC_HOOK = "sglang.srt.managers.scheduler.Scheduler.handle_rpc_request"
BATCH_INVARIANT_HOOK = "sglang.srt.batch_invariant_ops.enable_batch_invariant_mode"
SAMPLING_HASH_HOOK = "sglang.kernels.ops.sampling.murmur_hash.murmur_hash32"
SOFTCAP_HOOK = "sglang.srt.layers.logits_processor.fused_softcap"
DRAFT_BACKEND_HOOK = "sglang.srt.speculative.draft_utils.DraftBackendFactory._create_backend"

TOUCHPOINTS = (
    Touchpoint("platform plugin", "entry point", "sglang.srt.platforms: kunlun, kunlun_triton",
               "kunlun_triton.sglang_plugin:activate (SGLANG_PLATFORM=kunlun), :activate_alternate "
               "(SGLANG_PLATFORM=kunlun_triton, when another distribution also claims kunlun)", "sglang"),
    Touchpoint("general plugin", "entry point", "sglang.srt.plugins: kunlun",
               "kunlun_triton.sglang_plugin:register (this table, scope plugin)", "sglang"),
    Touchpoint("platform classes", "subclass", "sglang.srt.platforms.interface.SRTPlatform",
               "KunlunPlatform / KunlunDevPlatform (device, defaults, dtype policy)", "sglang"),
    Touchpoint("attention backend", "registration", "attention_registry.register_attention_backend",
               f"--attention-backend {ATTENTION_BACKEND}", "plugin", _register_attention_backend),
    Touchpoint("deterministic inference", "registration",
               "choices.add_deterministic_attention_backend_choices, add_radix_supported_..._choices",
               f"--enable-deterministic-inference with --attention-backend {ATTENTION_BACKEND} (radix cache kept): "
               "fixed decode split tiles, unified extend", "plugin", _accept_deterministic_inference),
    Touchpoint("per-model backend lists", "hook", "arg_groups.model_hook.attention_backends_of (AROUND)",
               "gpt-oss's list of attention backends with sinks and sliding windows reads ours as SGLang's "
               "Triton one (platform/model_rules.py; its MoE runner pinned to triton there too)", "plugin",
               _hook_model_allow_lists),
    Touchpoint("gpt-oss serving dtype", "hook", "models.gpt_oss.GptOssForCausalLM.__init__ (AROUND)",
               "gpt-oss's attention and router built in the serving dtype, not the checkpoint's "
               "(platform/model_rules.py)", "platform", _hook_gpt_oss_dtype),
    Touchpoint("batch-invariant ops", "hook", f"{BATCH_INVARIANT_HOOK}, {SAMPLING_HASH_HOOK} (AROUND)",
               "development mode: host row-GEMV + SGLang's log-softmax/mean kernels for CPU, SGLang's Triton "
               "sampling hash on host tensors; a card: SGLang's own", "platform", _hook_batch_invariant_mode),
    Touchpoint("sampling backend", "registration", "sampler.register_sampler_backend",
               f"--sampling-backend {SAMPLING_BACKEND}", "plugin", _register_sampling_backend),
    Touchpoint("fused ops", "fused-op forward", "BaseFusedOp.register_oot_forward (dispatch key kunlun)",
               "RMSNorm, SiluAndMul, GeluAndMul, RotaryEmbedding(+subclasses)", "plugin",
               _register_fused_forwards),
    Touchpoint("MoE layers", "fused-op forward",
               "BaseFusedOp.register_oot_forward (dispatch key kunlun): moe.topk.TopK, "
               "quantization.unquant.UnquantizedFusedMoEMethod",
               "the router, unquantized FusedMoE experts (shared experts stay dense)",
               "plugin", _register_moe_forwards),
    Touchpoint("MXFP4 experts", "registration",
               "quantization.QUANTIZATION_METHODS['mxfp4'] (added at the platform's activation, once that module "
               "has loaded), SRTPlatform.get_quantization_config",
               "gpt-oss's MXFP4 checkpoints: experts kept 4-bit, decoded in fused_experts' GEMM loops "
               "(use_mxfp4_w4a16)", "sglang"),
    Touchpoint("MoE support check", "platform hook", "SRTPlatform.apply_server_args_defaults / post_load_model",
               "a clear error at start for MoE a2a backends, non-triton MoE runners and quantized MoE", "sglang"),
    Touchpoint("W8A8-INT8 quantization", "hook",
               "quantization.w8a8_int8.W8A8Int8LinearMethod.apply, W8A8Int8MoEMethod.apply (AROUND)",
               "--quantization w8a8_int8: linear layers (quantize the activations, then the int8 GEMM), int8 "
               "experts (use_int8_w8a8)", "platform", _hook_int8_quantization),
    Touchpoint("final-logit soft-capping", "hook", f"{SOFTCAP_HOOK} (AROUND)",
               "the logits processor's final_logit_softcapping (Gemma-2)", "platform",
               _hook_logit_softcap),
    Touchpoint("speculative decoding", "platform hook",
               "SRTPlatform.supports_speculative_algorithm / supports_speculative_draft_attention_backend / "
               "get_default_speculative_draft_attention_backend",
               "EAGLE, EAGLE3, STANDALONE, NGRAM on --attention-backend kunlun_triton (target verify with the "
               "tree mask, draft extend); the rest refused at start naming the algorithm", "sglang"),
    Touchpoint("draft attention backends", "hook", f"{DRAFT_BACKEND_HOOK} (AROUND)",
               "the draft model's extend and multi-step decode", "plugin",
               _hook_draft_backends),
    Touchpoint("EAGLE tree kernels", "hook",
               "spec_tree.build_tree_kernel_efficient_func, spec_tree.verify_tree_greedy_func (AROUND)",
               "SGLang's portable Triton tree builder and greedy tree walk (its XPU path; in-tree refuses "
               "out-of-tree platforms)", "platform", _hook_spec_tree),
    Touchpoint("sampled speculative verify", "binding",
               "eagle_utils.tree_speculative_sampling_target_only / top_k_renorm_prob / top_p_renorm_prob (None "
               "off CUDA: rebound, not hooked)",
               "a sampled request's tree verify (EAGLE, STANDALONE, NGRAM through eagle_sample): rejection "
               "sampling over the draft tree after the top-k / top-p renormalisation", "platform",
               _bind_sampled_verify),
    Touchpoint("NGRAM tree bookkeeping", "hook",
               "reconstruct_tree.reconstruct_indices_from_tree_mask_func (AROUND; the module imported with an "
               "import-time stand-in for sgl_kernel.speculative where sgl_kernel cannot load)",
               "SGLang's Triton reconstruct_indices_from_tree_mask_triton (its XPU path): draft positions and "
               "tree links from the n-gram tree mask", "platform", _hook_ngram_tree),
    Touchpoint("DeepSeek MTP draft", "hook", "models.deepseek_v2.DeepseekV2ForCausalLM.set_embed_and_head (AROUND)",
               "the target's embedding and head shared with the NextN draft, then the platform's empty_cache / "
               "synchronize (SGLang calls torch.cuda's unconditionally)", "platform", _hook_deepseek_draft_head),
    Touchpoint("accept length", "hook", "output_streamer._GenerationStreamAccumulator.accept (AROUND)",
               "each finished request's spec_verify_ct / spec_num_correct_drafts -> the dispatch report's "
               "accept length", "platform", _hook_spec_accept),
    Touchpoint("request guard", "hook",
               "io_struct.GenerateReqInput.normalize_batch_and_arguments, "
               "TokenizerManager._validate_one_request (BEFORE)",
               "HTTP 400 naming the field for requests that would kill the scheduler (top_k >= 2**31, n < 1, "
               "token ids outside the vocabulary, logprob counts < 0 or above it); kunlun platform only",
               "plugin", _hook_request_guard),
    Touchpoint("request seeds", "hook", f"{SEED_HOOK} (AFTER)",
               "a per-request sampling seed for the kunlun_triton sampler", "plugin", _hook_request_seeds),
    Touchpoint("dispatch report (server)", "hook", f"{INTERNAL_STATE_HOOK} (AFTER)",
               "GET /server_info internal_states[*].kunlun_triton", "plugin", _hook_internal_state),
    Touchpoint("dispatch report (engine)", "hook", f"{RPC_HOOK} (AROUND)",
               "Engine.collective_rpc('kunlun_triton_dispatch_report') on every rank", "plugin", _hook_report_rpc),
    Touchpoint("KV pool", "subclass", "memory_pool.MHATokenToKVPool (get_kv_pool_cls)",
               "KunlunMHATokenToKVPool: KV writes", "sglang"),
    Touchpoint("paged allocator", "subclass", "allocator.base.BaseTokenToKVPoolAllocator (get_paged_allocator_cls)",
               "kunlun_triton.memory.PagedKVAllocator (page_size > 1)", "sglang"),
    Touchpoint("collectives", "hook", "parallel_state.GroupCoordinator.{all_reduce, all_gather, ...} (AROUND)",
               "kunlun_triton.comm.TPCommunicator (tp_size > 1)", "platform", _hook_collectives),
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
