"""NGRAM speculative decoding on the kunlun platform (development mode, every
op on Triton; docs/speculative.md), and the speculative rows of
docs/models.md's supported-models table.

Lossless: greedy tokens with speculative decoding are HF transformers' greedy
tokens (what SGLang gives without it) token for token, through a batch with
chunked prefill (a prompt over two chunks), then a request sharing the first
prompt's prefix (a radix hit) that continues the first request's own output:
the n-gram corpus holds that continuation (SGLang inserts each decode step's
tail), so its drafts match the target's tokens and some are accepted
(SGLang's ``spec_num_correct_drafts`` > 0: the multi-token accept path runs),
while the other requests' drafts are mostly rejected (the repair path). The
verify of every NGRAM tree runs our ``extend_attention`` with the tree's
mask; SGLang's Triton ``reconstruct_indices_from_tree_mask_triton`` builds
the positions and walk links (``sglang_plugin/speculative/ngram.py``).

STANDALONE (the target as its own draft: drafts accepted, a chain verified
causally) gives the Qwen3 row; the Llama STANDALONE row is written by
test_sglang_speculative.py's engine.

CI: three engines (about a minute each): Llama NGRAM at page size 1, Qwen3
NGRAM at page size 16, Qwen3 STANDALONE at page size 16.
``KUNLUN_TRITON_REGRESSION=full`` adds the other page size of each NGRAM
model (a deselection in the quick form, never a skip).
"""

from __future__ import annotations

import pytest
from kt_models_table import check_or_write_row, kernels_since, op_calls, refusals
from kt_sglang_support import output_ids
from kt_speculative import CHUNK, NEW, SAMPLED_OPS, greedy_params, lossless_prompts, sampled_between_greedy

from kunlun_triton.runtime.env import env_choice

SHARED = 4  # output tokens of the first request the prefix-sharing request starts with
NGRAM = dict(speculative_algorithm="NGRAM", speculative_num_draft_tokens=6, speculative_ngram_capacity=100_000)


def _breadth(page):
    """Trees of breadth 2 at page size 1; chains (breadth 1) with pages: SGLang 0.5.23 refuses a
    wider NGRAM tree with page_size > 1 on every backend but flashinfer (its own triton too)."""
    return 2 if page == 1 else 1


STANDALONE = dict(speculative_algorithm="STANDALONE", speculative_num_steps=3, speculative_eagle_topk=1,
                  speculative_num_draft_tokens=4)  # fmt: skip
FULL = env_choice("KUNLUN_TRITON_REGRESSION", ("quick", "full"), "quick") == "full"

# (tiny model, algorithm, page size, the row it writes or None)
CASES = [("llama", "NGRAM", 1, True), ("qwen3", "NGRAM", 16, True), ("qwen3", "STANDALONE", 16, True)]
if FULL:
    CASES += [("llama", "NGRAM", 16, False), ("qwen3", "NGRAM", 1, False)]


def _lossless(engine, hf, page):
    """The batch, then the first prompt continued by its own first SHARED output
    tokens (a radix hit on the prefix; the corpus holds what follows), each equal
    to HF's greedy tokens; returns every output."""
    prefix, prompts = lossless_prompts(hf)
    outs = engine.generate(input_ids=prompts, sampling_params=greedy_params())
    assert [output_ids(o) for o in outs] == [hf.greedy(p, NEW) for p in prompts]
    again_ids = prompts[0] + output_ids(outs[0])[:SHARED]
    again = engine.generate(input_ids=again_ids, sampling_params=greedy_params())
    assert output_ids(again) == hf.greedy(again_ids, NEW)
    assert again["meta_info"].get("cached_tokens", 0) >= (len(prefix) - 1) // page * page > 0  # whole pages
    return outs + [again]


def _served(algorithm, page):
    spec = (f"`--speculative-algorithm NGRAM` (6 draft tokens, breadth {_breadth(page)})" if algorithm == "NGRAM" else
            "`--speculative-algorithm STANDALONE` (the target as its draft, 3 steps, topk 1)")  # fmt: skip
    return f"2 layers, TP 1, {spec}, page size {page}, radix cache + chunked prefill"


