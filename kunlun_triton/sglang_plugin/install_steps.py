"""What each touchpoint of `install.TOUCHPOINTS` does: registrations with
SGLang, and hooks handed to its ``HookRegistry`` (applied once by
`install.install`). Every SGLang import is function-level: this module is
read while SGLang resolves its platform."""

from __future__ import annotations

from .platform.names import ATTENTION_BACKEND, DISPATCH_KEY, SAMPLING_BACKEND


def _hook(target: str, hook, kind: str) -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(target, hook, HookType[kind])


def add_attention_backend() -> None:
    from sglang.srt.arg_groups.choices import ATTENTION_BACKEND_CHOICES, add_attention_backend_choices
    from sglang.srt.layers.attention.attention_registry import register_attention_backend

    if ATTENTION_BACKEND not in ATTENTION_BACKEND_CHOICES:
        add_attention_backend_choices([ATTENTION_BACKEND])

    @register_attention_backend(ATTENTION_BACKEND)
    def _create(runner):
        from .backends.attention import KunlunTritonAttnBackend

        return KunlunTritonAttnBackend(runner)


def accept_deterministic_inference() -> None:
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
    accept_deterministic_inference()


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


def hook_model_rules() -> None:
    from .platform import model_rules as rules

    if _sglang_defines(rules.ALLOW_LIST_HOOK):  # else an SGLang that checks backends otherwise: its lists stay
        _hook(rules.ALLOW_LIST_HOOK, rules.backends_for_allow_lists, "AROUND")
    if _sglang_defines(rules.OVERRIDE_PROVIDER_HOOK):
        _hook(rules.OVERRIDE_PROVIDER_HOOK, rules.keep_explicit_dtype, "AROUND")


def hook_gpt_oss_dtype() -> None:
    from .platform.model_rules import GPT_OSS_INIT_HOOK, build_in_serving_dtype

    _hook(GPT_OSS_INIT_HOOK, build_in_serving_dtype, "AROUND")


def hook_batch_invariant_mode() -> None:
    from .layers.batch_invariant import enable_batch_invariant_mode, murmur_hash32

    _hook(BATCH_INVARIANT_HOOK, enable_batch_invariant_mode, "AROUND")
    _hook(SAMPLING_HASH_HOOK, murmur_hash32, "AROUND")


def register_sampling_backend() -> None:
    from sglang.srt.layers.sampler import register_sampler_backend

    from .backends.sampler import create_sampler

    register_sampler_backend(SAMPLING_BACKEND, create_sampler)


def register_fused_forwards() -> None:
    from .layers.fused_ops import register_fused_ops

    register_fused_ops(DISPATCH_KEY)


def register_moe_forwards() -> None:
    from .layers.moe import register_moe_ops

    register_moe_ops(DISPATCH_KEY)


def hook_request_seeds() -> None:
    from .backends.sampler import fill_request_seeds

    _hook(SEED_HOOK, fill_request_seeds, "AFTER")


def hook_request_guard() -> None:
    from .platform.request_guard import NORMALIZE_HOOK, VALIDATE_HOOK, guard_normalize, guard_validate

    _hook(NORMALIZE_HOOK, guard_normalize, "BEFORE")
    _hook(VALIDATE_HOOK, guard_validate, "BEFORE")


def hook_internal_state() -> None:
    from .report import add_report_to_internal_state

    _hook(INTERNAL_STATE_HOOK, add_report_to_internal_state, "AFTER")


def hook_report_rpc() -> None:
    from .report import answer_report_rpc

    _hook(RPC_HOOK, answer_report_rpc, "AROUND")


def hook_logit_softcap() -> None:
    from .layers.fused_ops import softcap_logits

    _hook(SOFTCAP_HOOK, softcap_logits, "AROUND")


def hook_int8_quantization() -> None:
    from .layers.moe import int8_experts_apply
    from .layers import quantization as q

    _hook(q.LINEAR_HOOK, q.int8_linear_apply, "AROUND")
    _hook(q.MOE_HOOK, int8_experts_apply, "AROUND")
    _hook(q.MOE_WEIGHTS_HOOK, q.int8_experts_create_weights, "AROUND")


def hook_draft_backends() -> None:
    from .speculative.draft import draft_backends

    _hook(DRAFT_BACKEND_HOOK, draft_backends, "AROUND")


def hook_spec_accept() -> None:
    from .speculative.accept import ACCEPT_HOOK, count_finished_request

    _hook(ACCEPT_HOOK, count_finished_request, "AROUND")


def hook_deepseek_draft_head() -> None:
    from .speculative.draft_models import SET_EMBED_AND_HEAD_HOOK, set_embed_and_head_on_platform

    _hook(SET_EMBED_AND_HEAD_HOOK, set_embed_and_head_on_platform, "AROUND")


def hook_spec_tree() -> None:
    from .speculative.tree import TREE_BUILD_HOOK, TREE_VERIFY_HOOK, build_tree_triton, verify_tree_greedy_triton

    if not _sglang_defines(TREE_BUILD_HOOK, TREE_VERIFY_HOOK):
        return  # SGLang 0.5.21 keeps its tree kernels in eagle_utils: left as they are
    _hook(TREE_BUILD_HOOK, build_tree_triton, "AROUND")
    _hook(TREE_VERIFY_HOOK, verify_tree_greedy_triton, "AROUND")


def bind_sampled_verify() -> None:
    # Function-level: it imports the op families (see `served_ops`).
    from .speculative.sampled_verify import bind_sampled_verify

    bind_sampled_verify()


def hook_ngram_tree() -> None:
    from .speculative.ngram import RECONSTRUCT_HOOK, import_reconstruct_tree, reconstruct_tree_triton

    module = import_reconstruct_tree()
    if not hasattr(module, RECONSTRUCT_HOOK.rsplit(".", 1)[1]):
        return  # SGLang 0.5.21: no dispatcher there (its NGRAM worker picks the op itself): left as it is
    _hook(RECONSTRUCT_HOOK, reconstruct_tree_triton, "AROUND")


def hook_collectives() -> None:
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
