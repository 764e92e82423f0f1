"""The uneven collectives under bad input, on two real gloo ranks (checked
communicators living for the whole module). Hypothesis sends pairs of calls
(one per rank), each possibly broken: negative or missing splits, splits that
do not sum to the rows given, floats for ints, an ``out`` of the wrong dtype
or shape, an unknown op; or the ranks disagree (dtype, trailing shape, sizes,
what one sends and the other expects). The test's own judge says what must
happen: a rank whose arguments are bad raises ValueError naming the argument,
the other raises CollectiveError; ranks that disagree both raise
CollectiveError; inputs and ``out`` unchanged either way, and the group keeps
answering; a good pair gives the rows computed from both ranks' inputs."""

from __future__ import annotations

import math
import multiprocessing
import socket

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import uneven_workers

_BREAKS = {
    "all_to_all": ["negative", "short", "sum", "floats", "recv", "out_dtype", "dtype", "trailing"],
    "all_gatherv": ["negative", "short", "rows", "sizes_differ", "out_shape", "dtype", "trailing"],
    "reduce_scatterv": ["negative", "sum", "sizes_differ", "op", "out_dtype", "dtype", "trailing"],
}
# the argument a local refusal names
_NAMES = {"negative": "negative", "short": "entries", "sum": "sum to", "floats": "list of ints", "rows": "sizes[",
          "out_dtype": "out has dtype", "out_shape": "out has shape", "op": "unknown reduction"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pair():
    ctx = multiprocessing.get_context("spawn")
    port, outbox = _free_port(), ctx.Queue()
    inboxes = [ctx.Queue(), ctx.Queue()]
    procs = [ctx.Process(target=uneven_workers.serve, args=(r, 2, port, inboxes[r], outbox), daemon=True)
             for r in range(2)]
    for p in procs:
        p.start()
    try:
        assert sorted(outbox.get(timeout=120)[1:3] for _ in procs) == [(0, "ready"), (1, "ready")]
        seq = [0]

        def call(per_rank):
            seq[0] += 1
            for inbox, c in zip(inboxes, per_rank):
                inbox.put((seq[0], c))
            results = {}
            while len(results) < 2:
                s, rank, kind, payload = outbox.get(timeout=60)
                if s == seq[0]:
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


@st.composite
def call_pairs(draw):
    """(collective, per-rank calls, per-rank break or None)."""
    collective = draw(st.sampled_from(sorted(_BREAKS)))
    trailing = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
    table = draw(st.lists(st.lists(st.integers(0, 3), min_size=2, max_size=2), min_size=2, max_size=2))
    sizes = [table[0][0], table[1][1]]
    breaks = [draw(st.sampled_from(_BREAKS[collective])) if draw(st.integers(0, 2)) == 0 else None
              for _ in range(2)]
    calls = []
    for rank, brk in enumerate(breaks):
        dtype = torch.float16 if brk == "dtype" else torch.float32
        shape = trailing + (1,) if brk == "trailing" else trailing
        if collective == "all_to_all":
            send, rows = list(table[rank]), sum(table[rank])
            recv = [table[s][rank] for s in range(2)] if draw(st.booleans()) or brk in ("recv", "out_dtype") else None
            if brk == "negative":
                send[0] = -1 - send[0]
            elif brk == "short":
                send = send[:1]
            elif brk == "sum":
                rows += 1
            elif brk == "floats":
                send = [float(s) for s in send]
            elif brk == "recv":
                recv[1 - rank] += 1
            kwargs = {"send_splits": send, "recv_splits": recv}
            out_rows = sum(recv) if recv else 0
        else:
            counts = list(sizes)
            rows = counts[rank] if collective == "all_gatherv" else sum(counts)
            if brk == "negative":
                counts[rank] = -1 - counts[rank]
            elif brk == "short":
                counts = counts[:1]
            elif brk in ("rows", "sum"):
                rows += 1
            elif brk == "sizes_differ":
                counts[1 - rank] += 1
                rows = counts[rank] if collective == "all_gatherv" else sum(counts)
            kwargs = {"sizes": counts}
            if collective == "reduce_scatterv":
                kwargs["op"] = "bogus" if brk == "op" else "sum"
            out_rows = sum(sizes) if collective == "all_gatherv" else sizes[rank]
        if brk == "out_dtype":
            kwargs["out"] = torch.zeros((out_rows, *shape), dtype=torch.float64)
        elif brk == "out_shape":
            kwargs["out"] = torch.zeros((out_rows + 1, *shape))
        calls.append((collective, rows, shape, dtype, kwargs))
    return collective, calls, breaks, table, sizes


def _inputs(calls):
    return [torch.arange(rows * math.prod(shape), dtype=torch.float32).reshape(rows, *shape).add(100 * r)
            for r, (_, rows, shape, _, _) in enumerate(calls)]


@settings(max_examples=40, deadline=None)
@given(case=call_pairs())
def test_bad_uneven_calls_raise_on_every_rank_and_change_nothing(pair, case):
    collective, calls, breaks, table, sizes = case
    results = pair(calls)
    local = [b in _NAMES for b in breaks]
    if any(local):
        for r in range(2):
            kind, payload = results[r]
            text, unchanged = payload
            assert unchanged, results
            if local[r]:
                assert kind == "ValueError" and collective in text and _NAMES[breaks[r]] in text, results
            else:
                assert kind == "CollectiveError" and "refused" in text and "nothing was sent" in text, results
        return
    same = breaks[0] == breaks[1] and breaks[0] in ("dtype", "trailing")  # both changed alike: they agree
    if any(breaks) and not same:  # the ranks disagree: both refuse, naming both calls
        for r in range(2):
            kind, (text, unchanged) = results[r]
            assert kind == "CollectiveError" and unchanged and "nothing was sent" in text, results
            assert "rank 0:" in text or "expects" in text, text
        return
    xs = _inputs(calls)
    for r in range(2):
        kind, payload = results[r]
        assert kind == "ok", results
        if collective == "all_to_all":
            want = uneven_workers.expected_all_to_all(xs, table, r)
        elif collective == "all_gatherv":
            want = torch.cat(xs)
        else:
            start = sum(sizes[:r])
            want = (xs[0] + xs[1])[start : start + sizes[r]]
        got = torch.tensor(payload).reshape(want.shape)  # float16 calls: small integers, exact
        assert torch.equal(got, want), (results, want)