@pytest.mark.parametrize("arch,algorithm,page,row", CASES, ids=[f"{a}-{g.lower()}-page{p}" for a, g, p, _ in CASES])
def test_speculative_greedy_equals_hf_and_drafts_are_accepted(arch, algorithm, page, row, tiny_model, engines):
    from conftest import HFOracle

    from kunlun_triton.sglang_plugin.report import engine_dispatch_report
    from kunlun_triton.sglang_plugin.platform.support import model_config

    path = tiny_model(arch)
    hf = HFOracle(path)
    if algorithm == "NGRAM":
        options = {**NGRAM, "speculative_ngram_max_bfs_breadth": _breadth(page)}
    else:
        options = {**STANDALONE, "speculative_draft_model_path": path}
    engine = engines.get(path, page_size=page, chunked_prefill_size=CHUNK, **options)
    before = op_calls(engine_dispatch_report(engine)[0]["ops"])
    outs = _lossless(engine, hf, page)
    sampled_between_greedy(engine, hf, outs[0])

    verify = sum(o["meta_info"]["spec_verify_ct"] for o in outs)
    correct = sum(o["meta_info"]["spec_num_correct_drafts"] for o in outs)
    tokens = sum(o["meta_info"]["completion_tokens"] for o in outs)
    print(f"{arch} {algorithm} page {page}: {tokens} tokens, {verify} verify forwards, {correct} drafts accepted")
    assert verify > 0, "no verify forward ran: speculative decoding was off"
    assert correct > 0, f"no draft accepted in {verify} verify forwards"
    # every generated token after the first (prefill) one came from a verify: its own or an accepted draft
    assert tokens <= len(outs) + verify + correct

    report = engine_dispatch_report(engine)[0]
    for name, entry in report["ops"].items():  # every op of the engine on Triton
        assert entry["impl"] == "triton" and set(entry["calls"]) == {"triton"}, (name, entry)
    verify_ops = report["speculative"]["target_verify"]["ops"]
    if algorithm == "NGRAM":  # a tree (a chain too): the mask in the kernel, never causal; no draft model
        assert verify_ops["extend_attention(custom_mask)"] > 0 and "extend_attention" not in verify_ops
        assert "draft_extend" not in report["speculative"] and "draft_decode" not in report["speculative"]
    else:  # a chain: causal
        assert verify_ops["extend_attention"] > 0 and "extend_attention(custom_mask)" not in verify_ops
    assert verify_ops["store_kv"] > 0
    for op in SAMPLED_OPS:  # the sampled verify ran on our kernels
        assert report["ops"][op]["calls"].get("triton", 0) > 0, (op, report["ops"].get(op))

    if row:
        architecture = model_config(path)["architectures"][0]
        check_or_write_row({"architecture": f"{architecture}, {algorithm}", "served": _served(algorithm, page),
                            "oracle": "HF transformers", "ops": kernels_since(report["ops"], before),
                            "refused": refusals(path, moe=False)})  # fmt: skip


def test_ngram_tree_op_imports_without_faking_sgl_kernel():
    """SGLang's NGRAM worker imports on the kunlun platform although its tree op's
    module takes a name from sgl_kernel (which cannot load here), and sgl_kernel
    stays absent for every other SGLang check."""
    import importlib.util
    import sys

    from kunlun_triton.sglang_plugin.speculative.ngram import import_reconstruct_tree

    had_kernel = importlib.util.find_spec("sgl_kernel") is not None
    module = import_reconstruct_tree()
    assert module.__name__ == "sglang.kernels.ops.speculative.reconstruct_tree"
    assert "sgl_kernel.speculative" not in sys.modules and "sgl_kernel" not in sys.modules
    with pytest.raises(ImportError):  # still not importable (not installed, or its CUDA build without libcuda)
        import sgl_kernel  # noqa: F401
    assert (importlib.util.find_spec("sgl_kernel") is not None) == had_kernel
    import sglang.srt.speculative.ngram_worker  # noqa: F401  (imports its tree op at import time)


def test_reconstruct_tree_hook_runs_sglangs_triton_kernel_and_matches_its_host_walk():
    """The hook's op (SGLang's Triton kernel, in the interpreter) against SGLang's
    own host derivation of the same tree links (`ngram_worker._derive_tree_links`)
    and positions counted here, on random n-gram-shaped trees."""
    import numpy as np
    import torch
    from sglang.srt.speculative.ngram_worker import _derive_tree_links

    from kunlun_triton.sglang_plugin.speculative.ngram import reconstruct_tree_triton

    gen = np.random.default_rng(0)
    bs, n = 3, 6
    mask = np.zeros((bs, n, n), dtype=bool)
    for b in range(bs):  # node 0 the root; each later node hangs under a random earlier one
        for i in range(n):
            mask[b, i, i] = True
            if i:
                parent = int(gen.integers(0, i))
                mask[b, i] |= mask[b, parent]
    seq_lens = torch.tensor([5, 9, 1])
    positions = torch.full((bs * n,), -7, dtype=torch.int64)
    index, next_token, next_sibling = (torch.full((bs, n), -7, dtype=torch.int64) for _ in range(3))

    def must_not_run(*args):
        raise AssertionError("the hook must not call sgl_kernel's op")

    reconstruct_tree_triton(must_not_run, torch.from_numpy(mask.reshape(-1)), seq_lens, positions, index,
                            next_token, next_sibling, bs, n)  # fmt: skip
    want_token, want_sibling = _derive_tree_links(mask.reshape(-1), bs, n)
    assert torch.equal(next_token, want_token) and torch.equal(next_sibling, want_sibling)
    depth = torch.from_numpy(mask.sum(-1) - 1)  # ancestors, the node itself excluded
    assert torch.equal(positions.view(bs, n), depth + seq_lens.view(-1, 1))
    assert torch.equal(index, torch.arange(bs * n).view(bs, n))
