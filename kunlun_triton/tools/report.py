"""Bench results out: a text table, JSON, CSV, a PNG plot, and a progress bar.

Rows are flat dicts, one per (case, impl), as `bench.run_bench` returns
them. Every writer takes the rows as they are, so a family may add any param.
"""

from __future__ import annotations

import csv
import json
import math
import sys
import time
from collections import defaultdict
from pathlib import Path

# Columns the text table leaves out (they are in JSON and CSV).
TABLE_HIDDEN = ("x_axis", "error_detail")


def columns_of(rows: list[dict], hidden=()) -> list[str]:
    return [c for c in dict.fromkeys(k for r in rows for k in r) if c not in hidden]


def _cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return f"{v:.3g}" if abs(v) < 1e4 else f"{v:.0f}"
    return str(v)


def text_table(rows: list[dict], hidden=TABLE_HIDDEN) -> str:
    """One aligned block per (family, op), so each block has its own columns."""
    if not rows:
        return "(no results)"
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r.get("family"), r.get("op"))].append(r)
    blocks = []
    for group in groups.values():
        columns = columns_of(group, hidden)
        table = [[_cell(r.get(c)) for c in columns] for r in group]
        widths = [max(len(c), *(len(t[i]) for t in table)) for i, c in enumerate(columns)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()]
        lines += ["  ".join(v.ljust(w) for v, w in zip(t, widths)).rstrip() for t in table]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def write_json(rows: list[dict], path, meta: dict | None = None) -> Path:
    path = Path(path)
    path.write_text(json.dumps({"meta": meta or {}, "results": rows}, indent=2, default=str) + "\n")
    return path


def write_csv(rows: list[dict], path) -> Path:
    path = Path(path)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns_of(rows), extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in r.items()})
    return path


def _metric(rows: list[dict], metric: str) -> tuple[str, str]:
    """(row key, axis label) for `metric` in auto | time | gbps."""
    if metric == "auto":
        metric = "gbps" if any(r.get("gbps") for r in rows) else "time"
    if metric == "gbps":
        return "gbps", "GB/s (higher is better)"
    if metric == "time":
        return "time_us", "time per call, us (lower is better)"
    raise ValueError(f"metric {metric!r}: expected auto, time or gbps")


# Row keys that are results, not params of the case.
_RESULT_KEYS = {"family", "op", "impl", "time_us", "gbps", "peak_fraction", "clock", "x_axis", "error", "error_detail",
                "tflops"}


def plot_series(rows: list[dict], metric: str = "auto") -> dict:
    """``{(family, op, x_axis): {label: [(x, y), ...]}}``: what `plot` draws.

    One panel per op and x axis; one line per impl and per combination of
    the other params that vary within the panel (e.g. dtype)."""
    panels: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        x_axis = r.get("x_axis")
        if x_axis and x_axis in r and r.get("time_us") is not None:
            panels[(r["family"], r["op"], x_axis)].append(r)
    out = {}
    for key, group in panels.items():
        y_key, _ = _metric(group, metric)
        params = [
            c for c in columns_of(group)
            if c not in _RESULT_KEYS and c != key[2] and not c.startswith("speedup_vs_")
        ]
        varying = [c for c in params if len({str(r.get(c)) for r in group}) > 1]
        series: dict[str, list] = defaultdict(list)
        for r in group:
            label = " ".join([str(r["impl"])] + [f"{c}={r.get(c)}" for c in varying])
            if r.get(y_key) is not None:
                series[label].append((r[key[2]], r[y_key]))
        out[key] = {label: sorted(points) for label, points in series.items()}
    return out


def plot(rows: list[dict], path, metric: str = "auto", title: str = "") -> Path | None:
    """A PNG with one panel per (op, x axis); None when no case names an x axis."""
    import matplotlib

    matplotlib.use("Agg")  # no display; works headless and in CI
    import matplotlib.pyplot as plt

    panels = plot_series(rows, metric)
    if not panels:
        return None
    cols = min(3, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5.5 * cols, 4 * nrows), squeeze=False)
    for ax, ((family, op, x_axis), series) in zip(axes.flat, panels.items()):
        group = [r for r in rows if r.get("family") == family and r.get("op") == op]
        _, y_label = _metric(group, metric)
        # same color for the same params, one line style per impl
        impls = list(dict.fromkeys(label.split(" ", 1)[0] for label in series))
        rests = list(dict.fromkeys(label.partition(" ")[2] for label in series))
        for label, points in series.items():
            impl, _, rest = label.partition(" ")
            xs, ys = zip(*points)
            style = impls.index(impl) % 4
            ax.plot(
                xs, ys, label=label,
                color=f"C{rests.index(rest) % 10}",
                linestyle=("-", "--", ":", "-.")[style],
                marker=("o", "s", "^", "D")[style],
            )
        ys_all = [y for pts in series.values() for _, y in pts if y and y > 0]
        if ys_all and max(ys_all) >= 50 * min(ys_all):  # e.g. interpreter vs torch
            ax.set_yscale("log")
        xs_all = [x for pts in series.values() for x, _ in pts]
        if all(isinstance(x, (int, float)) and x > 0 for x in xs_all) and max(xs_all) >= 8 * min(xs_all):
            ax.set_xscale("log", base=2)
        ax.set_title(f"{family}.{op}")
        ax.set_xlabel(x_axis)
        ax.set_ylabel(y_label)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_outputs(rows: list[dict], directory, meta: dict | None = None, metric: str = "auto") -> dict:
    """results.json, results.csv and plot.png (when there is something to
    plot) in `directory`, created if needed; returns ``{kind: path}``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = {
        "json": write_json(rows, directory / "results.json", meta),
        "csv": write_csv(rows, directory / "results.csv"),
    }
    title = " ".join(str(v) for k, v in (meta or {}).items() if k in ("device", "target", "preset"))
    png = plot(rows, directory / "plot.png", metric, title)
    if png:
        written["png"] = png
    return written


class ProgressBar:
    """``[#####.....] 12/40 norm.rms_norm {...}`` on stderr.

    On a terminal one line is redrawn; elsewhere (CI logs) each step is its
    own line, so nothing is lost in a log file."""

    def __init__(self, total: int, stream=None, width: int = 24):
        self.total, self.width = total, width
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.start = time.perf_counter()

    def update(self, done: int, label: str = "") -> None:
        filled = int(self.width * done / self.total) if self.total else self.width
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = time.perf_counter() - self.start
        line = f"[{bar}] {done}/{self.total} {elapsed:5.1f}s {label}"
        if self.tty:
            self.stream.write("\r\033[K" + line[:160])
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
