"""SGLang 0.5.23's gated-delta-net kernels (FLA's, under
``sglang.kernels.ops.attention``) as ahead-of-time compile specs, launched
as its GDN backend's Triton kernels launch them on an H100 / H200 (sm_90),
for ``kunlun-triton inspect linear_attention --compare sglang``.

- decode: ``fused_sigmoid_gating_delta_rule_update`` (`TritonGDNKernel.decode`:
  q / k / v as [1, B, heads, dim] views, int32 slots and query_start_loc);
- prefill: ``fused_gdn_gating`` (g, beta), then ``chunk_gated_delta_rule``:
  l2norm of q and of k, ``chunk_local_cumsum``, the fused kkt + solve
  (``chunk_gated_delta_rule_fwd_kkt_solve_kernel``), ``recompute_w_u``,
  the state pass ``chunk_gated_delta_rule_fwd_kernel_h_blockdim64`` and the
  output ``chunk_fwd_kernel_o``;
- conv update: ``causal_conv1d_update`` (Triton). Its prefill conv on CUDA
  is ``sgl_kernel``'s CUDA kernel (no Triton to compile): no baseline.

SGLang's launchers read the machine at import or launch (`_is_hip`, PDL support, FLA's
device context) and at launch (`q.device.type == "cuda"` picks the split
(N, HV) grid): those are set to an sm_90 card's values for one stubbed call
on meta tensors (cu_seqlens on the CPU: FLA's chunk indices are computed on
the host). FLA autotunes the kkt + solve kernel over BK x num_warps on the
card; with no card the plan takes `KKT_CONFIG`, among its candidates that
do not spill on sm_90 the one with the fewest executed instructions per
token (the most favourable to FLA: tests/tools/
test_inspect_linear_attention_sglang.py checks it).

Each spec carries ``work`` (programs, tokens, loop trips) so inspect prints
warp-instructions per token next to ours.

Importing this module imports sglang (ImportError when absent).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
from unittest import mock

import torch
from sglang.kernels.ops.attention.fla.chunk import chunk_gated_delta_rule
from sglang.kernels.ops.attention.linear.fused_gdn_gating import fused_gdn_gating
from sglang.kernels.ops.attention.linear.fused_sigmoid_gating_recurrent import fused_sigmoid_gating_delta_rule_update
from sglang.kernels.ops.mamba.causal_conv1d_triton import causal_conv1d_update

from kunlun_triton.ops.linear_attention.spec_shapes import CONV_DIM, QWEN3_NEXT

CHUNK = 64  # FLA's CHUNK_SIZE
KKT_MODULE = "sglang.kernels.ops.attention.fla.chunk_fwd"
KKT_CONFIG = {"BK": 64, "num_warps": 2}  # see the module docstring
_RECURRENT = "sglang.kernels.ops.attention.linear.fused_sigmoid_gating_recurrent"
_CONV = "sglang.kernels.ops.mamba.causal_conv1d_triton"


def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device="meta")


def _dims(shape):
    return {k: shape.get(k, v) for k, v in QWEN3_NEXT.items()}


@contextlib.contextmanager
def _as_on_sm90(kkt_config=None):
    """SGLang's machine globals as on an sm_90 card; FLA's kkt + solve autotuner
    pinned to one of its own configs (one config: it skips its benchmark)."""
    kkt = importlib.import_module(KKT_MODULE).chunk_gated_delta_rule_fwd_kkt_solve_kernel
    while not hasattr(kkt, "configs"):  # under its @triton.heuristics
        kkt = kkt.fn
    config = kkt_config or KKT_CONFIG
    pinned = [c for c in kkt.configs if c.kwargs.get("BK") == config["BK"] and c.num_warps == config["num_warps"]]
    if len(pinned) != 1:
        raise ValueError(f"FLA's kkt + solve autotuner has no config {config}: {kkt.configs}")
    recurrent, conv = importlib.import_module(_RECURRENT), importlib.import_module(_CONV)
    fla_utils = importlib.import_module("sglang.kernels.ops.attention.fla.utils")
    with contextlib.ExitStack() as stack:
        for name, value in (("_is_hip", False), ("_is_gfx95", False), ("_is_sm90", True)):
            stack.enter_context(mock.patch.object(recurrent, name, value))
        for module in (recurrent, conv):  # PDL on sm_90: both launch with USE_GDC and launch_pdl
            stack.enter_context(mock.patch.object(module, "is_arch_support_pdl", lambda: True))
        stack.enter_context(mock.patch.object(fla_utils, "custom_device_ctx", lambda index: contextlib.nullcontext()))
        stack.enter_context(mock.patch.object(kkt, "configs", pinned))
        stack.enter_context(mock.patch.object(kkt, "cache", {}))
        yield


def _planned(call, kkt_config=None):
    from kunlun_triton.introspect.launches import record_launches, spec_of_launch

    with _as_on_sm90(kkt_config):
        launches = record_launches(call, with_grid=True)
    specs = []
    for kernel, args, kwargs, grid in launches:
        spec = spec_of_launch(kernel, args, kwargs)
        if "SPLIT_N_HV_GRID" in spec.constexprs:  # `q.device.type == "cuda"` on the card
            spec = dataclasses.replace(spec, constexprs={**spec.constexprs, "SPLIT_N_HV_GRID": True})
        specs.append((spec, grid, kwargs))
    return specs


def _programs(grid, kwargs) -> int:
    grid = grid(kwargs) if callable(grid) else grid
    n = 1
    for g in tuple(grid):
        n *= int(g)
    return n


def _with_work(spec, programs: int, tokens: int, trips: tuple):
    return dataclasses.replace(spec, work={"programs": programs, "tokens": tokens, "trips": tuple(trips)})


# ---- decode


def gated_delta_rule_decode_inspect_specs(shape, dtype):
    """FLA's fused_sigmoid_gating_delta_rule_update for one decode step of
    ``batch`` requests, as `TritonGDNKernel.decode` calls it."""
    d, batch = _dims(shape), shape["batch"]
    h, hv, k, v = d["key_heads"], d["value_heads"], d["key_dim"], d["value_dim"]

    def call():
        fused_sigmoid_gating_delta_rule_update(
            A_log=_meta(hv, dtype=torch.float32), a=_meta(batch, hv, dtype=dtype),
            dt_bias=_meta(hv, dtype=torch.float32), softplus_beta=1.0, softplus_threshold=20.0,
            q=_meta(1, batch, h, k, dtype=dtype), k=_meta(1, batch, h, k, dtype=dtype),
            v=_meta(1, batch, hv, v, dtype=dtype), b=_meta(batch, hv, dtype=dtype),
            initial_state_source=_meta(batch + 1, hv, v, k, dtype=torch.float32),
            initial_state_indices=_meta(batch, dtype=torch.int32), use_qk_l2norm_in_kernel=True,
            cu_seqlens=_meta(batch + 1, dtype=torch.int32))  # fmt: skip

    out = []
    for spec, grid, kwargs in _planned(call):
        bv = spec.constexprs["BV"]
        out.append(_with_work(spec, batch * hv * -(-v // bv), batch, (1,)))  # its token loop: T = 1
    return out


def gated_delta_rule_decode_inspect_traffic(shape, dtype) -> int:
    """Bytes one FLA decode call moves into its programs: each (request,
    value head, BV columns) program reads its [BV, K] fp32 state slice and
    writes it back, reads q's and k's rows (again per value block), its v
    columns, a, b, A_log, dt_bias, the slot and two cu_seqlens entries, and
    writes its output columns."""
    d, batch = _dims(shape), shape["batch"]
    elt = torch.empty((), dtype=dtype).element_size()
    k, v, hv = d["key_dim"], d["value_dim"], d["value_heads"]
    bv = gated_delta_rule_decode_inspect_specs(shape, dtype)[0].constexprs["BV"]
    programs = batch * hv * -(-v // bv)
    per_program = 2 * bv * k * 4 + 2 * k * elt + 2 * bv * elt + 2 * elt + 2 * 4 + 4 + 2 * 4
    return programs * per_program


# ---- prefill


def gated_delta_rule_prefill_inspect_specs(shape, dtype, kkt_config=None):
    """SGLang's prefill chain for a ragged batch of ``lengths`` (each from
    its slot's state, as its backend runs an extend): fused_gdn_gating, then
    chunk_gated_delta_rule's kernels. `kkt_config`: one of FLA's kkt + solve
    autotune configs (default `KKT_CONFIG`)."""
    d, lengths = _dims(shape), tuple(shape["lengths"])
    h, hv, k, v = d["key_heads"], d["value_heads"], d["key_dim"], d["value_dim"]
    tokens, n = sum(lengths), len(lengths)
    starts = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)  # host: FLA's indices

    def call():
        g, beta = fused_gdn_gating(_meta(hv, dtype=torch.float32), _meta(tokens, hv, dtype=dtype),
                                   _meta(tokens, hv, dtype=dtype), _meta(hv, dtype=torch.float32))  # fmt: skip
        chunk_gated_delta_rule(q=_meta(1, tokens, h, k, dtype=dtype), k=_meta(1, tokens, h, k, dtype=dtype),
                               v=_meta(1, tokens, hv, v, dtype=dtype), g=g, beta=beta,
                               initial_state=_meta(n + 1, hv, v, k, dtype=torch.float32),
                               initial_state_indices=_meta(n, dtype=torch.int32), cu_seqlens=starts,
                               head_first=False, use_qk_l2norm_in_kernel=True)  # fmt: skip

    out = []
    for spec, grid, kwargs in _planned(call, kkt_config):
        programs = _programs(grid, {**kwargs, **spec.constexprs})
        out.append(_with_work(spec, programs, tokens, _prefill_trips(spec, lengths, k, v)))
    return out


def _prefill_trips(spec, lengths, k: int, v: int) -> tuple:
    """Iterations per program of each loop of FLA's prefill kernels, in source
    (= SASS address) order, as means over the programs where they differ."""
    c = spec.constexprs
    if spec.name == "chunk_gated_delta_rule_fwd_kkt_solve_kernel":
        # a program per (chunk, head): the K loop of k k^T, then forward
        # substitution inside each of the 4 diagonal 16 x 16 blocks:
        # range(2, min(16, rows left in the chunk from the block's start))
        rows = [min(CHUNK, n - t) for n in lengths for t in range(0, n, CHUNK)]
        solve = [sum(max(0, min(c["BC"], r - j * c["BC"]) - 2) for r in rows) / len(rows) for j in range(4)]
        return (-(-k // c["BK"]), *solve)
    if spec.name == "recompute_w_u_fwd_kernel":  # per (chunk, head): its V loop, then its K loop
        return (-(-v // c["BV"]), -(-k // c["BK"]))
    if spec.name == "chunk_gated_delta_rule_fwd_kernel_h_blockdim64":  # per (value block, request, head): its chunks
        return (sum(-(-n // CHUNK) for n in lengths) / len(lengths),)
    if spec.name == "chunk_fwd_kernel_o" and -(-k // c["BK"]) > 1:
        return (-(-k // c["BK"]),)
    return ()  # gating, l2norm, cumsum, o at BK = K: straight-line code


# ---- conv update


def causal_conv1d_update_inspect_specs(shape, dtype):
    """SGLang's Triton causal_conv1d_update for one decode token of
    ``batch`` requests (silu, int32 slots), as its GDN decode calls it."""
    dim, width, batch = shape.get("dim", CONV_DIM), shape.get("width", 4), shape["batch"]

    def call():
        causal_conv1d_update(_meta(batch, dim, dtype=dtype), _meta(batch + 1, dim, width - 1, dtype=dtype),
                             _meta(dim, width, dtype=dtype), _meta(dim, dtype=dtype), "silu",
                             conv_state_indices=_meta(batch, dtype=torch.int32))  # fmt: skip

    return [spec for spec, _, _ in _planned(call)]
