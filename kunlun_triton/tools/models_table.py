"""The supported-models table (docs/models.md, linked from the README), rendered from the end-to-end matrix's results.

``tests/sglang_plugin/test_sglang_engine_matrix.py`` serves a tiny checkpoint
of each architecture on the kunlun platform and records, per architecture,
what it was compared with, which of our ops ran (the scheduler's dispatch
report) and which options the platform refused at start-up (the errors it
raised). Each row of the README table is `render_row` of such a result:
the test checks its row, and with ``KUNLUN_TRITON_UPDATE_README=1`` writes
it instead. Nothing in the table is typed by hand.
"""

from __future__ import annotations

import re

BEGIN = "<!-- supported-models:begin (generated: KUNLUN_TRITON_UPDATE_README=1 pytest tests/sglang_plugin/test_sglang_engine_matrix.py) -->"  # noqa: E501
END = "<!-- supported-models:end -->"
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
    from kunlun_triton.sglang_plugin.support import UNSUPPORTED

    lines = ["Refused options fail at start-up (before a request is served) with an error naming the model, "
             "the feature and what to do:", ""]  # fmt: skip
    lines += [f"- {entry.key}: {entry.advice}." for entry in UNSUPPORTED]
    lines.append("- expert parallelism / MoE runners other than triton / quantized experts (MoE models): "
                 "use --tp-size, --moe-runner-backend auto, the unquantized checkpoint.")  # fmt: skip
    return "\n".join(lines)


def _section(text: str) -> tuple[int, int]:
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError("docs/models.md has no supported-models section (its BEGIN / END markers)")
    return start + len(BEGIN), end


def table_rows(text: str) -> dict[str, str]:
    """{architecture: row} of the README's table."""
    start, end = _section(text)
    rows = {}
    for line in text[start:end].splitlines():
        m = re.match(r"\| ([A-Za-z0-9_]+) \|", line)
        if m and m.group(1) != "Architecture":
            rows[m.group(1)] = line
    return rows


def render_section(rows: dict[str, str], order: list[str]) -> str:
    body = [rows[arch] for arch in order if arch in rows]
    return "\n" + "\n".join([HEADER, *body, "", render_notes()]) + "\n"


def with_row(text: str, architecture: str, row: str, order: list[str]) -> str:
    """`text` (the README) with `architecture`'s row replaced (or added), rows in `order`."""
    start, end = _section(text)
    rows = {**table_rows(text), architecture: row}
    return text[:start] + render_section(rows, order) + text[end:]


def notes_in(text: str) -> str:
    start, end = _section(text)
    section = text[start:end]
    return section[section.index("Refused options"):].rstrip("\n") if "Refused options" in section else ""
