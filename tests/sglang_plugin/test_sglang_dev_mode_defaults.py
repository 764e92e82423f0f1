"""Development mode's server-argument defaults, through SGLang's own call site
(``handle_platform_defaults``, which reaches our platform's
``apply_server_args_defaults``) on a stand-in for ``ServerArgs``:

- SGLang's watchdog no longer kills a server whose interpreted forward is
  slow (a 3000-token prompt outlasted the 300 s default);
- a multi-rank run on a machine with fewer NUMA nodes than ranks starts:
  SGLang's own ``init_threads_binding`` (the call that asserted for
  ``kunlun-triton serve --tp-size 2``) accepts every rank afterwards;
- heads that ``--tp-size`` cannot split are refused at start, naming them.
"""

from __future__ import annotations

import json
import os
import types

import pytest


def _args(tmp_path, **raw):
    (tmp_path / "config.json").write_text(json.dumps(
        {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_attention_heads": 4,
         "num_key_value_heads": 2}))  # fmt: skip
    fields = dict(dtype="float32", model_path=str(tmp_path), attention_backend=None, sampling_backend=None,
                  cuda_graph_config=None, disable_cuda_graph=False, disable_custom_all_reduce=False,
                  watchdog_timeout=300.0, tp_size=1, pp_size=1, dp_size=1, nnodes=1, enable_dp_attention=False,
                  speculative_algorithm=None, kv_cache_dtype="auto")  # fmt: skip
    fields.update(raw)
    return types.SimpleNamespace(**fields, _raw_input=dict(raw, model_path=str(tmp_path)))


def _apply(args):
    from sglang.srt.arg_groups.platform_hook import handle_platform_defaults

    handle_platform_defaults(args)
    return args


def _resolved(model_path, **kwargs):
    """SGLang's own resolution of a real ``ServerArgs`` (what an Engine runs)."""
    from sglang.srt.arg_groups.overrides import resolution_result
    from sglang.srt.arg_groups.pipeline import run_resolution_pipeline
    from sglang.srt.server_args import ServerArgs

    args = ServerArgs(model_path=model_path, **kwargs)
    run_resolution_pipeline(args)
    return lambda field: resolution_result(args, field)


def test_the_watchdog_outlasts_a_slow_interpreted_forward(tiny_llama):
    from kunlun_triton.sglang_plugin.platform.dev_mode_defaults import DEV_MODE_WATCHDOG_S

    assert _resolved(tiny_llama)("watchdog_timeout") == DEV_MODE_WATCHDOG_S >= 3600
    assert _resolved(tiny_llama, watchdog_timeout=42.0)("watchdog_timeout") == 42.0  # the user's choice stays


@pytest.mark.parametrize("tp_size,pp_size", [(2, 1), (2, 2), (4, 1)])
def test_every_rank_binds_its_threads_on_a_one_node_machine(tmp_path, monkeypatch, tp_size, pp_size):
    from sglang.srt.utils import numa_utils

    monkeypatch.delenv("SGLANG_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setattr(numa_utils, "get_cpu_ids_by_node", lambda: ["0,1"])  # one node, as here and in CI
    import sglang.srt.utils as sglang_utils

    monkeypatch.setattr(sglang_utils, "get_cpu_ids_by_node", lambda: ["0,1"])
    world = tp_size * pp_size
    with pytest.raises(AssertionError):  # SGLang's own refusal, before the platform sets anything
        numa_utils.init_threads_binding(numa_index=1, world_size=world)
    _apply(_args(tmp_path, tp_size=tp_size, pp_size=pp_size))
    bound = [numa_utils.init_threads_binding(numa_index=r, world_size=world) for r in range(world)]
    cpus = {int(c) for c in os.sched_getaffinity(0)}
    assert all(b and {int(c) for c in b.split(",")} <= cpus for b in bound), bound
    assert os.environ["SGLANG_CPU_OMP_THREADS_BIND"].count("|") == world - 1


def test_each_node_of_a_two_node_run_on_one_machine_binds_its_rank(tmp_path, monkeypatch):
    """``--tp-size 2 --nnodes 2`` on loopback: one rank per node, but SGLang's
    NUMA check counts the deployment's 2 ranks against this machine's 1 node."""
    from sglang.srt.utils import numa_utils

    monkeypatch.delenv("SGLANG_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setattr(numa_utils, "get_cpu_ids_by_node", lambda: ["0,1"])
    import sglang.srt.utils as sglang_utils

    monkeypatch.setattr(sglang_utils, "get_cpu_ids_by_node", lambda: ["0,1"])
    with pytest.raises(AssertionError):
        numa_utils.init_threads_binding(numa_index=0, world_size=2)
    _apply(_args(tmp_path, tp_size=2, nnodes=2))
    assert os.environ["SGLANG_CPU_OMP_THREADS_BIND"].count("|") == 0  # this node's one rank
    bound = numa_utils.init_threads_binding(numa_index=0, world_size=2)
    assert bound and {int(c) for c in bound.split(",")} <= {int(c) for c in os.sched_getaffinity(0)}


def test_a_users_thread_binding_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_CPU_OMP_THREADS_BIND", "0|0")
    _apply(_args(tmp_path, tp_size=2))
    assert os.environ["SGLANG_CPU_OMP_THREADS_BIND"] == "0|0"


@pytest.mark.parametrize("q,kv,tp,ok", [
    (9, 3, 2, False),   # SmolLM2 at TP 2: the weight loader's slice error before
    (9, 3, 3, True), (14, 2, 2, True), (14, 2, 4, False), (16, 2, 4, True),  # 2 KV heads replicated over 4
    (16, 3, 4, False), (8, 8, 8, True), (8, 1, 8, True),
])  # fmt: skip
def test_heads_tp_cannot_split_are_refused_naming_them(tmp_path, q, kv, tp, ok):
    from kunlun_triton.sglang_plugin.platform.support import UnsupportedFeature, check_tensor_parallel_heads

    (tmp_path / "config.json").write_text(json.dumps(
        {"architectures": ["LlamaForCausalLM"], "num_attention_heads": q, "num_key_value_heads": kv}))
    args = types.SimpleNamespace(model_path=str(tmp_path), tp_size=tp)
    if ok:
        check_tensor_parallel_heads(args)
        return
    with pytest.raises(UnsupportedFeature, match=rf"{q} query heads and {kv} KV heads.*--tp-size {tp}"):
        check_tensor_parallel_heads(args)


def test_the_head_check_runs_at_start_up(tmp_path):
    from kunlun_triton.sglang_plugin.platform.support import UnsupportedFeature

    args = _args(tmp_path, tp_size=3)  # 4 query heads, 2 KV heads
    with pytest.raises(UnsupportedFeature, match="--tp-size 3"):
        _apply(args)
