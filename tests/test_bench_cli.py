"""``memory-core bench NAME --json PATH|-`` for the benchmarks without a test of their own run: small
sizes, through the real CLI; each writes parseable JSON and leaves nothing in the temp folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SMALL = {
    "agents": ["--agents", "3", "--files", "2", "--searches", "5", "--edits", "1", "--restart"],
    "gateway": ["--files", "20", "--samples", "20", "--seconds", "0.5", "--clients", "2"],
    "latency": ["--sizes", "2000", "--queries", "10"],
    "cli": ["--runs", "2"],
    "freshness": ["--edits", "2", "--files", "10", "--debounce-ms", "100", "--skip", "idle", "--skip", "transcript"],
}


def bench(name: str, out: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmp), "MEMORY_CORE_HOME": str(tmp_path / "home"),
           "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "memory_core", "bench", name, *SMALL[name], "--json", out],
                       capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=300, check=False)
    return r, tmp


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SMALL))
def test_bench_writes_json_and_cleans_up(name, tmp_path):
    out = tmp_path / f"{name}.json"
    r, tmp = bench(name, str(out), tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"results written to {out}" in r.stdout
    results = json.loads(out.read_text())
    assert results, "empty results"
    assert list(tmp.iterdir()) == [], "the benchmark left files in the temp folder"
    r, _ = bench(name, "-", tmp_path)  # JSON on stdout instead of the table, progress on stderr
    assert r.returncode == 0, r.stderr
    assert type(json.loads(r.stdout)) is type(results)


def test_gateway_results_time_real_searches(tmp_path):
    """The gateway numbers come from searches that answered: counts and latencies are positive."""
    out = tmp_path / "gw.json"
    r, _ = bench("gateway", str(out), tmp_path)
    assert r.returncode == 0, r.stderr
    g = json.loads(out.read_text())
    assert g["chunks"] > 0 and g["concurrent"]["searches"] > 0
    for key in ("inProcess", "gatewayV1", "gatewayV2", "roundTrip"):
        assert g[key]["n"] == 20 and g[key]["p50Ms"] > 0, (key, g[key])


def test_cli_bench_times_successful_runs_only():
    """bench cli's rows are runs that did their job: a failing command or a missing output is an error."""
    from benchmarks.bench_cli import run_once

    env = dict(os.environ)
    assert run_once([sys.executable, "-c", "print('usage: x')"], env, "usage:") > 0
    with pytest.raises(RuntimeError, match="exit 3"):
        run_once([sys.executable, "-c", "import sys; sys.exit(3)"], env)
    with pytest.raises(RuntimeError, match="failed"):
        run_once([sys.executable, "-c", "print('No matches.')"], env, "memory/")


def test_cli_bench_reports_medians_against_python_startup(tmp_path):
    r, _ = bench("cli", "-", tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    base = out["python -c pass"]["medianS"]
    for row in ("help", "search"):
        assert out[row]["runs"] == 2 and out[row]["ratioToBaseline"] == round(out[row]["medianS"] / base, 2)
        assert out["targets"][row]["ok"] == (out[row]["medianS"] < out["targets"][row]["targetS"])
    assert "target help < 0.3 s" in r.stderr  # the table goes to stderr with --json -
