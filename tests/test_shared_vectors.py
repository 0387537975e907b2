"""Derived vector state shared by the workers through mapped files (host_facades.retrieval.vector_cache):
built once per generation, mapped by every worker, pruned to the current and leased generations."""

from __future__ import annotations

import os

import numpy as np
import pytest

from benchmarks.bench_throughput import MODEL, build_db
from benchmarks.worker_tasks import retrieve
from host_facades.retrieval import vector_cache
from host_facades.retrieval.vector_cache import DerivedStateCache
from host_facades.db.sqlite_read import db_identity, open_readonly, read_snapshot
from host_facades.db.vectors import encode_vector
from tests.helpers import runtime_infos
from tests.worker_tasks import TASK_MODULES
from workers.inline import InlinePool
from workers.pool import WorkerPool
from workers.retriever import PooledRetriever

ROWS = vector_cache.SHARED_MIN_ROWS  # the smallest generation that is shared
DIMS = 8


@pytest.fixture(scope="module")
def big_db(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("shared") / "main.sqlite")
    return build_db(path, ROWS, DIMS)


@pytest.fixture
def fresh(big_db):
    """The module database with no shared files left by an earlier test."""
    vector_cache.prune_shared(big_db, {})
    return big_db


def vector_op(seed: int, limit: int = 5) -> list[dict]:
    q = np.random.default_rng(seed).standard_normal(DIMS).astype(np.float32)
    return [{"op": "vector", "qvec": encode_vector(q / np.linalg.norm(q)), "model": MODEL, "limit": limit}]


def files(db: str) -> list[str]:
    d = vector_cache.shared_dir(db)
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def test_two_workers_build_a_generation_once_and_map_the_same_files(fresh):
    pool = WorkerPool("retrieval", 2, idle_timeout_s=None, task_modules=TASK_MODULES)
    try:
        pool.prewarm()
        payload = {"db_path": fresh, "ops": vector_op(1), "metadata": None, "keep": []}
        futures = [pool.submit("retrieve", payload) for _ in range(2)]  # both idle workers at once
        pooled = [f.result(60) for f in futures]
        infos = runtime_infos(pool)
        assert len(infos) == 2
        assert sum(i["shared_vector_builds"] for i in infos.values()) == 1
        stem = vector_cache.shared_stem((db_identity(fresh), pooled[0]["revision"], MODEL))
        assert [f for f in files(fresh) if not f.endswith(".lock")] == [stem + ".f32", stem + ".faiss", stem + ".npz"]
        for pid in pool.worker_pids():
            with open(f"/proc/{pid}/maps") as fh:
                maps = fh.read()
            assert stem + ".f32" in maps and stem + ".faiss" in maps
        inline = retrieve(PooledRetriever(fresh, InlinePool(task_modules=TASK_MODULES)), vector_op(1), metadata=None)
        assert pooled[0]["results"] == pooled[1]["results"] == inline["results"]
    finally:
        pool.close(drain=False)


def test_a_mapped_state_searches_exactly_like_a_private_one(fresh):
    conn = open_readonly(fresh, load_vec=False)
    try:
        with read_snapshot(conn) as rev:
            key = (db_identity(fresh), rev, MODEL)
            private = DerivedStateCache().get_or_build(conn, key)
            mapped = DerivedStateCache(shared=True).get_or_build(conn, key)
            again = DerivedStateCache(shared=True).get_or_build(conn, key)  # maps what the first wrote
    finally:
        conn.close()
    assert isinstance(mapped.ids, vector_cache.MappedIds) and isinstance(mapped.matrix, np.memmap)
    assert private.index_kind == mapped.index_kind == "int8"
    assert list(mapped.ids) == list(private.ids) and np.array_equal(mapped.matrix, private.matrix)
    rng = np.random.default_rng(5)
    for _ in range(20):
        q = rng.standard_normal(DIMS).astype(np.float32)
        assert mapped.search(q, 24) == private.search(q, 24) == again.search(q, 24)
        assert mapped.search(q, 5, sources=["memory"]) == private.search(q, 5, sources=["memory"])


