"""Public ops, one folder per op family (`norm`, `activation`, `logits`,
`rope`, `attention`, `sampling`, `moe`, `quant`,
`linear_attention`), each holding its ``@triton.jit`` kernels, its
launchers (validate, pick a config, launch; or run the torch reference where
no Triton target runs), its pure-torch reference and its specs (`spec.OpSpec`:
the one registry of ops; what doctor, bench, tune and the plugin need). One
name per op everywhere: function, config key in ``autotune_configs/``,
dispatch-report key, bench row, test.

Plain imports, so an editor's go-to-definition reaches every op's launcher
from here. Importing the package decorates the kernels and compiles nothing
(``python -X importtime -c "import kunlun_triton.ops"``: docs/design.md has
the measurement). The names below are the ops of every family's specs and
the helpers those specs list (``HELPERS``); tests/ops/test_registry.py
checks the two agree.
"""

from .activation import gelu_and_mul, silu_and_mul
from .attention import (
    DecodeWorkspace,
    build_kv_indices,
    decode_attention,
    decode_split_plan,
    decode_workspace,
    extend_attention,
    store_kv,
)
from .linear_attention import (
    causal_conv1d,
    causal_conv1d_update,
    gated_delta_rule_decode,
    gated_delta_rule_prefill,
    gdn_split_qkvzba,
)
from .logits import logit_softcap
from .moe import fused_experts, moe_topk
from .norm import fused_add_rms_norm, gated_rms_norm, rms_norm
from .quant import int8_scaled_mm, per_token_quant_int8
from .rope import rotary_embedding
from .sampling import (
    greedy,
    min_p_renorm_probs,
    renorm_probs,
    sample,
    top_k_renorm_probs,
    top_p_renorm_probs,
    tree_speculative_sampling_target_only,
)

__all__ = [
    "DecodeWorkspace",
    "build_kv_indices",
    "causal_conv1d",
    "causal_conv1d_update",
    "decode_attention",
    "decode_split_plan",
    "decode_workspace",
    "extend_attention",
    "fused_add_rms_norm",
    "fused_experts",
    "gated_delta_rule_decode",
    "gated_delta_rule_prefill",
    "gated_rms_norm",
    "gelu_and_mul",
    "gdn_split_qkvzba",
    "greedy",
    "int8_scaled_mm",
    "logit_softcap",
    "min_p_renorm_probs",
    "moe_topk",
    "per_token_quant_int8",
    "renorm_probs",
    "rms_norm",
    "rotary_embedding",
    "sample",
    "silu_and_mul",
    "store_kv",
    "top_k_renorm_probs",
    "top_p_renorm_probs",
    "tree_speculative_sampling_target_only",
]
