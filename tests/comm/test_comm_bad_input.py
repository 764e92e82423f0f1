"""The communicator under bad input: timeouts that are not a finite number
of seconds, collectives that fail part way, ranks that disagree on sizes.

Failures part way are staged in one process (``torch.distributed``'s calls
replaced by fakes that scribble on the buffer they are given, then fail):
whatever the backend did, the caller's tensor must be as it was on gloo,
and the error must say what it left. Disagreeing ranks run on two real gloo
processes that live for the whole module; hypothesis sends them pairs of
calls, and each must either give the single-process answer or raise
``CollectiveError`` on both ranks (before the fix, gloo aborted both
processes)."""

from __future__ import annotations

import math
import multiprocessing
import socket

import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

import comm_workers
from kunlun_triton.comm import CollectiveError, CollectiveTimeout, TPCommunicator, init_tp_group
from kunlun_triton.runtime import EnvError

# ------------------------------------------------------------ timeouts

bad_timeouts = st.one_of(
    st.floats(max_value=0.0),  # zero, negative, -inf
    st.sampled_from([math.inf, math.nan, -math.nan, 1e300, True, False, "600", None.__class__, [60]]),
    st.text(max_size=5),
)


@settings(max_examples=30, deadline=None)
@given(bad=bad_timeouts)
def test_a_bad_timeout_is_refused_when_the_communicator_is_built(bad):
    with pytest.raises(ValueError, match="timeout_s"):
        TPCommunicator(None, backend="gloo", timeout_s=bad)


@settings(max_examples=30, deadline=None)
@given(raw=st.one_of(st.sampled_from(["inf", "-inf", "nan", "-1", "0", "1e300", "ten", "60s", "0x10"]),
                     st.floats(max_value=0.0).map(repr),
                     # what an environment can hold: no NUL, encodable (os.environ refuses the rest itself)
                     st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=6)))
def test_a_bad_timeout_variable_is_refused_naming_it(raw):
    try:
        ok = 0 < float(raw) <= 365 * 24 * 3600 and raw.strip() == raw.strip()
    except ValueError:
        ok = not raw.strip()  # blank: unset, the default
    if ok:
        return  # a usable value; what it gives is covered below
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KUNLUN_TRITON_COMM_TIMEOUT_S", raw)
        with pytest.raises(EnvError, match="KUNLUN_TRITON_COMM_TIMEOUT_S"):
            TPCommunicator(None, backend="gloo")


def test_timeout_from_the_variable_and_the_argument(monkeypatch):
    _fake_group(monkeypatch)
    monkeypatch.setenv("KUNLUN_TRITON_COMM_TIMEOUT_S", "42.5")
    assert TPCommunicator(None, backend="gloo").timeout_s == 42.5
    assert TPCommunicator(None, backend="gloo", timeout_s=7).timeout_s == 7.0
    monkeypatch.delenv("KUNLUN_TRITON_COMM_TIMEOUT_S")
    assert TPCommunicator(None, backend="gloo").timeout_s == 600.0


def test_init_tp_group_checks_the_timeout_before_starting():
    with pytest.raises(ValueError, match="init_tp_group: timeout_s"):
        init_tp_group(0, 2, "tcp://127.0.0.1:1", backend="gloo", timeout_s=math.inf)
    assert not dist.is_initialized()


# ------------------------------------------------------------ failures part way


class _FailingWork:
    def __init__(self, how):
        self.how = how

    def wait(self, timeout=None):
        if self.how == "times_out":
            return False
        raise RuntimeError("[gloo] Connection closed by peer")


def _fake_group(monkeypatch, rank=0, world=2):
    monkeypatch.setattr(dist, "get_rank", lambda group=None: rank)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: world)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "gloo")
    monkeypatch.setattr(dist, "get_global_rank", lambda group, r: r)


def _scribbling(how):
    """A collective that writes garbage into half its buffer, then fails."""

    def collective(tensor, *args, **kwargs):
        half = tensor.view(-1)[: max(1, tensor.numel() // 2)]
        half.fill_(-7)
        if how == "raises":
            raise RuntimeError("[gloo] Connection closed by peer")
        return _FailingWork(how)

    return collective


@settings(max_examples=25, deadline=None)
@given(
    collective=st.sampled_from(["all_reduce", "broadcast"]),
    dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.int64]),
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    strided=st.booleans(),
    how=st.sampled_from(["raises", "fails_on_wait", "times_out"]),
    backend=st.sampled_from(["gloo", "nccl"]),
)
def test_a_failed_in_place_collective_says_what_it_left(collective, dtype, shape, strided, how, backend):
    with pytest.MonkeyPatch.context() as mp:
        _fake_group(mp)
        mp.setattr(dist, collective, _scribbling(how))
        comm = TPCommunicator(None, backend=backend, checked=False, timeout_s=1)
        base = (torch.arange(math.prod(shape) * 2) % 11 + 1).to(dtype).reshape(*shape[:-1], shape[-1] * 2)
        x = base[..., ::2] if strided else base[..., : shape[-1]]
        if backend == "nccl" and not x.is_contiguous() and collective == "all_reduce":
            x = x.contiguous()  # nccl collectives take contiguous tensors
        before = x.clone()
        call = (lambda: comm.all_reduce(x)) if collective == "all_reduce" else (lambda: comm.broadcast(x, src=1))
        expected = CollectiveTimeout if how == "times_out" else CollectiveError
        with pytest.raises(expected) as info:
            call()
        text = str(info.value)
        assert collective in text and "rank 0 of 2" in text
        if backend == "gloo":
            assert "input tensor is unchanged" in text, text
            assert torch.equal(x, before)  # the scribbles went to a private copy
        else:
            # device backends run in place: the error says the input is undefined
            assert "contents are undefined" in text, text
        if how == "times_out":
            assert "unusable" in text


