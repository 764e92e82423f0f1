"""The supported-version window without SGLang installed: the table of what
each SGLang release calls what, the compatibility mixin it builds, the
report of another ``kunlun`` platform plugin (a fake distribution on
sys.path), doctor's version lines, and our code's Python 3.10 compatibility
(vermin, a static checker, since no 3.10 interpreter is on these machines)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from kunlun_triton.sglang_plugin.platform import conflicts
from kunlun_triton.sglang_plugin.platform import versions

REPO = Path(__file__).resolve().parents[2]


def test_window_is_the_table_and_pyproject_accepts_exactly_it():
    assert versions.SUPPORTED_SGLANG_VERSIONS == ("0.5.21", "0.5.22", "0.5.23")
    text = (REPO / "pyproject.toml").read_text()
    assert '"sglang>=0.5.21,<=0.5.23"' in text
    for v, api in versions.API.items():
        assert api.version == v


@pytest.mark.parametrize("found,expected", [
    ("2.5.1+xpu", (2, 5, 1)), ("0.5.23", (0, 5, 23)), ("3.10.12", (3, 10, 12)), ("2.9.0rc1", (2, 9, 0)),
    ("0.5.21.post1", (0, 5, 21)),
])  # fmt: skip
def test_version_tuple_reads_vendor_and_pre_release_strings(found, expected):
    assert versions.version_tuple(found) == expected


@pytest.mark.parametrize("component,found,inside", [
    ("sglang", "0.5.21", True), ("sglang", "0.5.23", True), ("sglang", "0.5.20", False),
    ("sglang", "0.5.24", False), ("sglang", "0.5.22.post1", True), ("torch", "2.5.1+xpu", True),
    ("torch", "2.0.1", False), ("triton", "3.0.0", True), ("triton", "2.3.1", False),
    ("python", "3.10.0", True), ("python", "3.9.18", False),
])  # fmt: skip
def test_in_window(component, found, inside):
    assert versions.in_window(component, found) is inside


def test_an_unknown_release_gets_the_hooks_of_the_nearest_one_below():
    assert versions.api_for("0.5.22") is versions.API["0.5.22"]
    assert versions.api_for("0.5.30") is versions.API["0.5.23"]
    assert versions.api_for("0.4.0") is versions.API["0.5.21"]


class _NewStylePlatform:
    """What our platform classes implement: 0.5.23's hooks only."""

    capabilities = versions.LegacyCapabilities(graph_capture=True, piecewise_graph=False)

    def get_kv_pool_cls(self, *, kind):
        return {"mha": "MHAPool", "mla": "MLAPool"}.get(kind)

    def get_paged_allocator_cls(self):
        return "OurAllocator"


def _compose(v):
    return type("P", (versions.platform_compat(versions.API[v]), _NewStylePlatform), {})()


def test_compat_mixin_answers_0_5_21s_hook_names_from_the_new_ones():
    p = _compose("0.5.21")
    assert (p.get_mha_kv_pool_cls(), p.get_mla_kv_pool_cls()) == ("MHAPool", "MLAPool")
    with pytest.raises(NotImplementedError, match="no DSA KV pool"):
        p.get_dsa_kv_pool_cls()  # 0.5.21 would call None(...)
    assert p.support_cuda_graph() is True and p.support_piecewise_cuda_graph() is False
    assert p.get_paged_allocator_cls() == "OurAllocator"


@pytest.mark.parametrize("v", ["0.5.22", "0.5.23"])
def test_compat_mixin_adds_no_legacy_hook_where_sglang_deprecates_them(v):
    # SGLang 0.5.22+ serves a platform overriding get_mha_kv_pool_cls from it,
    # with a deprecation warning: the mixin must not define one there.
    mixin = versions.platform_compat(versions.API[v])
    for name in ("get_mha_kv_pool_cls", "get_mla_kv_pool_cls", "get_dsa_kv_pool_cls", "support_cuda_graph",
                 "support_piecewise_cuda_graph", "get_paged_allocator_cls"):  # fmt: skip
        assert not hasattr(mixin, name), name


