"""Opening a GGUF file and reading its keys and tensors (through the ``gguf``
package's memory-mapped reader; the dequantization is dequant.py's)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..checkpoint_files import ConvertError, first_line
from .dequant import SUPPORTED, UnsupportedType, dequantize


def gguf_module():
    try:
        import gguf
    except ImportError as exc:
        raise ConvertError(
            "convert-weights --from-gguf needs the gguf package: pip install gguf "
            "(or pip install 'kunlun-triton[tools]')"
        ) from exc
    return gguf


def open_gguf(path) -> object:
    """A ``gguf.GGUFReader`` over `path` (memory-mapped, read only), or a ConvertError."""
    gguf = gguf_module()
    path = Path(path)
    if not path.is_file():
        raise ConvertError(f"--from-gguf {path} is not a file")
    try:
        return gguf.GGUFReader(path, "r")
    except Exception as exc:  # ValueError on a bad magic, struct errors on truncation
        raise ConvertError(f"{path}: not a readable GGUF file ({first_line(exc)})") from None


def field(reader, key, default=None):
    found = reader.fields.get(key)
    return default if found is None else found.contents()


def hf_shape(tensor) -> tuple:
    """GGUF lists dimensions innermost first; numpy / torch outermost first."""
    return tuple(int(n) for n in reversed(tensor.shape))


def check_types(reader) -> None:
    """Every tensor's type one we dequantize, or a ConvertError naming the first that is not."""
    for t in reader.tensors:
        if t.tensor_type.name not in SUPPORTED:
            raise ConvertError(f"GGUF tensor {t.name}: type {t.tensor_type.name} is not supported "
                               f"(supported: {', '.join(SUPPORTED)}); nothing written")


def read_float32(tensor) -> np.ndarray:
    """`tensor` as a new float32 array in numpy's layout (outermost dimension first)."""
    shape = hf_shape(tensor)
    try:
        flat = dequantize(tensor.data, tensor.tensor_type.name, int(np.prod(shape)))
    except UnsupportedType:
        raise ConvertError(f"GGUF tensor {tensor.name}: type {tensor.tensor_type.name} is not supported") from None
    return flat.reshape(shape)
