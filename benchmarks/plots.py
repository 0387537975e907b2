"""Charts of benchmark results (``--plot PNG``); matplotlib is imported here only, on demand."""

from __future__ import annotations

from collections.abc import Sequence


def grouped_bars(path: str, labels: Sequence[str], series: dict[str, Sequence[float]], *, title: str,
                 ylabel: str) -> None:
    """One horizontal group per label, one bar per series, written to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    n = max(1, len(series))
    height = 0.8 / n
    fig, ax = plt.subplots(figsize=(9, 0.25 * len(labels) * n + 1.5))
    for i, (name, values) in enumerate(series.items()):
        ax.barh([j + i * height for j in range(len(labels))], values, height=height, label=name)
    ax.set_yticks([j + 0.4 - height / 2 for j in range(len(labels))])
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    ax.set_xlabel(ylabel)
    ax.set_title(title)
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=min(4, n))
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
