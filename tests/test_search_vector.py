"""Spec §11.2 case 18 (cosine fallback, KNN cap) and the three vector backends agreeing."""

from __future__ import annotations

import apsw
import numpy as np
import pytest

from host_facades.retrieval import vector_search
from host_facades.db.sqlite_read import open_readonly, read_snapshot
from host_facades.db.vectors import encode_vector
from memory_core.config import MemoryCoreConfig
from memory_core.search.engine import SearchEngine
from tests.search_fixtures import FakeEmbedder, add_chunk, build_index, open_db

BACKENDS = ["sqlite-vec", "faiss", "numpy"]


def test_case_18_scan_sees_rows_inserted_between_batches(tmp_path):
    conn = open_db(tmp_path / "s.sqlite", dims=2)
    for i in range(257):
        add_chunk(conn, id=f"base-{i:03d}", path=f"memory/b{i}.md", text="base", model="m", vector=[0.0, 1.0])
    batches = []

    def between(batch_no):
        batches.append(batch_no)
        if batch_no == 1:
            add_chunk(conn, id="winner-A", path="memory/wa.md", text="a", model="m", vector=[1.0, 0.0])
            add_chunk(conn, id="winner-B", path="memory/wb.md", text="b", model="m", vector=[0.9, 0.1])

    hits = vector_search.cosine_scan(conn, [1.0, 0.0], limit=2, model="m", between_batches=between)
    assert [h["id"] for h in hits] == ["winner-A", "winner-B"]
    assert batches[:2] == [1, 2]
    conn.close()


@pytest.mark.parametrize("backend", BACKENDS + ["scan"])
def test_case_18_unit_vector_scores(tmp_path, backend):
    conn = open_db(tmp_path / "u.sqlite", dims=2)
    add_chunk(conn, id="win", path="memory/w.md", text="w", model="m", vector=[1.0, 0.0])
    add_chunk(conn, id="near", path="memory/n.md", text="n", model="m", vector=[0.8, 0.6])
    add_chunk(conn, id="empty", path="memory/e.md", text="e", model="m", vector=None)
    conn.close()
    ro = open_readonly(str(tmp_path / "u.sqlite"))
    with read_snapshot(ro):
        if backend == "scan":
            hits = vector_search.cosine_scan(ro, [1.0, 0.0], limit=5, model="m")
        else:
            hits = vector_search.knn_search(ro, [1.0, 0.0], limit=5, model="m", backend=backend)
    assert [h["id"] for h in hits][:2] == ["win", "near"]
    assert hits[0]["vector_score"] == pytest.approx(1.0, abs=1e-6)
    assert hits[1]["vector_score"] == pytest.approx(0.8, abs=1e-6)
    ro.close()


def test_case_18_knn_cap_falls_back_to_scan(tmp_path):
    conn = open_db(tmp_path / "k.sqlite", dims=2)
    rng = np.random.default_rng(0)
    with conn:
        for i in range(4100):
            v = np.array([1.0, rng.uniform(0, 0.01)], dtype=np.float32)
            conn.execute("INSERT INTO memory_index_chunks(id, path, source, start_line, end_line, hash, model, text,"
                         " embedding, updated_at) VALUES (?,?,?,?,?,?,?,?,?,0)",
                         (f"o{i}", f"memory/o{i}.md", "memory", 1, 1, "h", "other", "o", encode_vector(v)))
            conn.execute("INSERT INTO memory_index_chunks_vec(id, embedding) VALUES (?,?)", (f"o{i}", encode_vector(v)))
    add_chunk(conn, id="t1", path="memory/t1.md", text="t", model="target", vector=[0.6, 0.8])
    add_chunk(conn, id="t2", path="memory/t2.md", text="t", model="target", vector=[0.0, 1.0])
    q = encode_vector([1.0, 0.0])
    with pytest.raises(apsw.SQLError, match="4097"):
        conn.execute("SELECT id FROM memory_index_chunks_vec WHERE embedding MATCH ? AND k = 4097", (q,)).fetchall()
    res = vector_search.sqlite_vec_knn(conn, [1.0, 0.0], limit=2, model="target")
    assert res["fallback_scan_required"] is True and res["k"] == 4096
    hits = vector_search.knn_search(conn, [1.0, 0.0], limit=2, model="target", backend="sqlite-vec")
    assert [h["id"] for h in hits] == ["t1", "t2"]
    assert vector_search.knn_k(6 * 4) == 192 and vector_search.knn_k(10_000) == 4096
    conn.close()


