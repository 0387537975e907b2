"""SearchEngine through the worker pool == in-process, across index edits, forgets, forced
reindexes (file swap) and killed workers; and no generation lease ever leaks."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from memory_core.config import load_config
from memory_core.core import MemoryCore
from memory_core.embeddings import register_embedding_provider
from memory_core.search.engine import SearchEngine
from workers.pool import WorkerPool
from workers.retriever import PooledRetriever

NOW_MS = 1_795_000_000_000.0
WORDS = ["rocket", "release", "tea", "green", "jenkins", "actions", "marco", "changelog", "freeze", "oslo"]


class WordEmbedder:
    """Deterministic bag-of-words embedder (exact, repeatable scores)."""

    id = "fake-pool"
    model = "fake-pool-16"
    provider_key = "k"
    dims = 16
    max_input_bytes = 8192

    def vector(self, text: str) -> np.ndarray:
        v = np.zeros(self.dims, dtype=np.float32)
        for w in text.lower().split():
            h = int.from_bytes(hashlib.sha256(w.encode()).digest()[:4], "little")
            v[h % self.dims] += 1.0 if h & 1 << 20 else -1.0
        n = float(np.linalg.norm(v))
        return v / n if n else v

    def embed_batch(self, texts):
        return np.stack([self.vector(t) for t in texts]).astype(np.float32) if texts else np.zeros((0, 16), np.float32)


EMB = WordEmbedder()
register_embedding_provider("fake-pool", lambda cfg: EMB)


def make_core(ws: Path) -> MemoryCore:
    cfg = load_config(None, overrides={
        "provider": "fake-pool", "sources": ["memory", "sessions"], "sessions_dir": str(ws / "sessions"),
        "experimental": {"session_memory": True}, "query": {"min_score": 0.0},
    })
    return MemoryCore(str(ws), config=cfg, embedding_provider=EMB)


def session_line(text: str, i: int) -> str:
    return json.dumps({"type": "message", "id": f"m{i}", "timestamp": "2026-11-01T08:00:00.000Z",
                       "message": {"role": "user", "content": [{"type": "text", "text": text}],
                                   "timestamp": 1793520001000 + i}})


@pytest.fixture(scope="module")
def shared_pool():
    p = WorkerPool("retrieval", 2, idle_timeout_s=None)
    yield p
    p.close(drain=False)


def engines(core: MemoryCore, pool: WorkerPool) -> tuple[SearchEngine, SearchEngine, PooledRetriever]:
    retriever = PooledRetriever(core.db_path, pool)
    inproc = SearchEngine(core.config, core.db_path, EMB, now_ms=lambda: NOW_MS)
    pooled = SearchEngine(core.config, core.db_path, EMB, now_ms=lambda: NOW_MS, retriever=retriever)
    return inproc, pooled, retriever


def test_pooled_search_equals_in_process(workspace, shared_pool):
    (workspace / "MEMORY.md").write_text("- likes green tea\n- never propose jenkins again\n")
    (workspace / "memory" / "rocket.md").write_text("# Rocket\nThe rocket release freezes on Nov 12.\n")
    (workspace / "sessions").mkdir()
    (workspace / "sessions" / "s1.jsonl").write_text(session_line("marco needs the rocket changelog", 1) + "\n")
    with make_core(workspace) as core:
        core.index()
        inproc, pooled, retriever = engines(core, shared_pool)
        for query, kw in [("rocket release", {}), ("green tea", {"lexical_only": True}),
                          ("changelog", {"sources": ["sessions"]}), ("jenkins", {"sources": ["memory", "sessions"]})]:
            a = inproc.explain(query, **kw)
            b = pooled.explain(query, **kw)
            assert b.hits == a.hits and b.mode == a.mode and b.revision == a.revision
            assert b.hits, query
        assert [h.path for h in pooled.search("rocket release", max_results=2)] == ["memory/rocket.md", "sessions/s1.jsonl"]
        assert retriever.leases.count() == 0
        inproc.close()
        pooled.close()


class PooledVsInProcess(RuleBasedStateMachine):
    """index / edit / delete / forget / reindex --force / search / kill a worker."""

    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self.tmp = tempfile.mkdtemp(prefix="h7-sm-")
        self.ws = Path(self.tmp) / "ws"
        (self.ws / "memory").mkdir(parents=True)
        (self.ws / "sessions").mkdir()
        os.environ["MEMORY_CORE_HOME"] = str(Path(self.tmp) / "home")
        (self.ws / "memory" / "a.md").write_text("rocket release freeze tea\n")
        (self.ws / "MEMORY.md").write_text("- green tea\n- jenkins never, actions always\n")
        (self.ws / "sessions" / "s0.jsonl").write_text(session_line("marco wants the rocket changelog", 0) + "\n")
        self.core = make_core(self.ws)
        self.core.index()
        self.inproc, self.pooled, self.retriever = engines(self.core, POOL)

    @rule(name=st.sampled_from(["a", "b", "c"]), words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=6))
    def edit(self, name, words):
        (self.ws / "memory" / f"{name}.md").write_text(" ".join(words) + "\n")
        self.core.sync()

    @rule(name=st.sampled_from(["a", "b", "c"]))
    def delete(self, name):
        p = self.ws / "memory" / f"{name}.md"
        if p.exists():
            p.unlink()
            self.core.sync()

    @rule(words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=5))
    def add_session(self, words):
        n = len(list((self.ws / "sessions").iterdir()))
        (self.ws / "sessions" / f"s{n}.jsonl").write_text(session_line(" ".join(words), n) + "\n")
        self.core.sync()

    @rule()
    def forget(self):
        files = sorted((self.ws / "sessions").iterdir())
        if files:
            self.core.forget_session(files[0].name)

    @rule()
    def reindex_force(self):
        self.core.index(force=True)

    @rule()
    def kill_worker(self):
        pids = POOL.worker_pids()
        if pids:
            os.kill(pids[0], signal.SIGKILL)
            deadline = time.monotonic() + 5
            while pids[0] in POOL.worker_pids() and time.monotonic() < deadline:
                time.sleep(0.01)

    @rule(query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
          lexical=st.booleans(), sources=st.sampled_from([None, ["memory"], ["sessions"], ["memory", "sessions"]]))
    def search(self, query, lexical, sources):
        q = " ".join(query)
        a = self.inproc.explain(q, lexical_only=lexical, sources=sources)
        b = self.pooled.explain(q, lexical_only=lexical, sources=sources)
        assert (b.mode, b.revision, b.hits) == (a.mode, a.revision, a.hits)
        STATS["searches"] += 1
        STATS["hits"] += len(b.hits)

    @invariant()
    def no_lease_leaks(self):
        assert self.retriever.leases.count() == 0

    def teardown(self):
        self.inproc.close()
        self.pooled.close()
        self.core.close()
        import shutil

        shutil.rmtree(self.tmp, ignore_errors=True)


POOL: WorkerPool
STATS = {"searches": 0, "hits": 0}


def test_state_machine_pooled_equals_in_process(shared_pool, monkeypatch):
    global POOL
    POOL = shared_pool
    monkeypatch.setenv("MEMORY_CORE_HOME", os.environ.get("MEMORY_CORE_HOME", "/tmp"))
    PooledVsInProcess.TestCase.settings = settings(
        max_examples=12, stateful_step_count=15, deadline=None, derandomize=True, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    PooledVsInProcess.TestCase().runTest()
    assert STATS["searches"] >= 5 and STATS["hits"] > 0, STATS
    assert shared_pool.stats["completed"] > 0


def test_index_preparation_through_the_pool_equals_in_process(tmp_path):
    import shutil

    from memory_core.store.writer import IndexWriter  # noqa: F401 - the owner side may import it
    from workers import shared

    examples = Path(__file__).resolve().parent.parent / "examples"
    tables = ("SELECT id, path, source, start_line, end_line, hash, model, text FROM memory_index_chunks ORDER BY id",
              "SELECT * FROM memory_index_chunk_recall_metadata ORDER BY chunk_id",
              "SELECT chunk_id, origin_class, session_kind, supersedes_key FROM memory_index_chunk_provenance ORDER BY chunk_id")
    dumps = []
    for workers in (0, 2):
        ws = tmp_path / f"ws{workers}"
        shutil.copytree(examples / "workspace", ws)
        cfg = load_config(examples / "memory-core.toml", overrides={
            "pool": {"workers": workers}, "store": {"path": str(tmp_path / f"db{workers}.sqlite")}})
        with MemoryCore(str(ws), config=cfg) as core:
            pools = shared.pools_for(cfg)
            if workers:  # running workers take any batch of MIN_ENTRIES_FOR_POOL files or more
                pools["indexing"].prewarm()
            summary = core.index()
            assert (summary.failed, summary.problems) == (0, [])
            dumps.append([[tuple(r) for r in core.writer.conn.execute(sql)] for sql in tables])
            if workers:
                assert pools["indexing"].stats["completed"] >= 4
            else:
                assert pools is None
    assert dumps[0] == dumps[1] and len(dumps[0][0]) > 20


def test_a_cold_indexing_pool_is_started_only_for_enough_files(tmp_path, monkeypatch):
    """A one-shot index of a few files prepares them in-process instead of starting workers."""
    import shutil

    from workers import shared

    examples = Path(__file__).resolve().parent.parent / "examples"
    for threshold, started in ((shared.COLD_POOL_MIN_ENTRIES, False), (10, True)):
        monkeypatch.setattr(shared, "COLD_POOL_MIN_ENTRIES", threshold)
        shared.close_all()
        ws = tmp_path / f"ws{threshold}"
        shutil.copytree(examples / "workspace", ws)  # 19 files
        cfg = load_config(examples / "memory-core.toml", overrides={
            "pool": {"workers": 1}, "store": {"path": str(tmp_path / f"db{threshold}.sqlite")}})
        with MemoryCore(str(ws), config=cfg) as core:
            assert core.index().files == 19
            indexing = shared.pools_for(cfg)["indexing"]
            assert (indexing.stats["started"] > 0, indexing.stats["completed"] >= 4) == (started, started)


def test_shared_pools_follow_pool_workers(workspace):
    (workspace / "MEMORY.md").write_text("- likes green tea\n")
    inproc = MemoryCore(str(workspace), config=load_config(None, overrides={"pool": {"workers": 0}}))
    pooled = MemoryCore(str(workspace), config=load_config(None, overrides={"pool": {"workers": 1, "cursor_ttl_s": 5}}))
    with inproc, pooled:
        assert inproc.retriever is None
        retriever = pooled.retriever
        assert retriever is pooled.retriever and retriever.pool.size == 1
        pooled.index()
        assert [h.path for h in pooled.search("green tea")] == [h.path for h in inproc.search("green tea")] == ["MEMORY.md"]
        assert retriever.leases.count() == 0
