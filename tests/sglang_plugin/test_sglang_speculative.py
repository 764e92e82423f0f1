"""Speculative decoding on the kunlun platform (docs/speculative.md): greedy
outputs with speculative decoding are token for token HF transformers'
greedy outputs (the same tokens SGLang gives without it), through the radix
cache (a second request sharing a prefix), chunked prefill and page sizes 1
and 16; every attention call of each phase ran on our Triton kernels, the
verify of a tree with its custom mask, of a chain causal.

Engines (each start is about a minute on 2 cores):
- STANDALONE, topk 1, the target as its own draft (every draft is the
  target's greedy token, so drafts are accepted: accept length > 1, the
  multi-token accept path runs); a chain: verify without a mask.
- EAGLE, topk 2, page size 1, a random draft head built locally
  (kt_speculative.py): a tree verified with its mask, drafts mostly
  rejected (the repair path), the draft decode over two branches.
NGRAM: test_sglang_speculative_ngram.py. The STANDALONE engine writes the
"LlamaForCausalLM, STANDALONE" row of docs/models.md (kt_models_table).
Backend level: target verify with random tree masks against attention
written out in torch.
"""

from __future__ import annotations

import pytest

from kt_sglang_support import output_ids
from kt_speculative import CHUNK, NEW, SAMPLED_OPS, greedy_params, lossless_prompts, sampled_between_greedy



def _accept_length(outs) -> float:
    """Tokens per target verify forward, over the requests (SGLang's meta_info)."""
    verify = sum(o["meta_info"]["spec_verify_ct"] for o in outs)
    assert verify > 0, "no verify forward ran: speculative decoding was off"
    return sum(o["meta_info"]["completion_tokens"] for o in outs) / verify


def _lossless(engine, hf, page):
    """Batch, then a second request sharing the first one's prefix (a radix
    hit), each equal to HF's greedy tokens; returns every output."""
    prefix, prompts = lossless_prompts(hf)
    outs = engine.generate(input_ids=prompts, sampling_params=greedy_params())
    assert [output_ids(o) for o in outs] == [hf.greedy(p, NEW) for p in prompts]
    shared = prefix + hf.encode(" a kernel")
    again = engine.generate(input_ids=shared, sampling_params=greedy_params())
    assert output_ids(again) == hf.greedy(shared, NEW)
    assert again["meta_info"].get("cached_tokens", 0) >= (len(prefix) - 1) // page * page > 0  # whole pages
    return outs + [again]


def _phases(engine) -> dict:
    from kunlun_triton.sglang_plugin.report import engine_dispatch_report

    report = engine_dispatch_report(engine)[0]
    for name, entry in report["ops"].items():  # every op of the engine on Triton
        assert entry["impl"] == "triton" and set(entry["calls"]) == {"triton"}, (name, entry)
    return report["speculative"]


@pytest.fixture(scope="module")
def hf(hf_llama):
    return hf_llama


def test_standalone_chain_is_lossless_and_accepts_drafts(tiny_llama, hf, engines):
    from kt_models_table import check_or_write_row, kernels_since, op_calls, refusals

    from kunlun_triton.sglang_plugin.report import engine_dispatch_report

    engine = engines.get(tiny_llama, page_size=16, chunked_prefill_size=CHUNK, speculative_algorithm="STANDALONE",
                         speculative_draft_model_path=tiny_llama, speculative_num_steps=3,
                         speculative_eagle_topk=1, speculative_num_draft_tokens=4)  # fmt: skip
    before = op_calls(engine_dispatch_report(engine)[0]["ops"])
    outs = _lossless(engine, hf, page=16)
    # the draft is the target: its greedy drafts are accepted (4 per verify but at the ends)
    assert _accept_length(outs) > 2.0
    phases = _phases(engine)
    assert phases["target_verify"]["ops"]["extend_attention"] > 0  # a chain: causal, no mask
    assert "extend_attention(custom_mask)" not in phases["target_verify"]["ops"]
    assert phases["draft_extend"]["ops"]["extend_attention"] > 0
    assert phases["draft_decode"]["ops"]["decode_attention"] > 0
    check_or_write_row({"architecture": "LlamaForCausalLM, STANDALONE",
                        "served": "2 layers, TP 1, `--speculative-algorithm STANDALONE` (the target as its draft, "
                                  "3 steps, topk 1), page size 16, radix cache + chunked prefill",
                        "oracle": "HF transformers",
                        "ops": kernels_since(engine_dispatch_report(engine)[0]["ops"], before),
                        "refused": refusals(tiny_llama, moe=False)})  # fmt: skip


