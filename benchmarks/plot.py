"""Charts of benchmark results (``memory-core bench NAME --plot out.png``).

matplotlib (the ``bench`` extra) is imported only here and only when a chart is drawn, so the CLI
and the engine never load it. :func:`check_plot_available` runs before a benchmark starts, so a
missing matplotlib is a one-line error up front, not after minutes of measuring.

- :func:`latency_distributions`: per panel, the empirical CDF of each series' latencies (log x),
  with p50 and p95 marked: distributions compared by looking, not just two percentiles.
- :func:`grouped_bars`: one group per category (e.g. worker count, metric), one bar per series
  (e.g. search kind, system), value-labelled; throughput per worker count, quality per system.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from typing import Any

from memory_core.errors import ConfigError

PLOT_HELP = "also draw the results as a chart into this PNG (needs matplotlib: pip install 'memory-core[bench]')"


def add_plot_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plot", metavar="PNG", default=None, help=PLOT_HELP)


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise ConfigError("--plot needs matplotlib, which is not installed: "
                          "pip install 'memory-core[bench]' (or pip install matplotlib)") from exc
    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    return plt


def check_plot_available(path: str | None) -> None:
    """Fail before measuring when ``--plot PATH`` cannot be honoured (no matplotlib, no folder)."""
    if not path:
        return
    _pyplot()
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ConfigError(f"--plot {path}: the folder {folder} does not exist; create it or choose another path")


def _save(fig: Any, plt: Any, path: str) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def latency_distributions(panels: Mapping[str, Mapping[str, Sequence[float]]], path: str, *,
                          title: str, unit: str = "ms") -> str:
    """``panels[panel][series] = latencies``: one subplot per panel, one CDF line per series."""
    import numpy as np

    plt = _pyplot()
    n = max(1, len(panels))
    fig, axes = plt.subplots(1, n, figsize=(6.5 * n, 4.5), squeeze=False)
    for ax, (panel, series) in zip(axes[0], panels.items()):
        for name, samples in series.items():
            xs = np.sort(np.asarray(samples, dtype=float))
            if xs.size == 0:
                continue
            ys = np.arange(1, xs.size + 1) / xs.size
            p50, p95 = np.percentile(xs, 50), np.percentile(xs, 95)
            (line,) = ax.step(xs, ys, where="post", label=f"{name} (p50 {p50:.3g}, p95 {p95:.3g} {unit})")
            ax.plot([p50, p95], [0.5, 0.95], "o", color=line.get_color(), markersize=4)
        ax.set_xscale("log")
        ax.set_xlabel(f"latency ({unit}, log scale)")
        ax.set_ylabel("fraction of queries at or below")
        ax.set_ylim(0, 1.02)
        ax.axhline(0.5, color="0.85", linewidth=0.8, zorder=0)
        ax.axhline(0.95, color="0.85", linewidth=0.8, zorder=0)
        ax.grid(True, which="both", color="0.93")
        ax.set_title(panel)
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(title)
    return _save(fig, plt, path)


def grouped_bars(groups: Mapping[str, Mapping[str, float]], path: str, *, title: str, ylabel: str,
                 value_format: str = "{:.3g}") -> str:
    """``groups[category][series] = value``: bars grouped by category, one colour per series."""
    plt = _pyplot()
    categories = list(groups)
    series: list[str] = []
    for values in groups.values():
        series.extend(s for s in values if s not in series)
    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(categories) * max(1, len(series)) ** 0.5 + 3), 4.5))
    for k, name in enumerate(series):
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(categories))]
        ys = [groups[c].get(name, float("nan")) for c in categories]
        bars = ax.bar(xs, ys, width, label=name)
        ax.bar_label(bars, labels=["" if y != y else value_format.format(y) for y in ys], fontsize=7)
    ax.set_xticks(range(len(categories)), categories)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, axis="y", color="0.93")
    ax.set_axisbelow(True)
    if series:
        ax.legend(fontsize=8)
    return _save(fig, plt, path)
