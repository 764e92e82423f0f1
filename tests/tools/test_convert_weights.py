"""`kunlun-triton convert-weights` on small checkpoints built here.

The oracle is torch's own cast of the source tensors, read back through
safetensors, and the files as written by hand. Bad checkpoints (escaping
shard paths, truncated or foreign shards, malformed JSON, an output whose
parent is a file, failures part way) must each give one line naming the
file, exit status 1, and leave nothing written anywhere."""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import safetensors.torch as safetensors_torch
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kunlun_triton.cli import main as cli_main
from kunlun_triton.tools import convert_weights

FP16_MAX = 65504.0


def _tensors():
    g = torch.Generator().manual_seed(0)
    big = torch.randn(4, 8, generator=g)
    big[1, 2], big[3, 0] = 1.0e6, -3.0e5  # beyond fp16
    big[0, 0] = float("inf")  # already inf: not an overflow of the conversion
    shard1 = {
        "model.embed_tokens.weight": torch.randn(16, 8, generator=g).to(torch.bfloat16),
        "model.layers.0.mlp.weight": big,
        "model.position_ids": torch.arange(8, dtype=torch.int64),
        "model.layers.0.q_proj.weight_fp8": torch.randn(4, 4, generator=g).to(torch.float8_e4m3fn),
    }
    shard2 = {
        "lm_head.weight": torch.randn(16, 8, generator=g).to(torch.bfloat16),
        "model.norm.weight": torch.ones(8, dtype=torch.float64),
        "model.mask": torch.tensor([True, False]),
    }
    return shard1, shard2


def _write_checkpoint(root, sharded=True):
    root.mkdir()
    shard1, shard2 = _tensors()
    if sharded:
        names = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
        for name, tensors in zip(names, (shard1, shard2)):
            safetensors_torch.save_file(tensors, str(root / name), metadata={"format": "pt"})
        weight_map = {k: names[0] for k in shard1} | {k: names[1] for k in shard2}
        (root / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": 1}, "weight_map": weight_map})
        )
    else:
        safetensors_torch.save_file({**shard1, **shard2}, str(root / "model.safetensors"))
    config = {"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16", "hidden_size": 8,
              "text_config": {"torch_dtype": "bfloat16", "vocab_size": 16}}
    (root / "config.json").write_text(json.dumps(config))
    (root / "tokenizer.json").write_text('{"model": {"type": "BPE"}}')
    (root / "tokenizer_config.json").write_text('{"bos_token": "<s>"}')
    (root / "generation_config.json").write_text('{"temperature": 0.6}')
    (root / "pytorch_model.bin").write_bytes(b"pickled, never copied")
    (root / "original").mkdir()
    return {**shard1, **shard2}


def _read_all(directory):
    out = {}
    for path in sorted(directory.glob("*.safetensors")):
        out.update(safetensors_torch.load_file(str(path)))
    return out


def _expected(name, t, on_overflow="clamp"):
    if t.dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        if on_overflow == "clamp":
            finite = torch.isfinite(t)
            t = torch.where(finite, t.double().clamp(-FP16_MAX, FP16_MAX), t.double())
        return t.to(torch.float16)
    return t


@pytest.mark.parametrize("sharded", [True, False])
def test_converts_floats_keeps_the_rest(tmp_path, sharded, capsys):
    source = _write_checkpoint(tmp_path / "src", sharded)
    before = {p.name: p.read_bytes() for p in (tmp_path / "src").iterdir() if p.is_file()}
    rc = cli_main(["convert-weights", "--model-path", str(tmp_path / "src"), "--output", str(tmp_path / "out"),
                   "--dtype", "fp16", "--quiet"])
    assert rc == 0
    converted = _read_all(tmp_path / "out")
    assert sorted(converted) == sorted(source)
    for name, t in source.items():
        want = _expected(name, t)
        assert converted[name].dtype == want.dtype, name
        assert torch.equal(converted[name].view(torch.uint8), want.view(torch.uint8)) if want.dtype == torch.float8_e4m3fn \
            else torch.equal(converted[name], want), name
    assert converted["model.layers.0.mlp.weight"][1, 2] == FP16_MAX
    assert converted["model.layers.0.mlp.weight"][0, 0] == float("inf")
    out = capsys.readouterr().out
    assert "overflow: model.layers.0.mlp.weight: 2 values" in out

    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["torch_dtype"] == config["dtype"] == "float16"
    assert config["text_config"] == {"torch_dtype": "float16", "vocab_size": 16}
    assert config["architectures"] == ["LlamaForCausalLM"]
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (tmp_path / "out" / name).read_bytes() == before[name]
    assert not (tmp_path / "out" / "pytorch_model.bin").exists()
    if sharded:
        index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
        source_index = json.loads(before["model.safetensors.index.json"])
        assert index["weight_map"] == source_index["weight_map"]
        assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in converted.values())
    # the source is untouched
    assert {p.name: p.read_bytes() for p in (tmp_path / "src").iterdir() if p.is_file()} == before


