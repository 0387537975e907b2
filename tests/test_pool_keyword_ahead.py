"""A pooled hybrid search runs its keyword stage in a worker while the owner embeds the query (the
``keyword`` task): the search task uses that answer only when it read the same file and
generation, else runs the stage again; a task no worker picked up before the embedding was done is
withdrawn. Every way, the answer is the in-process search's."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from memory_core.config import load_config
from memory_core.core import MemoryCore
from memory_core.embeddings import register_embedding_provider
from memory_core.search.engine import OVERLAPPED, SearchEngine
from tests.helpers import wait_for
from tests.test_pool_search import WordEmbedder
from tests.worker_tasks import TASK_MODULES
from workers.pool import WorkerPool
from workers.retriever import PooledRetriever

NOW_MS = 1_795_000_000_000.0


class GatedEmbedder(WordEmbedder):
    """test_pool_search's bag-of-words vectors; a query waits for ``gate()`` first (when set)."""

    id = "fake-ahead"
    model = "fake-ahead-16"
    gate: Callable[[], None] | None = None

    def embed_queries(self, texts):
        if self.gate is not None:
            self.gate()
        return self.embed_batch(texts)


EMB = GatedEmbedder()
register_embedding_provider("fake-ahead", lambda cfg: EMB)
QUERIES = ["rocket release freeze", "green tea jenkins", "marco changelog rocket", "oslo actions tea"]


@pytest.fixture
def core(workspace):
    (workspace / "MEMORY.md").write_text("- likes green tea\n- never propose jenkins again\n")
    (workspace / "memory" / "rocket.md").write_text("# Rocket\nThe rocket release freezes on Nov 12.\n")
    (workspace / "memory" / "notes.md").write_text("marco owns the changelog\nactions in oslo\n")
    cfg = load_config(None, overrides={"provider": "fake-ahead", "query": {"min_score": 0.0}})
    with MemoryCore(str(workspace), config=cfg, embedding_provider=EMB) as c:
        c.index()
        yield c
    EMB.gate = None


def engines(core: MemoryCore, pool: WorkerPool) -> tuple[SearchEngine, SearchEngine, list, list]:
    """In-process and pooled engines of ``core``; the keyword tasks the pooled one started, and
    the (task, has a ``keyword`` answer) of every task it ran."""
    retriever = PooledRetriever(core.db_path, pool)
    started: list = []
    ran: list = []
    submit, run = retriever.submit_keyword, pool.run

    def submit_keyword(req, **kw):
        started.append(submit(req, **kw))
        return started[-1]

    def spy_run(task, payload=None, **kw):
        ran.append((task, "keyword" in (payload or {})))
        return run(task, payload, **kw)

    retriever.submit_keyword = submit_keyword  # type: ignore[method-assign]
    pool.run = spy_run  # type: ignore[method-assign]
    inproc = SearchEngine(core.config, core.db_path, EMB, now_ms=lambda: NOW_MS)
    pooled = SearchEngine(core.config, core.db_path, EMB, now_ms=lambda: NOW_MS, retriever=retriever)
    return inproc, pooled, started, ran


def same_answer(a, b) -> None:
    assert (b.hits, b.mode, b.revision, list(b.ranked)) == (a.hits, a.mode, a.revision, list(a.ranked))
    assert b.to_dict()["candidates"] == a.to_dict()["candidates"]


def test_the_keyword_stage_run_ahead_is_used(core):
    pool = WorkerPool("retrieval", 2, idle_timeout_s=None)
    try:
        inproc, pooled, started, ran = engines(core, pool)
        # the pooled search's embedding ends after its keyword task (the in-process one starts none)
        EMB.gate = lambda: started and started[-1].future.result(timeout=60)
        for q in QUERIES:
            a, b = inproc.explain(q), pooled.explain(q)
            same_answer(a, b)
            assert b.hits, q
            assert OVERLAPPED in b.params and "keyword" not in b.timings_ms
            assert {"dispatch", "embed", "keyword_wait", "pool"} <= set(b.timings_ms)
            assert sum(v for k, v in b.timings_ms.items() if k != "total") == pytest.approx(b.timings_ms["total"])
        assert pooled.search("tea rocket oslo") == inproc.search("tea rocket oslo")  # without details too
        assert len(started) == 5 and ran == [("search", True)] * 5
        pooled.search("tea rocket oslo")  # its vector is cached now: nothing to overlap
        assert len(started) == 5 and ran[-1] == ("search", False)
        assert pooled.retriever.leases.count() == 0
    finally:
        pool.close(drain=False)


def test_a_revision_change_in_between_reruns_the_keyword_stage(core, workspace):
    pool = WorkerPool("retrieval", 2, idle_timeout_s=None)
    try:
        inproc, pooled, started, ran = engines(core, pool)
        before = core.search_engine.search("zeppelin rocket")
        assert "memory/zeppelin.md" not in [h.path for h in before]

        def write_during_embedding():  # after the keyword task answered, before the search task
            if started and not (workspace / "memory" / "zeppelin.md").exists():
                started[-1].future.result(timeout=60)
                (workspace / "memory" / "zeppelin.md").write_text("the zeppelin rocket lands in oslo\n")
                core.sync()

        EMB.gate = write_during_embedding
        b = pooled.explain("zeppelin rocket")
        assert started[-1].future.result(timeout=0)[1] < b.revision  # the keyword task read the old generation
        assert ran == [("search", True)]
        assert "keyword" in b.timings_ms and OVERLAPPED not in b.params  # the stage ran again
        assert b.hits[0].path == "memory/zeppelin.md"
        same_answer(inproc.explain("zeppelin rocket"), b)
        assert pooled.retriever.leases.count() == 0
    finally:
        pool.close(drain=False)


def test_a_keyword_task_no_worker_picked_up_is_withdrawn(core, tmp_path):
    pool = WorkerPool("retrieval", 1, idle_timeout_s=None, task_modules=TASK_MODULES)
    try:
        inproc, pooled, started, ran = engines(core, pool)
        release = tmp_path / "release"
        pool.prewarm(1)
        blocker = pool.submit("hold_until", {"release": str(release)})
        assert wait_for(lambda: pool.busy_pids())

        def release_after_withdraw():  # the worker stays busy until the keyword task was taken back
            wait_for(lambda: pool.stats["cancelled"] == 1, timeout=60)
            release.write_text("")

        releaser = threading.Thread(target=release_after_withdraw)
        releaser.start()
        b = pooled.explain("rocket release freeze")
        releaser.join()
        assert blocker.result(timeout=60) is True
        assert pool.stats["cancelled"] == 1 and started[-1].future.cancelled()
        assert ran == [("search", False)]
        assert "keyword" in b.timings_ms and OVERLAPPED not in b.params
        same_answer(inproc.explain("rocket release freeze"), b)
        assert pooled.retriever.leases.count() == 0
    finally:
        pool.close(drain=False)


def test_a_search_with_an_embedding_hook_reads_nothing_before_it(core):
    """The provider runtime checks its caller's authority in ``on_embedding``: nothing may read the
    store before that check, so such a search sends no keyword task ahead."""
    pool = WorkerPool("retrieval", 2, idle_timeout_s=None)
    try:
        inproc, pooled, started, ran = engines(core, pool)
        seen = []
        b = pooled.explain("tea rocket oslo", on_embedding=lambda error: seen.append((error, list(ran))))
        assert seen == [(None, [])] and started == [] and ran == [("search", False)]
        same_answer(inproc.explain("tea rocket oslo"), b)
    finally:
        pool.close(drain=False)