# ------------------------------------------------------------ ranks that disagree


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def gloo_pair():
    """Two gloo ranks (checked communicators) serving calls until the module ends."""
    ctx = multiprocessing.get_context("spawn")
    port, outbox = _free_port(), ctx.Queue()
    inboxes = [ctx.Queue(), ctx.Queue()]
    procs = [ctx.Process(target=comm_workers.serve, args=(r, 2, port, inboxes[r], outbox), daemon=True)
             for r in range(2)]
    for p in procs:
        p.start()
    try:
        assert sorted(outbox.get(timeout=120)[1:3] for _ in procs) == [(0, "ready"), (1, "ready")]
        calls_made = [0]

        def call(per_rank):
            calls_made[0] += 1
            for inbox, c in zip(inboxes, per_rank):
                inbox.put((calls_made[0], c))
            results = {}
            while len(results) < len(procs):
                seq, rank, kind, payload = outbox.get(timeout=60)
                if seq == calls_made[0]:  # else a late reply to a call that failed the test
                    results[rank] = (kind, payload)
            return results

        yield call
    finally:
        for inbox in inboxes:
            inbox.put(None)
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()


_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@st.composite
def call_pairs(draw):
    """What each of the two ranks calls: usually the same collective, with
    shapes, dtypes and arguments that agree or not."""
    collective = draw(st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "broadcast"]))
    shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    calls = []
    for _ in range(2):
        c_shape = list(shape)
        if draw(st.integers(0, 2)) == 0:  # this rank's shape differs
            i = draw(st.integers(0, len(shape) - 1))
            c_shape[i] += draw(st.integers(1, 3))
            if draw(st.booleans()):
                c_shape.append(1)
        dtype = draw(st.sampled_from(_DTYPES)) if draw(st.integers(0, 4)) == 0 else torch.float32
        name = collective if draw(st.integers(0, 5)) else draw(st.sampled_from(["all_reduce", "broadcast"]))
        arg = {"all_reduce": "sum", "broadcast": 1, "all_gather": 0, "reduce_scatter": 0}[name]
        if name in ("all_gather", "reduce_scatter"):
            arg = draw(st.integers(0, len(c_shape) - 1))
        calls.append((name, tuple(c_shape), dtype, arg))
    return calls


def _answer(calls, rank):
    """The single-process result of rank `rank`'s call when both agree."""
    name, shape, dtype, arg = calls[rank]
    xs = [torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape).add(100 * r).to(dtype) for r in range(2)]
    if name == "all_reduce":
        return torch.stack([x.float() for x in xs]).sum(0).to(dtype)
    if name == "all_gather":
        return torch.cat(xs, dim=arg)
    if name == "broadcast":
        return xs[arg]
    return torch.stack([x.float() for x in xs]).sum(0).to(dtype).chunk(2, dim=arg)[rank]


@settings(max_examples=20, deadline=None)
@given(calls=call_pairs())
def test_ranks_that_disagree_raise_on_every_rank(gloo_pair, calls):
    results = gloo_pair(calls)
    if calls[0] == calls[1]:
        name, shape, _, arg = calls[0]
        if name == "reduce_scatter" and shape[arg] % 2:
            assert [results[r][0] for r in (0, 1)] == ["ValueError", "ValueError"], results
            return
        for r in (0, 1):
            kind, payload = results[r]
            assert kind == "ok", results
            torch.testing.assert_close(torch.tensor(payload), _answer(calls, r).float(), atol=0.2, rtol=1e-2)
        return
    for r in (0, 1):
        kind, payload = results[r]
        assert kind == "CollectiveError", results
        text, unchanged = payload
        assert "do not match" in text and "nothing was sent" in text and unchanged, text
        for name, shape, dtype, _ in calls:  # both ranks' calls are named
            assert f"{name}({str(dtype).replace('torch.', '')}{list(shape)}" in text, text


# ------------------------------------------------------------ issue 25: one rank checks what two ranks check


def test_one_rank_refuses_what_two_ranks_refuse(monkeypatch):
    """At world size 1 all_reduce(op="bogus"), all_gather(dim=5) on a 1-D
    tensor and broadcast(src=3) returned silently; at 2 ranks they raise."""
    _fake_group(monkeypatch, world=1)
    comm = TPCommunicator(None, backend="gloo")
    t = torch.arange(4.0)
    for call, words in ((lambda: comm.all_reduce(t, op="bogus"), "bogus"),
                        (lambda: comm.all_reduce(t, op="avg"), "avg"),
                        (lambda: comm.all_gather(t, dim=5), "all_gather: dim 5"),
                        (lambda: comm.reduce_scatter(t, dim=3), "reduce_scatter: dim 3"),
                        (lambda: comm.reduce_scatter(t, op="bogus"), "bogus"),
                        (lambda: comm.broadcast(t, src=3), "broadcast: src 3")):  # fmt: skip
        with pytest.raises(ValueError, match=words):
            call()
        assert torch.equal(t, torch.arange(4.0))
    assert comm.all_reduce(t) is t and torch.equal(comm.all_gather(t, dim=-1), t)  # good calls still answer


def test_an_unknown_backend_variable_is_named(monkeypatch):
    from kunlun_triton.comm.communicator import default_backend

    monkeypatch.setenv("KUNLUN_TRITON_DIST_BACKEND", "bogus")
    with pytest.raises(EnvError, match="KUNLUN_TRITON_DIST_BACKEND"):
        default_backend("cuda")
    monkeypatch.setenv("KUNLUN_TRITON_DIST_BACKEND", "BKCL")
    assert default_backend("kunlun") == "bkcl"