def test_incomplete_or_foreign_files_are_rebuilt(fresh):
    conn = open_readonly(fresh, load_vec=False)
    try:
        with read_snapshot(conn) as rev:
            key = (db_identity(fresh), rev, MODEL)
            DerivedStateCache(shared=True).get_or_build(conn, key)
            base = os.path.join(vector_cache.shared_dir(fresh), vector_cache.shared_stem(key))
            with open(base + ".f32", "r+b") as fh:  # a truncated matrix: not the generation's state
                fh.truncate(100)
            assert vector_cache.load_shared(vector_cache.shared_dir(fresh), key) is None
            state = DerivedStateCache(shared=True).get_or_build(conn, key)
            assert len(state.ids) == ROWS and os.path.getsize(base + ".f32") == ROWS * DIMS * 4
    finally:
        conn.close()


def test_a_state_directory_that_cannot_be_made_keeps_the_state_private(fresh):
    directory = vector_cache.shared_dir(fresh)
    if os.path.isdir(directory):
        os.rmdir(directory)
    with open(directory, "w") as fh:  # a file where the directory would go (works as root too)
        fh.write("not a directory")
    try:
        conn = open_readonly(fresh, load_vec=False)
        try:
            with read_snapshot(conn) as rev:
                state = DerivedStateCache(shared=True).get_or_build(conn, (db_identity(fresh), rev, MODEL))
        finally:
            conn.close()
        assert len(state.ids) == ROWS and not isinstance(state.matrix, np.memmap)
    finally:
        os.unlink(directory)


def test_prune_keeps_current_leased_and_newer_generations(tmp_path):
    db = str(tmp_path / "x.sqlite")
    d = vector_cache.shared_dir(db)
    os.makedirs(d)
    names = {}
    for db_id, rev in (("1:2", 5), ("1:2", 6), ("1:2", 7), ("1:2", 9), ("3:4", 1)):
        stem = vector_cache.shared_stem((db_id, rev, MODEL))
        names[(db_id, rev)] = stem
        for ext in (".f32", ".faiss", ".npz", ".lock"):
            open(os.path.join(d, stem + ext), "w").close()
    open(os.path.join(d, names[("1:2", 7)] + ".f32.tmp-1"), "w").close()  # a build in progress
    open(os.path.join(d, "unrelated.txt"), "w").close()
    removed = vector_cache.prune_shared(db, {"1:2": {5, 7}})
    left = set(os.listdir(d))
    assert removed == 8  # revision 6 and the other database's revision 1
    assert not any(n.startswith((names[("1:2", 6)], names[("3:4", 1)])) for n in left)
    assert {names[("1:2", 5)] + ".npz", names[("1:2", 7)] + ".f32.tmp-1", names[("1:2", 9)] + ".npz",
            "unrelated.txt"} <= left


def test_the_owner_removes_files_of_generations_no_search_holds(fresh):
    import apsw

    from memory_core.store import schema

    retriever = PooledRetriever(fresh, InlinePool(task_modules=TASK_MODULES))
    first = retrieve(retriever, vector_op(1), metadata=None)
    old = vector_cache.shared_stem((db_identity(fresh), first["revision"], MODEL))
    assert old + ".npz" in files(fresh)
    conn = apsw.Connection(fresh)  # a publication: one more chunk, a new revision
    schema.configure_connection(conn)
    with conn:
        conn.execute("INSERT INTO memory_index_chunks(id, path, source, start_line, end_line, hash, model, text,"
                     " embedding, updated_at) VALUES ('new', 'memory/new.md', 'memory', 1, 1, 'h', ?, 'fresh', ?, 0)",
                     (MODEL, encode_vector(np.ones(DIMS, dtype=np.float32) / np.sqrt(DIMS))))
    conn.close()
    second = retrieve(retriever, vector_op(1), metadata=None)
    assert second["revision"] > first["revision"]
    new = vector_cache.shared_stem((db_identity(fresh), second["revision"], MODEL))
    left = files(fresh)
    assert new + ".npz" in left and not any(n.startswith(old) for n in left)
