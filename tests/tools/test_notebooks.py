"""The notebooks run top to bottom (the interpreter on a CPU-only machine)
and are committed without outputs. Each notebook asserts its own results
against plain-torch oracles, so a wrong kernel fails its cell."""

from __future__ import annotations

from pathlib import Path

import nbclient
import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def test_the_three_notebooks_are_there():
    assert [p.name for p in NOTEBOOKS] == ["01_quickstart.ipynb", "02_paged_attention.ipynb", "03_sampling.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs(path):
    book = nbformat.read(path, as_version=4)
    nbformat.validate(book)
    for cell in book.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: clear outputs before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_runs_top_to_bottom(path):
    book = nbformat.read(path, as_version=4)
    # "python3" resolves to ipykernel's native spec, i.e. this interpreter, and
    # the kernel inherits this environment (TRITON_INTERPRET on CPU machines)
    client = nbclient.NotebookClient(
        book,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    outputs = [o for c in book.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    if "quickstart" in path.stem:
        text = "".join(o.get("text", "") for o in outputs)
        assert "checks ok" in text
