"""Deterministic inference on the kunlun platform (development mode).

- End to end: a tiny Qwen3 served with ``enable_deterministic_inference``;
  one prompt sampled at temperature 0.9 with top-k/top-p and a fixed seed,
  alone, inside three different batches (other prompts of other lengths,
  chunked prefill, a partly cached prefix), and alone again after its prefix
  is cached: the same output_ids and bitwise the same output_token_logprobs.
- The host ops the platform registers for SGLang's batch-invariant mode are
  row-invariant; SGLang's persistent GEMM kernel under the Triton
  interpreter is not (numpy's matmul rounds by the row's lane in the tile),
  which is why the host does not use it.
"""

from __future__ import annotations

import pytest
import torch

from kt_sglang_support import output_ids, start_engine

CHUNK = 16  # the target prompt is longer: chunked prefill when uncached
NEW = 4


@pytest.fixture(scope="module")
def engine(tiny_qwen3):
    eng = start_engine(tiny_qwen3, enable_deterministic_inference=True, chunked_prefill_size=CHUNK)
    yield eng
    eng.shutdown()


@pytest.fixture(scope="module")
def tokenizer(tiny_qwen3):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_qwen3)
    return lambda text: tok(text, add_special_tokens=False)["input_ids"]


def test_sampled_tokens_and_logprobs_are_batch_and_cache_invariant(engine, tokenizer):
    target = tokenizer("The quick brown fox jumps over the lazy dog and keeps running far away")
    assert len(target) > CHUNK
    others = [tokenizer("Hello"), tokenizer("Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 13"), tokenizer("A kernel")]
    params = {"max_new_tokens": NEW, "temperature": 0.9, "top_k": 20, "top_p": 0.9, "sampling_seed": 42,
              "ignore_eos": True}  # fmt: skip

    def run(batch, at, flush=True):
        if flush:
            engine.flush_cache()
        outs = engine.generate(input_ids=batch, sampling_params=[params] * len(batch), return_logprob=True)
        out = outs[at]
        return output_ids(out), [lp for lp, _, _ in out["meta_info"]["output_token_logprobs"]], out["meta_info"]

    runs = {"alone": run([target], 0)}
    runs["batch of 2"] = run([others[0], target], 1)
    runs["batch of 3"] = run([target, others[1], others[2]], 0)
    engine.flush_cache()
    engine.generate(input_ids=target[:11], sampling_params={"max_new_tokens": 1})  # a cached prefix cut mid-tile
    runs["batch of 4, prefix cut at 11"] = run([others[2], others[1], target, others[0]], 2, flush=False)
    runs["alone, cached"] = run([target], 0, flush=False)
    assert runs["batch of 4, prefix cut at 11"][2]["cached_tokens"] >= 11
    assert runs["alone, cached"][2]["cached_tokens"] >= len(target) - 1

    ids, logprobs, _ = runs["alone"]
    assert len(ids) == NEW
    for name, (other_ids, other_logprobs, _) in runs.items():
        assert other_ids == ids, name
        assert other_logprobs == logprobs, f"{name}: logprobs not bitwise equal"  # float ==: bit for bit


def test_the_seed_matters(engine, tokenizer):
    """The sample is drawn, not fixed: another seed gives other tokens."""
    prompt = tokenizer("The quick brown fox")
    params = {"max_new_tokens": 6, "temperature": 0.9, "top_k": 20, "top_p": 0.9, "ignore_eos": True}
    draws = {tuple(output_ids(engine.generate(input_ids=prompt, sampling_params={**params, "sampling_seed": s})))
             for s in (1, 2, 3)}  # fmt: skip
    assert len(draws) > 1


def _rows_alone_and_batched(mm, a, b):
    batched = mm(a, b)
    return [torch.equal(mm(a[i : i + 1], b)[0], batched[i]) for i in range(a.shape[0])]


def test_host_batch_invariant_ops_are_row_invariant():
    from kunlun_triton.sglang_plugin.layers.batch_invariant import disable_on_host, enable_on_host

    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(24, 64, generator=gen), torch.randn(64, 96, generator=gen)
    bias = torch.randn(96, generator=gen)
    logits = torch.randn(24, 200, generator=gen)
    plain = _rows_alone_and_batched(torch.mm, a, b)
    enable_on_host()
    try:
        assert all(_rows_alone_and_batched(torch.mm, a, b))
        assert all(_rows_alone_and_batched(lambda x, y: torch.addmm(bias, x, y), a, b))
        assert all(_rows_alone_and_batched(lambda x, y: torch.nn.functional.linear(x, y.t()), a, b))
        torch.testing.assert_close(torch.mm(a, b), (a.double() @ b.double()).float())
        lsm = torch.log_softmax(logits, dim=-1)  # SGLang's Triton log-softmax kernel
        assert all(torch.equal(torch.log_softmax(logits[i : i + 1], -1)[0], lsm[i]) for i in range(24))
        torch.testing.assert_close(lsm, torch.log_softmax(logits.double(), -1).float())
    finally:
        disable_on_host()
    # the CPU's own GEMM is what needed replacing (it blocks rows by the batch size)
    assert not all(plain), "torch's host GEMM was row-invariant here: the replacement is untested"
