"""Attention backend ``kunlun_triton``: SGLang's paged attention on our kernels.

Metadata comes from SGLang's ``ForwardBatch``: each request's KV slots are
read out of ``req_to_token`` (token-level slot ids, so any ``page_size``
works). Decode attends over the whole sequence (the new token's K/V is
written first); extend attends over the cached prefix (``kv_indices`` lists
the prefix only, as SGLang's ``extend_attention_fwd``) plus the new tokens,
which covers radix-cache hits and chunked prefill. KV writes go through
``ops.store_kv``.

A decode step allocates its split-KV partials once (a `DecodeWorkspace`, made
at the step's first attention layer and shared by every layer of the same
shape: each layer's merge has read them before the next layer's first
stage overwrites them, in stream order); per-request split counts are
decided on the device from the lengths, so the decode path never waits on
the host (run with checks off outside development mode).

Decode graphs (SGLang 0.5.23's contract): `init_cuda_graph_state` allocates
kv_indptr, kv_indices and, per layer shape, one split-KV scratch sized for
the largest captured batch; `init_forward_metadata_out_graph` (capture only)
points the metadata at views of them; `init_forward_metadata_in_graph`
rewrites them from the batch's device tensors (`build_kv_indices`: a cumsum
and one program per request; no host value, no allocation whose address a
replay sees change); the graph's kernels run unchecked.

Deterministic inference (``--enable-deterministic-inference``): decode splits
are fixed tiles of `split_tile_size` keys (a request's split count depends
on its own length only) and extend runs `extend_attention`'s unified mode
(kv_indices cover the whole sequence; keys on a fixed tile grid), so a
request's result does not depend on its batch, its cached prefix or its
chunking.

MLA models (DeepSeek-V2/V3, SGLang's ``MLATokenToKVPool``: one latent "head"
of kv_lora_rank + rope values per token) take the two paths SGLang's model
picks for the Triton backend: a prefill with no cached prefix arrives as
plain multi-head attention (``attn_mha``: the model has stored the latent
itself and up-projected K/V; nothing is read from the pool), and decode and
every extend over a cached prefix arrive absorbed (``attn_mqa``: one KV head
of kv_lora_rank + rope, V the cache's first kv_lora_rank values, a strided
view). The latent is stored with ``store_kv`` (latent and rope parts).

Speculative decoding (EAGLE/EAGLE3, STANDALONE, NGRAM; docs/speculative.md),
as SGLang's Triton backend serves it: target verify is an extend of each
request's draft tokens (a fixed count per request) over its committed
sequence (kv_indices: seq_lens, the prefix), with the draft tree's custom
mask as a kernel input (`extend_attention(custom_mask=, mask_indptr=)`); a
chain (EAGLE-family topk 1: num_draft_tokens == num_steps + 1) is exactly
causal and runs without a mask, as SGLang's split-KV verify does. Draft
extend (v1 and v2) is a plain extend; the draft model's multi-step decode
(`KunlunMultiStepDraftBackend`, speculative/draft.py) gives each step's kv
indices in ``spec_info`` and decode reads them from there.

Not supported (a clear error, not a wrong answer): encoder and cross
attention, quantized or non-NHD KV caches other than fp8.

An fp8 KV cache (``--kv-cache-dtype fp8_e4m3 | fp8_e5m2``) is written by
``store_kv``'s integer encoder and read by the kernels' integer decoder, with
the layer's k_scale / v_scale (1.0 when the checkpoint has none): no FP8
type or hardware on any target.
"""

from __future__ import annotations

from typing import Optional

import torch
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
from sglang.srt.layers.radix_attention import AttentionType
from sglang.srt.mem_cache.memory_pool import KVWriteLoc

from ...ops.attention.decode_attention import decode_attention
from ...ops.attention.decode_splits import decode_workspace
from ...ops.attention.extend_attention import extend_attention
from ...ops.attention.kv_indices import build_kv_indices
from ..platform.mode import dev_mode
from ..speculative.algorithms import chain_verify, speculative_shape
from ..speculative.phases import note_op
from .attention_metadata import (  # noqa: F401 (_latent_of: asked here by tests)
    GraphState,
    KunlunAttnMetadata,
    _cached_rows,
    _latent_of,
    deterministic_inference,
    deterministic_split_tile_size,
    forward_metadata,
    graph_workspace,
)
from .kv_pool import accepts_values, fp8_pool, plain_mla_pool, plain_pool, store_kv_into_pool, store_latent_into_pool


