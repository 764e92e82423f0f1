"""One table over bench result files: per op, how fast our kernel is.

``python -m kunlun_triton.tools.summary OUT.json RESULTS.json [...]`` reads
the ``results.json`` files `kunlun-triton bench --output` writes (one per
preset, say) and prints, per (preset, op), over the op's shapes: our
kernel's GB/s (median and best), its fraction of the card's peak (median),
and the median ratio of the torch reference's time (and SGLang's kernel's,
where it ran) to ours, so > 1 means ours is faster. ``OUT.json`` gets the
same numbers as JSON, with each file's run metadata.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def _median(values):
    values = [v for v in values if isinstance(v, (int, float))]
    return statistics.median(values) if values else None


def summarize(files) -> tuple[str, dict]:
    """(the text table, {"ops": [...], "meta": [...]}) over bench result files."""
    ops, metas = [], []
    for path in files:
        data = json.loads(Path(path).read_text())
        meta = data.get("meta", {})
        metas.append(meta)
        by_op: dict[tuple, list] = {}
        for row in data.get("results", []):
            if row.get("impl") in ("triton", "kunlun_triton"):
                by_op.setdefault((row.get("family"), row.get("op")), []).append(row)
        for (family, op), rows in by_op.items():
            gbps = [r.get("gbps") for r in rows]
            ops.append({
                "preset": meta.get("preset"), "family": family, "op": op, "shapes": len(rows),
                "errors": sum(1 for r in rows if r.get("error")),
                "gbps_median": _median(gbps), "gbps_best": max((g for g in gbps if g), default=None),
                "peak_fraction_median": _median(r.get("peak_fraction") for r in rows),
                "vs_torch_median": _median(r.get("speedup_vs_torch") for r in rows),
                "vs_sglang_median": _median(r.get("speedup_vs_sglang") for r in rows),
            })  # fmt: skip
    return _table(ops, metas), {"meta": metas, "ops": ops}


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _table(ops, metas) -> str:
    device = next((m.get("device") for m in metas if m.get("device")), "?")
    peak = next((m.get("peak_gbps") for m in metas if m.get("peak_gbps")), None)
    lines = [f"device: {device}, peak {_fmt(peak, '.0f')} GB/s; ratios are the other impl's time / ours (> 1: ours faster)",
             f"{'preset':<12} {'op':<22} {'shapes':>6} {'GB/s med':>9} {'GB/s best':>9} {'peak':>6} "
             f"{'vs torch':>9} {'vs sglang':>9} {'errors':>6}"]  # fmt: skip
    for o in ops:
        lines.append(
            f"{str(o['preset']):<12} {o['op']:<22} {o['shapes']:>6} {_fmt(o['gbps_median'], '.0f'):>9} "
            f"{_fmt(o['gbps_best'], '.0f'):>9} {_fmt(o['peak_fraction_median'], '.0%'):>6} "
            f"{_fmt(o['vs_torch_median'], '.2f'):>9} {_fmt(o['vs_sglang_median'], '.2f'):>9} {o['errors']:>6}"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        print("usage: python -m kunlun_triton.tools.summary OUT.json RESULTS.json [RESULTS.json ...]", file=sys.stderr)
        return 2
    out, files = argv[0], [f for f in argv[1:] if Path(f).is_file()]
    if not files:
        print("no bench results to summarise", file=sys.stderr)
        return 1
    text, data = summarize(files)
    Path(out).write_text(json.dumps(data, indent=2, default=str) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
