"""The HTTP server on the kunlun platform (``kunlun-triton serve``, i.e.
``serve_main``), asked through the OpenAI client as an operator would, on
127.0.0.1 only. The answer equals HF transformers' greedy continuation of the
chat-templated conversation. At start serve prints the plan (target, which of
our ops each layer reaches), then the scheduler's real dispatch report, which
``GET /server_info`` also carries."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

NEW = 6


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server_log(tmp_path_factory):
    return tmp_path_factory.mktemp("serve") / "serve.log"


@pytest.fixture(scope="module")
def server(tiny_llama, server_log):
    port = _free_port()
    env = dict(os.environ, SGLANG_PLATFORM="kunlun")
    cmd = [sys.executable, "-m", "kunlun_triton.sglang_plugin.tools.serve", "--model-path", tiny_llama,
           "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--max-total-tokens", "2048",
           "--max-running-requests", "4", "--random-seed", "0", "--log-level", "error"]  # fmt: skip
    log = open(server_log, "w")  # a file, not a pipe: nobody drains a pipe while it serves
    proc = subprocess.Popen(cmd, env=env, cwd="/", stdout=log, stderr=subprocess.STDOUT, text=True)
    import urllib.request

    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 600
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited with {proc.returncode}:\n{server_log.read_text()[-5000:]}")
        try:
            with urllib.request.urlopen(f"{base}/health_generate", timeout=60) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(3)
    else:
        proc.kill()
        pytest.fail("server did not come up in 600 s")
    yield base
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def test_chat_completions_through_openai_client(server, hf_llama):
    from openai import OpenAI

    client = OpenAI(base_url=f"{server}/v1", api_key="none")
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    reply = client.chat.completions.create(model="default", messages=messages, max_tokens=NEW, temperature=0)
    ids = hf_llama.greedy(hf_llama.chat_ids(messages), NEW)
    eos = hf_llama.tokenizer.eos_token_id
    if eos in ids:
        ids = ids[: ids.index(eos)]
    assert reply.choices[0].message.content == hf_llama.tokenizer.decode(ids, skip_special_tokens=True)


def test_server_info_carries_the_scheduler_dispatch_report(server):
    from kunlun_triton.sglang_plugin.tools.serve import fetch_scheduler_report

    rep = fetch_scheduler_report(server)
    assert rep is not None and rep["target"] == "interpreter" and rep["tp_rank"] == 0
    for op in ("extend_attention", "store_kv", "rms_norm", "silu_and_mul", "rotary_embedding"):
        assert rep["ops"][op]["impl"] == "triton", (op, rep["ops"].get(op))


def test_serve_prints_the_plan_then_the_scheduler_report(server, server_log):
    deadline = time.time() + 120  # the report thread polls every 5 s
    while "scheduler dispatch report" not in server_log.read_text() and time.time() < deadline:
        time.sleep(2)
    text = server_log.read_text()
    assert "target:      interpreter" in text
    assert "our ops run: Triton kernels" in text
    from kunlun_triton.sglang_plugin.install import TOUCHPOINTS

    plan = text[text.index("routing plan"):]
    for point in TOUCHPOINTS:  # one line per touchpoint of the install table
        assert f"{point.name} " in plan and point.sglang in plan, point.name
    assert "kunlun_triton (platform default): --attention-backend kunlun_triton -> store_kv, decode_attention, extend_attention" in plan
    assert "kunlun_triton (platform default): --sampling-backend kunlun_triton -> sample, greedy" in plan
    assert "RotaryEmbedding(+subclasses) -> rms_norm, fused_add_rms_norm, silu_and_mul" in plan
    assert "-> off (tp_size 1)" in plan
    report = text[text.index("scheduler dispatch report"):]
    assert "extend_attention" in report and "triton" in report


def _post(url, body):
    """(status, body text) of a JSON POST; HTTP errors are answers, not exceptions."""
    import json
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _greedy_text(server):
    import json

    status, text = _post(f"{server}/generate", {"text": "The capital of France is",
                                                 "sampling_params": {"max_new_tokens": NEW, "temperature": 0}})
    assert status == 200, text
    return json.loads(text)["text"]


def test_hostile_requests_get_400_naming_the_field_and_the_server_keeps_serving(server, tiny_llama):
    """Issue 25's HIGH class (and the OpenAI n / logprobs LOW class): each of
    these once ended every server process (scheduler exception) or answered
    nonsense. Each must get a 400 naming the field; afterwards the server
    gives the same greedy text as before. Vocabulary size from the checkpoint."""
    import json

    vocab = json.load(open(os.path.join(tiny_llama, "config.json")))["vocab_size"]
    before = _greedy_text(server)
    gen, cmpl, chat = f"{server}/generate", f"{server}/v1/completions", f"{server}/v1/chat/completions"
    sampled = {"max_new_tokens": 2, "temperature": 1.0}
    user = [{"role": "user", "content": "Hi"}]
    hostile = [
        ("top_k", gen, {"text": "Hi", "sampling_params": {**sampled, "top_k": 2**31}}),
        ("top_k", cmpl, {"model": "default", "prompt": "Hi", "max_tokens": 2, "top_k": 2**40}),
        ("input_ids", gen, {"input_ids": [1, 2, vocab], "sampling_params": sampled}),
        ("input_ids", gen, {"input_ids": [1, -3, 2], "sampling_params": sampled}),
        ("input_ids", gen, {"input_ids": [[1, 2], [3, 100000]], "sampling_params": sampled}),
        ("input_ids", cmpl, {"model": "default", "prompt": [1, 2, 100000], "max_tokens": 2}),
        ("top_logprobs_num", gen, {"text": "Hi", "return_logprob": True, "top_logprobs_num": vocab + 1,
                                   "sampling_params": sampled}),
        ("top_logprobs_num", cmpl, {"model": "default", "prompt": "Hi", "max_tokens": 2, "logprobs": vocab + 5}),
        ("top_logprobs_num", cmpl, {"model": "default", "prompt": "Hi", "max_tokens": 2, "logprobs": -1}),
        ("top_logprobs_num", chat, {"model": "default", "messages": user, "max_tokens": 2, "logprobs": True,
                                    "top_logprobs": -1}),
        ("n", cmpl, {"model": "default", "prompt": "Hi", "max_tokens": 2, "n": 0}),
        ("n", chat, {"model": "default", "messages": user, "max_tokens": 2, "n": -1}),
    ]  # fmt: skip
    for field, url, body in hostile:
        status, text = _post(url, body)
        assert status == 400 and field in text, (url, body, status, text[:500])
    assert _greedy_text(server) == before
