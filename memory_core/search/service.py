"""The search service of one index: its pooled retriever, its engine (and the in-process keyword
engine a deadline's fallback reads) and the one search verb every surface takes
(``MemoryCore.search`` delegates here)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from memory_core.config import MemoryCoreConfig
from memory_core.errors import MemoryCoreError
from memory_core.search.engine import SearchEngine, account
from memory_core.search.types import SearchResults
from memory_core.store.access import index_errors
from workers.steps import Steps, drive

_UNSET: Any = object()


class SearchService:
    """``provider()`` is the index owner's embedding provider (it may raise: the engine then fails
    closed for a configured provider that is missing); ``identity_mismatch()`` the owner's check."""

    def __init__(self, config: MemoryCoreConfig, db_path: str, *, provider: Callable[[], Any],
                 identity_mismatch: Callable[[], list[str] | None]) -> None:
        self.config = config
        self.db_path = db_path
        self._provider = provider
        self._identity_mismatch = identity_mismatch
        self._lock = threading.RLock()  # guards the lazily built members
        self._engine: SearchEngine | None = None
        self._fallback_engine: SearchEngine | None = None
        self._retriever: Any = _UNSET

    @property
    def retriever(self) -> Any:
        """The pooled retriever of this index (None: searches read in-process, ``pool.workers = 0``)."""
        with self._lock:
            if self._retriever is _UNSET:
                from workers.shared import make_retriever

                self._retriever = make_retriever(self.config, self.db_path)
            return self._retriever

    @property
    def engine(self) -> SearchEngine:
        """The one :class:`SearchEngine` of this index (created once): its identity check reads
        through the owner, its snapshot reads go through :attr:`retriever`."""
        with self._lock:
            if self._engine is None:
                try:
                    provider = self._provider()
                except MemoryCoreError:
                    provider = None  # the engine fails closed for a configured provider that is missing
                self._engine = SearchEngine(self.config, self.db_path, provider,
                                            identity_check=self._identity_mismatch, retriever=self.retriever)
            return self._engine

    @property
    def fallback_engine(self) -> SearchEngine:
        """A keyword-only, in-process engine of this index for a deadline's fallback answer: it never
        waits on :attr:`engine`, which the late search may hold."""
        with self._lock:
            if self._fallback_engine is None:
                self._fallback_engine = SearchEngine(self.config, self.db_path, None,
                                                     identity_check=self._identity_mismatch)
            return self._fallback_engine

    def read_open_state(self, first_search: tuple | None = None) -> Any:
        """What opening the index's owner reads (the workspace and identity meta, the startup
        catch-up's rows), read by a retrieval worker (the ``agent_state`` task) on the connection it
        keeps for the searches: an :class:`~memory_core.index_identity.OpenState`, or None (no pool,
        no file yet, the file changed meanwhile, or the task failed: the owner reads it itself).

        ``first_search``: ``(query, max_results, min_score)`` of the search that opens the agent; a
        keyword-only one is answered by the same task on the same snapshot and kept for that search
        (``PooledRetriever.stash``), which uses it only if the file is still unchanged when every
        check before it (workspace, identity, catch-up) has passed: one task per opened agent."""
        from memory_core.index_identity import OPEN_META_KEYS, OpenState, file_stamp

        retriever = self.retriever
        stamp = file_stamp(self.db_path)
        if retriever is None or stamp is None:
            return None
        payload: dict[str, Any] = {"db_path": self.db_path, "keys": list(OPEN_META_KEYS)}
        req = None
        if first_search is not None and self.config.provider == "none":  # the engine loads no model then
            req = self.engine.speculative_request(*first_search)
        if req is not None:
            payload["req"] = req.wire()
        try:
            state = retriever.pool.run("agent_state", payload, timeout_s=retriever.timeout_s)
        except Exception:  # noqa: BLE001 - the owner's own reads report what is wrong with the file
            return None
        if state is None or state["db_id"] != f"{stamp[0]}:{stamp[1]}":
            return None
        stamp = unchanged_stamp(stamp, file_stamp(self.db_path))
        if stamp is None:
            return None
        if req is not None and state.get("search") is not None:
            retriever.stash(req, lambda: file_stamp(self.db_path) == stamp, tuple(state["search"]))
        return OpenState(stamp=stamp, meta=state["meta"], sources=[tuple(r) for r in state["sources"]],
                         forgotten=[tuple(r) for r in state["forgotten"]],
                         skipped=[tuple(r) for r in state["skipped"]])

    def close(self) -> None:
        """Close the engines' reader connections (they reopen on the next search)."""
        for engine in (self._engine, self._fallback_engine):
            if engine is not None:
                engine.close()

    def search(self, query: str, *, before_search: Callable[[], dict[str, Any] | None],
               sync: Callable[[], Any], sync_if_empty: bool = False, keyword_fallback: bool = False,
               answer_staleness: Callable[[Any, str, Any], Any] = lambda stale, query, hits: stale,
               **kwargs: Any) -> SearchResults:
        """``before_search()`` (its staleness comes back with the hits), then the engine's search
        (``kwargs``: :meth:`SearchEngine.search`'s). ``sync_if_empty``: no hits run ``sync()`` and the
        search again. ``keyword_fallback``: keyword-only on :attr:`fallback_engine`, without
        ``before_search``. ``answer_staleness(stale, query, hits)``: this answer's part of the index's
        staleness (the files it could depend on)."""
        if keyword_fallback:
            with index_errors(self.db_path):
                return self.fallback_engine.search(
                    query, max_results=kwargs.get("max_results"), min_score=kwargs.get("min_score"),
                    sources=kwargs.get("sources"), lexical_only=True)
        result = self._search(query, before_search, answer_staleness, kwargs)
        if sync_if_empty and not result:
            sync()
            result = self._search(query, before_search, answer_staleness, kwargs)
        return result

    def _search(self, query: str, before_search: Callable[[], dict[str, Any] | None],
                answer_staleness: Callable[[Any, str, Any], Any], kwargs: dict[str, Any]) -> SearchResults:
        return drive(self.search_steps(query, before_search, answer_staleness, kwargs), self.engine.worker_pool)

    def search_steps(self, query: str, before_search: Callable[[], dict[str, Any] | None],
                     answer_staleness: Callable[[Any, str, Any], Any], kwargs: dict[str, Any]) -> Steps[SearchResults]:
        """One search (:meth:`search` without ``sync_if_empty`` and ``keyword_fallback``) as steps
        (``workers/steps.py``): a pooled search yields its one worker task."""
        with index_errors(self.db_path):
            stale = None
            t = time.perf_counter()
            if isinstance(query, str) and query.strip():  # the engine rejects a query that is no string
                stale = before_search()
            freshness = (time.perf_counter() - t) * 1000
            result = yield from self.engine.search_steps(query, **kwargs)
            stale = answer_staleness(stale, query, result)
            result.staleness = stale
            details = result.details
            if details is not None:
                details.staleness = stale
                if details.timings_ms:  # the freshness check (and bootstrap sync) ran before the engine's clock
                    timings = details.timings_ms
                    details.timings_ms = account({"freshness": freshness, **timings},
                                                 timings.get("total", 0.0) + freshness)
            return result


def unchanged_stamp(before: Any, after: Any) -> Any:
    """``after`` when the index file's content is the same as under ``before`` (two
    :func:`~memory_core.index_identity.file_stamp` values), else None.

    The same stamp, or the same file with a write-ahead log created empty in between: opening a
    database in WAL mode creates its ``-wal`` (0 bytes: no frame) when there was none, which the
    worker's read does to every index closed cleanly (the last connection removes the log), so
    every agent of a restarted server. Without this the worker's read was thrown away for all of
    them and the owner read it all again on its own connection (and the first search ran a second
    worker task). ``after`` is returned for the comparisons that follow."""
    if after == before:
        return after
    if (before is not None and after is not None and after[:4] == before[:4]
            and before[4:] == (-1, -1) and after[4] == 0):
        return after
    return None