class KunlunTritonAttnBackend(AttentionBackend):
    # SGLang's multi-step draft container asks its per-step backends this
    # (a separate sliding-window pool); ours serves windows from the one pool.
    use_sliding_window_kv_pool = False

    def __init__(self, model_runner, deterministic: Optional[bool] = None):
        super().__init__()
        self.device = model_runner.device
        self.req_to_token_pool = model_runner.req_to_token_pool
        self.token_to_kv_pool = model_runner.token_to_kv_pool
        self.forward_metadata = None
        self.check = dev_mode()
        self.deterministic = deterministic_inference() if deterministic is None else deterministic
        self.split_tile_size = deterministic_split_tile_size() if self.deterministic else None
        self.max_context_len = self.req_to_token_pool.req_to_token.shape[1]
        self.graph: Optional[GraphState] = None
        self.use_mla = bool(getattr(model_runner, "use_mla_backend", False))
        algorithm, topk, steps, self.num_draft_tokens = speculative_shape()
        self.chain_verify = chain_verify(algorithm, topk, steps, self.num_draft_tokens)
        if self.use_mla and not plain_mla_pool(self.token_to_kv_pool):
            raise NotImplementedError(
                "kunlun_triton attention serves MLA models with a latent KV cache in the model dtype or fp8 "
                f"(got {type(self.token_to_kv_pool).__name__}); use --kv-cache-dtype auto, fp8_e4m3 or fp8_e5m2"
            )
        if not self.use_mla and not plain_pool(self.token_to_kv_pool):
            raise NotImplementedError(
                "kunlun_triton attention needs an NHD MHA KV cache in the model dtype or fp8 "
                f"(got {type(self.token_to_kv_pool).__name__}); use --kv-cache-dtype auto, fp8_e4m3 or fp8_e5m2"
            )

    # -- metadata --------------------------------------------------------

    def init_forward_metadata(self, forward_batch):
        self.forward_metadata = forward_metadata(self, forward_batch)

    def update_verify_buffers_to_fill_after_draft(self, spec_info, cuda_graph_bs):
        """Nothing to refill: verify metadata is built per step (no verify graphs)."""

    # -- decode graphs (SGLang 0.5.23: out_graph / in_graph) ----------------

    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int):
        device = self.req_to_token_pool.req_to_token.device
        max_len = self.max_context_len
        self.graph = GraphState(
            kv_indptr=torch.zeros(max_bs + 1, dtype=torch.int32, device=device),
            kv_indices=torch.zeros(max_bs * max_len, dtype=torch.int32, device=device),
            max_bs=max_bs,
        )

    def get_cuda_graph_seq_len_fill_value(self):
        return 1

    def init_forward_metadata_out_graph(self, forward_batch, in_capture: bool = False):
        """At capture: the metadata becomes views of the graph buffers (a
        replay runs the captured kernels on the same addresses; the in-graph
        part refills them). At replay: nothing host-side to do."""
        mode = forward_batch.forward_mode
        if not in_capture:
            if self.graph is None or not mode.is_decode_or_idle():
                self.init_forward_metadata(forward_batch)
            return
        if not mode.is_decode_or_idle() or forward_batch.spec_info is not None:
            raise NotImplementedError(f"kunlun_triton attention: graph capture of {mode} is not supported")
        bs = forward_batch.batch_size
        if self.graph is None:
            raise RuntimeError("kunlun_triton attention: graph capture before init_cuda_graph_state")
        if bs > self.graph.max_bs:
            raise RuntimeError(f"kunlun_triton attention: capture of batch {bs} > max_bs {self.graph.max_bs}")
        g = self.graph
        self.forward_metadata = KunlunAttnMetadata(g.kv_indptr[: bs + 1], g.kv_indices, graph_batch=bs)

    def init_forward_metadata_in_graph(self, forward_batch):
        """kv_indptr = [0, cumsum(seq_lens)] and kv_indices = each request's
        req_to_token row up to its length, packed, on the device
        (`build_kv_indices`: static shapes, reads only the live slots)."""
        meta, g = self.forward_metadata, self.graph
        if g is None or meta is None or not meta.graph_batch:
            return
        bs = meta.graph_batch
        build_kv_indices(self.req_to_token_pool.req_to_token, forward_batch.req_pool_indices[:bs],
                             forward_batch.seq_lens[:bs], g.kv_indptr[: bs + 1], g.kv_indices, check=False)  # fmt: skip

    # -- helpers -----------------------------------------------------------

    @staticmethod
    def _layer_args(layer):
        cap = float(layer.logit_cap or 0.0)
        method = getattr(layer, "logit_capping_method", "tanh")
        if cap > 0 and method not in (None, "tanh"):
            raise NotImplementedError(f"kunlun_triton attention: logit capping {method!r} is not supported")
        window = layer.sliding_window_size
        window = window if window is not None and window > -1 else None
        if layer.is_cross_attention or layer.attn_type == AttentionType.ENCODER_ONLY:
            raise NotImplementedError("kunlun_triton attention: encoder / cross attention is not supported")
        return cap, window

    def _scales(self, layer):
        """(k_scale, v_scale) of an fp8 pool as the kernels take them: the
        checkpoint's per-layer floats, None (1.0) without; MLA's V is part of
        the latent row, stored with k_scale."""
        if not fp8_pool(self.token_to_kv_pool) or getattr(layer, "k_scale_float", None) is None:
            return None, None
        if self.use_mla:
            return layer.k_scale_float, layer.k_scale_float
        return layer.k_scale_float, layer.v_scale_float

    def _store(self, layer, forward_batch, k, v, check):
        pool = self.token_to_kv_pool
        loc = forward_batch.out_cache_loc
        k_scale, v_scale = self._scales(layer)
        if self.use_mla:  # the latent row (K); V is a view of it
            if accepts_values(pool, k) and k.shape[-1] == pool.kv_cache_dim:
                store_latent_into_pool(pool, layer.layer_id, loc, k, check=check, k_scale=k_scale)
            else:
                pool.set_kv_buffer(layer, KVWriteLoc.for_batch(forward_batch), k, v)
            return
        if plain_pool(pool) and accepts_values(pool, k, v):
            store_kv_into_pool(pool, layer.layer_id, loc, k, v, check=check, k_scale=k_scale, v_scale=v_scale)
        else:
            pool.set_kv_buffer(layer, KVWriteLoc.for_batch(forward_batch), k, v, k_scale, v_scale)

    # -- forward -----------------------------------------------------------

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        cap, window = self._layer_args(layer)
        heads, kv_heads = layer.tp_q_head_num, layer.tp_k_head_num
        o = q.new_empty((q.shape[0], heads * layer.v_head_dim))
        pool = self.token_to_kv_pool
        if k is None and v is None:  # K/V shared from another layer's cache rows
            k_scale, v_scale = self._scales(layer)
            k = _cached_rows(pool.get_key_buffer(layer.layer_id), forward_batch.out_cache_loc, k_scale, q.dtype)
            v = _cached_rows(pool.get_value_buffer(layer.layer_id), forward_batch.out_cache_loc, v_scale, q.dtype)
        elif save_kv_cache:
            self._store(layer, forward_batch, k, v, self.check)
        meta = self.forward_metadata
        k = k.view(-1, kv_heads, layer.qk_head_dim)
        v = v.view(-1, kv_heads, layer.v_head_dim)
        k_buffer, v_buffer = pool.get_key_buffer(layer.layer_id), pool.get_value_buffer(layer.layer_id)
        if self.use_mla and layer.qk_head_dim != k_buffer.shape[-1]:
            # MLA prefill as multi-head attention: SGLang picks it only without a
            # cached prefix, so the extend reads no cache (the new K/V stand in).
            if meta.kv_indices.numel():
                raise NotImplementedError("kunlun_triton attention: MLA multi-head extend over a cached prefix")
            k_buffer, v_buffer = k, v
        elif self.use_mla:
            v = _latent_of(k, v, self.check)
        k_scale, v_scale = self._scales(layer) if k_buffer.dtype != k.dtype else (None, None)
        if meta.phase:
            note_op(meta.phase, "extend_attention" if meta.custom_mask is None else "extend_attention(custom_mask)")
            if save_kv_cache:
                note_op(meta.phase, "store_kv")
        extend_attention(
            q.view(-1, heads, layer.qk_head_dim),
            k,
            v,
            o.view(-1, heads, layer.v_head_dim),
            k_buffer,
            v_buffer,
            meta.qo_indptr,
            meta.kv_indptr,
            meta.kv_indices,
            meta.max_len_extend,
            layer.scaling,
            logit_cap=cap,
            sliding_window=window,
            check=self.check,
            unified_kv=meta.unified_kv,
            k_scale=k_scale,
            v_scale=v_scale,
            sinks=kwargs.get("sinks"),  # gpt-oss: a per-head sink logit (its layer passes it; None elsewhere)
            **({} if meta.custom_mask is None else dict(custom_mask=meta.custom_mask, mask_indptr=meta.mask_indptr)),
        )
        return o

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        cap, window = self._layer_args(layer)
        heads = layer.tp_q_head_num
        q = q.reshape(-1, heads * layer.qk_head_dim)
        o = q.new_empty((q.shape[0], heads * layer.v_head_dim))
        meta = self.forward_metadata
        check = self.check and not meta.graph_batch  # a graph never syncs on the host
        if save_kv_cache and k is not None and v is not None:
            self._store(layer, forward_batch, k, v, check)
        k_scale, v_scale = self._scales(layer)
        dims = (heads, layer.tp_k_head_num, layer.qk_head_dim, layer.v_head_dim)
        workspace = meta.workspaces.get(dims)
        if workspace is None and meta.graph_batch:
            workspace = meta.workspaces[dims] = graph_workspace(self, dims, q.shape[0], q.device)
        elif workspace is None:  # the step's first layer of this shape
            fixed = dict(split_tile_size=self.split_tile_size, max_context_len=self.max_context_len)
            workspace = meta.workspaces[dims] = decode_workspace(
                q.shape[0], *dims, q.device, **(fixed if self.split_tile_size else {}))
        if meta.phase:
            note_op(meta.phase, "decode_attention")
            if save_kv_cache:
                note_op(meta.phase, "store_kv")
        decode_attention(
            q.view(-1, heads, layer.qk_head_dim),
            self.token_to_kv_pool.get_key_buffer(layer.layer_id),
            self.token_to_kv_pool.get_value_buffer(layer.layer_id),
            o.view(-1, heads, layer.v_head_dim),
            meta.kv_indptr,
            meta.kv_indices,
            layer.scaling,
            logit_cap=cap,
            sliding_window=window,
            check=check,
            workspace=workspace,
            k_scale=k_scale,
            v_scale=v_scale,
            sinks=kwargs.get("sinks"),
        )
        return o
