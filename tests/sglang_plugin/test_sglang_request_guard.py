"""The request guard's checks on their own (the HTTP fuzz in
test_sglang_http_server.py sends them through a real server). Oracle: the
limits the issue names (int32 top_k, n >= 1, ids in [0, vocab), logprob
counts in [0, vocab]); each refusal is a ValueError naming the field and
leaves the request as it was."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

from kunlun_triton.sglang_plugin.platform import request_guard as guard

VOCAB = 512


def _req(**kw):
    base = {"sampling_params": {"max_new_tokens": 4}, "top_logprobs_num": 0}
    return SimpleNamespace(**{**base, **kw})


BAD = [
    ("top_k", _req(sampling_params={"top_k": 2**31})),
    ("top_k", _req(sampling_params={"top_k": 0})),
    ("top_k", _req(sampling_params={"top_k": "5"})),
    ("top_k", _req(sampling_params=[{"top_k": 5}, {"top_k": 2**40}])),
    ("n", _req(sampling_params={"n": 0})),
    ("n", _req(sampling_params={"n": -1})),
    ("n", _req(sampling_params={"n": guard.MAX_N + 1})),
    ("top_logprobs_num", _req(top_logprobs_num=-1)),
    ("top_logprobs_num", _req(top_logprobs_num=[0, -3])),
]


@pytest.mark.parametrize("field,req", BAD, ids=[f"{i}-{b[0]}" for i, b in enumerate(BAD)])
def test_vocabulary_free_checks_name_the_field(field, req):
    before = copy.deepcopy(vars(req))
    with pytest.raises(ValueError, match=field):
        guard.check_generate_request(req)
    assert vars(req) == before


@pytest.mark.parametrize("ids,field", [([1, 2, VOCAB], "input_ids"), ([-1], "input_ids"), ([1, 2.5], "input_ids"),
                                       ([True], "input_ids")])  # fmt: skip
def test_token_ids_outside_the_vocabulary_are_refused(ids, field):
    with pytest.raises(ValueError, match=field):
        guard.check_against_vocab(_req(), list(ids), VOCAB)


def test_logprob_counts_above_the_vocabulary_are_refused():
    with pytest.raises(ValueError, match="top_logprobs_num"):
        guard.check_against_vocab(_req(top_logprobs_num=VOCAB + 1), [1, 2], VOCAB)


def test_good_requests_pass():
    for req in (_req(), _req(sampling_params={"top_k": -1, "n": 2}), _req(sampling_params={"top_k": 2**31 - 1}),
                _req(sampling_params={"top_k": 40.0}), _req(top_logprobs_num=VOCAB)):  # fmt: skip
        guard.check_generate_request(req)
        guard.check_against_vocab(req, [0, 1, VOCAB - 1], VOCAB)


def test_the_guard_is_in_the_install_table_as_a_plugin_hook():
    from kunlun_triton.sglang_plugin.install import TOUCHPOINTS

    point = next(p for p in TOUCHPOINTS if p.name == "request guard")
    assert point.scope == "plugin" and "TokenizerManager._validate_one_request" in point.sglang


def test_sampler_answers_top_logprobs_above_the_vocabulary_with_the_whole_vocabulary():
    """Issue 25: top_logprobs_num > vocab reached torch.topk ("selected index
    k out of range") through our sampler. An Engine caller is not behind the
    HTTP guard: the sampler clamps to the vocabulary. Oracle: torch.topk of
    log_softmax over the whole (small) vocabulary."""
    import torch
    from sglang.srt.layers.logprob_processor import OutputLogprobProcessor

    from kunlun_triton.sglang_plugin.backends.sampler import KunlunSampler

    sampler = object.__new__(KunlunSampler)  # no TP group in this process: only what forward reads
    sampler.use_ascend_backend, sampler.rl_on_policy_target = False, None
    sampler._preprocess_logits = lambda logits, info: logits
    sampler._sync_token_ids_across_tp = lambda ids, info: None
    sampler.output_logprob_processor = OutputLogprobProcessor()
    logits = torch.randn(2, 7)
    out = SimpleNamespace(next_token_logits=logits)
    info = SimpleNamespace(is_all_greedy=True, sampling_mask_batch_indices=None)
    captured = {}
    out_result = SimpleNamespace(write_output_to=lambda o: None)
    real = sampler.output_logprob_processor.compute_logprobs

    def compute(logprobs, nums, token_ids, ids):
        captured["result"] = real(logprobs, nums, token_ids, ids)
        return out_result

    sampler.output_logprob_processor.compute_logprobs = compute
    ids = sampler.forward(out, info, True, [100, 3], [None, None], torch.zeros(2, dtype=torch.int64))
    assert torch.equal(ids, logits.argmax(-1))
    want = torch.log_softmax(logits, -1).topk(7, dim=-1)
    vals, idx = captured["result"].top_logprobs_val, captured["result"].top_logprobs_idx
    assert len(vals[0]) == 7 and len(vals[1]) == 3
    assert torch.allclose(torch.as_tensor(vals[0]), want.values[0]) and list(idx[0]) == want.indices[0].tolist()
