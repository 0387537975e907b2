"""Owner-side adapter: run a search's retrieval through a pool on one leased generation.

:class:`PooledRetriever` is what the search engine calls instead of opening its own reader:
``run_search(req)`` runs a whole search as ONE ``search`` task (``host_facades.search.run``: a
``SearchRequest`` in, a ``SearchReply`` out); ``run_leased(task, payload)`` runs another
snapshot task the same way (the benchmarks' and tests' ``retrieve``, benchmarks/worker_tasks.py).
Each task is one read transaction, i.e. one generation (memory_core/generations.py); the adapter
holds a lease for the duration and keeps workers' derived state down to the current generation
plus the leased ones. With ``InlinePool`` (``pool.workers = 0``) the very same task function runs in-process, so results are identical.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from host_facades.search.edge import SearchReply, SearchRequest, reply_from_wire, request_key
from host_facades.retrieval.vector_cache import remove_shared_files
from memory_core.generations import GenerationLeases
from workers.inline import InlinePool
from workers.pool import WorkerPool
from workers.steps import Steps, drive


@dataclass(frozen=True)
class KeywordTask:
    """A ``keyword`` task in flight (:meth:`PooledRetriever.submit_keyword`) and its lease."""

    future: Any
    lease: Any


class PooledRetriever:
    """Retrieval for one database file through ``pool`` with generation leases."""

    def __init__(self, db_path: str, pool: "WorkerPool | InlinePool", *,
                 leases: GenerationLeases | None = None, timeout_s: float | None = None) -> None:
        self.db_path = db_path
        self.pool = pool
        self.timeout_s = timeout_s
        self.leases = leases or GenerationLeases()
        if self.leases.on_last_release is None:
            self.leases.on_last_release = self._on_last_release
        self._lock = threading.Lock()
        self.current: dict[str, int] = {}  # newest revision seen per database identity
        self.current_db_id: str | None = None
        self._stash: tuple[tuple, Any, tuple] | None = None  # (request key, still valid?, task answer)
        remove_shared_files(db_path)  # mapped vector files an earlier version left beside the index

    def stash(self, req: SearchRequest, valid: Any, answer: tuple) -> None:
        """Keep ``answer``, a ``search`` task's ``(db_id, revision, reply)`` for ``req`` that a
        worker computed ahead (``agent_state``), for the next search: used once, by a search whose
        request is ``req``'s (its clock aside) while ``valid()`` holds (the file unchanged since)."""
        self._stash = (request_key(req), valid, answer)

    def _take_stash(self, req: SearchRequest) -> tuple | None:
        stashed, self._stash = self._stash, None
        if stashed is None or stashed[0] != request_key(req) or not stashed[1]():
            return None
        return stashed[2]

    def run_leased(self, task: str, payload: dict | None = None, *, timeout_s: float | None = None) -> dict:
        """Run ``task`` (a task of the pool that reads one snapshot and answers a dict with its
        ``db_id`` and ``revision``, ``db_id`` None for an absent file) on one leased generation:
        ``payload`` plus ``db_path`` and ``keep`` (the revisions still leased). Returns its result."""
        lease, keep = self.leases.acquire_unbound(self.current_db_id)
        try:
            payload = {**(payload or {}), "db_path": self.db_path, "keep": keep}
            result = self.pool.run(task, payload, timeout_s=timeout_s or self.timeout_s)
            if result.get("db_id") is not None:
                self._read(lease, result["db_id"], int(result["revision"]))
            return result
        finally:
            lease.release()

    def submit_keyword(self, req: SearchRequest, *, timeout_s: float | None = None) -> KeywordTask:
        """Start the keyword stage of ``req`` now, as a ``keyword`` task on its own leased
        generation (the owner embeds the query meanwhile); :meth:`run_search` takes it back."""
        lease, keep = self.leases.acquire_unbound(self.current_db_id)
        try:
            payload = {"db_path": self.db_path, "keep": keep, "req": req.wire()}
            future = self.pool.submit("keyword", payload, timeout_s=timeout_s or self.timeout_s)
        except BaseException:
            lease.release()
            raise
        return KeywordTask(future, lease)

    def collect_keyword(self, ahead: KeywordTask) -> tuple | None:
        """The answer of :meth:`submit_keyword`'s task, waiting for it when a worker has it; None
        (the search runs the stage itself) when no worker had picked it up yet (it is withdrawn)
        or it failed. Ends the task's lease either way."""
        future = ahead.future
        try:
            if not future.done() and getattr(future, "withdraw", None) is not None and future.withdraw():
                return None
            try:
                result = future.result()
            except Exception:  # noqa: BLE001 - the search task runs the stage again and reports its own error
                return None
            if result is not None:
                self._read(ahead.lease, result[0], int(result[1]))
            return result
        finally:
            ahead.lease.release()

    def run_search(self, req: SearchRequest, *, timeout_s: float | None = None,
                   keyword: tuple | None = None) -> SearchReply:
        """A whole search as one ``search`` task (``host_facades.search.run.run_search`` in the
        worker) on one leased generation; an absent database answers ``empty_index``.
        ``keyword``: what :meth:`collect_keyword` returned for ``req``, used by the task when it
        reads the same file and generation (else the task runs the keyword stage itself)."""
        return drive(self.search_steps(req, timeout_s=timeout_s, keyword=keyword), self.pool)

    def search_steps(self, req: SearchRequest, *, timeout_s: float | None = None,
                     keyword: tuple | None = None) -> Steps[SearchReply]:
        """:meth:`run_search` as steps (:mod:`workers.steps`): it yields its ``search`` task."""
        lease, keep = self.leases.acquire_unbound(self.current_db_id)
        try:
            answered = self._take_stash(req) if self._stash is not None else None
            if answered is not None:
                db_id, revision, reply = answered
            else:
                # plain values both ways: typed objects only on each side of the pipe
                payload = {"db_path": self.db_path, "keep": keep, "req": req.wire()}
                if keyword is not None:
                    payload["keyword"] = keyword
                db_id, revision, reply = yield "search", payload, timeout_s or self.timeout_s
            if db_id is None:
                return SearchReply(mode="empty", revision=revision, empty_index=True)
            self._read(lease, db_id, revision)
            return reply_from_wire(reply)
        finally:
            lease.release()

    def _read(self, lease: Any, db_id: str, revision: int) -> None:
        """The task read generation ``revision`` of ``db_id`` and is done with it."""
        self._saw(db_id, revision)
        # the current generation is never dropped, so only an older one needs the last-release call
        lease.settle(db_id, revision, notify=revision != self.current.get(db_id))

    def index_state(self) -> dict:
        return self.pool.run("index_state", {"db_path": self.db_path}, timeout_s=self.timeout_s)

    def _saw(self, db_id: str, revision: int) -> None:
        if self.current_db_id == db_id and self.current.get(db_id, -1) >= revision:
            return  # nothing new (read without the lock; a change is handled under it)
        changed = False
        old_db = None
        with self._lock:
            if self.current_db_id != db_id:
                old_db, self.current_db_id = self.current_db_id, db_id
                changed = True
            if revision > self.current.get(db_id, -1):
                self.current[db_id] = revision
                changed = True
        if changed:
            if old_db is not None and not self.leases.leased_revisions(old_db):
                self.pool.broadcast("drop", {"db_id": old_db})
            self._broadcast_retain(db_id)

    def _broadcast_retain(self, db_id: str) -> None:
        keep = self.leases.leased_revisions(db_id)  # a fresh set
        cur = self.current.get(db_id)
        if cur is not None:
            keep.add(cur)
        self.pool.broadcast("retain", {"db_id": db_id, "keep": sorted(keep)})

    def _on_last_release(self, db_id: str, revision: int, still_leased: set[int]) -> None:
        # The last lease on an old generation ended: workers may drop its derived state now.
        if db_id != self.current_db_id:
            if not still_leased:
                self.pool.broadcast("drop", {"db_id": db_id})
            return
        if revision != self.current.get(db_id):
            self._broadcast_retain(db_id)
