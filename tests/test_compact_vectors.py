"""Large generations keep int8 candidate codes only (host_facades.retrieval.vector_compact): the same
exact answers as the float32 matrix, rows read back from the search's read transaction, nothing
written beside the database, and the files earlier versions mapped are removed."""

from __future__ import annotations

import os

import apsw
import numpy as np
import pytest

from benchmarks.worker_tasks import retrieve
from host_facades.db.sqlite_read import db_identity, open_readonly, read_snapshot
from host_facades.db.vectors import encode_int8, encode_vector
from host_facades.retrieval import vector_cache, vector_compact
from host_facades.retrieval.vector_compact import COMPACT_MIN_ROWS, CompactState, load_state
from host_facades.retrieval.vector_state import load_vector_state
from memory_core.store import schema
from tests.helpers import runtime_infos
from tests.worker_tasks import TASK_MODULES
from workers.inline import InlinePool
from workers.pool import WorkerPool
from workers.retriever import PooledRetriever

MODEL = "m"
DIMS = 32
CHUNKS = COMPACT_MIN_ROWS // 8  # each with 7 passage vectors: COMPACT_MIN_ROWS rows in all
PASSAGES = 7


def write_index(path: str, *, chunks: int = CHUNKS, near_duplicates: int = 0, noise: float = 1e-3) -> np.ndarray:
    """Chunks (every 5th a session's) with float32 vectors and ``PASSAGES`` int8 passage vectors
    each; the first ``near_duplicates`` chunk vectors one direction plus ``noise``. Returns it."""
    rng = np.random.default_rng(11)
    base = rng.standard_normal(DIMS)
    conn = apsw.Connection(path)
    schema.configure_connection(conn)
    schema.migrate(conn)
    schema.ensure_fts(conn)
    with conn:
        for src in ("memory", "sessions"):
            conn.execute("INSERT INTO memory_index_sources(path, source, hash, mtime, size) VALUES (?,?,'h',0,0)",
                         (f"{src}/a.md", src))
        vecs = rng.standard_normal((chunks, DIMS))
        vecs[:near_duplicates] = base + rng.standard_normal((near_duplicates, DIMS)) * noise
        for i in range(chunks):
            src = "sessions" if i % 5 == 0 else "memory"
            conn.execute("INSERT INTO memory_index_chunks(id, path, source, start_line, end_line, hash, model, text,"
                         " embedding, updated_at) VALUES (?,?,?,1,1,?,?,?,?,0)",
                         (f"c{i:05d}", f"{src}/a.md", src, f"h{i}", MODEL, f"t{i}", encode_vector(vecs[i])))
            rowid = conn.last_insert_rowid()
            conn.executemany("INSERT INTO memory_index_passage_vectors(chunk_rowid, seq, embedding, scale)"
                             " VALUES (?,?,?,?)", [(rowid, s, *encode_int8(rng.standard_normal(DIMS)))
                                                   for s in range(PASSAGES)])
    conn.close()
    return base.astype(np.float32)


@pytest.fixture(scope="module")
def big_db(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("compact") / "main.sqlite")
    write_index(path)
    return path


def states(path: str):
    """(compact state, float32 int8-candidates state, numpy state) of the current generation, and
    the open connection (inside its read transaction) the compact one reads rows from."""
    conn = open_readonly(path, load_vec=False)
    snap = read_snapshot(conn)
    rev = snap.__enter__()
    key = (db_identity(path), rev, MODEL)
    return conn, snap, load_state(conn, key), load_vector_state(conn, key), load_vector_state(conn, key, use_faiss=False)


def test_a_large_generation_keeps_codes_only_and_answers_as_the_float32_matrix(big_db):
    conn, snap, compact, full, exact = states(big_db)
    try:
        assert isinstance(compact, CompactState) and full.index_kind == "int8"
        assert len(compact) == len(full.ids) == CHUNKS * (1 + PASSAGES) and compact.passages == CHUNKS * PASSAGES
        assert compact.nbytes < full.nbytes / 2  # 32 code bytes + 16 of row keys a row, not 128 + 32
        rng = np.random.default_rng(5)
        for i, q in enumerate(rng.standard_normal((30, DIMS)).astype(np.float32)):
            sources = [None, ["memory"], ["sessions"]][i % 3]
            for k in (1, 6, 24):
                got = compact.search(q, k, sources=sources, conn=conn)
                assert got == full.search(q, k, sources=sources) == exact.search(q, k, sources=sources, exact=True)
                assert len(got) == k and len({cid for cid, _ in got}) == k
            assert compact.search(q, 6, conn=conn, exact=True) == exact.search(q, 6, exact=True)
        assert compact.exhaustive_scans == 0  # the numpy backend's float32 rows: read once and kept
        assert compact._exact is not None and compact._exact.matrix.shape == (len(compact), DIMS)
    finally:
        snap.__exit__(None, None, None)
        conn.close()


