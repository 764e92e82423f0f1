"""The tokenizer and chat template of a GGUF file, as tokenizer.json and
tokenizer_config.json, through transformers' GGUF tokenizer converter (which
knows the llama/gpt2 vocabularies llama.cpp stores)."""

from __future__ import annotations

from pathlib import Path

from ..checkpoint_files import ConvertError, first_line


def write_tokenizer(src: Path, work: Path) -> str:
    """Writes the tokenizer files into `work`; returns the transformers version that wrote them."""
    try:
        import transformers
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise ConvertError(
            "convert-weights --from-gguf needs transformers for the tokenizer: pip install transformers"
        ) from exc
    try:
        tok = AutoTokenizer.from_pretrained(str(src.resolve().parent), gguf_file=src.name)
    except Exception as exc:
        raise ConvertError(f"{src}: its tokenizer cannot be converted ({first_line(exc)})") from None
    tok.save_pretrained(str(work))
    return transformers.__version__
