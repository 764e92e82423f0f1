"""Development mode's launch plan, pinned as counts (never as wall-clock).

The interpreter pays per launch and per program (every ``tl`` op of every
program runs through Triton's Python semantics), so its plan is fewest
launches and programs: a SmolLM2-135M decode layer at batch 3 is six
launches of one program each; attention launches once (one split, no
merge) and one program folds every (request, KV head) row of the batch as
3-D tiles (`ops/attention/decode_batch.py`; it was one program per row). The
interpreter's per-launch waste is patched out when the target is detected
(`kunlun_triton.runtime.interpreter_speed`). See docs/dev-mode-speed.md.
"""

from collections import Counter

import pytest
import torch

from strategies import DEVICE

from kunlun_triton import ops
from kunlun_triton.runtime import current_target
from kunlun_triton.introspect.paged import decode_batch

BF16 = torch.bfloat16
HIDDEN, HEADS, KV_HEADS, DIM, INTER = 576, 9, 3, 64, 1536  # SmolLM2-135M


@pytest.fixture
def launches(monkeypatch):
    """Counts of launches and programs per kernel while the test runs."""
    from triton.runtime import interpreter

    counts = {"launches": Counter(), "programs": Counter()}
    real_run, builder = interpreter.InterpretedFunction.run, interpreter.interpreter_builder
    real_set_idx = builder.set_grid_idx
    current = []

    def run(self, *args, **kwargs):
        current.append(self.fn.__name__)
        counts["launches"][self.fn.__name__] += 1
        try:
            return real_run(self, *args, **kwargs)
        finally:
            current.pop()

    def set_grid_idx(x, y, z):
        counts["programs"][current[-1]] += 1
        return real_set_idx(x, y, z)

    monkeypatch.setattr(interpreter.InterpretedFunction, "run", run)
    monkeypatch.setattr(builder, "set_grid_idx", set_grid_idx)
    return counts


def test_interpreter_target_installs_the_speed_ups():
    assert current_target().name == "interpreter"
    from triton.runtime import interpreter

    assert getattr(interpreter, "_kunlun_fast_patch", False)
    assert getattr(interpreter.GridExecutor, "_kunlun_in_place", False)
    x = torch.ones(4)
    args, kwargs = interpreter.GridExecutor._init_args_hst(None, (x, 3), {"y": x})
    assert args[0] is x and kwargs["y"] is x, "a CPU tensor must reach the kernel as itself (no re-view, no copy back)"


def test_decode_attention_is_one_launch_of_one_program(launches):
    lens = [37, 0, 70]  # the empty request must still come out as zeros
    d = decode_batch(lens, q_heads=HEADS, kv_heads=KV_HEADS, head_dim=DIM, dtype=BF16, device=DEVICE, seed=3)
    args = d.args()
    args[3].fill_(7.0)  # stale values where the empty request's output goes
    workspace = ops.decode_workspace(len(lens), HEADS, KV_HEADS, DIM, DIM, DEVICE)
    out = ops.decode_attention(*args, workspace=workspace)
    assert dict(launches["launches"]) == {"decode_batch_kernel": 1}
    assert dict(launches["programs"]) == {"decode_batch_kernel": 1}
    # An oracle in float64: softmax over each request's keys.
    p = d.pool
    for b, n in enumerate(lens):
        slots = p.kv_indices[p.kv_indptr[b] : p.kv_indptr[b + 1]].long()
        if n == 0:
            assert torch.equal(out[b].cpu(), torch.zeros_like(out[b].cpu()))
            continue
        q = d.q[b].double().cpu()
        k = p.k_buffer[slots].double().cpu().repeat_interleave(HEADS // KV_HEADS, 1)
        v = p.v_buffer[slots].double().cpu().repeat_interleave(HEADS // KV_HEADS, 1)
        probs = torch.softmax(torch.einsum("hd,nhd->hn", q, k) * d.sm_scale, -1)
        want = torch.einsum("hn,nhd->hd", probs, v)
        torch.testing.assert_close(out[b].cpu().double(), want, atol=1.6e-2, rtol=1.6e-2)


def test_a_decode_layer_is_six_launches_of_one_program(launches):
    """What SGLang's Llama decode layer launches on our platform at batch 3."""
    bs, gen = 3, torch.Generator().manual_seed(0)
    rand = lambda *s: torch.randn(*s, generator=gen).to(BF16).to(DEVICE)  # noqa: E731
    x, residual, w = rand(bs, HIDDEN), rand(bs, HIDDEN), rand(HIDDEN)
    qkv, gate_up = rand(bs, (HEADS + 2 * KV_HEADS) * DIM), rand(bs, 2 * INTER)
    d = decode_batch([20, 33, 41], q_heads=HEADS, kv_heads=KV_HEADS, head_dim=DIM, dtype=BF16, device=DEVICE)
    q_arg, k_buf, v_buf, o, kv_indptr, kv_indices, sm_scale = d.args()
    loc = kv_indices[kv_indptr[1:].long() - 1]
    cache = torch.randn(64, DIM, generator=gen).to(DEVICE)
    positions = torch.tensor([19, 32, 40]).remainder(64).to(DEVICE)
    q, k, v = qkv.split([HEADS * DIM, KV_HEADS * DIM, KV_HEADS * DIM], -1)
    workspace = ops.decode_workspace(bs, HEADS, KV_HEADS, DIM, DIM, DEVICE)

    ops.fused_add_rms_norm(x, residual, w, 1e-5)
    ops.rotary_embedding(positions, q, k.view(bs, KV_HEADS, DIM), DIM, cache, True)
    ops.store_kv(k.view(bs, KV_HEADS, DIM), v.view(bs, KV_HEADS, DIM), k_buf, v_buf, loc)
    ops.decode_attention(q_arg, k_buf, v_buf, o, kv_indptr, kv_indices, sm_scale, workspace=workspace)
    ops.fused_add_rms_norm(x, residual, w, 1e-5)
    ops.silu_and_mul(gate_up)

    assert sum(launches["launches"].values()) == 6, dict(launches["launches"])
    assert launches["programs"] == launches["launches"], dict(launches["programs"])
    assert launches["launches"]["decode_batch_kernel"] == 1


def test_small_batches_get_tiles_of_their_rows(monkeypatch):
    """fused_add_rms_norm's FIT_ROWS (interpreter config): 3 rows run in a
    4-row tile, not 16 (numpy would work on the padding rows), with the same
    bits as the 16-row tile (rows are independent)."""
    import importlib

    norm = importlib.import_module("kunlun_triton.ops.norm.ops")
    assert norm._cached_plan("fused_add_rms_norm", HIDDEN).rows_per_program == 16
    seen, real = [], norm._fitted_plan

    def fitted(*args):
        plan = real(*args)
        seen.append(plan.rows_per_program)
        return plan

    monkeypatch.setattr(norm, "_fitted_plan", fitted)
    gen = torch.Generator().manual_seed(4)
    x, residual, w = (torch.randn(*s, generator=gen).to(DEVICE) for s in ((3, HIDDEN), (3, HIDDEN), (HIDDEN,)))
    fitted_out = ops.fused_add_rms_norm(x, residual.clone(), w, 1e-5)
    assert seen == [4]
    whole = ops.fused_add_rms_norm(x, residual.clone(), w, 1e-5, config={"ROWS_PER_PROGRAM": 16})
    assert torch.equal(fitted_out.cpu(), whole.cpu())
