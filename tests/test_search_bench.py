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
    assert main(["bench", "quality", "--ci", "--no-vectors", "--dataset", "wordnet-100"]) == 1
    err = capsys.readouterr().err
    assert "bench quality needs bm25s" in err and 'pip install ".[bench]"' in err and "Traceback" not in err


def test_the_bench_extra_has_what_benchmarks_need():
    import tomllib

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "pyproject.toml"), "rb") as fh:
        extras = tomllib.load(fh)["project"]["optional-dependencies"]
    names = {req.split(">")[0].split("=")[0].split("[")[0] for req in extras["bench"]}
    local = {req.split(">")[0] for req in extras["local"]}
    assert {"bm25s", "matplotlib"} <= names and local <= names


def test_bench_quality_help_is_plain_and_shows_only_its_own_options(capsys):
    from memory_core.cli import main

    with pytest.raises(SystemExit):
        main(["bench", "quality", "--help"])
    out = capsys.readouterr().out
    assert "``" not in out and "--workspace" not in out and "--agent" not in out and "global options" not in out
    assert out.splitlines()[0].startswith("usage: memory-core bench quality")
    assert "--plot PNG" in out and "--cache-dir DIR" in out


def test_embedding_prints_progress_lines_and_keeps_nothing_without_a_cache_dir(monkeypatch, capsys, tmp_path):
    from memory_core import progress
    from tests.search_fixtures import FakeEmbedder

    monkeypatch.setattr(progress, "LINE_INTERVAL_S", 0.0)  # a line at every step instead of every 3 s
    monkeypatch.chdir(tmp_path)
    vecs = bq.embed_all([f"text {i}" for i in range(150)], FakeEmbedder(dims=8), "t-docs")
    assert vecs.shape == (150, 8) and os.listdir(tmp_path) == []
    err = capsys.readouterr().err.splitlines()
    assert [line.split(",")[0] for line in err[:2]] == [
        "  embedding t-docs: 64/150 texts (42%)", "  embedding t-docs: 128/150 texts (85%)"]
    assert len(err) == 3 and err[2].startswith("  embedding t-docs: 150/150 texts in ")


def test_matplotlib_is_imported_only_when_a_plot_is_drawn():
    import subprocess
    import sys

    code = ("import sys, memory_core.cli, benchmarks.bench_quality, benchmarks.plot; "
            "memory_core.cli.build_parser(); print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_quality_plot_draws_one_bar_per_system_and_data_set(tmp_path):
    pytest.importorskip("matplotlib")
    out = [{"dataset": {"name": n}, "results": {"memory-core keyword-only": {"ndcg@10": v},
                                                 "baseline bm25s": {"ndcg@10": v - 0.1}}}
           for n, v in (("wordnet-100", 0.6), ("lee", 0.7))]
    path = tmp_path / "q.png"
    bq.plot_quality(out, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(not WORDNET, reason="needs Debian's wordnet-base")
@pytest.mark.skipif(bq.find_gensim_wheel() is None, reason="needs the gensim wheel (.ci/install-test-data)")
def test_bench_quality_leaves_no_data_behind(tmp_path, monkeypatch, capsys):
    """Neither the state dir nor the temporary folder keeps anything after a run (Lee, keyword systems)."""
    from memory_core.cli import main

    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    monkeypatch.setenv("MEMORY_CORE_HOME", str(home))
    monkeypatch.setenv("TMPDIR", str(tmp))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    assert main(["bench", "quality", "--no-vectors", "--dataset", "lee"]) == 0
    assert "memory-core keyword-only" in capsys.readouterr().out
    assert (os.listdir(home), os.listdir(tmp)) == ([], [])


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
def test_packed_dataset_keeps_every_entry_and_points_queries_at_their_file():
    docs, queries = bq.build_dataset(20, 200, seed=0)
    packed, pq = bq.pack_dataset(docs, queries, seed=0)
    lines = [line for _, text in packed for line in text.split("\n")]
    assert sorted(lines) == sorted(text for _, text in docs)
    assert all(8 <= text.count("\n") + 1 <= 12 for _, text in packed[:-1])
    files = dict(packed)
    entries = dict(docs)
    assert [q for q, _ in pq] == [q for q, _ in queries]
    assert all(entries[rel] in files[f].split("\n") for (_, rel), (_, f) in zip(queries, pq))
    assert bq.pack_dataset(docs, queries, seed=0) == (packed, pq)


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
    """The CI size (100 queries over 1k entries, seed 0), every system, every target."""
    summary = bq.evaluate(100, 1000, seed=0, workdir=str(tmp_path), with_vectors=True, log=lambda s: None)
    r = {k: v["ndcg@10"] for k, v in summary["results"].items()}
    baseline_rrf = r["baseline RRF(bm25s, faiss)"]
    best_single = max(r["baseline bm25s"], r["baseline faiss exact"])
    for hybrid in ("memory-core hybrid weighted", "memory-core hybrid rrf"):
        assert r[hybrid] >= baseline_rrf and r[hybrid] >= best_single + 0.06, (hybrid, r)
    assert r["memory-core keyword-only"] >= r["baseline bm25s"] - 0.01, r
    assert summary["targets"]["default hybrid (weighted) >= max(keyword-only, vector-only) + 0.01"] is True
    assert summary["targets"]["vectorWeight 0 ranks as keyword-only (queries that differ)"] == 0


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
    share = out["targets"]["pool_scaling_share_of_machine_ceiling (>= 0.9)"]
    assert all(share[k] > 0 for k in ("keyword", "vector", "hybrid")), share
    table = bt.format_table(out)
    assert "pool_scaling_share_of_machine_ceiling" in table
    assert "QPS 1 / 2 workers" in table and "CPU us/query" in table and "machine's ceiling" in table
    floor = out["owner_floor"]
    assert floor["memory_mb"] == 1 and floor["owner_us_registers"] >= 0 and floor["owner_us_memory"] >= 0
    assert "pool round trip, no search" in table


def test_stream_task_keeps_its_worker_busy_with_and_without_memory_traffic():
    from benchmarks.worker_tasks import TASK_MODULES
    from workers.inline import InlinePool

    pool = InlinePool(task_modules=TASK_MODULES)
    for mb in (0, 2):
        assert pool.run("stream", {"cpu_s": 0.005, "mb": mb}) > 0, mb
    from benchmarks import worker_tasks
    assert worker_tasks._streams[2][0].nbytes == 2 << 20  # the MiB it reads, kept for the next task


def test_vector_weight_sets_every_hybrid_row_but_the_sanity_row(capsys):
    p = __import__("argparse").ArgumentParser()
    bq.add_arguments(p)
    assert p.parse_args(["--vector-weight", "0.6"]).vector_weight == 0.6
    with pytest.raises(SystemExit):
        p.parse_args(["--vector-weight", "1.5"])
    assert "--vector-weight takes a number from 0 to 1, got 1.5" in capsys.readouterr().err
    rows = dict(bq.hybrid_systems(0.6))
    weighted = rows[bq.hybrid_name("weighted")]["query"]["hybrid"]
    assert (weighted["vector_weight"], round(weighted["text_weight"], 6)) == (0.6, 0.4)
    assert rows[bq.SANITY]["query"]["hybrid"]["vector_weight"] == 0.0
    assert "vector_weight" not in dict(bq.hybrid_systems())[bq.hybrid_name("weighted")]["query"]["hybrid"]
