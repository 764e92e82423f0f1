"""Fixtures for the fixed-model regression suite (marker ``regression``).

The models are SmolLM2-135M-Instruct and Qwen2.5-Coder-0.5B-Instruct from
``kunlun-triton models fetch smollm2`` / ``qwen2.5-0.5b`` (scripts/test.sh
fetches both before the sglang stage; here fetch is a no-op when cached). The oracle is HF transformers, eager, float32, on the
same checkpoint. ``KUNLUN_TRITON_REGRESSION=full`` adds the long system
prompt, more tokens, the multi-turn matrix (page sizes, chunked prefill, cache
off) and the bf16/fp16 checkpoints; the quick form (CI) is a small slice.
"""

from __future__ import annotations

import os

import pytest
from kt_regression_support import FULL

# The full-only files are not collected in the quick form (a deselection, never a skip).
collect_ignore_glob = [] if FULL else ["*_full.py"]


@pytest.fixture(scope="session")
def smollm2():
    """The float32 SmolLM2 checkpoint's path (downloaded and converted once)."""
    from kunlun_triton.tools.models import fetch

    return str(fetch("smollm2", "fp32", progress=False))


@pytest.fixture(scope="session")
def smollm2_bf16():
    """The bf16 SmolLM2 checkpoint's path (converted from the same cached GGUF, no download)."""
    from kunlun_triton.tools.models import fetch

    return str(fetch("smollm2", "bf16", progress=False))


@pytest.fixture(scope="session")
def qwen():
    """The float32 Qwen2.5-Coder-0.5B-Instruct checkpoint's path (downloaded and converted once)."""
    from kunlun_triton.tools.models import fetch

    return str(fetch("qwen2.5-0.5b", "fp32", progress=False))


class HFOracle:
    """HF transformers, eager float32: greedy ids and per-step log-softmax."""

    def __init__(self, path, dtype=None, cached=False):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.cached = cached  # decode on HF's KV cache (its generate path) instead of recomputing the sequence
        self._greedy = {}
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(
            path, dtype=dtype or torch.float32, attn_implementation="eager").eval()

    def logprobs(self, ids):
        """log_softmax over the vocabulary at every position of `ids` (float32)."""
        torch = self.torch
        with torch.no_grad():
            logits = self.model(torch.tensor([list(ids)])).logits[0].float()
        return torch.log_softmax(logits, dim=-1)

    def greedy(self, ids, max_new_tokens):
        """Greedy continuation (no EOS stop) and the log-softmax that chose each token
        (remembered: several tests ask for the same prompts)."""
        key = (tuple(ids), max_new_tokens)
        if key not in self._greedy:
            self._greedy[key] = self._decode(ids, max_new_tokens)
        return self._greedy[key]

    def _decode(self, ids, max_new_tokens):
        torch = self.torch
        if self.cached:
            return self._decode_cached(ids, max_new_tokens)
        ids, out, steps = list(ids), [], []
        with torch.no_grad():
            for _ in range(max_new_tokens):
                lp = torch.log_softmax(self.model(torch.tensor([ids])).logits[0, -1].float(), dim=-1)
                nxt = int(torch.argmax(lp))
                out.append(nxt)
                steps.append(lp)
                ids.append(nxt)
        return out, steps


    def _decode_cached(self, ids, max_new_tokens):
        torch = self.torch
        out, steps, past, step_ids = [], [], None, list(ids)
        with torch.no_grad():
            for _ in range(max_new_tokens):
                result = self.model(torch.tensor([step_ids]), past_key_values=past, use_cache=True)
                past = result.past_key_values
                lp = torch.log_softmax(result.logits[0, -1].float(), dim=-1)
                nxt = int(torch.argmax(lp))
                out.append(nxt)
                steps.append(lp)
                step_ids = [nxt]
        return out, steps


@pytest.fixture(scope="session")
def hf_smollm2(smollm2):
    return HFOracle(smollm2)


@pytest.fixture(scope="session")
def hf_qwen(qwen):
    # 24 layers at a 152k vocabulary: decoding on HF's KV cache (a full recompute per token made
    # HF the larger half of the quick form's time)
    return HFOracle(qwen, cached=True)


@pytest.fixture(scope="session")
def engines():
    os.environ.setdefault("SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS", "0")
    from kt_engines import EngineCache

    from kunlun_triton.sglang_plugin.tools.regress import start_engine

    cache = EngineCache(start_engine, dtype="float32")
    yield cache
    cache.close()