# -- another `kunlun` platform plugin --------------------------------------------


def _fake_distribution(root: Path, name: str, entry_points: str) -> Path:
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)
    return root


def test_conflict_names_both_distributions_the_active_one_and_how_to_choose(tmp_path, monkeypatch, caplog):
    ours = [c for c in conflicts.claims() if c.ours]
    assert ours, "kunlun-triton is not installed with its entry points (pip install -e .)"
    assert conflicts.report_platform_conflicts() is None  # alone: nothing to say
    _fake_distribution(tmp_path, "sglang-kunlun", "[sglang.srt.platforms]\nkunlun = sglang_kunlun:activate\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(conflicts, "_reported", False)
    found = conflicts.claims()
    assert [c.distribution for c in found].count("sglang-kunlun") == 1
    with caplog.at_level("WARNING", logger="kunlun_triton.sglang_plugin"):
        message = conflicts.report_platform_conflicts()
        conflicts.report_platform_conflicts()  # said once per process
    assert [r.getMessage() for r in caplog.records] == [message]
    # SGLang keeps the last entry point of a name ({ep.name: ep for ep in ...}).
    winner = {ep.name: ep for ep in conflicts.entry_points(group=conflicts.GROUP)}["kunlun"]
    assert f"SGLANG_PLATFORM=kunlun runs {winner.dist.name}'s plugin ({winner.value})" in message
    assert "sglang-kunlun (sglang_kunlun:activate)" in message
    assert "SGLANG_PLATFORM=kunlun_triton" in message and "pip uninstall sglang-kunlun" in message


def test_alternate_name_is_registered_in_pyproject():
    text = (REPO / "pyproject.toml").read_text()
    section = text.split('[project.entry-points."sglang.srt.platforms"]')[1].split("[")[0]
    assert 'kunlun = "kunlun_triton.sglang_plugin:activate"' in section
    assert 'kunlun_triton = "kunlun_triton.sglang_plugin:activate_alternate"' in section


# -- doctor ------------------------------------------------------------------------


def test_doctor_prints_each_component_and_whether_it_is_in_the_window(monkeypatch):
    import torch
    import triton

    from kunlun_triton.tools.doctor import version_lines

    lines = "\n".join(version_lines())
    assert f"torch:        {torch.__version__} (inside the window >= 2.1)" in lines
    assert f"triton:       {triton.__version__} (inside the window >= 3.0)" in lines
    assert "python:       3." in lines
    real = versions.installed_version
    monkeypatch.setattr(versions, "installed_version", lambda d: "0.5.20" if d == "sglang" else real(d))
    assert "sglang:       0.5.20 (OUTSIDE the window 0.5.21, 0.5.22, 0.5.23)" in "\n".join(version_lines())
    monkeypatch.setattr(versions, "installed_version", lambda d: None if d == "sglang" else real(d))
    assert "sglang:       not installed (the plugin supports 0.5.21, 0.5.22, 0.5.23)" in "\n".join(version_lines())


# -- Python 3.10 ---------------------------------------------------------------------


def _vermin(*paths):
    exe = shutil.which("vermin", path=str(Path(sys.executable).parent)) or shutil.which("vermin")
    assert exe, "vermin is not installed (it is in the test extra: pip install -e '.[test]')"
    cmd = [exe, "--target=3.10-", "--no-tips", "--violations", "--eval-annotations", *map(str, paths)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def test_our_code_runs_on_python_3_10():
    done = _vermin(REPO / "kunlun_triton", REPO / "scripts")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_static_check_catches_code_newer_than_3_10(tmp_path):
    (tmp_path / "new.py").write_text("import tomllib\n\ntry:\n    pass\nexcept* ValueError:\n    pass\n")
    done = _vermin(tmp_path)
    assert done.returncode != 0 and "3.11" in done.stdout, done.stdout
    assert version("vermin")
