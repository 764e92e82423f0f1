"""Decode graph capture, SGLang 0.5.23's contract, checked on the CPU (no
device graphs here: a "replay" re-runs exactly what a capture records, the
in-graph metadata and the decode forward, on the captured static inputs).

(a) replay equivalence: static buffers filled through the in-graph path for
    batches of several sizes and lengths give bitwise the eager path's
    output (and the torch reference's, within tolerance);
(b) no host sync: in-graph metadata, the decode forward and the other
    captured ops (store_kv, rotary, norms, activations, sampler; checks off)
    run with Tensor.item / tolist / cpu / __bool__ / __int__ and
    torch.cuda.synchronize raising;
(c) stable addresses: the metadata and scratch buffers a capture recorded
    are the ones every replay writes and reads.
Plus the platform's declaration: graphs on CUDA/HIP, on Kunlun when its
torch exposes them, off in development mode.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch

from kunlun_triton.ops.spec import specs_where

HEADS, KV_HEADS, DIM, MAX_LEN, MAX_BS = 4, 2, 16, 96, 4
SLOTS = MAX_BS * MAX_LEN + 8


class HostSync(AssertionError):
    pass


@contextlib.contextmanager
def no_host_sync():
    """Every way a tensor value reaches the host raises inside the block."""

    def refuse(name):
        def method(*args, **kwargs):
            raise HostSync(f"host sync: {name}")

        return method

    patched = {(torch.Tensor, n): getattr(torch.Tensor, n) for n in ("item", "tolist", "cpu", "__bool__", "__int__")}
    patched[(torch.cuda, "synchronize")] = torch.cuda.synchronize
    try:
        for (owner, name) in patched:
            setattr(owner, name, refuse(name))
        yield
    finally:
        for (owner, name), original in patched.items():
            setattr(owner, name, original)


def test_no_host_sync_guard_catches_syncs():
    t = torch.ones(2)
    with no_host_sync():
        for probe in (t.sum().item, t.tolist, t.cpu, lambda: bool(t[0]), lambda: int(t[0]), torch.cuda.synchronize):
            with pytest.raises(HostSync):
                probe()


def _setup(deterministic=False):
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    from kunlun_triton.sglang_plugin.backends.attention import KunlunTritonAttnBackend

    pool = MHATokenToKVPool(size=SLOTS, page_size=1, dtype=torch.float32, head_num=KV_HEADS, head_dim=DIM,
                            layer_num=1, device="cpu", enable_memory_saver=False, enable_alt_stream=False)  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    pool.get_key_buffer(0).copy_(torch.randn(pool.get_key_buffer(0).shape, generator=gen))
    pool.get_value_buffer(0).copy_(torch.randn(pool.get_value_buffer(0).shape, generator=gen))
    req_to_token = torch.randperm(SLOTS - 1, generator=gen)[: MAX_BS * MAX_LEN].add(1).to(torch.int32)
    runner = SimpleNamespace(device="cpu", token_to_kv_pool=pool, use_mla_backend=False,
                             req_to_token_pool=SimpleNamespace(req_to_token=req_to_token.view(MAX_BS, MAX_LEN)))  # fmt: skip
    backend = KunlunTritonAttnBackend(runner, deterministic=deterministic)
    backend.check = True  # development mode's checks: the graph path must drop them itself
    return backend, pool, runner


def _layer():
    from sglang.srt.layers.radix_attention import AttentionType

    return SimpleNamespace(tp_q_head_num=HEADS, tp_k_head_num=KV_HEADS, qk_head_dim=DIM, v_head_dim=DIM,
                           scaling=DIM**-0.5, layer_id=0, logit_cap=0.0, sliding_window_size=-1,
                           is_cross_attention=False, attn_type=AttentionType.DECODER)  # fmt: skip


def _batch(seq_lens, req_pool_indices, req_to_token, seed):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    seq_lens = torch.tensor(seq_lens, dtype=torch.int64)
    req_pool_indices = torch.tensor(req_pool_indices, dtype=torch.int64)
    gen = torch.Generator().manual_seed(seed)
    bs = len(seq_lens)
    return SimpleNamespace(
        forward_mode=ForwardMode.DECODE, batch_size=bs, seq_lens=seq_lens, req_pool_indices=req_pool_indices,
        seq_lens_sum=int(seq_lens.sum()), seq_lens_cpu=seq_lens.clone(), spec_info=None,
        out_cache_loc=req_to_token[req_pool_indices, seq_lens - 1].to(torch.int64),  # the new token's slot
        q=torch.randn(bs, HEADS * DIM, generator=gen), k=torch.randn(bs, KV_HEADS, DIM, generator=gen),
        v=torch.randn(bs, KV_HEADS, DIM, generator=gen))  # fmt: skip


class StaticInputs:
    """A graph runner's static inputs: one buffer per input for MAX_BS."""

    def __init__(self):
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        self.seq_lens = torch.ones(MAX_BS, dtype=torch.int64)
        self.req_pool_indices = torch.zeros(MAX_BS, dtype=torch.int64)
        self.out_cache_loc = torch.zeros(MAX_BS, dtype=torch.int64)
        self.q = torch.zeros(MAX_BS, HEADS * DIM)
        self.k = torch.zeros(MAX_BS, KV_HEADS, DIM)
        self.v = torch.zeros(MAX_BS, KV_HEADS, DIM)
        self.mode = ForwardMode.DECODE

    def view(self, bs):
        return SimpleNamespace(forward_mode=self.mode, batch_size=bs, seq_lens=self.seq_lens[:bs],
                               req_pool_indices=self.req_pool_indices[:bs], out_cache_loc=self.out_cache_loc[:bs],
                               seq_lens_sum=None, seq_lens_cpu=None, spec_info=None)  # fmt: skip

    def load(self, batch):
        bs = batch.batch_size
        for name in ("seq_lens", "req_pool_indices", "out_cache_loc", "q", "k", "v"):
            getattr(self, name)[:bs].copy_(getattr(batch, name))


