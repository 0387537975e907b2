"""Read-only database access for retrieval (owner and worker processes alike).

Readers open the agent database read-only, ``query_only``, in WAL mode with a busy timeout, and
hold one connection for the life of one query, so all reads of a query see one snapshot
(generation). ``SQLITE_IDLE_HANDLE_TTL_S`` is the one idle lifetime for retained SQLite handles.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import apsw

from host_facades.sqlite_ext import load_sqlite_vec

SQLITE_IDLE_HANDLE_TTL_S = 30 * 60
BUSY_TIMEOUT_MS = 5000


def open_readonly(db_path: str, *, load_vec: bool = True) -> apsw.Connection:
    """Open ``db_path`` read-only (``query_only``, busy timeout); sqlite-vec loaded when available."""
    if not os.path.exists(db_path):
        raise FileNotFoundError(f"memory index database not found: {db_path}; run `memory-core index`")
    conn = apsw.Connection(db_path, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    conn.execute("PRAGMA query_only=ON")
    if load_vec:
        load_sqlite_vec(conn)
    return conn


@contextlib.contextmanager
def read_snapshot(conn: apsw.Connection) -> Iterator[int]:
    """Run reads inside one read transaction; yields the revision (generation) it sees."""
    conn.execute("BEGIN")
    try:
        row = conn.execute("SELECT revision FROM memory_index_state WHERE id = 1").fetchone()
        yield int(row[0]) if row else 0
    finally:
        conn.execute("COMMIT")


# --- Derived per-generation vector state (H7) -------------------------------------------------
# Workers keep a normalised vector matrix (and a faiss index when faiss is installed) per
# generation, keyed by (database identity dev:inode, revision, model), so a query does not reload
# every vector. The state is rebuildable from SQLite at any time and is dropped as soon as its
# generation is neither current nor leased by the owner (see memory_core/generations.py).

import threading  # noqa: E402
from collections import OrderedDict  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

import numpy as np  # noqa: E402

from host_facades.vectors import VECTOR_DTYPE, decode_vector, encode_vector, normalize_rows  # noqa: E402,F401

try:  # re-exported retrieval primitives (H4); optional so this module imports on its own
    from host_facades.vector_search import *  # noqa: E402,F401,F403
except ImportError:  # pragma: no cover - before host_facades.vector_search exists
    pass

DerivedKey = tuple[str, int, str]  # (db identity "dev:inode", revision, model; "" = every model)


def db_identity(db_path: str) -> str:
    """The physical identity ``"dev:inode"`` of the database file (changes when a reindex swaps it)."""
    st = os.stat(db_path)
    return f"{st.st_dev}:{st.st_ino}"


def _faiss():
    try:
        import faiss

        return faiss
    except ImportError:  # pragma: no cover - faiss-cpu is a dependency
        return None


@dataclass
class VectorState:
    """All vectors of one model in one generation: ids, sources, L2-normalised rows, faiss index."""

    key: DerivedKey
    ids: list[str]
    sources: np.ndarray
    matrix: np.ndarray
    index: object | None = None
    nbytes: int = field(init=False, default=0)
    _subsets: dict = field(init=False, default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.nbytes = int(self.matrix.nbytes)

    @property
    def dims(self) -> int:
        return int(self.matrix.shape[1]) if self.matrix.ndim == 2 else 0

    def for_sources(self, sources: "list[str] | tuple[str, ...] | None") -> "VectorState":
        """The sub-state holding only rows of ``sources`` (memoised); ``self`` when nothing is filtered."""
        if not sources or len(self.ids) == 0:
            return self
        wanted = tuple(sorted(set(sources)))
        cached = self._subsets.get(wanted)
        if cached is not None:
            return cached
        mask = np.isin(self.sources, list(wanted))
        if bool(mask.all()):
            self._subsets[wanted] = self
            return self
        rows = np.flatnonzero(mask)
        matrix = np.ascontiguousarray(self.matrix[rows])
        index = None
        if self.index is not None and rows.size:
            index, matrix = _flat_index(matrix)
        sub = VectorState(self.key, [self.ids[int(i)] for i in rows], self.sources[rows], matrix, index)
        self._subsets[wanted] = sub
        self.nbytes += sub.nbytes
        return sub

    def search(self, qvec: np.ndarray, limit: int, *, sources: "list[str] | None" = None) -> list[tuple[str, float]]:
        """Top-``limit`` (id, cosine) pairs, best first; ties broken by storage (chunk_rowid) order."""
        state = self.for_sources(sources)
        q = np.asarray(qvec, dtype=np.float32).reshape(-1)
        n = len(state.ids)
        if n == 0 or limit <= 0 or q.shape[0] != state.dims:
            return []
        norm = float(np.linalg.norm(q))
        if norm == 0.0:
            return []
        q = q / norm
        k = min(int(limit), n)
        if state.index is not None:
            scores, rows = state.index.search(q.reshape(1, -1), k)  # type: ignore[attr-defined]
            pairs = [(int(r), float(sc)) for sc, r in zip(scores[0], rows[0]) if r >= 0]
        else:
            all_scores = state.matrix @ q
            part = np.argpartition(-all_scores, k - 1)[:k] if k < n else np.arange(n)
            pairs = [(int(i), float(all_scores[i])) for i in part]
        pairs.sort(key=lambda t: (-t[1], t[0]))
        return [(state.ids[i], sc) for i, sc in pairs]


def load_vector_state(conn: apsw.Connection, key: DerivedKey, *, use_faiss: bool = True) -> VectorState:
    """Build the state for ``key`` from the connection's current read transaction.

    Rows whose vector length differs from the most common one for the model are left out (they
    belong to a half-migrated index and are rebuilt by ``memory-core index --force``).
    """
    model = key[2]
    if model == "":  # no model filter (a search without a provider model)
        rows = conn.execute(
            "SELECT id, source, embedding FROM memory_index_chunks WHERE length(embedding) > 0 ORDER BY chunk_rowid"
        ).fetchall()
    else:
        rows = conn.execute(
            "SELECT id, source, embedding FROM memory_index_chunks WHERE model = ? AND length(embedding) > 0"
            " ORDER BY chunk_rowid",
            (model,),
        ).fetchall()
    if not rows:
        return VectorState(key, [], np.zeros(0, dtype=object), np.zeros((0, 0), dtype=np.float32))
    lengths = np.fromiter((len(r[2]) for r in rows), dtype=np.int64, count=len(rows))
    values, counts = np.unique(lengths, return_counts=True)
    width = int(values[int(np.argmax(counts))])
    if width % 4 != 0:
        rows = [r for r in rows if len(r[2]) % 4 == 0]
        width = len(rows[0][2]) if rows else 4
    if not bool(np.all(lengths == width)):
        rows = [r for r in rows if len(r[2]) == width]
    ids = [r[0] for r in rows]
    sources = np.array([r[1] for r in rows], dtype=object)
    matrix = np.frombuffer(b"".join(r[2] for r in rows), dtype=VECTOR_DTYPE).reshape(len(rows), width // 4)
    matrix = np.ascontiguousarray(normalize_rows(matrix), dtype=np.float32)
    index = None
    faiss = _faiss() if use_faiss else None
    if faiss is not None and len(ids):
        index, matrix = _flat_index(matrix)
    return VectorState(key, ids, sources, matrix, index)


def _flat_index(matrix: np.ndarray) -> tuple[object, np.ndarray]:
    """A faiss ``IndexFlatIP`` over ``matrix`` plus a zero-copy view of the index's own storage,
    so a generation's vectors are held once, not twice."""
    faiss = _faiss()
    n, d = matrix.shape
    index = faiss.IndexFlatIP(d)
    index.add(matrix)
    view = faiss.rev_swig_ptr(index.get_xb(), n * d).reshape(n, d)
    return index, view


