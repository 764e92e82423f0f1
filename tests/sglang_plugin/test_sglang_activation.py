"""Activation rules of the ``sglang.srt.platforms`` entry point, in fresh
processes (the rules read the environment once)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import json
from kunlun_triton.sglang_plugin import activate
import os
print(json.dumps({"cls": activate(), "interp": os.environ.get("TRITON_INTERPRET")}))
"""


def _run(code, **env_changes):
    env = {k: v for k, v in os.environ.items() if k not in ("SGLANG_PLATFORM", "KUNLUN_TRITON_TARGET", "TRITON_INTERPRET")}
    env.update(env_changes)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, cwd="/")
    return done


def _probe(**env):
    import json

    done = _run(PROBE, **env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_plain_machine_without_selection_returns_none():
    result, _ = _probe()
    assert result["cls"] is None


def test_explicit_selection_is_development_mode_on_cpu_and_says_so():
    result, stderr = _probe(SGLANG_PLATFORM="kunlun")
    assert result["cls"].endswith(":KunlunDevPlatform")
    assert result["interp"] == "1"
    assert stderr.count("development mode") == 1


def test_kunlun_card_selects_device_platform():
    result, _ = _probe(KUNLUN_TRITON_TARGET="kunlun")
    assert result["cls"].endswith(":KunlunPlatform")


def test_unsupported_sglang_version_is_a_clear_error():
    from kunlun_triton.sglang_plugin import UnsupportedSGLangVersion, check_sglang_version

    with pytest.raises(UnsupportedSGLangVersion, match=r"supports SGLang 0\.5\.23, found 0\.4\.0"):
        check_sglang_version("0.4.0")
    assert check_sglang_version("0.5.23") == "0.5.23"


def test_sglang_resolves_the_platform_through_the_entry_point():
    code = """
from sglang.srt.platforms import current_platform
print(type(current_platform).__name__, current_platform.get_device(None), current_platform.is_out_of_tree())
"""
    done = _run(code, SGLANG_PLATFORM="kunlun")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-3:] == ["KunlunDevPlatform", "cpu", "True"]


REGISTER_WITH_OLD_SGLANG = """
import kunlun_triton.sglang_plugin as plugin
plugin.sglang_version = lambda: "0.4.0"
try:
    plugin.register()
    print("registered-or-stepped-aside")
except plugin.UnsupportedSGLangVersion as exc:
    print("refused:", exc)
"""


def test_unsupported_sglang_breaks_nothing_unless_our_platform_is_selected():
    """The general plugin runs under every platform: on a machine that does
    not use ours it must not fail SGLang over a version we do not support."""
    done = _run(REGISTER_WITH_OLD_SGLANG)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "registered-or-stepped-aside"
    done = _run(REGISTER_WITH_OLD_SGLANG, SGLANG_PLATFORM="kunlun")
    assert "refused: kunlun-triton's SGLang plugin supports SGLang 0.5.23, found 0.4.0" in done.stdout