def test_eagle_tree_with_a_random_head_is_lossless(tiny_llama, hf, engines, model_root):
    from kt_speculative import build_eagle_head

    head = build_eagle_head(tiny_llama, f"{model_root}/tiny-llama-eagle-head")
    # page size 1: SGLang 0.5.23 allows topk > 1 with pages only on its own flashinfer / fa3 / triton backends
    engine = engines.get(tiny_llama, page_size=1, chunked_prefill_size=CHUNK, speculative_algorithm="EAGLE",
                         speculative_draft_model_path=head, speculative_num_steps=3,
                         speculative_eagle_topk=2, speculative_num_draft_tokens=5)  # fmt: skip
    outs = _lossless(engine, hf, page=1)
    assert _accept_length(outs) >= 1.0  # random drafts: mostly rejected, the verify's own token kept
    sampled_between_greedy(engine, hf, outs[0])  # a tree verified by rejection sampling on our kernels
    phases = _phases(engine)
    from kunlun_triton.sglang_plugin.report import engine_dispatch_report

    ops = engine_dispatch_report(engine)[0]["ops"]
    assert all(ops[op]["calls"].get("triton", 0) > 0 for op in SAMPLED_OPS), {op: ops.get(op) for op in SAMPLED_OPS}
    assert phases["target_verify"]["ops"]["extend_attention(custom_mask)"] > 0  # a tree: the mask in the kernel
    assert "extend_attention" not in phases["target_verify"]["ops"]
    assert phases["draft_extend"]["ops"]["extend_attention"] > 0  # the head, fed the target's hidden states
    decode = phases["draft_decode"]  # topk 2: two branches per request in each draft decode step
    assert decode["ops"]["decode_attention"] > 0
    assert decode["requests"] >= 2 * decode["forwards"] and decode["requests"] % 2 == 0


def test_platform_declares_algorithms_and_refuses_the_rest(tmp_path):
    import json
    from types import SimpleNamespace

    import sglang  # noqa: F401  (first: the platform module imports SGLang's platform package mid-init)

    from kunlun_triton.sglang_plugin.platform.classes import KunlunDevPlatform
    from kunlun_triton.sglang_plugin.platform.support import UnsupportedFeature, check_support

    platform = KunlunDevPlatform.__new__(KunlunDevPlatform)  # the hooks read no state
    for algo in ("EAGLE", "EAGLE3", "STANDALONE", "NGRAM", "NEXTN"):
        assert platform.supports_speculative_algorithm(algo)
        assert platform.supports_speculative_draft_attention_backend(algo, "kunlun_triton")
    for algo in ("DFLASH", "UNO", "DSPARK", "FROZEN_KV_MTP"):
        assert not platform.supports_speculative_algorithm(algo)
    assert not platform.supports_speculative_draft_attention_backend("EAGLE", "flashinfer")
    assert platform.get_default_speculative_draft_attention_backend("EAGLE") == "kunlun_triton"
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    args = SimpleNamespace(model_path=str(tmp_path), speculative_algorithm="STANDALONE", kv_cache_dtype="auto")
    check_support(args, ours=True)  # served
    args.speculative_algorithm = "DFLASH"
    with pytest.raises(UnsupportedFeature, match=r"LlamaForCausalLM .*--speculative-algorithm DFLASH.*NGRAM"):
        check_support(args, ours=True)


def _verify_setup(seq_lens, n, seed):
    """Our backend over a random pool; a TARGET_VERIFY batch of len(seq_lens)
    requests with n draft tokens each and a random tree mask (SGLang's layout:
    request b's n x (seq_len + n) block, prefix columns all visible)."""
    from types import SimpleNamespace

    import torch
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    from kunlun_triton.sglang_plugin.backends.attention import KunlunTritonAttnBackend

    kv_heads, dim, max_len, bs = 2, 16, 32, len(seq_lens)
    slots = bs * max_len + 8
    pool = MHATokenToKVPool(size=slots, page_size=1, dtype=torch.float32, head_num=kv_heads, head_dim=dim,
                            layer_num=1, device="cpu", enable_memory_saver=False, enable_alt_stream=False)  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    pool.get_key_buffer(0).copy_(torch.randn(pool.get_key_buffer(0).shape, generator=gen))
    pool.get_value_buffer(0).copy_(torch.randn(pool.get_value_buffer(0).shape, generator=gen))
    req_to_token = torch.randperm(slots - 1, generator=gen)[: bs * max_len].add(1).to(torch.int32).view(bs, max_len)
    runner = SimpleNamespace(device="cpu", token_to_kv_pool=pool, use_mla_backend=False,
                             req_to_token_pool=SimpleNamespace(req_to_token=req_to_token))  # fmt: skip
    backend = KunlunTritonAttnBackend(runner, deterministic=False)
    backend.chain_verify = False  # not whatever server context this process last had: the mask path
    blocks = []
    for s in seq_lens:  # a random tree: each draft token sees itself and a random subset of earlier ones
        tree = (torch.rand(n, n, generator=gen) < 0.5).tril(-1) | torch.eye(n, dtype=torch.bool)
        blocks.append(torch.cat([torch.ones(n, s, dtype=torch.bool), tree], dim=1).flatten())
    seq = torch.tensor(seq_lens, dtype=torch.int64)
    out_loc = torch.cat([req_to_token[b, s : s + n] for b, s in enumerate(seq_lens)]).to(torch.int64)
    batch = SimpleNamespace(forward_mode=ForwardMode.TARGET_VERIFY, req_pool_indices=torch.arange(bs),
                            seq_lens=seq, seq_lens_sum=int(seq.sum()), out_cache_loc=out_loc,
                            spec_info=SimpleNamespace(num_tokens_per_req=n, custom_mask=torch.cat(blocks)))  # fmt: skip
    return backend, pool, req_to_token, batch, blocks, gen