class DerivedStateCache:
    """Per-process cache of :class:`VectorState` keyed by (db identity, revision, model).

    ``retain(db_id, keep)`` drops every state of that database whose revision is not in ``keep``:
    the owner passes the current revision plus the revisions it still holds leases on, so memory
    holds at most the current generation plus the leased ones.
    """

    def __init__(self, *, use_faiss: bool = True, max_entries: int = 16) -> None:
        self.max_entries = max_entries  # across databases (agents); least recently used goes first
        self._states: "OrderedDict[DerivedKey, VectorState]" = OrderedDict()
        self._lock = threading.Lock()
        self.use_faiss = use_faiss
        self.builds = 0

    def get_or_build(self, conn: apsw.Connection, key: DerivedKey) -> VectorState:
        """The state for ``key``; ``conn`` must be inside the read transaction of ``key[1]``."""
        with self._lock:
            state = self._states.get(key)
            if state is not None:
                self._states.move_to_end(key)
        if state is not None:
            return state
        state = load_vector_state(conn, key, use_faiss=self.use_faiss)
        with self._lock:
            self._states[key] = state
            self.builds += 1
            while len(self._states) > self.max_entries:
                self._states.popitem(last=False)
        return state

    def retain(self, db_id: str, keep: "set[int] | list[int] | tuple[int, ...]") -> int:
        """Drop states of ``db_id`` whose revision is not in ``keep``; returns how many were dropped."""
        keep_set = set(int(r) for r in keep)
        with self._lock:
            drop = [k for k in self._states if k[0] == db_id and k[1] not in keep_set]
            for k in drop:
                del self._states[k]
        return len(drop)

    def drop_database(self, db_id: str | None = None) -> int:
        """Drop every state of ``db_id`` (or of every database when None)."""
        with self._lock:
            drop = [k for k in self._states if db_id is None or k[0] == db_id]
            for k in drop:
                del self._states[k]
        return len(drop)

    def keys(self) -> list[DerivedKey]:
        with self._lock:
            return list(self._states)

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(s.nbytes for s in self._states.values())