def test_zero_query_vector_skips_vector_search(tmp_path):
    conn = open_db(tmp_path / "z.sqlite", dims=2)
    add_chunk(conn, id="a", path="memory/a.md", text="a", model="m", vector=[1.0, 0.0])
    assert vector_search.knn_search(conn, [0.0, 0.0], limit=3, model="m") == []
    conn.close()


@pytest.fixture(scope="module")
def random_index(tmp_path_factory):
    rng = np.random.default_rng(1234)
    n, dims = 10_000, 16
    mat = rng.standard_normal((n, dims)).astype(np.float32)
    path = tmp_path_factory.mktemp("rand") / "r.sqlite"
    conn = open_db(path, dims=dims)
    with conn:
        conn.execute("INSERT INTO memory_index_sources(path, source, hash, mtime, size) VALUES ('memory/r.md','memory','h',0,0)")
        rows = [(f"c{i:05d}", "memory/r.md", "memory", i + 1, i + 1, "h", "m", f"t{i}", encode_vector(mat[i]))
                for i in range(n)]
        conn.executemany("INSERT INTO memory_index_chunks(id, path, source, start_line, end_line, hash, model, text,"
                         " embedding, updated_at) VALUES (?,?,?,?,?,?,?,?,?,0)", rows)
        conn.executemany("INSERT INTO memory_index_chunks_vec(id, embedding) VALUES (?,?)", [(r[0], r[8]) for r in rows])
    conn.close()
    queries = rng.standard_normal((1000, dims)).astype(np.float32)
    return str(path), mat, queries


def _top10(conn, q, backend):
    return [(h["id"], h["vector_score"]) for h in vector_search.knn_search(conn, q, limit=10, model="m", backend=backend)]


def test_backends_agree_on_top10(random_index):
    path, mat, queries = random_index
    conn = open_readonly(path)
    norm = mat / np.linalg.norm(mat, axis=1, keepdims=True)
    disagreements = 0
    for q in queries:
        exact = norm @ (q / np.linalg.norm(q))
        order = np.argsort(-exact, kind="stable")[:10]
        tenth = exact[order[-1]]
        truth = {f"c{i:05d}" for i in order if exact[i] > tenth + 1e-5}
        results = {b: _top10(conn, q, b) for b in BACKENDS}
        for b, res in results.items():
            ids = {cid for cid, _ in res}
            assert len(res) == 10
            if not truth <= ids:  # ties at the 10th place may swap; anything else is a bug
                disagreements += 1
            assert [s for _, s in res] == pytest.approx(sorted(exact[order].tolist(), reverse=True), abs=1e-5), b
    assert disagreements == 0
    conn.close()


def test_hybrid_engine_with_fake_embedder(tmp_path):
    emb = FakeEmbedder()
    db = build_index(tmp_path / "h.sqlite", [
        {"path": "memory/cats.md", "text": "cats purr and sleep all day"},
        {"path": "memory/dogs.md", "text": "dogs bark at the mail carrier"},
        {"path": "memory/db.md", "text": "postgres vacuum tuning notes"},
    ], embedder=emb)
    for backend in BACKENDS:
        cfg = MemoryCoreConfig(provider="fake", store={"vector": {"backend": backend}})
        engine = SearchEngine(cfg, db, emb)
        details = engine.explain("cats purr")
        assert details.mode == "hybrid"
        assert [h.path for h in details.hits][:1] == ["memory/cats.md"]
        top = details.hits[0]
        assert top.vector_score == pytest.approx(float(emb.vector("cats purr") @ emb.vector("cats purr and sleep all day")), abs=1e-5)
        assert top.citation == "memory/cats.md#L1"
        engine.close()


def test_rrf_fusion_through_the_engine(tmp_path):
    emb = FakeEmbedder()
    db = build_index(tmp_path / "r.sqlite", [
        {"path": "memory/cats.md", "text": "cats purr and sleep all day"},
        {"path": "memory/dogs.md", "text": "dogs bark at the mail carrier"},
    ], embedder=emb)
    cfg = MemoryCoreConfig(provider="fake", query={"hybrid": {"fusion": "rrf", "mmr": {"enabled": False}}})
    engine = SearchEngine(cfg, db, emb)
    hits = engine.search("cats purr", min_score=0.0)
    assert hits[0].path == "memory/cats.md" and hits[0].score == pytest.approx(1.0)
    assert all(h.score <= 1.0 for h in hits)
    engine.close()
