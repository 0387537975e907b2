"""Process-wide pools for MemoryCore (owner side).

``MemoryCore`` searches and index preparation run through two shared pools per pool
configuration (``config.pool``): ``retrieval`` and ``indexing`` (upstream
`memory/manager-cpu-worker-runtime.ts`). ``pool.workers = 0``
means in-process (no pool). Pools are created on first use, shared by every agent/core of the
process (workers reopen databases by path), and closed at interpreter exit or by :func:`close_all`.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

from workers.pool import INDEXING_MAX_PENDING_BYTES, WorkerPool
from workers.retriever import PooledRetriever

# searches are short and uniform: let each retrieval worker hold its next task (workers/pool.py)
RETRIEVAL_PIPELINE_DEPTH = 2

_lock = threading.Lock()
_pools: dict[tuple, dict[str, WorkerPool]] = {}


def _settings(cfg: Any) -> tuple:
    p = cfg.pool
    return (p.resolved_workers(), p.max_pending_tasks, p.max_pending_bytes, p.task_timeout_s, p.idle_timeout_s)


def pools_for(cfg: Any) -> dict[str, WorkerPool] | None:
    """``{"retrieval": pool, "indexing": pool}`` for ``cfg.pool``; None when ``pool.workers == 0``."""
    key = _settings(cfg)
    workers, max_tasks, max_bytes, timeout_s, idle_s = key
    if workers == 0:
        return None
    with _lock:
        pools = _pools.get(key)
        if pools is None:
            pools = {
                "retrieval": WorkerPool("retrieval", workers, max_pending_tasks=max_tasks, max_pending_bytes=max_bytes,
                                        task_timeout_s=timeout_s, idle_timeout_s=idle_s,
                                        pipeline_depth=RETRIEVAL_PIPELINE_DEPTH),
                "indexing": WorkerPool("indexing", workers, max_pending_tasks=max_tasks,
                                       max_pending_bytes=max(max_bytes, INDEXING_MAX_PENDING_BYTES),
                                       task_timeout_s=None, idle_timeout_s=idle_s),
            }
            _pools[key] = pools
        return pools


def make_retriever(cfg: Any, db_path: str) -> PooledRetriever | None:
    """A :class:`PooledRetriever` of ``db_path`` on the shared retrieval pool, or None for in-process
    search (``pool.workers = 0``). The index owner (``MemoryCore.retriever``) keeps the one it gets."""
    pools = pools_for(cfg)
    if pools is None:
        return None
    return PooledRetriever(db_path, pools["retrieval"], timeout_s=cfg.pool.task_timeout_s)


def close_all() -> None:
    """Close every shared pool (tests, shutdown)."""
    with _lock:
        pools = list(_pools.values())
        _pools.clear()
    for group in pools:
        for pool in group.values():
            pool.close(drain=False, timeout_s=2.0)


atexit.register(close_all)


# --- chunk preparation through the indexing pool ---------------------------------------------------

MIN_ENTRIES_FOR_POOL = 4  # below this the hop costs more than it parallelises
# A pool whose workers are not running yet (a one-shot `memory-core index`, or after the idle
# timeout) is started only for this many files: on a small machine its start-up and the owner's
# writing compete for the cores (`memory-core bench cli --index-files` compares both ways).
COLD_POOL_MIN_ENTRIES = 20_000


class PreparedStream:
    """Chunk preparation of ``entries`` in the indexing pool, a bounded window ahead of the consumer.

    ``get(i)`` returns entry ``i``'s chunks (entries are consumed in order). A pool that is
    overloaded, closed or lost the worker falls back to preparing in-process; a chunking failure
    raises ``RuntimeError`` so the indexer records it as that file's problem.
    """

    def __init__(self, pool: WorkerPool, entries: list, cfg: Any, max_input_bytes: int, *, window: int | None = None) -> None:
        self.pool = pool
        self.entries = entries
        self.cfg = cfg
        self.max_input_bytes = max_input_bytes
        self.window = window or max(2, 4 * pool.size)
        self._futs: dict[int, Any] = {}
        self._next = 0

    def _kwargs(self, entry: Any) -> dict:
        # the same arguments as memory_core.indexer.prepare_entry
        return {"source": entry.source, "path": entry.path, "content": entry.content,
                "tokens": self.cfg.chunking.tokens, "overlap": self.cfg.chunking.overlap,
                "mtime_ms": entry.mtime_ms, "max_input_bytes": self.max_input_bytes, "line_map": entry.line_map}

    def get(self, i: int) -> list:
        from memory_core.errors import WorkerError, WorkerOverloaded, WorkerTimeout, WorkerUnavailable

        while self._next < len(self.entries) and self._next <= i + self.window:
            self._futs[self._next] = self.pool.submit("prepare", self._kwargs(self.entries[self._next]))
            self._next += 1
        fut = self._futs.pop(i)
        try:
            return fut.result()
        except (WorkerOverloaded, WorkerUnavailable, WorkerTimeout):
            from host_facades.chunking.pipeline import prepare_chunks

            return prepare_chunks(**self._kwargs(self.entries[i]))
        except WorkerError as exc:
            raise RuntimeError(exc.message) from exc

    def cancel(self) -> None:
        for fut in self._futs.values():
            fut.cancel()
        self._futs.clear()


def prepared_stream(entries: list, cfg: Any, max_input_bytes: int) -> PreparedStream | None:
    """A :class:`PreparedStream` over the shared indexing pool, or None (in-process preparation):
    None for fewer than ``MIN_ENTRIES_FOR_POOL`` entries, or fewer than ``COLD_POOL_MIN_ENTRIES``
    while the pool has no running worker."""
    if len(entries) < MIN_ENTRIES_FOR_POOL:
        return None
    pools = pools_for(cfg)
    if pools is None:
        return None
    pool = pools["indexing"]
    if len(entries) < COLD_POOL_MIN_ENTRIES and not pool.workers():
        return None
    return PreparedStream(pool, entries, cfg, max_input_bytes)
