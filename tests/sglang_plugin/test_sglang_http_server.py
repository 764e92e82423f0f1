"""The HTTP server on the kunlun platform (``kunlun-triton serve``, i.e.
``serve_main``), asked through the OpenAI client as an operator would, on
127.0.0.1 only. The answer equals HF transformers' greedy continuation of the
chat-templated conversation."""

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
def server(tiny_llama):
    port = _free_port()
    env = dict(os.environ, SGLANG_PLATFORM="kunlun")
    cmd = [sys.executable, "-m", "kunlun_triton.sglang_plugin.serve", "--model-path", tiny_llama,
           "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--max-total-tokens", "2048",
           "--max-running-requests", "4", "--random-seed", "0", "--log-level", "error"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    import urllib.request

    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 600
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited with {proc.returncode}:\n{proc.stdout.read()[-5000:]}")
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
