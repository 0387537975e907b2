"""Per-process caches of derived vector state: one :class:`DerivedStateCache` per worker
(``workers.tasks.WorkerContext``) and :data:`PROCESS_CACHE` for in-process searches.

A cache keeps the :class:`~host_facades.vector_state.VectorState` of a generation while it is
current or leased and drops it after (workers: the owner's ``retain`` broadcasts; in-process:
:meth:`DerivedStateCache.get_current` keeps the newest generation per file). Large states come from
:mod:`host_facades.shared_vectors`: built once, mapped by every worker.
Imported by workers: standard library, numpy, faiss and apsw only.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import apsw

from host_facades import shared_vectors
from host_facades.sqlite_read import db_identity
from host_facades.vector_state import DerivedKey, VectorState, load_vector_state, model_key


def _chunk_count(conn: apsw.Connection) -> int | None:
    """Rows of the chunk table (an upper bound on a generation's vectors), None if unreadable."""
    try:
        return int(conn.execute("SELECT count(*) FROM memory_index_chunks").fetchone()[0])
    except apsw.Error:
        return None


class DerivedStateCache:
    """Per-process cache of :class:`VectorState` keyed by (db identity, revision, model).

    ``retain(db_id, keep)`` drops every state of that database whose revision is not in ``keep``:
    the owner passes the current revision plus the revisions it still holds leases on, so memory
    holds at most the current generation plus the leased ones.
    """

    def __init__(self, *, use_faiss: bool = True, max_entries: int = 16, shared: bool = False) -> None:
        self.max_entries = max_entries  # across databases (agents); least recently used goes first
        # large states through host_facades.shared_vectors: built once, mapped by every process
        self.shared = shared
        self._states: OrderedDict[DerivedKey, VectorState] = OrderedDict()
        self._lock = threading.Lock()
        self.use_faiss = use_faiss
        self.builds = 0
        self._newest: dict[str, int] = {}   # db identity -> newest revision seen (in-process policy)
        self._path_ids: dict[str, str] = {}  # database path -> its current db identity

    def get_or_build(self, conn: apsw.Connection, key: DerivedKey) -> VectorState:
        """The state for ``key``; ``conn`` must be inside the read transaction of ``key[1]``."""
        with self._lock:
            state = self._states.get(key)
            if state is not None:
                self._states.move_to_end(key)
        if state is not None:
            return state
        if self.shared and self.use_faiss:
            state = shared_vectors.get_or_build(
                conn, key, lambda: load_vector_state(conn, key, use_faiss=True), rows_hint=_chunk_count(conn))
        else:
            state = load_vector_state(conn, key, use_faiss=self.use_faiss)
        with self._lock:
            self._states[key] = state
            self.builds += 1
            while len(self._states) > self.max_entries:
                self._states.popitem(last=False)
        return state

    def retain(self, db_id: str, keep: set[int] | list[int] | tuple[int, ...]) -> int:
        """Drop states of ``db_id`` whose revision is not in ``keep``; returns how many were dropped."""
        keep_set = {int(r) for r in keep}
        with self._lock:
            drop = [k for k in self._states if k[0] == db_id and k[1] not in keep_set]
            for k in drop:
                del self._states[k]
        return len(drop)

    def get_current(self, conn: apsw.Connection, key: DerivedKey, path: str | None = None) -> VectorState:
        """In-process policy (no owner leases): keep only the newest generation seen per database
        file and drop every state of a database file that a reindex replaced at ``path``.

        A search on an older snapshot still gets (and holds, while it runs) its own state; the
        cache just does not keep it. So memory holds the current generation plus the states of
        searches in flight - the in-process counterpart of "current + leased"."""
        db_id, revision = key[0], int(key[1])
        if path is not None:
            with self._lock:
                old = self._path_ids.get(path)
                self._path_ids[path] = db_id
            if old is not None and old != db_id:
                self.drop_database(old)
                with self._lock:
                    self._newest.pop(old, None)
        state = self.get_or_build(conn, key)
        with self._lock:
            newest = max(revision, self._newest.get(db_id, revision))
            self._newest[db_id] = newest
        self.retain(db_id, {newest})
        return state

    def drop_database(self, db_id: str | None = None) -> int:
        """Drop every state of ``db_id`` (or of every database when None)."""
        with self._lock:
            drop = [k for k in self._states if db_id is None or k[0] == db_id]
            for k in drop:
                del self._states[k]
            if db_id is None:
                self._newest.clear()
                self._path_ids.clear()
        return len(drop)

    def keys(self) -> list[DerivedKey]:
        with self._lock:
            return list(self._states)

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(s.nbytes for s in self._states.values())


# The in-process cache: host_facades.vector_search's numpy/faiss backends (searches that run in
# the owner process without a pool) use this one; each worker process has its WorkerContext.cache.
PROCESS_CACHE = DerivedStateCache()


def process_state(conn: apsw.Connection, model: str | Sequence[str] | None = None,
                  db_id: str | None = None) -> VectorState:
    """The generation's :class:`VectorState` for ``conn`` (inside its read transaction) from
    :data:`PROCESS_CACHE`. ``db_id`` is the identity of the file ``conn`` has open (pass it when
    known; otherwise the path is stat'ed, which names the wrong file right after a swap)."""
    path = conn.filename
    ident = db_id
    if ident is None:
        try:
            ident = db_identity(path)
        except OSError:  # in-memory or vanished file: the path names it
            ident = f"path:{path}"
    row = conn.execute("SELECT revision FROM memory_index_state WHERE id = 1").fetchone()
    revision = int(row[0]) if row else 0
    return PROCESS_CACHE.get_current(conn, (ident, revision, model_key(model)), path)
