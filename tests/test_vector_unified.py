"""One in-memory vector search (host_facades.retrieval.vector_state) for in-process and pooled searches:
identical results, exact top-k from the compressed candidate indexes, bounded in-process cache."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.worker_tasks import TASK_MODULES, retrieve
from host_facades.retrieval import vector_cache, vector_search
from host_facades.db.sqlite_read import db_identity, open_readonly, read_snapshot
from host_facades.retrieval.vector_state import VectorState, build_index
from host_facades.db.vectors import encode_vector
from memory_core.config import MemoryCoreConfig
from memory_core.search.engine import SearchEngine
from memory_core.store.reindex import swap_into_place
from tests.search_fixtures import add_chunk, open_db
from workers.pool import WorkerPool
from workers.retriever import PooledRetriever

N_BIG = 24_000  # above vector_state.FP16_MIN_ROWS: the int8 candidate index + exact rescoring
DIMS = 32


def _write_rows(path, mat: np.ndarray, *, sessions_every: int = 0) -> None:
    conn = open_db(path)
    with conn:
        conn.execute("INSERT INTO memory_index_sources(path, source, hash, mtime, size) VALUES ('memory/r.md','memory','h',0,0)")
        conn.execute("INSERT INTO memory_index_sources(path, source, hash, mtime, size)"
                     " VALUES ('sessions/s.jsonl','sessions','h',0,0)")
        rows = []
        for i in range(mat.shape[0]):
            sess = sessions_every and i % sessions_every == 0
            rows.append((f"c{i:05d}", "sessions/s.jsonl" if sess else "memory/r.md", "sessions" if sess else "memory",
                         i + 1, i + 1, "h", "m", f"t{i}", encode_vector(mat[i])))
        conn.executemany("INSERT INTO memory_index_chunks(id, path, source, start_line, end_line, hash, model, text,"
                         " embedding, updated_at) VALUES (?,?,?,?,?,?,?,?,?,0)", rows)
    conn.close()


@pytest.fixture(scope="module")
def big_index(tmp_path_factory):
    rng = np.random.default_rng(2024)
    mat = rng.standard_normal((N_BIG, DIMS)).astype(np.float32)
    path = tmp_path_factory.mktemp("big") / "big.sqlite"
    _write_rows(path, mat, sessions_every=7)
    return str(path), mat, rng.standard_normal((40, DIMS)).astype(np.float32)


def test_in_process_and_pooled_vector_search_return_identical_pairs(big_index):
    path, _mat, queries = big_index
    vector_search.clear_cache()
    pool = WorkerPool("retrieval", 1, idle_timeout_s=None, task_modules=TASK_MODULES)
    try:
        retriever = PooledRetriever(path, pool)
        conn = open_readonly(path)
        for i, q in enumerate(queries):
            sources = [None, ["memory"], ["sessions"]][i % 3]
            with read_snapshot(conn):
                local = vector_search.faiss_knn(conn, q, limit=24, model="m", sources=sources)
                local_np = vector_search.numpy_knn(conn, q, limit=24, model="m", sources=sources)
            op = {"op": "vector", "qvec": q.tobytes(), "model": "m", "limit": 24}
            if sources:
                op["sources"] = sources
            pooled = retrieve(retriever, [op], metadata=None)["results"][0]
            assert [tuple(p) for p in pooled] == local  # same ids, bit-identical scores
            assert local_np == local
        conn.close()
        # through the engine (vector-only hits), in-process vs pooled
        cfg = MemoryCoreConfig(query={"min_score": 0.0, "hybrid": {"enabled": False}})
        inproc, pooled_engine = SearchEngine(cfg, path, None), SearchEngine(cfg, path, None, retriever=retriever)
        for q in queries[:5]:
            a = [(h.id, h.vector_score) for h in inproc.search("x", query_vector=q)]
            b = [(h.id, h.vector_score) for h in pooled_engine.search("x", query_vector=q)]
            assert a == b and len(a) == 6
        inproc.close()
        pooled_engine.close()
    finally:
        pool.close()
    key_kinds = {s.index_kind for s in vector_cache.PROCESS_CACHE._states.values()}
    assert key_kinds == {"compact"}  # from vector_compact.COMPACT_MIN_ROWS rows: int8 codes, rows read back


def _brute_top(mat: np.ndarray, q: np.ndarray, k: int) -> tuple[list[int], np.ndarray]:
    norm = mat.astype(np.float64) / np.linalg.norm(mat.astype(np.float64), axis=1, keepdims=True)
    scores = norm @ (q.astype(np.float64) / np.linalg.norm(q))
    order = np.argsort(-scores, kind="stable")
    return order[:k].tolist(), scores[order]


def test_a_state_from_fp16_min_rows_searches_int8_candidates_and_a_smaller_one_the_flat_scan():
    from host_facades.retrieval.vector_state import FP16_MIN_ROWS

    rng = np.random.default_rng(5)
    mat = rng.standard_normal((FP16_MIN_ROWS, 16)).astype(np.float32)
    mat /= np.linalg.norm(mat, axis=1, keepdims=True)
    kinds = []
    for n in (FP16_MIN_ROWS - 1, FP16_MIN_ROWS):
        index, matrix = build_index(np.ascontiguousarray(mat[:n]))
        state = VectorState(("db", n, "m"), [f"r{i}" for i in range(n)], np.array(["memory"] * n, dtype=object),
                            matrix, index)
        kinds.append(state.index_kind)
        q = rng.standard_normal(16).astype(np.float32)
        exact = VectorState(state.key, state.ids, state.sources, np.ascontiguousarray(mat[:n]), None)
        assert state.search(q, 48) == exact.search(q, 48, exact=True)
    assert kinds == ["flat", "int8"]


def test_the_vector_candidates_benchmark_times_both_kinds_and_compares_their_answers(tmp_path):
    import json

    from benchmarks import vector_candidates

    out = tmp_path / "vc.json"
    assert vector_candidates.main(["--dims", "24", "--rows", "400", "--queries", "20", "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["sameAnswers"] is True and row["rows"] == 400 and row["dims"] == 24
    assert all(row[f"{c} {k}"] > 0 for c in ("hot", "cold") for k in ("flat", "int8", "compact"))


@pytest.mark.parametrize("kind", ["int8", "fp16", "flat"])
def test_candidate_indexes_return_exactly_the_numpy_top_k(kind):
    rng = np.random.default_rng(77)
    n, d, k = 30_000, 48, 10
    mat = rng.standard_normal((n, d)).astype(np.float32)
    normed = np.ascontiguousarray(mat / np.linalg.norm(mat, axis=1, keepdims=True), dtype=np.float32)
    index, matrix = build_index(normed.copy(), kind=kind)
    ids = [f"r{i}" for i in range(n)]
    state = VectorState(("db", 1, "m"), ids, np.array(["memory"] * n, dtype=object), matrix, index)
    assert state.index_kind == kind
    numpy_state = VectorState(("db", 1, "m"), ids, state.sources, normed, None)
    checked = 0
    for q in rng.standard_normal((200, d)).astype(np.float32):
        top, sorted_scores = _brute_top(mat, q, k + 1)
        if sorted_scores[k - 1] - sorted_scores[k] < 1e-6:
            continue  # a near tie at the k-th place: either row is right
        checked += 1
        got = state.search(q, k)
        assert got == numpy_state.search(q, k, exact=True)
        assert [cid for cid, _ in got] == [f"r{i}" for i in top[:k]]
        assert np.allclose([s for _, s in got], sorted_scores[:k], atol=1e-6)
    assert checked >= 190


def test_int8_candidates_widen_until_exact_on_near_duplicates():
    # 400 near-duplicates of one direction: their scores differ by far less than the int8 error
    # bound, so the first candidate set cannot be certified and the search must widen.
    rng = np.random.default_rng(5)
    n, d = 25_000, 32
    base = rng.standard_normal(d)
    mat = rng.standard_normal((n, d))
    mat[:400] = base + rng.standard_normal((400, d)) * 1e-3
    mat = mat.astype(np.float32)
    normed = np.ascontiguousarray(mat / np.linalg.norm(mat, axis=1, keepdims=True), dtype=np.float32)
    index, matrix = build_index(normed.copy(), kind="int8")
    ids = [f"r{i}" for i in range(n)]
    state = VectorState(("db", 1, "m"), ids, np.array(["memory"] * n, dtype=object), matrix, index)
    numpy_state = VectorState(("db", 1, "m"), ids, state.sources, normed, None)
    q = base.astype(np.float32)
    for k in (6, 24, 200):
        assert state.search(q, k) == numpy_state.search(q, k, exact=True)
    assert state.exact_fallbacks > 0


def test_in_process_cache_keeps_only_the_current_generation(tmp_path):
    vector_search.clear_cache()
    path = str(tmp_path / "g.sqlite")
    w = open_db(path)
    add_chunk(w, id="a", path="memory/a.md", text="a", model="m", vector=[1.0, 0.0], vec_table=False)
    db_id = db_identity(path)

    def cached() -> list[tuple]:
        return sorted(k for k in vector_cache.PROCESS_CACHE.keys() if k[0] == db_id)  # noqa: SIM118

    engine = SearchEngine(MemoryCoreConfig(query={"min_score": 0.0}), path, None)
    revisions = []
    for i in range(4):
        hits = engine.search("a", query_vector=[1.0, 0.0])
        revisions.append(engine.explain("a", query_vector=[1.0, 0.0]).revision)
        assert {h.id for h in hits} >= {"a"}
        assert cached() == [(db_id, revisions[-1], "")]  # current generation only
        add_chunk(w, id=f"n{i}", path=f"memory/n{i}.md", text="n", model="m", vector=[0.6, 0.8], vec_table=False)
    assert len(set(revisions)) == 4
    # an older snapshot still searches its own generation, the cache keeps only the newest one
    old = open_readonly(path)
    with read_snapshot(old) as old_rev:
        add_chunk(w, id="late", path="memory/late.md", text="l", model="m", vector=[0.0, 1.0], vec_table=False)
        new = open_readonly(path)
        with read_snapshot(new) as new_rev:
            assert len(vector_search.numpy_knn(new, [0.0, 1.0], limit=50, model=None)) == 6
        old_pairs = vector_search.numpy_knn(old, [0.0, 1.0], limit=50, model=None)  # after the newer search
        assert [cid for cid, _ in old_pairs if cid == "late"] == [] and len(old_pairs) == 5
    assert new_rev > old_rev and cached() == [(db_id, new_rev, "")]
    old.close()
    new.close()
    # a reindex swaps the file: the replaced file's states go
    w.close()
    swapped = str(tmp_path / "g2.sqlite")
    w2 = open_db(swapped)
    add_chunk(w2, id="b", path="memory/b.md", text="b", model="m", vector=[1.0, 0.0], vec_table=False)
    w2.close()
    swap_into_place(swapped, path)  # what an atomic reindex does
    assert [h.id for h in engine.search("b", query_vector=[1.0, 0.0])] == ["b"]
    assert cached() == []
    assert [k[0] for k in vector_cache.PROCESS_CACHE.keys()] == [db_identity(path)]  # noqa: SIM118
    engine.close()

