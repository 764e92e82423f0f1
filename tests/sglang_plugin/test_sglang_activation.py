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

    with pytest.raises(UnsupportedSGLangVersion, match=r"supports SGLang 0\.5\.21, 0\.5\.22, 0\.5\.23 .*found 0\.4\.0"):
        check_sglang_version("0.4.0")
    assert check_sglang_version("0.5.23") == "0.5.23"
    assert check_sglang_version("0.5.21") == "0.5.21"


def test_sglang_resolves_the_platform_through_the_entry_point():
    code = """
from sglang.srt.platforms import current_platform
print(type(current_platform).__name__, current_platform.get_device(None), current_platform.is_out_of_tree())
"""
    done = _run(code, SGLANG_PLATFORM="kunlun")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-3:] == ["KunlunDevPlatform", "cpu", "True"]


REGISTER_WITH_OLD_SGLANG = """
import kunlun_triton.sglang_plugin.platform.activation as plugin
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
    assert "refused: kunlun-triton's SGLang plugin supports SGLang 0.5.21, 0.5.22, 0.5.23" in done.stdout
    assert "found 0.4.0" in done.stdout


ALTERNATE = """
import json
from kunlun_triton.sglang_plugin import activate_alternate
print(json.dumps({"cls": activate_alternate()}))
"""


def test_alternate_name_answers_only_when_selected_by_it(tmp_path):
    """Unselected, SGLang activates every entry point: answering under both
    names would be "multiple platform plugins activated"."""
    path = _with_sglang_kunlun(tmp_path, ours_shadow=True, other=False)
    for env, expected in (({}, None), ({"SGLANG_PLATFORM": "kunlun"}, None),
                          ({"SGLANG_PLATFORM": "kunlun_triton"}, ":KunlunDevPlatform")):  # fmt: skip
        done = _run(ALTERNATE, PYTHONPATH=path, **env)
        assert done.returncode == 0, done.stderr[-2000:]
        cls = __import__("json").loads(done.stdout.strip().splitlines()[-1])["cls"]
        assert (cls is None) if expected is None else cls.endswith(expected), (env, cls)


FAKE_PLATFORM = """
from sglang.srt.platforms.device_mixin import PlatformEnum
from sglang.srt.platforms.interface import SRTPlatform


class FakeKunlunPlatform(SRTPlatform):
    _enum = PlatformEnum.OOT
    device_name = "kunlun"
    device_type = "cpu"


def activate():
    return "sglang_kunlun:FakeKunlunPlatform"
"""

RESOLVE = """
import logging, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
from kunlun_triton.sglang_plugin.platform.conflicts import report_platform_conflicts
message = report_platform_conflicts()
from sglang.srt.platforms import current_platform
print(type(current_platform).__name__)
print(message)
"""


def _with_sglang_kunlun(tmp_path, ours_shadow: bool, other: bool = True):
    """A fake sglang-kunlun distribution (its own `kunlun` platform), unless
    not `other`; with `ours_shadow`, kunlun-triton's entry points as
    pyproject.toml declares them (a dist-info found first shadows the
    installed one, whose entry points are those of its last install)."""
    if other:
        info = tmp_path / "sglang_kunlun-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang-kunlun\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text("[sglang.srt.platforms]\nkunlun = sglang_kunlun:activate\n")
        (tmp_path / "sglang_kunlun.py").write_text(FAKE_PLATFORM)
    if ours_shadow:
        from importlib.metadata import version

        v = version("kunlun-triton")
        ours = tmp_path / f"kunlun_triton-{v}.dist-info"
        ours.mkdir()
        (ours / "METADATA").write_text(f"Metadata-Version: 2.1\nName: kunlun-triton\nVersion: {v}\n")
        (ours / "entry_points.txt").write_text(
            "[sglang.srt.platforms]\nkunlun = kunlun_triton.sglang_plugin:activate\n"
            "kunlun_triton = kunlun_triton.sglang_plugin:activate_alternate\n\n"
            "[sglang.srt.plugins]\nkunlun = kunlun_triton.sglang_plugin:register\n"
        )
    return os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)


def test_another_kunlun_plugin_is_reported_with_the_one_sglang_runs(tmp_path):
    """SGLang's own platform resolution is the oracle for which plugin wins."""
    path = _with_sglang_kunlun(tmp_path, ours_shadow=True)
    done = _run(RESOLVE, SGLANG_PLATFORM="kunlun", PYTHONPATH=path)
    assert done.returncode == 0, done.stderr[-3000:]
    resolved, message = done.stdout.strip().splitlines()[-2:]
    winner = "sglang-kunlun" if resolved == "FakeKunlunPlatform" else "kunlun-triton"
    assert resolved in ("FakeKunlunPlatform", "KunlunDevPlatform")
    assert f"SGLANG_PLATFORM=kunlun runs {winner}'s plugin" in message
    assert "SGLANG_PLATFORM=kunlun_triton" in message and "pip uninstall sglang-kunlun" in message
    assert message in done.stderr  # logged, once
    assert done.stderr.count("distributions register the SGLang platform name") == 1

    done = _run(RESOLVE, SGLANG_PLATFORM="kunlun_triton", PYTHONPATH=path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-2] == "KunlunDevPlatform"


PARSE_OUR_BACKENDS = """
from sglang.srt.plugins import _get_excluded_dists, load_plugins
load_plugins()
from sglang.srt.server_args import prepare_server_args
args = prepare_server_args(["--model-path", "unused", "--attention-backend", "kunlun_triton",
                            "--sampling-backend", "kunlun_triton"])
print(sorted(_get_excluded_dists()), args.attention_backend, args.sampling_backend)
"""


@pytest.mark.parametrize("name", ["kunlun", "kunlun_triton"])
def test_our_backend_names_parse_although_sglang_skips_our_general_plugin(tmp_path, name):
    """With SGLANG_PLATFORM set, SGLang skips the general plugins of every
    distribution with a platform entry point under another name: ours, since
    it registers two. The command line must still accept our backends."""
    path = _with_sglang_kunlun(tmp_path, ours_shadow=True)
    done = _run(PARSE_OUR_BACKENDS, SGLANG_PLATFORM=name, PYTHONPATH=path)
    assert done.returncode == 0, done.stderr[-3000:]
    excluded, attention, sampling = done.stdout.strip().splitlines()[-1].rsplit(" ", 2)
    assert "kunlun-triton" in excluded  # SGLang's behaviour this test is about
    assert (attention, sampling) == ("kunlun_triton", "kunlun_triton")
