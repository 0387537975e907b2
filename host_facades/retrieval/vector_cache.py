"""Where a generation's vector state is kept: per-process caches.

One :class:`DerivedStateCache` per worker (``workers.tasks.WorkerContext``) and
:data:`PROCESS_CACHE` for in-process searches keep the state of a generation
(:func:`host_facades.retrieval.vector_compact.load_state`: a float32
:class:`~host_facades.retrieval.vector_state.VectorState`, or from
:data:`~host_facades.retrieval.vector_compact.COMPACT_MIN_ROWS` vectors a
:class:`~host_facades.retrieval.vector_compact.CompactState` of int8 codes) while it is current or
leased and drop it after (workers: the owner's ``retain`` broadcasts; in-process:
:meth:`DerivedStateCache.get_current` keeps the newest generation per file).

Nothing is written beside the database. Earlier versions mapped large states from files in
``<db>-vectors/`` (a float32 copy of every vector plus its codes, 2.7x the database on a set of
long documents); :func:`remove_shared_files` deletes what they left.

Imported by workers: standard library, numpy, faiss and apsw only.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence

import apsw

from host_facades.db.sqlite_read import db_identity
from host_facades.retrieval.vector_compact import CompactState, load_state
from host_facades.retrieval.vector_state import DerivedKey, VectorState, model_key

# --- in memory ---------------------------------------------------------------------------------


class DerivedStateCache:
    """Per-process cache of generation states keyed by (db identity, revision, model).

    ``retain(db_id, keep)`` drops every state of that database whose revision is not in ``keep``:
    the owner passes the current revision plus the revisions it still holds leases on, so memory
    holds at most the current generation plus the leased ones.
    """

    def __init__(self, *, use_faiss: bool = True, max_entries: int = 16) -> None:
        self.max_entries = max_entries  # across databases (agents); least recently used goes first
        self._states: OrderedDict[DerivedKey, VectorState | CompactState] = OrderedDict()
        self._lock = threading.Lock()
        self.use_faiss = use_faiss
        self.builds = 0
        self._newest: dict[str, int] = {}   # db identity -> newest revision seen (in-process policy)
        self._path_ids: dict[str, str] = {}  # database path -> its current db identity

    def get_or_build(self, conn: apsw.Connection, key: DerivedKey) -> VectorState | CompactState:
        """The state for ``key``; ``conn`` must be inside the read transaction of ``key[1]``."""
        with self._lock:
            state = self._states.get(key)
            if state is not None:
                self._states.move_to_end(key)
        if state is not None:
            return state
        state = load_state(conn, key, use_faiss=self.use_faiss)
        if isinstance(state, CompactState):
            _return_freed_memory()  # the float32 matrix its codes were built from
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

    def get_current(self, conn: apsw.Connection, key: DerivedKey, path: str | None = None) -> VectorState | CompactState:
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

    def kinds(self) -> list[str]:
        """The ``index_kind`` of each state held, in :meth:`keys` order."""
        with self._lock:
            return [s.index_kind for s in self._states.values()]

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(s.nbytes for s in self._states.values())


# The in-process cache: host_facades.retrieval.vector_search's numpy/faiss backends (searches that run in
# the owner process without a pool) use this one; each worker process has its WorkerContext.cache.
PROCESS_CACHE = DerivedStateCache()


def process_state(conn: apsw.Connection, model: str | Sequence[str] | None = None,
                  db_id: str | None = None) -> VectorState | CompactState:
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


# --- files of earlier versions --------------------------------------------------------------


def remove_shared_files(db_path: str) -> int:
    """Delete the state files an earlier version mapped from ``<db>-vectors/`` (names
    ``<dev>-<inode>.r<revision>.<model digest>.<ext>``, their locks and temporaries) and the folder
    once empty; anything else in it stays. Returns how many files were removed."""
    directory = f"{db_path}-vectors"
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    removed = 0
    for name in names:
        parts = name.split(".")
        if len(parts) < 4 or not parts[1].startswith("r") or not parts[1][1:].isdigit():
            continue
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(directory, name))
            removed += 1
    with contextlib.suppress(OSError):
        os.rmdir(directory)
    return removed


def _return_freed_memory() -> None:
    """Give the heap freed by a build back to the system (glibc ``malloc_trim``; best effort)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
