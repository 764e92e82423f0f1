"""Fixtures for the SGLang plugin tests: real SGLang on the CPU (development
mode, Triton interpreter), tiny random models built locally, HF transformers
as the oracle.

Without SGLang the root conftest does not collect these files, unless
``KUNLUN_TRITON_REQUIRE_SGLANG=1`` (CI's sglang stage): then they fail.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

os.environ.setdefault("SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS", "0")

REQUIRE = os.environ.get("KUNLUN_TRITON_REQUIRE_SGLANG") == "1"
HAVE_SGLANG = importlib.util.find_spec("sglang") is not None


@pytest.fixture(scope="session", autouse=True)
def _require_sglang():
    if not HAVE_SGLANG and REQUIRE:
        pytest.fail("KUNLUN_TRITON_REQUIRE_SGLANG=1 but SGLang is not installed", pytrace=False)


@pytest.fixture(scope="session")
def model_root(tmp_path_factory):
    root = os.environ.get("KUNLUN_TRITON_TINY_MODEL_DIR")
    return root if root else str(tmp_path_factory.mktemp("tiny_models"))


def _build(model_root, arch):
    from kunlun_triton.sglang_plugin.tools.tiny_model import build_tiny_model

    return str(build_tiny_model(os.path.join(model_root, f"tiny-{arch}"), arch))


@pytest.fixture(scope="session")
def tiny_model(model_root):
    """tiny_model(arch) -> the path of that tiny checkpoint (built once)."""
    return lambda arch: _build(model_root, arch)


@pytest.fixture(scope="session")
def engines():
    """One engine at a time, cached per (model, options): kt_engines.EngineCache."""
    from kt_engines import EngineCache
    from kt_sglang_support import ENGINE_DEFAULTS, start_sglang_engine

    cache = EngineCache(start_sglang_engine, **ENGINE_DEFAULTS)
    yield cache
    cache.close()


@pytest.fixture(scope="session")
def smollm2_bf16():
    """The bf16 SmolLM2-135M-Instruct checkpoint's directory: $KUNLUN_TRITON_SMOLLM2_BF16,
    or `kunlun-triton models fetch smollm2 --dtype bf16` (converted once from the cached GGUF)."""
    path = os.environ.get("KUNLUN_TRITON_SMOLLM2_BF16")
    if path:
        return path
    try:
        from kunlun_triton.tools.models import fetch
    except ImportError:
        pytest.fail("no SmolLM2 checkpoint: set KUNLUN_TRITON_SMOLLM2_BF16 to a converted bf16 checkpoint's "
                    "directory (or install a kunlun-triton with `models fetch`)", pytrace=False)  # fmt: skip
    return str(fetch("smollm2", "bf16", progress=False))


@pytest.fixture(scope="session")
def tiny_llama(model_root):
    return _build(model_root, "llama")


@pytest.fixture(scope="session")
def tiny_qwen2(model_root):
    return _build(model_root, "qwen2")


@pytest.fixture(scope="session")
def tiny_qwen3(model_root):
    return _build(model_root, "qwen3")


@pytest.fixture(scope="session")
def tiny_qwen3_moe(model_root):
    return _build(model_root, "qwen3_moe")


@pytest.fixture(scope="session")
def tiny_mixtral(model_root):
    return _build(model_root, "mixtral")


class HFOracle:
    """Greedy decoding with HF transformers, fp32, no EOS stop."""

    def __init__(self, path, **config_changes):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **config_changes).eval()

    def encode(self, text):
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def chat_ids(self, messages):
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self.encode(text)

    def greedy(self, input_ids, max_new_tokens):
        torch = self.torch
        ids = torch.tensor([list(input_ids)])
        out = []
        with torch.no_grad():
            for _ in range(max_new_tokens):
                logits = self.model(ids).logits[0, -1]
                nxt = int(torch.argmax(logits))
                out.append(nxt)
                ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
        return out


@pytest.fixture(scope="session")
def hf_llama(tiny_llama):
    return HFOracle(tiny_llama)


@pytest.fixture(scope="session")
def hf_qwen2(tiny_qwen2):
    return HFOracle(tiny_qwen2)


@pytest.fixture(scope="session")
def hf_qwen3_moe(tiny_qwen3_moe):
    return HFOracle(tiny_qwen3_moe)


@pytest.fixture(scope="session")
def hf_mixtral(tiny_mixtral):
    return HFOracle(tiny_mixtral)