def test_refuse_on_overflow_writes_nothing(tmp_path, capsys):
    _write_checkpoint(tmp_path / "src")
    rc = convert_weights.main(["--model-path", str(tmp_path / "src"), "--output", str(tmp_path / "out"),
                               "--on-overflow", "refuse", "--quiet"])
    assert rc == 1
    err = capsys.readouterr().err
    assert "model.layers.0.mlp.weight" in err and "nothing written" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # no output, no partial dir


def test_refuses_existing_output_and_the_source_dir(tmp_path, capsys):
    _write_checkpoint(tmp_path / "src")
    (tmp_path / "taken").mkdir()
    args = ["--model-path", str(tmp_path / "src"), "--quiet", "--output"]
    assert convert_weights.main(args + [str(tmp_path / "taken")]) == 1
    assert "already exists" in capsys.readouterr().err
    assert list((tmp_path / "taken").iterdir()) == []
    assert convert_weights.main(args + [str(tmp_path / "src")]) == 1
    assert convert_weights.main(args + [str(tmp_path / "src" / "fp16")]) == 1
    assert "inside the source" in capsys.readouterr().err
    assert not (tmp_path / "src" / "fp16").exists()


def test_missing_shard_and_empty_dir_are_clear_errors(tmp_path, capsys):
    _write_checkpoint(tmp_path / "src")
    (tmp_path / "src" / "model-00002-of-00002.safetensors").unlink()
    assert convert_weights.main(["--model-path", str(tmp_path / "src"), "--output", str(tmp_path / "o1")]) == 1
    assert "model-00002-of-00002.safetensors" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert convert_weights.main(["--model-path", str(tmp_path / "empty"), "--output", str(tmp_path / "o2")]) == 1
    assert "no *.safetensors" in capsys.readouterr().err


def test_without_safetensors_the_error_says_what_to_install(tmp_path, monkeypatch, capsys):
    _write_checkpoint(tmp_path / "src")
    for mod in [m for m in sys.modules if m == "safetensors" or m.startswith("safetensors.")]:
        monkeypatch.setitem(sys.modules, mod, None)
    monkeypatch.setitem(sys.modules, "safetensors", None)
    assert convert_weights.main(["--model-path", str(tmp_path / "src"), "--output", str(tmp_path / "out")]) == 1
    assert "pip install safetensors" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------ bad input
# Every failure: exit status 1, one line on stderr naming the file, nothing
# written anywhere (no output, no partial directory, no parent it created),
# the source and its neighbours untouched.

SHARD2 = "model-00002-of-00002.safetensors"
INDEX = "model.safetensors.index.json"