@pytest.mark.parametrize("noise", [1e-3, 0.0])
def test_near_duplicates_widen_the_candidates_and_past_the_limit_scan_every_row(tmp_path, noise):
    # 2,000 scores closer than the int8 error bound (or equal: ties resolve in storage order) cannot
    # be certified from the first candidates, nor from wider ones before the limit
    path = str(tmp_path / "dup.sqlite")
    q = write_index(path, near_duplicates=2000, noise=noise)
    conn, snap, compact, _full, exact = states(path)
    try:
        for k in (6, 24, 400):
            assert compact.search(q, k, conn=conn) == exact.search(q, k, exact=True)
        assert compact.exact_fallbacks > 0 and compact.exhaustive_scans > 0
    finally:
        snap.__exit__(None, None, None)
        conn.close()


def test_a_compact_state_needs_the_searchs_connection(big_db):
    conn, snap, compact, _full, _exact = states(big_db)
    try:
        with pytest.raises(ValueError, match="pass the search's connection"):
            compact.search(np.ones(DIMS, dtype=np.float32), 5)
    finally:
        snap.__exit__(None, None, None)
        conn.close()


def test_below_the_threshold_a_generation_keeps_its_float32_matrix(tmp_path):
    path = str(tmp_path / "small.sqlite")
    write_index(path, chunks=CHUNKS - 1)
    conn, snap, state, _full, _exact = states(path)
    try:
        assert state.index_kind == "int8" and state.matrix.shape == ((CHUNKS - 1) * (1 + PASSAGES), DIMS)
    finally:
        snap.__exit__(None, None, None)
        conn.close()


def test_pooled_workers_hold_compact_states_and_answer_as_in_process(big_db):
    pool = WorkerPool("retrieval", 2, idle_timeout_s=None, task_modules=TASK_MODULES)
    try:
        pool.prewarm()
        rng = np.random.default_rng(9)
        ops = [{"op": "vector", "qvec": encode_vector(q), "model": MODEL, "limit": 12}
               for q in rng.standard_normal((4, DIMS)).astype(np.float32)]
        payload = {"db_path": big_db, "ops": ops, "metadata": None, "keep": []}
        pooled = [f.result(120) for f in [pool.submit("retrieve", payload) for _ in range(2)]]
        assert {k for info in runtime_infos(pool).values() for k in info["derived_kinds"]} == {"compact"}
        inline = retrieve(PooledRetriever(big_db, InlinePool(task_modules=TASK_MODULES)), ops, metadata=None)
        assert pooled[0]["results"] == pooled[1]["results"] == inline["results"]
        assert all(len(r) == 12 for r in inline["results"])
        assert not os.path.exists(big_db + "-vectors")  # nothing written beside the database
    finally:
        pool.close(drain=False)


def test_the_owner_removes_the_vector_files_an_earlier_version_mapped(tmp_path):
    db = str(tmp_path / "x.sqlite")
    write_index(db, chunks=10)
    folder = db + "-vectors"
    os.makedirs(folder)
    old = ["1-2.r5.0123456789ab.f32", "1-2.r5.0123456789ab.faiss", "1-2.r5.0123456789ab.npz",
           "1-2.r5.0123456789ab.lock", "1-2.r6.0123456789ab.f32.tmp-77"]
    for name in old + ["notes.txt"]:
        open(os.path.join(folder, name), "w").close()
    PooledRetriever(db, InlinePool(task_modules=TASK_MODULES))
    assert os.listdir(folder) == ["notes.txt"]  # not ours: kept, and so is the folder
    os.unlink(os.path.join(folder, "notes.txt"))
    open(os.path.join(folder, old[0]), "w").close()
    assert vector_cache.remove_shared_files(db) == 1 and not os.path.exists(folder)


def test_a_row_gone_from_the_snapshot_is_a_clear_error(big_db, tmp_path):
    conn, snap, compact, _full, _exact = states(big_db)
    snap.__exit__(None, None, None)
    conn.close()
    other = str(tmp_path / "other.sqlite")
    write_index(other, chunks=10)  # a different index: the state's rows are not in it
    conn = open_readonly(other, load_vec=False)
    try:
        with read_snapshot(conn), pytest.raises(RuntimeError, match="read transaction"):
            vector_compact.CompactState.fetch(compact, conn, np.arange(len(compact) - 50, len(compact)))
    finally:
        conn.close()
