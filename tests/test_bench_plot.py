"""benchmarks.plot: real PNG charts from benchmark samples; a missing matplotlib fails up front."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import plot
from memory_core.errors import ConfigError

pytest.importorskip("matplotlib")
ROOT = Path(__file__).resolve().parent.parent


def ink(path: Path) -> float:
    """Fraction of the image's pixels that are not white (a blank chart has only axes)."""
    import matplotlib.image

    img = matplotlib.image.imread(str(path))
    return float((img[..., :3] < 0.9).any(axis=-1).mean())


def test_latency_distributions_draws_one_cdf_per_series(tmp_path):
    rng = np.random.default_rng(0)
    panels = {"10000 chunks": {"raw FTS5": list(rng.lognormal(0, 0.3, 200)),
                               "memory-core hybrid": list(rng.lognormal(1, 0.3, 200))}}
    one = plot.latency_distributions({"p": {"a": [1.0, 2.0]}}, str(tmp_path / "one.png"), title="t")
    two = plot.latency_distributions(panels, str(tmp_path / "two.png"), title="latency")
    assert Path(two).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert ink(Path(two)) > ink(Path(one))  # two curves and their legend draw more than one short step


def test_grouped_bars_draws_each_value(tmp_path):
    empty = plot.grouped_bars({"keyword": {}}, str(tmp_path / "empty.png"), title="t", ylabel="qps")
    full = plot.grouped_bars({"keyword": {"1 worker": 100.0, "2 workers": 180.0},
                              "vector": {"1 worker": 50.0, "2 workers": 90.0}},
                             str(tmp_path / "full.png"), title="t", ylabel="qps")
    assert ink(Path(full)) > ink(Path(empty)) + 0.02


def test_missing_matplotlib_is_a_one_line_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(ConfigError, match=r"pip install 'memory-core\[bench\]'"):
        plot.check_plot_available("out.png")
    plot.check_plot_available(None)  # no --plot: nothing needed


def test_plot_into_a_missing_folder_fails_before_measuring(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        plot.check_plot_available(str(tmp_path / "nope" / "x.png"))


def test_bench_latency_plot_through_the_cli(tmp_path):
    out = tmp_path / "latency.png"
    env = {**os.environ, "MEMORY_CORE_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "memory_core", "bench", "latency", "--sizes", "1000", "--queries", "10",
                        "--plot", str(out)], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    assert f"chart written to {out}" in r.stdout
    assert ink(out) > 0.02
    r = subprocess.run([sys.executable, "-m", "memory_core", "bench", "latency", "--sizes", "1000",
                        "--plot", str(tmp_path / "missing" / "x.png")], capture_output=True, text=True, env=env,
                       timeout=300, check=False)
    assert r.returncode == 2 and r.stderr.startswith("error: --plot ") and len(r.stderr.splitlines()) == 1


def test_throughput_chart_from_results(tmp_path):
    from benchmarks.bench_throughput import plot as throughput_plot

    qps = {"pool_1": 100.0, "pool_2": 170.0, "independent_1": 110.0, "independent_2": 190.0}
    out = {"chunks": 1000, "dims": 8, "cpu_count": 2, **{k: {"qps": qps} for k in ("keyword", "vector", "hybrid")}}
    assert ink(Path(throughput_plot(out, str(tmp_path / "t.png")))) > 0.05