def _replay(backend, layer, static, bs):
    """What a replay re-executes: in-graph metadata, then the decode forward."""
    fb = static.view(bs)
    backend.init_forward_metadata_in_graph(fb)
    return backend.forward_decode(static.q[:bs], static.k[:bs], static.v[:bs], layer, fb)


def _eager(backend, layer, batch):
    backend.init_forward_metadata(batch)
    return backend.forward_decode(batch.q, batch.k, batch.v, layer, batch)


BATCHES = {  # batch size -> several replays: (seq_lens, request rows)
    1: [([5], [2]), ([96], [0]), ([33], [3])],
    3: [([1, 40, 7], [0, 1, 2]), ([90, 2, 64], [3, 1, 0])],
    4: [([17, 17, 3, 95], [1, 0, 3, 2])],
}


@pytest.mark.parametrize("deterministic", [False, True])
def test_replays_equal_the_eager_path_with_stable_buffers_and_no_host_sync(deterministic):
    from kunlun_triton.ops.attention import reference

    backend, pool, runner = _setup(deterministic)
    layer = _layer()
    req_to_token = runner.req_to_token_pool.req_to_token
    backend.init_cuda_graph_state(MAX_BS, MAX_BS)
    static = StaticInputs()
    for bs, replays in BATCHES.items():
        backend.init_forward_metadata_out_graph(static.view(bs), in_capture=True)  # the capture of batch bs
        captured = backend.forward_metadata
        _replay(backend, layer, static, bs)  # the recorded run (fill values)
        addresses = None
        for i, (lens, rows) in enumerate(replays):
            batch = _batch(lens, rows, req_to_token, seed=bs * 10 + i)
            eager = _eager(backend, layer, batch)
            backend.forward_metadata = captured  # replay: no Python metadata step runs
            backend.init_forward_metadata_out_graph(static.view(bs))  # replay's host part: must not touch it
            assert backend.forward_metadata is captured
            static.load(batch)
            with no_host_sync():
                out = _replay(backend, layer, static, bs)
            assert torch.equal(out, eager), f"bs {bs} lens {lens}: replay differs from eager"
            expected = reference.decode_attention(
                batch.q.view(bs, HEADS, DIM), pool.get_key_buffer(0), pool.get_value_buffer(0),
                torch.empty(bs, HEADS, DIM), captured.kv_indptr, captured.kv_indices, DIM**-0.5)  # fmt: skip
            torch.testing.assert_close(out.view(bs, HEADS, DIM), expected)
            workspace = next(iter(captured.workspaces.values()))
            now = [t.data_ptr() for t in (captured.kv_indptr, captured.kv_indices, backend.graph.kv_indptr,
                                          workspace.part_out, workspace.part_lse)]  # fmt: skip
            assert addresses is None or now == addresses, "a graph buffer moved between replays"
            addresses = now
            assert now[0] == now[2], "the metadata is not a view of the graph's kv_indptr"
        if deterministic:  # fixed split tiles: the split count depends on the length only
            assert workspace.split_tokens == backend.split_tile_size
    scratch = next(iter(backend.graph.scratch.values()))
    assert all(workspace.part_out.data_ptr() == scratch[0].data_ptr() for workspace in captured.workspaces.values())


def test_capture_needs_graph_state_and_decode():
    backend, _, _ = _setup()
    static = StaticInputs()
    with pytest.raises(RuntimeError, match="init_cuda_graph_state"):
        backend.init_forward_metadata_out_graph(static.view(2), in_capture=True)
    backend.init_cuda_graph_state(MAX_BS, MAX_BS)
    with pytest.raises(RuntimeError, match="max_bs"):
        backend.init_forward_metadata_out_graph(static.view(MAX_BS + 1), in_capture=True)
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    extend = static.view(2)
    extend.forward_mode = ForwardMode.EXTEND
    with pytest.raises(NotImplementedError, match="graph capture"):
        backend.init_forward_metadata_out_graph(extend, in_capture=True)
    assert backend.get_cuda_graph_seq_len_fill_value() == 1


# The ops a captured decode step runs (their specs say `graph_capture`).
CAPTURED_OPS = specs_where(lambda spec: spec.graph_capture)


@pytest.mark.parametrize("name", CAPTURED_OPS)
def test_captured_ops_do_not_sync_with_checks_off(name):
    from kunlun_triton.ops.spec import all_specs

    spec = all_specs()[name]
    shape, dtype = spec.doctor[0]
    case = spec.make_case(shape, dtype, "cpu")
    with no_host_sync():
        case.run(None)


def test_platform_declares_graphs_where_the_target_has_them():
    from kunlun_triton.sglang_plugin.platform import classes as platform
    from kunlun_triton.sglang_plugin.platform.classes import KunlunDevPlatform, KunlunPlatform, device_graphs_available

    assert device_graphs_available("cuda") and device_graphs_available("hip")
    assert not device_graphs_available("interpreter")
    # Kunlun: on only when the vendor torch has compiled graphs (this torch: a CUDA build, it has)
    assert torch._C._CUDAGraph.__module__ == "torch._C"
    assert device_graphs_available("kunlun")
    dummy = type("_CUDAGraph", (), {"__module__": "torch._utils"})  # what a build without graphs carries
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch._C, "_CUDAGraph", dummy)
        assert not platform.torch_exposes_device_graphs()
        assert not device_graphs_available("kunlun")
    assert not KunlunDevPlatform.capabilities.graph_capture
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner

    assert KunlunPlatform.get_graph_runner_cls(None) is DecodeCudaGraphRunner
