"""Server-argument defaults of development mode (CPU + Triton interpreter).

Two SGLang defaults assume a device that is fast and a host with a NUMA
node per rank; the interpreter on a small CPU is neither:

- SGLang's watchdog SIGQUITs the server when one forward makes no progress
  for ``--watchdog-timeout`` (300 s). An interpreted forward is slow, not
  stuck: a 3000-token prompt batched with short ones outlasted 300 s and the
  server died with every request in flight (docs/dev-mode-speed.md, "A long
  prompt"). Development mode raises the default to a day, said once.
- SGLang's CPU workers bind each rank's OpenMP threads to a NUMA node and
  assert that there are at least as many nodes as ranks, unless
  ``SGLANG_CPU_OMP_THREADS_BIND`` names each rank's cores. Development mode
  splits this process's CPUs over the ranks it starts here (the value the
  tests set by hand) when the machine has fewer NUMA nodes than the
  deployment has ranks (SGLang counts every node's, so two one-rank nodes on
  loopback need it too), so `serve`, the main job and `regress` start at
  ``--tp-size 2`` on a one-node machine.

Only what the user left at SGLang's default changes.
"""

from __future__ import annotations

import logging
import os

from ...runtime.env import env_str
from .names import LOGGER

logger = logging.getLogger(LOGGER)

SGLANG_WATCHDOG_DEFAULT_S = 300.0
DEV_MODE_WATCHDOG_S = 86400.0  # a forward that makes no progress for a day is stuck, not slow
THREADS_BIND = "SGLANG_CPU_OMP_THREADS_BIND"


def raise_watchdog(server_args) -> None:
    # SGLang's raw-input snapshot holds every field's default, so SGLang's own
    # default is what "left unset" looks like here (an explicit 300 reads the same).
    if getattr(server_args, "watchdog_timeout", None) not in (None, SGLANG_WATCHDOG_DEFAULT_S):
        return
    server_args.watchdog_timeout = DEV_MODE_WATCHDOG_S
    logger.warning(
        "kunlun-triton development mode: SGLang's watchdog raised from %.0f s to %.0f s (the Triton interpreter "
        "takes minutes for a long prompt's forward; pass --watchdog-timeout to choose)",
        SGLANG_WATCHDOG_DEFAULT_S, DEV_MODE_WATCHDOG_S,
    )  # fmt: skip


def deployment_ranks(server_args) -> int:
    """The scheduler processes of the whole deployment, every node: TP x PP
    ranks per DP replica (attention DP partitions the TP group, it starts no
    process). SGLang's NUMA check counts these, whatever the node count."""
    tp = int(getattr(server_args, "tp_size", 1) or 1)
    pp = int(getattr(server_args, "pp_size", 1) or 1)
    dp = 1 if getattr(server_args, "enable_dp_attention", False) else int(getattr(server_args, "dp_size", 1) or 1)
    return max(1, dp * tp * pp)


def ranks_on_this_host(server_args) -> int:
    """The scheduler processes SGLang starts here: the deployment's ranks over the nodes."""
    nodes = max(1, int(getattr(server_args, "nnodes", 1) or 1))
    return max(1, deployment_ranks(server_args) // nodes)


def split_cpus(cpus: list[int], ranks: int) -> str:
    """``SGLANG_CPU_OMP_THREADS_BIND`` giving each rank an equal share of `cpus`
    (ranks share a core round-robin when there are fewer cores than ranks)."""
    cpus = sorted(cpus)
    if len(cpus) < ranks:
        return "|".join(str(cpus[r % len(cpus)]) for r in range(ranks))
    share = len(cpus) // ranks
    return "|".join(",".join(map(str, cpus[r * share:(r + 1) * share])) for r in range(ranks))


def bind_rank_threads(server_args, numa_nodes: int) -> None:
    if deployment_ranks(server_args) <= numa_nodes or env_str(THREADS_BIND):
        return
    ranks = ranks_on_this_host(server_args)
    value = split_cpus(list(os.sched_getaffinity(0)), ranks)
    os.environ[THREADS_BIND] = value  # the schedulers SGLang starts next inherit it
    logger.warning(
        "kunlun-triton development mode: %d ranks on %d NUMA node(s): %s=%s (set it to choose the cores)",
        ranks, numa_nodes, THREADS_BIND, value,
    )  # fmt: skip


def numa_node_count() -> int:
    from sglang.srt.utils import get_cpu_ids_by_node

    try:
        return max(1, len(get_cpu_ids_by_node()))
    except Exception:  # no NUMA information (containers): one node
        return 1


def apply_dev_mode_defaults(server_args) -> None:
    raise_watchdog(server_args)
    bind_rank_threads(server_args, numa_node_count())
