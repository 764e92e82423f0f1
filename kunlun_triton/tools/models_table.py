"""The supported-models table (docs/models.md, linked from the README), rendered from the end-to-end tests' results.

``tests/sglang_plugin/test_sglang_engine_matrix.py`` serves a tiny checkpoint
of each architecture on the kunlun platform and records, per architecture,
what it was compared with, which of our ops ran (the scheduler's dispatch
report) and which options the platform refused at start-up (the errors it
raised). The quantized serving tests record their rows the same way, on the
engines they start anyway (`QUANTIZED`). Each row of the table is
`render_row` of such a result: the test checks its row, and with
``KUNLUN_TRITON_UPDATE_README=1`` writes it instead, leaving the other rows
as they are (so one test file regenerates its rows alone). Nothing in the
table is typed by hand.
"""

from __future__ import annotations

import re

_BEGIN_PREFIX = "<!-- supported-models:begin"
BEGIN = (_BEGIN_PREFIX + " (generated: KUNLUN_TRITON_UPDATE_README=1 pytest "
         "tests/sglang_plugin/test_sglang_engine_matrix.py tests/sglang_plugin/test_sglang_w8a8_int8.py "
         "tests/sglang_plugin/test_sglang_fp8_kv.py tests/sglang_plugin/test_sglang_speculative.py "
         "tests/sglang_plugin/test_sglang_speculative_ngram.py "
         "tests/sglang_plugin/test_sglang_qwen3_next.py) -->")  # fmt: skip
END = "<!-- supported-models:end -->"
# The rows after the matrix's (first cell -> the test that writes it): quantized serving on the
# engines those tests start for their own checks (no engine start of their own).
QUANTIZED = {
    "LlamaForCausalLM, W8A8-INT8": "tests/sglang_plugin/test_sglang_w8a8_int8.py",
    "Qwen3MoeForCausalLM, W8A8-INT8": "tests/sglang_plugin/test_sglang_w8a8_int8.py",
    "LlamaForCausalLM, KV cache fp8_e4m3": "tests/sglang_plugin/test_sglang_fp8_kv.py",
    "GptOssForCausalLM, MXFP4": "tests/sglang_plugin/test_sglang_gpt_oss_mxfp4.py",
    "GptOssForCausalLM, W8A8-INT8": "tests/sglang_plugin/test_sglang_gpt_oss_w8a8.py",
}
# Then speculative decoding's rows, on the engines of the speculative tests.
SPECULATIVE = {
    "LlamaForCausalLM, STANDALONE": "tests/sglang_plugin/test_sglang_speculative.py",
    "LlamaForCausalLM, NGRAM": "tests/sglang_plugin/test_sglang_speculative_ngram.py",
    "Qwen3ForCausalLM, STANDALONE": "tests/sglang_plugin/test_sglang_speculative_ngram.py",
    "Qwen3ForCausalLM, NGRAM": "tests/sglang_plugin/test_sglang_speculative_ngram.py",
}
# Then hybrid linear attention's, on the engines of its own test.
HYBRID = {
    "Qwen3NextForCausalLM": "tests/sglang_plugin/test_sglang_qwen3_next.py",
    "Qwen3_5ForCausalLM": "tests/sglang_plugin/test_sglang_qwen3_next.py",
}
AFTER_MATRIX = {**QUANTIZED, **SPECULATIVE, **HYBRID}
HEADER = (
    "| Architecture | Served end to end | Greedy tokens equal to | Our ops that ran | Refused at start-up |\n"
    "|---|---|---|---|---|"
)


def render_row(result: dict) -> str:
    """One table row: result = {architecture, served, oracle, ops, refused}."""
    cells = [result["architecture"], result["served"], result["oracle"],
             ", ".join(f"`{op}`" for op in result["ops"]), "; ".join(result["refused"]) or "-"]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


def render_notes() -> str:
    """The errors behind the last column (from the platform's own tables)."""
    from kunlun_triton.sglang_plugin.platform.support import UNSUPPORTED

    lines = ["Refused options fail at start-up (before a request is served) with an error naming the model, "
             "the feature and what to do:", ""]  # fmt: skip
    lines += [f"- {entry.key}: {entry.advice}." for entry in UNSUPPORTED]
    lines.append("- MoE all-to-all backends / MoE runners other than triton / quantized experts other than "
                 "W8A8-INT8 and MXFP4 (MoE models): use --moe-a2a-backend none (--ep-size then runs SGLang's "
                 "standard dispatcher), --moe-runner-backend auto, the unquantized, a w8a8_int8 or an MXFP4 "
                 "checkpoint.")  # fmt: skip
    return "\n".join(lines)


def _section(text: str) -> tuple[int, int, int]:
    """(where the BEGIN marker starts, where the table starts, where END starts)."""
    marker, end = text.find(_BEGIN_PREFIX), text.find(END)
    start = text.find("-->", marker) + len("-->") if marker >= 0 else -1
    if marker < 0 or start < len("-->") or end < start:
        raise ValueError("docs/models.md has no supported-models section (its BEGIN / END markers)")
    return marker, start, end


def table_rows(text: str) -> dict[str, str]:
    """{first cell (the architecture, and the quantization for a quantized row): row} of the table."""
    _, start, end = _section(text)
    rows = {}
    for line in text[start:end].splitlines():
        m = re.match(r"\| ([^|]+?) \|", line)
        if m and m.group(1) != "Architecture" and not line.startswith("|---"):
            rows[m.group(1)] = line
    return rows


def render_section(rows: dict[str, str], order: list[str]) -> str:
    body = [rows[arch] for arch in order if arch in rows]
    return "\n" + "\n".join([HEADER, *body, "", render_notes()]) + "\n"


def with_row(text: str, architecture: str, row: str, order: list[str]) -> str:
    """`text` (docs/models.md) with `architecture`'s row replaced (or added), the other rows kept,
    rows in `order`, the BEGIN marker naming every test that writes the table."""
    marker, start, end = _section(text)
    rows = {**table_rows(text), architecture: row}
    return text[:marker] + BEGIN + render_section(rows, order) + text[end:]


def row_order(text: str, architecture: str) -> list[str]:
    """The table's rows in order with `architecture` added: the matrix's rows, then `QUANTIZED`'s,
    `SPECULATIVE`'s and `HYBRID`'s."""
    keys = list(dict.fromkeys([*table_rows(text), architecture]))
    return [k for k in keys if k not in AFTER_MATRIX] + [k for k in AFTER_MATRIX if k in keys]


def notes_in(text: str) -> str:
    _, start, end = _section(text)
    section = text[start:end]
    return section[section.index("Refused options"):].rstrip("\n") if "Refused options" in section else ""
