"""The SGLang versions the plugin supports, and what each one calls what.

Every difference between the SGLang releases of the window lives in
:data:`API` (read from each release's source: ``srt/platforms/interface.py``,
``srt/mem_cache/kv_cache_configurator.py``, ``srt/model_executor/``); the
rest of the plugin is written against SGLang 0.5.23's names and asks this
module for the rest:

- :func:`make_capabilities`: ``PlatformCapabilities`` where SGLang has it,
  an attribute-for-attribute stand-in where it does not (our own code reads
  ``platform.capabilities`` on every version);
- :func:`platform_compat`: a mixin with the older hooks the installed SGLang
  calls instead of the newer ones (0.5.21: ``get_{mha,mla,dsa}_kv_pool_cls``,
  ``support_cuda_graph``, an allocator class that is never ``None``), each
  answered from the newer hook. On 0.5.22+ it is
  empty: overriding a legacy hook there earns a deprecation warning.

What is the same on all three releases (checked, so not in the table): the
entry-point groups and ``SGLANG_PLATFORM`` matching (``srt/plugins``), the
hook registry, the graph-capture contract of attention backends
(``init_cuda_graph_state``, ``init_forward_metadata_out_graph`` /
``_in_graph``, ``get_cuda_graph_seq_len_fill_value``), the decode graph
runner's module, and every other SGLang symbol the plugin imports.

Importing this module imports neither SGLang nor torch: ``kunlun-triton
doctor`` reads the window from here.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version


@dataclass(frozen=True)
class SGLangAPI:
    """What one SGLang release calls what (the fields name the 0.5.23 form)."""

    version: str
    # ``PlatformCapabilities`` and ``SRTPlatform.capabilities`` (0.5.22+);
    # before, graph capture was ``support_cuda_graph()`` and
    # ``support_piecewise_cuda_graph()`` and Triton was assumed.
    capabilities: bool
    # ``get_kv_pool_cls(kind=)`` (0.5.22+; the per-kind hooks still work
    # there, with a deprecation warning) or ``get_{mha,mla,dsa}_kv_pool_cls()``.
    kv_pool_by_kind: bool
    # ``get_paged_allocator_cls()`` may answer None for SGLang's own
    # (0.5.22+); 0.5.21 builds whatever it returns, at page size 1 too.
    allocator_may_be_none: bool
    # ``SRTPlatform.post_load_model(model)`` is called after loading
    # (0.5.22+). 0.5.21 has no such hook (and ``ModelRunner`` does not exist
    # yet when ``init_backend`` runs, so it cannot be hooked from there): the
    # loaded-model MoE check does not run; the server-argument checks do.
    post_load_model: bool
    # ``get_group_coordinator_device(local_rank)`` is consulted (0.5.23);
    # before, an out-of-tree device's coordinator sat on the CPU.
    group_coordinator_device: bool


API: dict[str, SGLangAPI] = {
    "0.5.21": SGLangAPI("0.5.21", capabilities=False, kv_pool_by_kind=False, allocator_may_be_none=False,
                        post_load_model=False, group_coordinator_device=False),
    "0.5.22": SGLangAPI("0.5.22", capabilities=True, kv_pool_by_kind=True, allocator_may_be_none=True,
                        post_load_model=True, group_coordinator_device=False),
    "0.5.23": SGLangAPI("0.5.23", capabilities=True, kv_pool_by_kind=True, allocator_may_be_none=True,
                        post_load_model=True, group_coordinator_device=True),
}  # fmt: skip

SUPPORTED_SGLANG_VERSIONS = tuple(API)
WINDOW = f"{SUPPORTED_SGLANG_VERSIONS[0]} to {SUPPORTED_SGLANG_VERSIONS[-1]}"

# The other components' windows, as pyproject.toml declares them (lower
# bounds only: vendor builds of torch and Triton must pass without being
# replaced). Each: (lowest version, highest or None).
COMPONENT_WINDOWS = {
    "python": ("3.10", None),
    "torch": ("2.1", None),
    "triton": ("3.0", None),
    "sglang": (SUPPORTED_SGLANG_VERSIONS[0], SUPPORTED_SGLANG_VERSIONS[-1]),
}

def version_tuple(text: str) -> tuple[int, ...]:
    """``"2.5.1+xpu"`` -> ``(2, 5, 1)``: the leading numeric release only."""
    parts = []
    for piece in text.split("+")[0].split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):
            break
    return tuple(parts)


def in_window(component: str, found: str) -> bool:
    low, high = COMPONENT_WINDOWS[component]
    got = version_tuple(found)
    if got < version_tuple(low):
        return False
    return high is None or got[: len(version_tuple(high))] <= version_tuple(high)


def window_text(component: str) -> str:
    low, high = COMPONENT_WINDOWS[component]
    if component == "sglang":
        return ", ".join(SUPPORTED_SGLANG_VERSIONS)
    return f">= {low}" if high is None else f"{low} to {high}"


def installed_version(distribution: str) -> str | None:
    """The installed version of a distribution (``python``: the interpreter)."""
    if distribution == "python":
        return ".".join(map(str, sys.version_info[:3]))
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def api_for(found: str) -> SGLangAPI:
    """The table entry for SGLang `found`; outside the window (only reached
    with ``KUNLUN_TRITON_ALLOW_ANY_SGLANG=1``) the nearest release at or
    below it, else the oldest."""
    if found in API:
        return API[found]
    below = [v for v in API if version_tuple(v) <= version_tuple(found)]
    return API[below[-1] if below else SUPPORTED_SGLANG_VERSIONS[0]]


@functools.lru_cache(maxsize=1)
def current_api() -> SGLangAPI:
    """The table entry for the installed SGLang."""
    return api_for(installed_version("sglang") or SUPPORTED_SGLANG_VERSIONS[-1])


@dataclass(frozen=True)
class LegacyCapabilities:
    """Stand-in for 0.5.22's ``PlatformCapabilities`` (same fields, same
    defaults) on releases without it; only our own code reads it there."""

    supports_triton: bool = False
    graph_capture: bool = False
    piecewise_graph: bool = False
    hicache_device_kernels: bool = False
    supports_pynccl: bool = False


def make_capabilities(**fields):
    """``PlatformCapabilities(**fields)``, or the stand-in before 0.5.22.
    Fields the installed release does not know are dropped."""
    if not current_api().capabilities:
        return LegacyCapabilities(**fields)
    from sglang.srt.platforms.interface import PlatformCapabilities

    known = set(getattr(PlatformCapabilities, "__struct_fields__", fields))
    return PlatformCapabilities(**{k: v for k, v in fields.items() if k in known})


# -- the older hooks, answered from the newer ones ------------------------------


class _LegacyKVPoolHooks:
    """0.5.21 asks per kind, and builds what it gets (None would crash)."""

    def _legacy_kv_pool(self, kind):
        cls = self.get_kv_pool_cls(kind=kind)
        if cls is None:
            raise NotImplementedError(f"kunlun-triton has no {kind.upper()} KV pool (SGLang {current_api().version})")
        return cls

    def get_mha_kv_pool_cls(self):
        return self._legacy_kv_pool("mha")

    def get_mla_kv_pool_cls(self):
        return self._legacy_kv_pool("mla")

    def get_dsa_kv_pool_cls(self):
        return self._legacy_kv_pool("dsa")


class _LegacyCapabilityHooks:
    """0.5.21 asks methods where 0.5.22+ reads ``capabilities``."""

    def support_cuda_graph(self) -> bool:
        return self.capabilities.graph_capture

    def support_piecewise_cuda_graph(self) -> bool:
        return self.capabilities.piecewise_graph


class _AllocatorNeverNone:
    """0.5.21 constructs the class it is given: SGLang's own when we decline."""

    def get_paged_allocator_cls(self):
        cls = super().get_paged_allocator_cls()
        if cls is None:
            from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator

            cls = PagedTokenToKVPoolAllocator
        return cls


def platform_compat(api: SGLangAPI | None = None) -> type:
    """A mixin (placed before ``SRTPlatform`` in the bases) with the older
    hooks `api`'s SGLang calls; an empty class on 0.5.23."""
    api = api or current_api()
    bases = []
    if not api.kv_pool_by_kind:
        bases.append(_LegacyKVPoolHooks)
    if not api.capabilities:
        bases.append(_LegacyCapabilityHooks)
    if not api.allocator_may_be_none:
        bases.append(_AllocatorNeverNone)
    return type(f"SGLangCompat_{api.version.replace('.', '_')}", (*bases, object), {})

