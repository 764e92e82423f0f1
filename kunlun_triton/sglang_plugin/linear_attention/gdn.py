"""SGLang's gated-delta-net layers (Qwen3-Next, Qwen3.5) on our kernels.

SGLang 0.5.23 runs a GDN layer in ``GDNAttnBackend.forward_decode`` /
``forward_extend`` (``srt/layers/attention/linear/gdn_backend.py``): the
causal conv1d (FLA's Triton ``causal_conv1d_fn`` / ``causal_conv1d_update``,
module globals there), the gates (``fused_gdn_gating``) and the delta rule
through its ``GDNKernelDispatcher`` (FLA's ``chunk_gated_delta_rule`` and
``fused_sigmoid_gating_delta_rule_update``). The dispatcher is too narrow a
seam: it receives the gates already computed and never sees the conv. So the
AROUND hooks below take the two forwards whole, on the batches our kernels
serve, and read SGLang's state pool as it is:

- conv states ``mamba2_layer_cache(layer).conv[0]``: [slots, conv dim,
  width - 1], the layout of ``ops.causal_conv1d`` / ``causal_conv1d_update``;
- recurrent states ``.temporal``: [slots, value heads, value dim, key dim]
  (fp32), the layout of ``ops.gated_delta_rule_prefill`` / ``_decode``, which
  fuse the gating (``-exp(A_log) * softplus(a + dt_bias)``, ``sigmoid(b)``)
  and the q/k L2 normalisation as SGLang's decode kernel does;
- ``forward_metadata.mamba_cache_indices``: each request's slot (-1 padding),
  ``query_start_loc``: the ragged bounds of the extend batch;
  ``extend_prefix_lens > 0``: the requests that continue a cached or chunked
  prefix (their states are read; the others start from zeros).

The extra_buffer prefix cache (SGLang's default strategy) snapshots states
into spare slots at its track points. Decode: our kernels write the new conv
window and state to ``where(mamba_track_mask, mamba_track_indices, -1)`` as
they write the request's own slot (SGLang copies them in a second launch).
Extend: the tracked conv windows are copied before the conv (SGLang's own
statement), and the prefill writes the state at ``track_chunk_idx`` (its
``supports_track_state_snapshot`` contract) into an fp32 buffer that SGLang's
``_track_mamba_state_extend`` places.

The dispatch report's ``gdn_extend_batches`` counts the extend batches served
and those carrying decode rows (``--enable-mixed-chunk``).

Target verify (speculative decoding), multi-item scoring, the fused decode
projection (a tuple ``mixed_qkv``) and ReplaySSM stay SGLang's: the platform
refuses them at start (``rules.py``), and a batch that reaches one anyway
runs SGLang's original forward.
Scope: platform. Test: tests/sglang_plugin/test_sglang_qwen3_next.py.
"""

from __future__ import annotations

import torch

GDN_BACKEND = "sglang.srt.layers.attention.linear.gdn_backend.GDNAttnBackend"
DECODE_HOOK = f"{GDN_BACKEND}.forward_decode"
EXTEND_HOOK = f"{GDN_BACKEND}.forward_extend"


def _ours(backend, forward_batch, mixed_qkv) -> bool:
    """Whether this batch is one our kernels serve (else SGLang's forward runs)."""
    metadata = backend.forward_metadata
    return (
        isinstance(mixed_qkv, torch.Tensor)
        and not forward_batch.forward_mode.is_target_verify()
        and getattr(backend, "mis_metadata", None) is None
        and getattr(metadata, "replayssm_write_pos", None) is None
    )


_extend_batches = {"batches": 0, "with_decode_rows": 0}
_last_batch = None


def extend_batches_report() -> dict:
    """Extend batches our GDN hook served, and those carrying decode rows (1-token rows past a
    prefix beside a longer one: SGLang's --enable-mixed-chunk runs those as EXTEND)."""
    return dict(_extend_batches)


def _count(forward_batch) -> None:
    global _last_batch
    if forward_batch is _last_batch:  # once a forward, not once a layer
        return
    _last_batch = forward_batch
    lengths, prefixes = forward_batch.extend_seq_lens_cpu or [], forward_batch.extend_prefix_lens_cpu or []
    _extend_batches["batches"] += 1
    if max(lengths, default=0) > 1 and any(n == 1 and p > 0 for n, p in zip(lengths, prefixes)):
        _extend_batches["with_decode_rows"] += 1


def _states(backend, layer):
    cache = backend.req_to_token_pool.mamba2_layer_cache(layer.layer_id)
    return cache.conv[0], cache.temporal


