"""What the tests that write docs/models.md's supported-models table share
(imported by name: tests/ is not a package): the refusal checks behind its
last column, the ops a test's requests ran, and checking or writing a row
(``KUNLUN_TRITON_UPDATE_README=1``). The rendering is
`kunlun_triton.tools.models_table`."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from kunlun_triton.tools import models_table

README = Path(__file__).resolve().parents[2] / "docs" / "models.md"  # the supported-models table (README links it)
UPDATE = os.environ.get("KUNLUN_TRITON_UPDATE_README") == "1"


def refusals(path, moe: bool) -> list[str]:
    """The options the platform refuses for this model, by calling its start-up
    checks as ``apply_server_args_defaults`` does (each must raise and name the
    model: its architecture, or `path` where config.json names none)."""
    from kunlun_triton.sglang_plugin.layers import moe as moe_support
    from kunlun_triton.sglang_plugin.platform.support import UNSUPPORTED, UnsupportedFeature, check_support, model_config

    base = dict(model_path=path, speculative_algorithm=None, kv_cache_dtype="auto")
    tries = [("other speculative algorithms", {"speculative_algorithm": "DFLASH"}),
             ("quantized KV cache other than fp8", {"kv_cache_dtype": "mxfp8"})]  # fmt: skip
    assert {key for key, _ in tries} <= {entry.key for entry in UNSUPPORTED}
    names = model_config(path).get("architectures") or [str(path)]
    refused = []
    for key, change in tries:
        with pytest.raises(UnsupportedFeature) as err:
            check_support(SimpleNamespace(**{**base, **change}), ours=True)
        assert names[0] in str(err.value) and "kunlun_triton attention backend" in str(err.value)
        refused.append(key)
    check_support(SimpleNamespace(**base), ours=True)  # the plain options pass
    if moe:
        with pytest.raises(moe_support.UnsupportedMoE, match="--moe-a2a-backend deepep"):
            moe_support.check_server_args(SimpleNamespace(ep_size=2, moe_a2a_backend="deepep", moe_runner_backend="auto"))
        refused.append("MoE all-to-all backends")
    return refused


def op_calls(ops: dict) -> dict[str, int]:
    """{op: calls} of one rank's dispatch report (``engine_dispatch_report(engine)[rank]["ops"]``)."""
    return {name: sum(entry["calls"].values()) for name, entry in ops.items()}


def kernels_since(ops: dict, before: dict[str, int]) -> list[str]:
    """The ops that ran our Triton kernels since `before` (`op_calls` then), sorted: an engine
    shared with other tests lists only what this test's requests ran."""
    return sorted(name for name, entry in ops.items()
                  if entry["impl"] == "triton" and sum(entry["calls"].values()) > before.get(name, 0))  # fmt: skip


def check_or_write_row(result: dict) -> None:
    """Check `result`'s row of the table (write it with KUNLUN_TRITON_UPDATE_README=1; the other rows stay)."""
    row = models_table.render_row(result)
    text = README.read_text()
    key = result["architecture"]
    if UPDATE:
        README.write_text(models_table.with_row(text, key, row, models_table.row_order(text, key)))
        return
    assert models_table.table_rows(text).get(key) == row, (
        f"docs/models.md's supported-models row for {key} is not what this run found; "
        f"rerun with KUNLUN_TRITON_UPDATE_README=1 to write:\n{row}"
    )