def _verify_layer(heads=4, kv_heads=2, dim=16):
    from types import SimpleNamespace

    from sglang.srt.layers.radix_attention import AttentionType

    return SimpleNamespace(tp_q_head_num=heads, tp_k_head_num=kv_heads, qk_head_dim=dim, v_head_dim=dim,
                           scaling=dim**-0.5, layer_id=0, logit_cap=0.0, sliding_window_size=-1,
                           is_cross_attention=False, attn_type=AttentionType.DECODER)  # fmt: skip


@pytest.mark.parametrize("seq_lens,n", [([5, 9], 4), ([1, 12, 3], 6)])
def test_target_verify_attends_where_the_tree_mask_says(seq_lens, n):
    """Our backend's TARGET_VERIFY forward (metadata + store + masked extend)
    against attention written out here in torch: draft token i of request b
    sees the whole committed prefix and draft token j where the mask says;
    the draft K/V land in the pool at out_cache_loc."""
    import torch

    backend, pool, req_to_token, batch, blocks, gen = _verify_setup(seq_lens, n, seed=len(seq_lens))
    layer = _verify_layer()
    total = len(seq_lens) * n
    q, k, v = (torch.randn(total, 4 * 16, generator=gen), torch.randn(total, 2 * 16, generator=gen),
               torch.randn(total, 2 * 16, generator=gen))  # fmt: skip
    backend.init_forward_metadata(batch)
    assert backend.forward_metadata.custom_mask is not None  # not a chain: the mask goes to the kernel
    out = backend.forward_extend(q, k, v, layer, batch).view(total, 4, 16)
    kb, vb = pool.get_key_buffer(0), pool.get_value_buffer(0)
    assert torch.equal(kb[batch.out_cache_loc], k.view(total, 2, 16))
    for b, s in enumerate(seq_lens):
        keys = torch.cat([kb[req_to_token[b, :s].long()], k.view(total, 2, 16)[b * n : (b + 1) * n]])
        vals = torch.cat([vb[req_to_token[b, :s].long()], v.view(total, 2, 16)[b * n : (b + 1) * n]])
        mask = blocks[b].view(n, s + n)
        for i in range(n):
            for h in range(4):
                scores = (keys[:, h // 2] @ q.view(total, 4, 16)[b * n + i, h]) * 16**-0.5
                scores = scores.masked_fill(~mask[i], float("-inf"))
                ref = torch.softmax(scores, 0) @ vals[:, h // 2]
                torch.testing.assert_close(out[b * n + i, h], ref, rtol=1e-4, atol=1e-4)


def test_chain_verify_without_a_mask_equals_the_chain_mask():
    """The shortcut for EAGLE-family topk 1: a chain's mask is causal, so the
    maskless (causal) verify gives what the masked one gives."""
    import torch

    backend, pool, req_to_token, batch, blocks, gen = _verify_setup([7, 3], 4, seed=5)
    n, seqs = 4, [7, 3]
    chain = [torch.cat([torch.ones(n, s, dtype=torch.bool), torch.ones(n, n, dtype=torch.bool).tril()], 1).flatten()
             for s in seqs]  # fmt: skip
    batch.spec_info.custom_mask = torch.cat(chain)
    layer, total = _verify_layer(), 2 * n
    q, k, v = (torch.randn(total, 64, generator=gen), torch.randn(total, 32, generator=gen),
               torch.randn(total, 32, generator=gen))  # fmt: skip
    backend.init_forward_metadata(batch)
    masked = backend.forward_extend(q, k, v, layer, batch)
    backend.chain_verify = True
    backend.init_forward_metadata(batch)
    assert backend.forward_metadata.custom_mask is None
    torch.testing.assert_close(backend.forward_extend(q, k, v, layer, batch), masked, rtol=1e-5, atol=1e-5)


def test_serve_report_prints_each_speculative_phase():
    from kunlun_triton.sglang_plugin.tools.serve import format_report
    from kunlun_triton.sglang_plugin.speculative.phases import (
        note_forward, note_op, reset_speculative_report, speculative_report)

    reset_speculative_report()
    note_forward("target_verify", 3)
    note_op("target_verify", "extend_attention(custom_mask)")
    note_op("target_verify", "store_kv")
    rep = {"tp_rank": 0, "pid": 1, "target": "interpreter", "ops": {}, "speculative": speculative_report()}
    assert rep["speculative"] == {"target_verify": {"forwards": 1, "requests": 3,
                                                    "ops": {"extend_attention(custom_mask)": 1, "store_kv": 1}}}
    assert "speculative target_verify: 1 forwards, 3 rows  [extend_attention(custom_mask)=1, store_kv=1]" in (
        format_report(rep))
    reset_speculative_report()
