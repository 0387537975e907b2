"""8 concurrent pooled searchers while a writer republishes 100 times, every 25th a full
swap (slow, CI). The amount of work is a count, not a duration: under load the test takes longer,
it does not do less; MEMORY_CORE_SLOW_REPUBLISHES raises it for a longer soak."""

from __future__ import annotations

import os
import threading
import time

import pytest

from memory_core.search.engine import SearchEngine
from tests.test_pool_search import EMB, NOW_MS, WORDS, make_core, session_line
from workers.pool import WorkerPool
from workers.retriever import PooledRetriever

REPUBLISHES = int(os.environ.get("MEMORY_CORE_SLOW_REPUBLISHES", "100"))


@pytest.mark.slow
@pytest.mark.timeout(max(300, 3 * REPUBLISHES))
def test_concurrent_searchers_while_republishing(workspace):
    (workspace / "sessions").mkdir()
    for i in range(5):
        (workspace / "memory" / f"n{i}.md").write_text(" ".join(WORDS[i:] + WORDS[:i]) + "\n")
    (workspace / "sessions" / "s0.jsonl").write_text(session_line("rocket changelog marco", 0) + "\n")
    pool = WorkerPool("retrieval", 2, idle_timeout_s=None)
    core = make_core(workspace)
    core.index()
    retriever = PooledRetriever(core.db_path, pool, timeout_s=30)
    stop = threading.Event()
    failures: list[str] = []
    counts = [0] * 8
    revisions: set[int] = set()

    def searcher(k: int) -> None:
        eng = SearchEngine(core.config, core.db_path, EMB, now_ms=lambda: NOW_MS, retriever=retriever)
        i = 0
        while not stop.is_set():
            q = f"{WORDS[(k + i) % len(WORDS)]} {WORDS[(k * 3 + i) % len(WORDS)]}"
            try:
                d = eng.explain(q, lexical_only=(i % 3 == 0))
                revisions.add(d.revision)
                counts[k] += 1
            except Exception as exc:  # noqa: BLE001 - every failure is recorded and fails the test
                failures.append(f"{type(exc).__name__}: {exc}")
            i += 1
        eng.close()

    threads = [threading.Thread(target=searcher, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    writer_errors: list[str] = []
    for n in range(1, REPUBLISHES + 1):
        (workspace / "memory" / f"n{n % 5}.md").write_text(" ".join(WORDS[n % 7:]) + f" edit{n}\n")
        try:
            if n % 25 == 0:
                core.index(force=True)  # atomic file swap under the readers
            else:
                core.sync()
        except Exception as exc:  # noqa: BLE001
            writer_errors.append(f"{type(exc).__name__}: {exc}")
        time.sleep(0.02)  # the searchers' turn
    # every searcher got through searches while the writer ran (or, on a starved machine, after)
    while min(counts) == 0 and not failures and all(t.is_alive() for t in threads):
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join(30)
    core.close()
    pool.close()
    assert failures == [], failures[:5]
    assert writer_errors == []
    assert min(counts) > 0 and len(revisions) > 10
    assert retriever.leases.count() == 0
