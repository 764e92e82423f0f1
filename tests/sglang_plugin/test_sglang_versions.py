"""The version table against the installed SGLang's own classes (the oracle):
whichever release of the window is installed (0.5.23 in the sglang stage,
0.5.21 in the sglang-window stage), the table says what it calls, our
platform answers every hook it calls, and no deprecation warning comes from
SGLang about our platform."""

from __future__ import annotations

import logging
import warnings
from importlib.metadata import version

import pytest

from kunlun_triton.sglang_plugin import UnsupportedSGLangVersion, check_sglang_version
from kunlun_triton.sglang_plugin.platform import versions


@pytest.fixture(scope="module")
def api():
    return versions.current_api()


def test_installed_sglang_is_in_the_window_and_its_table_entry_is_used(api):
    found = version("sglang")
    assert found in versions.SUPPORTED_SGLANG_VERSIONS
    assert api.version == found
    assert check_sglang_version() == found


def test_outside_the_window_is_refused_naming_window_and_version(monkeypatch):
    monkeypatch.delenv("KUNLUN_TRITON_ALLOW_ANY_SGLANG", raising=False)
    for found in ("0.5.20", "0.5.24", "0.4.0"):
        expected = rf"supports SGLang 0\.5\.21, 0\.5\.22, 0\.5\.23 \(the window 0\.5\.21 to 0\.5\.23\), found {found}"
        with pytest.raises(UnsupportedSGLangVersion, match=expected):
            check_sglang_version(found)
    for found in versions.SUPPORTED_SGLANG_VERSIONS:
        assert check_sglang_version(found) == found


def test_table_matches_the_installed_sglang_source(api):
    from sglang.srt.platforms import interface
    from sglang.srt.platforms.interface import SRTPlatform

    assert api.capabilities == hasattr(interface, "PlatformCapabilities")
    assert api.capabilities == hasattr(SRTPlatform, "capabilities")
    assert api.kv_pool_by_kind == hasattr(SRTPlatform, "get_kv_pool_cls")
    assert api.post_load_model == hasattr(SRTPlatform, "post_load_model")
    assert api.group_coordinator_device == hasattr(SRTPlatform, "get_group_coordinator_device")
    # 0.5.21's get_paged_allocator_cls raises in the base (its result is always built);
    # 0.5.22+ returns None for "SGLang's own".
    try:
        base_answer = SRTPlatform.get_paged_allocator_cls(SRTPlatform())
    except NotImplementedError:
        base_answer = NotImplemented
    assert api.allocator_may_be_none == (base_answer is None)


def _platform():
    from kunlun_triton.sglang_plugin.platform.classes import KunlunDevPlatform

    return KunlunDevPlatform()


def test_our_platform_answers_every_hook_this_release_calls(api):
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool

    p = _platform()
    if api.kv_pool_by_kind:
        mha, mla = p.get_kv_pool_cls(kind="mha"), p.get_kv_pool_cls(kind="mla")
    else:
        mha, mla = p.get_mha_kv_pool_cls(), p.get_mla_kv_pool_cls()
    assert issubclass(mha, MHATokenToKVPool) and issubclass(mla, MLATokenToKVPool)
    graph_capture = p.capabilities.graph_capture if api.capabilities else p.support_cuda_graph()
    assert graph_capture is False  # development mode: eager decode
    allocator = p.get_paged_allocator_cls()
    assert allocator is not None or api.allocator_may_be_none


def test_no_sglang_deprecation_warning_about_our_platform(api, caplog):
    """SGLang 0.5.22+ warns (a log record) when a platform overrides the
    per-kind KV pool hooks; Python warnings are collected too."""
    from sglang.srt.platforms.interface import SRTPlatform

    p = _platform()
    with caplog.at_level(logging.WARNING), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for kind in ("mha", "mla"):
            if api.kv_pool_by_kind:
                p.get_kv_pool_cls(kind=kind)
            else:
                getattr(p, f"get_{kind}_kv_pool_cls")()
        p.get_paged_allocator_cls()
    said = [r.getMessage() for r in caplog.records] + [str(w.message) for w in caught]
    assert not [s for s in said if "deprecat" in s.lower()], said

    if api.kv_pool_by_kind:
        # The oracle is live: a platform on the old hook name is warned about.
        class OldStyle(type(p)):
            def get_mha_kv_pool_cls(self):
                return object

            get_kv_pool_cls = SRTPlatform.get_kv_pool_cls

        caplog.clear()
        with caplog.at_level(logging.WARNING):
            OldStyle().get_kv_pool_cls(kind="mha")
        assert any("deprecated" in r.getMessage() for r in caplog.records)
