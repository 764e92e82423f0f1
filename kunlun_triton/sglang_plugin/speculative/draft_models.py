"""What SGLang 0.5.23's draft models need from an out-of-tree platform.

DeepSeek MTP (``--speculative-algorithm EAGLE`` / ``NEXTN`` with a
``DeepseekV3ForCausalLMNextN`` draft layer): the EAGLE worker hands the
target's embedding and head to the draft (``init_lm_head`` ->
``set_embed_and_head``), and ``DeepseekV2ForCausalLM.set_embed_and_head``
(``srt/models/deepseek_v2.py``, inherited by the NextN model) ends with
``torch.cuda.empty_cache(); torch.cuda.synchronize()`` unconditionally,
where Llama's goes through ``current_platform``. In development mode (the
CPU; no CUDA driver) that raises "Found no NVIDIA driver" while the draft
worker allocates its memory pool: the scheduler dies at start-up. The AROUND
hook below does what the original does (the same two weights swapped in)
and then asks the platform, as Llama's does. On a card (Kunlun's vendor torch
reports ``cuda``) the platform's calls are torch.cuda's: the same behaviour.
Scope: platform. Test: tests/sglang_plugin/test_sglang_speculative_deepseek.py.
"""

from __future__ import annotations

SET_EMBED_AND_HEAD_HOOK = "sglang.srt.models.deepseek_v2.DeepseekV2ForCausalLM.set_embed_and_head"


def set_embed_and_head_on_platform(original, self, embed, head):
    """AROUND hook: ``DeepseekV2ForCausalLM.set_embed_and_head`` without the
    unconditional CUDA calls (the platform's empty_cache / synchronize)."""
    from sglang.srt.platforms import current_platform

    del self.model.embed_tokens.weight
    del self.lm_head.weight
    self.model.embed_tokens.weight = embed
    self.lm_head.weight = head
    current_platform.empty_cache()
    current_platform.synchronize()
