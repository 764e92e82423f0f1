"""Sampling backend ``kunlun_triton``: SGLang's sampler on our ``sample`` op.

Registered with ``register_sampler_backend`` (SGLang 0.5.23,
``sglang/srt/layers/sampler.py``). Greedy batches run ``ops.greedy``; the
rest run ``ops.sample`` with each request's temperature, top-k, top-p, min-p
(a greedy request in a mixed batch has top_k = 1; a filter no request uses,
by SGLang's ``need_*_sampling`` flags, is passed as the number that turns it
off, so its work is compiled out) and a per-request seed:
the request's ``sampling_seed`` when it gives one, else a seed drawn once
from torch's default generator (which SGLang seeds with ``random_seed``). The
seed travels with the request through batch filters and merges, so a seeded
request samples the same tokens whatever else is in the batch.

Paths SGLang handles specially (custom logit processors aside, which run
first as usual) go to SGLang's own sampler: RL on-policy / deterministic
log-softmax sampling, the Ascend backend, sampling-mask capture, separate
logprob logits.
"""

from __future__ import annotations

import torch
from sglang.srt.layers.sampler import Sampler

BACKEND = "kunlun_triton"


def _active() -> bool:
    try:
        from sglang.srt.runtime_context import get_exec

        return get_exec().kernel.sampling_backend == BACKEND
    except Exception:
        return False


def fill_request_seeds(result, *args, **kwargs):
    """AFTER hook on ``SamplingBatchInfo.from_schedule_batch``: per-request seeds."""
    if result is None or getattr(result, "sampling_seed", None) is not None or not _active():
        return result
    batch = next((a for a in list(args) + list(kwargs.values()) if hasattr(a, "reqs")), None)
    if batch is None:
        return result
    seeds = []
    for req in batch.reqs:
        seed = getattr(req.sampling_params, "sampling_seed", None)
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        seeds.append(seed)
    result.sampling_seed = torch.tensor(seeds, dtype=torch.int64).to(result.temperatures.device)
    return result


class KunlunSampler(Sampler):
    def forward(
        self,
        logits_output,
        sampling_info,
        return_logprob,
        top_logprobs_nums,
        token_ids_logprobs,
        positions,
        *,
        logprob_logits=None,
    ):
        if (
            logprob_logits is not None
            or self.use_ascend_backend
            or self.rl_on_policy_target is not None
            or sampling_info.sampling_mask_batch_indices is not None
        ):
            return super().forward(
                logits_output, sampling_info, return_logprob, top_logprobs_nums,
                token_ids_logprobs, positions, logprob_logits=logprob_logits,
            )  # fmt: skip
        from kunlun_triton import ops

        logits = self._preprocess_logits(logits_output.next_token_logits, sampling_info)
        if sampling_info.is_all_greedy:
            ids = ops.greedy(logits, check=False)
            logprobs = torch.log_softmax(logits, dim=-1) if return_logprob else None
        else:
            temperatures = sampling_info.temperatures.view(-1)
            seeds = sampling_info.sampling_seed
            # A filter no request in the batch uses goes in as the number
            # that switches it off, so the kernels skip its work entirely.
            ids = ops.sample(
                logits,
                temperatures,
                sampling_info.top_ks if sampling_info.need_top_k_sampling else -1,
                sampling_info.top_ps if sampling_info.need_top_p_sampling else 1.0,
                sampling_info.min_ps if sampling_info.need_min_p_sampling else 0.0,
                seeds=seeds,
                positions=positions if seeds is not None else None,
                check=False,
            )
            logprobs = torch.log_softmax(logits / temperatures.view(-1, 1), dim=-1) if return_logprob else None
        if return_logprob:
            # At most the whole vocabulary: torch.topk refuses k > vocab (the
            # request guard refuses such requests; an Engine caller may not).
            vocab = logits.shape[-1]
            top_logprobs_nums = [min(int(k), vocab) for k in top_logprobs_nums] if top_logprobs_nums else top_logprobs_nums
            result = self.output_logprob_processor.compute_logprobs(
                logprobs, top_logprobs_nums, token_ids_logprobs, ids
            )
            result.write_output_to(logits_output)
        self._sync_token_ids_across_tp(ids, sampling_info)
        return ids


def create_sampler() -> Sampler:
    return KunlunSampler()