def _split(layer, mixed_qkv: torch.Tensor):
    """q, k [tokens, key heads, key dim] and v [tokens, value heads, value dim]:
    strided views of the conv output (the kernels take row and head strides)."""
    tokens = mixed_qkv.shape[0]
    q, k, v = torch.split(mixed_qkv, [layer.q_dim, layer.k_dim, layer.v_dim], dim=-1)
    return (q.view(tokens, layer.num_q_heads, layer.head_q_dim), k.view(tokens, layer.num_k_heads, layer.head_k_dim),
            v.view(tokens, layer.num_v_heads, layer.head_v_dim))  # fmt: skip


def gdn_forward_decode(original, self, layer=None, forward_batch=None, mixed_qkv=None, a=None, b=None, **kwargs):
    """AROUND ``GDNAttnBackend.forward_decode``: one token per request, the conv
    window and the recurrent state stepped in place in each request's slot."""
    if not _ours(self, forward_batch, mixed_qkv):
        return original(self, layer=layer, forward_batch=forward_batch, mixed_qkv=mixed_qkv, a=a, b=b, **kwargs)
    from kunlun_triton import ops

    from ..platform.mode import dev_mode

    check = dev_mode()
    conv_states, ssm_states = _states(self, layer)
    slots = self.forward_metadata.mamba_cache_indices
    track = _decode_track_slots(self.forward_metadata, forward_batch, slots.shape[0])
    x = ops.causal_conv1d_update(mixed_qkv, conv_states, layer.conv_weights, layer.bias, slots,
                                 activation=layer.activation, track_slots=track, check=check)  # fmt: skip
    q, k, v = _split(layer, x)
    out = ops.gated_delta_rule_decode(q, k, v, a, b, layer.A_log, layer.dt_bias, ssm_states, slots,
                                      scale=layer.head_k_dim**-0.5, track_slots=track, check=check)  # fmt: skip
    return out.unsqueeze(0)  # [1, tokens, value heads, value dim], as SGLang's kernels return it


def gdn_forward_extend(original, self, layer=None, forward_batch=None, mixed_qkv=None, a=None, b=None, **kwargs):
    """AROUND ``GDNAttnBackend.forward_extend``: a ragged prefill batch (chunked
    prefill and cached prefixes continue from the slot's states)."""
    if not _ours(self, forward_batch, mixed_qkv):
        return original(self, layer=layer, forward_batch=forward_batch, mixed_qkv=mixed_qkv, a=a, b=b, **kwargs)
    from kunlun_triton import ops

    from ..platform.mode import dev_mode

    check = dev_mode()
    _count(forward_batch)
    conv_states, ssm_states = _states(self, layer)
    metadata = self.forward_metadata
    slots, starts = metadata.mamba_cache_indices, metadata.query_start_loc
    has_initial_state = forward_batch.extend_prefix_lens > 0
    lengths = forward_batch.extend_seq_lens_cpu
    longest = max(lengths) if lengths else None  # a host int: no sync in the launcher
    tracking = getattr(metadata, "has_mamba_track_mask", False)
    if tracking:  # the tracked conv windows, before the conv moves them on (SGLang's statement, with the
        # cast SGLang lacks: its conv states stay bf16 under a float32 model, SGLANG_MAMBA_CONV_DTYPE)
        windows = mixed_qkv[metadata.track_conv_indices].transpose(1, 2)
        conv_states[metadata.conv_states_mask_indices] = windows.to(conv_states.dtype)
    x = ops.causal_conv1d(mixed_qkv, layer.conv_weights, layer.bias, conv_states, starts, slots, has_initial_state,
                          activation=layer.activation, max_len=longest, check=check)  # fmt: skip
    q, k, v = _split(layer, x)
    snapshot = None  # the states at unaligned track points (aligned ones are the final states)
    if tracking and metadata.track_ssm_h_src.numel() > 0:
        snapshot = torch.empty(slots.shape[0], *ssm_states.shape[1:], dtype=torch.float32, device=ssm_states.device)
    out = ops.gated_delta_rule_prefill(q, k, v, a, b, layer.A_log, layer.dt_bias, ssm_states, slots, starts,
                                       has_initial_state, scale=layer.head_k_dim**-0.5, track_state=snapshot,
                                       track_chunk_idx=None if snapshot is None else metadata.track_chunk_idx,
                                       track_chunk_size=self.mamba_chunk_size, check=check)  # fmt: skip
    if tracking:
        self._track_mamba_state_extend(forward_batch, None, ssm_states, metadata, h_track_buf=snapshot)
    return out.unsqueeze(0)


def _decode_track_slots(metadata, forward_batch, requests: int):
    """Where each request's new states also go (-1: nowhere), once a forward: None without tracking."""
    mask = getattr(forward_batch, "mamba_track_mask", None)
    if mask is None:
        return None
    batch, track = getattr(metadata, "kunlun_track_slots", (None, None))
    if batch is not forward_batch:
        track = torch.where(mask[:requests], metadata.mamba_track_indices[:requests], -1)
        metadata.kunlun_track_slots = (forward_batch, track)
    return track