def _run(src, out, *extra):
    """(exit status, stderr) of convert-weights, in this process."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = convert_weights.main(["--model-path", str(src), "--output", str(out), "--quiet", *extra])
    return rc, err.getvalue()


def _tree(root):
    """Every file under `root` with its bytes and mode (what must not change)."""
    return {str(p.relative_to(root)): (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
            for p in sorted(Path(root).rglob("*")) if p.is_file()}


def _assert_refused(rc, err, root, before, *names):
    assert rc == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for name in names:
        assert name in lines[0], (name, err)
    assert _tree(root) == before  # nothing written, nothing changed
    assert not [p for p in Path(root).iterdir() if p.name.startswith(".") or p.name == "out"]


def _set_index(src, weight_map_edit):
    index = json.loads((src / INDEX).read_text())
    weight_map_edit(index["weight_map"])
    (src / INDEX).write_text(json.dumps(index))


@st.composite
def escaping_entries(draw):
    """A weight_map value that leaves the source directory: ``../`` chains
    (after optional inner components) or an absolute path."""
    inner = draw(st.lists(st.sampled_from(["sub", "."]), max_size=2))
    ups = inner.count("sub") + draw(st.integers(1, 2))
    kind = draw(st.sampled_from(["relative", "absolute"]))
    return kind, inner + [".."] * ups


@settings(max_examples=10, deadline=None)
@given(entry=escaping_entries(), which=st.sampled_from(sorted(_tensors()[1])))
def test_shard_entries_outside_the_source_are_refused(entry, which):
    """Before the fix an entry ``../victim.safetensors`` (or an absolute
    path) had that file, outside both the source and --output, overwritten
    in place with an fp16 copy, exit 0."""
    kind, parts = entry
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        src = root / "a" / "b" / "src"  # deep enough for the ../ steps to stay in root
        src.parent.mkdir(parents=True)
        _write_checkpoint(src)
        (src / "sub" / "sub").mkdir(parents=True)  # the inner components exist
        target = src
        for _ in range(parts.count("..") - parts.count("sub")):
            target = target.parent
        victim = target / "victim.safetensors"
        safetensors_torch.save_file({which: torch.ones(2, 2)}, str(victim))
        value = str(victim) if kind == "absolute" else "/".join(parts + [victim.name])
        _set_index(src, lambda wm: wm.__setitem__(which, value))
        before = _tree(root)
        rc, err = _run(src, root / "out")
        _assert_refused(rc, err, root, before, INDEX, repr(value))


def test_shards_in_a_subdirectory_and_symlinked_shards_convert(tmp_path):
    """What the path check must keep working: an entry naming a file in a
    subdirectory of the source, and shards that are symlinks to blobs
    outside it (a Hugging Face cache snapshot)."""
    src = tmp_path / "snapshot"
    source = _write_checkpoint(src)
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    (src / "shards").mkdir()
    (src / SHARD2).rename(blobs / "abc123")
    blob = (blobs / "abc123").read_bytes()
    (src / "shards" / SHARD2).symlink_to(Path("..") / ".." / "blobs" / "abc123")
    _set_index(src, lambda wm: wm.update({k: f"shards/{SHARD2}" for k, v in list(wm.items()) if v == SHARD2}))
    rc, err = _run(src, tmp_path / "out")
    assert rc == 0, err
    out = tmp_path / "out"
    assert (out / "shards" / SHARD2).is_file() and not (out / "shards" / SHARD2).is_symlink()
    converted = {**safetensors_torch.load_file(str(out / "model-00001-of-00002.safetensors")),
                 **safetensors_torch.load_file(str(out / "shards" / SHARD2))}
    assert sorted(converted) == sorted(source)
    assert converted["lm_head.weight"].dtype == torch.float16
    assert (blobs / "abc123").read_bytes() == blob  # read through the link, never written


@settings(max_examples=8, deadline=None)
@given(fraction=st.floats(0.0, 0.999), sharded=st.booleans())
def test_truncated_shards_are_one_line_errors(fraction, sharded):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _write_checkpoint(root / "src", sharded)
        shard = root / "src" / (SHARD2 if sharded else "model.safetensors")
        data = shard.read_bytes()
        shard.write_bytes(data[: int(len(data) * fraction)])
        before = _tree(root)
        rc, err = _run(root / "src", root / "out")
        _assert_refused(rc, err, root, before, str(shard), "safetensors")


@pytest.mark.parametrize("content", [b"", b"garbage" * 20, b"\xff" * 64])
def test_a_shard_that_is_not_safetensors(tmp_path, content):
    _write_checkpoint(tmp_path / "src")
    (tmp_path / "src" / SHARD2).write_bytes(content)
    before = _tree(tmp_path)
    _assert_refused(*_run(tmp_path / "src", tmp_path / "out"), tmp_path, before, SHARD2)


@pytest.mark.parametrize("name", [INDEX, "config.json"])
@pytest.mark.parametrize("text", ["{", "[1, 2]", "null", b"\xff\xfe{}", '{"weight_map": []}',
                                  '{"weight_map": {}}', '{"weight_map": {"lm_head.weight": 3}}'])
def test_malformed_json_is_refused_before_any_tensor_is_converted(tmp_path, monkeypatch, name, text):
    _write_checkpoint(tmp_path / "src")
    if name == "config.json" and isinstance(text, str) and text.startswith('{"weight_map"'):
        text = "[]"  # valid JSON, not an object
    path = tmp_path / "src" / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    cast = []
    monkeypatch.setattr(convert_weights, "cast_tensor", lambda *a: cast.append(a) or a[1])
    before = _tree(tmp_path)
    _assert_refused(*_run(tmp_path / "src", tmp_path / "out"), tmp_path, before, str(path))
    assert cast == []  # nothing converted before the error


def test_index_naming_a_tensor_its_shard_lacks(tmp_path):
    _write_checkpoint(tmp_path / "src")
    _set_index(tmp_path / "src", lambda wm: wm.__setitem__("model.ghost", SHARD2))
    before = _tree(tmp_path)
    _assert_refused(*_run(tmp_path / "src", tmp_path / "out"), tmp_path, before, "model.ghost", SHARD2)


def test_missing_shard_leaves_nothing(tmp_path):
    _write_checkpoint(tmp_path / "src")
    (tmp_path / "src" / SHARD2).unlink()
    before = _tree(tmp_path)
    _assert_refused(*_run(tmp_path / "src", tmp_path / "out"), tmp_path, before, SHARD2)


def test_output_whose_parent_is_a_file(tmp_path):
    _write_checkpoint(tmp_path / "src")
    (tmp_path / "plain").write_text("a file")
    before = _tree(tmp_path)
    rc, err = _run(tmp_path / "src", tmp_path / "plain" / "deeper" / "out")
    _assert_refused(rc, err, tmp_path, before, str(tmp_path / "plain"), "not a directory")


@pytest.mark.parametrize("failure", ["convert", "write"])
def test_a_run_failing_midway_leaves_no_output_and_no_parents(tmp_path, monkeypatch, failure):
    """A failure after the output's parents were created (a tensor that
    cannot be cast, a full disk): they are removed again."""
    _write_checkpoint(tmp_path / "src")
    if failure == "convert":
        real, calls = convert_weights.cast_tensor, []

        def cast(*args):
            calls.append(1)
            if len(calls) == 3:
                raise convert_weights.ConvertError("model.layers.0.mlp.weight: cannot be cast")
            return real(*args)

        monkeypatch.setattr(convert_weights, "cast_tensor", cast)
    else:
        def full_disk(*args, **kwargs):
            raise OSError(28, "No space left on device", args[1])

        monkeypatch.setattr(safetensors_torch, "save_file", full_disk)
    before = _tree(tmp_path)
    rc, err = _run(tmp_path / "src", tmp_path / "new" / "parents" / "out")
    _assert_refused(rc, err, tmp_path, before, "cannot be cast" if failure == "convert" else "No space left")
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_output_permissions_follow_the_umask(tmp_path, umask):
    _write_checkpoint(tmp_path / "src")
    (tmp_path / "src" / "tokenizer.json").chmod(0o444)  # a source mode is not copied
    old = os.umask(umask)
    try:
        rc, err = _run(tmp_path / "src", tmp_path / "out")
    finally:
        os.umask(old)
    assert rc == 0, err
    out = tmp_path / "out"
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~umask
    for path in out.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path.name


def test_the_command_line_prints_one_line_and_no_traceback(tmp_path):
    _write_checkpoint(tmp_path / "src")
    (tmp_path / "src" / SHARD2).write_bytes(b"not safetensors")
    done = subprocess.run(
        [sys.executable, "-m", "kunlun_triton.cli", "convert-weights", "--model-path", str(tmp_path / "src"),
         "--output", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0 and SHARD2 in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_dangling_shard_without_an_index_fails_the_conversion(tmp_path):
    """Issue 25: without an index, a shard that is a dangling symlink was
    skipped with a "not copied" line and exit 0, the weight missing."""
    _write_checkpoint(tmp_path / "src", sharded=False)
    (tmp_path / "src" / "model-extra.safetensors").symlink_to(tmp_path / "gone.safetensors")
    before = _tree(tmp_path)
    _assert_refused(*_run(tmp_path / "src", tmp_path / "out"), tmp_path, before, "model-extra.safetensors")
