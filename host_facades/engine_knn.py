"""Read-only database access for retrieval (owner and worker processes alike).

Readers open the agent database read-only, ``query_only``, in WAL mode with a busy timeout, and
hold one connection for the life of one query, so all reads of a query see one snapshot
(generation). ``SQLITE_IDLE_HANDLE_TTL_S`` is the one idle lifetime for retained SQLite handles.
"""

from __future__ import annotations

import contextlib
import os
import urllib.parse
from collections.abc import Iterator

import apsw

from host_facades.sqlite_ext import load_sqlite_vec

SQLITE_IDLE_HANDLE_TTL_S = 30 * 60
BUSY_TIMEOUT_MS = 5000
# Readers map the database file (``PRAGMA mmap_size``) instead of copying each page with a pread
# into a private page cache: a keyword search at 100k chunks makes ~19 preads, and mapping made it
# ~14% faster here; the pages are the kernel's page cache, shared by every worker. Safe for
# memory-core's files: the writer never shrinks a file in place (no VACUUM; a full reindex swaps
# in a new file). ``MEMORY_CORE_READ_MMAP_BYTES=0`` turns it off.
READ_MMAP_BYTES = int(os.environ.get("MEMORY_CORE_READ_MMAP_BYTES", str(1 << 30)))


# SQLite's answers for a file that is not (or no longer) a database: garbage, a text file, damaged pages
CORRUPT_ERRORS = (apsw.NotADBError, apsw.CorruptError)


class DatabaseUnreadable(Exception):
    """The database file cannot be read. ``code`` is ``"index_corrupt"`` (not a readable SQLite
    database) or ``"index_unreadable"`` (it cannot be opened read-only; the message says why).
    :meth:`to_data` is the data of the owner's error (``IndexCorrupt`` / ``IndexUnreadable``)."""

    ERROR_TYPES = {"index_corrupt": "IndexCorrupt", "index_unreadable": "IndexUnreadable"}

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def to_data(self) -> dict[str, str]:
        """``MemoryCoreError.to_data()`` of the owner-side error this failure is."""
        return {"code": self.code, "message": self.message, "type": self.ERROR_TYPES[self.code]}


def corrupt_message(db_path: str, exc: BaseException) -> str:
    """The one message for an index file SQLite cannot read as a database."""
    return (f"{db_path} is not a readable memory-core index ({exc}); run `memory-core index --force` to "
            "move it aside and rebuild the index")


def unreadable(db_path: str, exc: BaseException) -> DatabaseUnreadable | None:
    """The :class:`DatabaseUnreadable` an error raised while reading ``db_path`` means, or None."""
    if isinstance(exc, DatabaseUnreadable):
        return exc
    if isinstance(exc, CORRUPT_ERRORS):
        return DatabaseUnreadable("index_corrupt", corrupt_message(db_path, exc))
    return None


def _connect(target: str, flags: int) -> apsw.Connection:
    conn = apsw.Connection(target, flags=flags)
    try:
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
        # read the header now (opening is lazy): a file that is no database, or a WAL database whose
        # -shm cannot be opened, fails here rather than in the middle of a search
        conn.execute("PRAGMA schema_version").fetchone()
    except BaseException:
        conn.close()
        raise
    return conn


def _open_in_readonly_folder(db_path: str, exc: apsw.Error) -> apsw.Connection:
    """A WAL database in a folder that cannot hold its ``-shm`` (read-only folder or mount): opened
    ``immutable`` when its write-ahead log holds nothing (nobody can change a file there: a writer
    needs the folder too); otherwise the reason it cannot be read."""
    folder = os.path.dirname(os.path.abspath(db_path))
    if os.access(folder, os.W_OK | os.X_OK):
        raise DatabaseUnreadable("index_unreadable", f"cannot open the index {db_path} read-only ({exc}); "
                                 "check the permissions of the file and its folder") from None
    wal = db_path + "-wal"
    try:
        wal_bytes = os.path.getsize(wal)
    except OSError:
        wal_bytes = 0
    if wal_bytes:
        raise DatabaseUnreadable(
            "index_unreadable",
            f"cannot read the index {db_path}: its write-ahead log {wal} holds changes that need {db_path}-shm, "
            f"which cannot be created because {folder} is not writable; make {folder} writable and run "
            "`memory-core index` once (it folds the log into the index), or copy the index with its -wal to "
            "a writable folder and set MEMORY_CORE_HOME or stateDir there") from None
    uri = "file:" + urllib.parse.quote(os.path.abspath(db_path)) + "?mode=ro&immutable=1"
    return _connect(uri, apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)


def open_readonly(db_path: str, *, load_vec: bool = True) -> apsw.Connection:
    """Open ``db_path`` read-only (``query_only``, busy timeout); sqlite-vec loaded when available.

    Raises FileNotFoundError when there is no file and :class:`DatabaseUnreadable` when it cannot
    be read. A database in a read-only folder is readable too (see ``_open_in_readonly_folder``)."""
    if not os.path.exists(db_path):
        raise FileNotFoundError(f"memory index database not found: {db_path}; run `memory-core index`")
    try:
        try:
            conn = _connect(db_path, apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
        except (apsw.CantOpenError, apsw.ReadOnlyError) as exc:  # the -shm cannot be created/initialised
            if not os.path.exists(db_path):
                raise FileNotFoundError(
                    f"memory index database not found: {db_path}; run `memory-core index`") from None
            conn = _open_in_readonly_folder(db_path, exc)
    except CORRUPT_ERRORS as exc:
        raise DatabaseUnreadable("index_corrupt", corrupt_message(db_path, exc)) from None
    conn.execute("PRAGMA query_only=ON")
    if READ_MMAP_BYTES > 0:
        conn.execute(f"PRAGMA mmap_size={READ_MMAP_BYTES}")
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
# THE one in-memory vector search of memory-core. Worker tasks (workers/tasks.py) and in-process
# searches (host_facades/vector_search.py numpy/faiss backends) both go through
# :class:`DerivedStateCache` -> :class:`VectorState.search`, so pooled and in-process searches share
# one code path and return identical (id, score) lists.
#
# A state holds one model's vectors of one generation, keyed by (database identity dev:inode,
# revision, model): ids, sources, the L2-normalised float32 matrix and a faiss index. It is
# rebuildable from SQLite at any time and is dropped as soon as its generation is neither current
# nor leased (workers: the owner's ``retain`` broadcasts, memory_core/generations.py; in-process:
# :func:`process_state`, which keeps only the newest generation seen per database file).
#
# Search = candidate generation + exact rescoring:
# - n >= FP16_MIN_ROWS (20k): a compressed faiss index proposes k' candidates, which are rescored
#   exactly from the float32 matrix (float64 dot products rounded to float32) and the top k taken
#   with the tie-break (score desc, storage order). Brute-force IndexFlatIP at 100k x 384 reads
#   153.6 MB per query and is memory-bandwidth bound (7.4 ms/query single-threaded here; two
#   processes scale ~1.2x). Measured single-threaded at 100k x 384, top 24, 300 random queries:
#     int8 (default, Int8Candidates, k' = max(8k, k+64)): 1.9 ms/query, 38.4 MB of codes
#     fp16 (IndexScalarQuantizer QT_fp16, k' = max(4k, k+32)): 3.9 ms/query, 76.8 MB of codes
#   Memory per generation at 100k x 384: 153.6 MB float32 matrix + 38.4 MB int8 codes (fp16:
#   + 76.8 MB); in workers this is one copy for all of them (mapped files, host_facades/
#   shared_vectors.py), in-process a private one. The float32 matrix is kept because the rescoring
#   must be exact without touching SQLite (the derived state outlives the read transaction), the
#   numpy backend scans it, and it is the exhaustive fallback.
# - smaller n (cheap): ``IndexFlatIP`` whose storage IS the matrix (held once), same rescoring.
# - backend numpy (or no faiss): float32 matrix-vector product, same rescoring.
# Exactness is certified, not hoped for: every candidate index reports a bound eps on
# |approximate - exact| score (int8: computed per query, see Int8Candidates; fp16: 2^-10 since
# the relative error per component is <= 2^-11 when rounding, 2^-10 if truncating, by
# Cauchy-Schwarz, fp16 subnormals add < d * 2^-25). When the exact k-th score exceeds the lowest
# candidate's approximate score by more than eps, no row outside the candidates can reach the top
# k; otherwise k' grows (x4; past max(4096, n/8) an exhaustive float32 scan takes over).

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from host_facades.vectors import VECTOR_DTYPE, decode_vector, encode_vector, normalize_rows  # noqa: F401

# (db identity "dev:inode", revision, model); model "" = every model, a tuple = several models
DerivedKey = tuple  # tuple[str, int, str | tuple[str, ...]]

# from this many rows searches use a compressed candidate index + exact rescoring; below, IndexFlatIP
FP16_MIN_ROWS = int(os.environ.get("MEMORY_CORE_FP16_MIN_ROWS", "20000"))
CANDIDATE_INDEX = os.environ.get("MEMORY_CORE_CANDIDATE_INDEX", "int8")  # "int8" | "fp16" | "flat"
FP16_REL_ERROR = 2.0 ** -10  # |x16 - x| <= 2^-11 |x| rounding to nearest, 2^-10 even if truncating


def candidate_k(k: int, n: int, multiplier: int = 4, extra: int = 32) -> int:
    """Candidates fetched from the approximate index for a top-``k``: max(4k, k + 32), capped at n
    (int8 candidates: max(8k, k + 64), measured: no widening on 300 random queries at 100k x 384)."""
    return min(int(n), max(multiplier * int(k), int(k) + extra))


def db_identity(db_path: str) -> str:
    """The physical identity ``"dev:inode"`` of the database file (changes when a reindex swaps it)."""
    st = os.stat(db_path)
    return f"{st.st_dev}:{st.st_ino}"


def model_key(model: str | Sequence[str] | None) -> str | tuple[str, ...]:
    """The model part of a :data:`DerivedKey`: "" for no filter, the name, or a sorted tuple."""
    if model is None:
        return ""
    if isinstance(model, str):
        return model
    models = tuple(sorted(set(map(str, model))))
    return models[0] if len(models) == 1 else models


def _faiss():
    try:
        import faiss

        return faiss
    except ImportError:  # pragma: no cover - faiss-cpu is a dependency
        return None


def rescore(matrix: np.ndarray, rows: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Exact cosines of ``rows`` (float64 dot products of the float32 rows, rounded to float32).

    Every path (fp16 candidates, flat candidates, numpy) ends here, so a row's score does not
    depend on the backend, the candidate set or the process."""
    if rows.size == 0:
        return np.zeros(0, dtype=np.float32)
    return (matrix[rows].astype(np.float64) @ q.astype(np.float64)).astype(np.float32)


@dataclass
class VectorState:
    """All vectors of one model in one generation: ids, sources, L2-normalised rows, faiss index.

    ``index`` is an ``IndexFlatIP`` (storage shared with ``matrix``) or, from
    :data:`FP16_MIN_ROWS` rows, an fp16 ``IndexScalarQuantizer`` used for candidates only; None
    means numpy."""

    key: DerivedKey
    ids: list[str]
    sources: np.ndarray
    matrix: np.ndarray
    index: object | None = None
    nbytes: int = field(init=False, default=0)
    _subsets: dict = field(init=False, default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.nbytes = int(self.matrix.nbytes) + _index_nbytes(self.index, self.matrix)
        self.exact_fallbacks = 0  # searches whose fp16 candidates had to be widened

    @property
    def dims(self) -> int:
        return int(self.matrix.shape[1]) if self.matrix.ndim == 2 else 0

    @property
    def index_kind(self) -> str:
        """``"flat"``, ``"int8"``, ``"fp16"`` or ``"numpy"``."""
        if self.index is None:
            return "numpy"
        if isinstance(self.index, Int8Candidates):
            return "int8"
        return "flat" if type(self.index).__name__ == "IndexFlatIP" else "fp16"

    def for_sources(self, sources: Sequence[str] | None) -> VectorState:
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
            index, matrix = build_index(matrix)
        sub = VectorState(self.key, [self.ids[int(i)] for i in rows], self.sources[rows], matrix, index)
        self._subsets[wanted] = sub
        self.nbytes += sub.nbytes
        return sub

    def search(self, qvec: np.ndarray, limit: int, *, sources: Sequence[str] | None = None,
               exact: bool = False) -> list[tuple[str, float]]:
        """Top-``limit`` (id, exact cosine) pairs, best first; ties broken by storage (chunk_rowid) order.

        ``exact=True`` scans the float32 matrix with numpy (the numpy backend) instead of the faiss index.
        """
        state = self.for_sources(sources)
        q = np.asarray(qvec, dtype=np.float32).reshape(-1)
        n = len(state.ids)
        if n == 0 or limit <= 0 or q.shape[0] != state.dims:
            return []
        norm = float(np.linalg.norm(q))
        if norm == 0.0:
            return []
        q = np.ascontiguousarray(q / norm, dtype=np.float32)
        rows, scores = state._top_rows(q, min(int(limit), n), exact=exact)
        return [(state.ids[int(r)], float(s)) for r, s in zip(rows, scores)]

    def _top_rows(self, q: np.ndarray, k: int, *, exact: bool) -> tuple[np.ndarray, np.ndarray]:
        n = len(self.ids)
        d = self.dims
        slack = 4.0 * d * 2.0 ** -24 + 2.0 ** -20  # float32 accumulation of an approximate score, generous
        index = None if exact else self.index
        approx_all: list[np.ndarray] = []

        def numpy_candidates(kk: int) -> tuple[np.ndarray, np.ndarray, float]:
            if not approx_all:
                approx_all.append(self.matrix @ q)
            scores = approx_all[0]
            rows = np.argpartition(-scores, kk - 1)[:kk] if kk < n else np.arange(n)
            return rows, scores[rows], slack

        def index_candidates(kk: int) -> tuple[np.ndarray, np.ndarray, float]:
            if isinstance(index, Int8Candidates):
                return index.search(q, kk)
            s, r = index.search(q.reshape(1, -1), kk)  # type: ignore[union-attr]
            keep = r[0] >= 0
            eps = slack + (FP16_REL_ERROR + d * 2.0 ** -25 if self.index_kind == "fp16" else 0.0)
            return r[0][keep].astype(np.int64), s[0][keep], eps

        candidates = numpy_candidates if index is None else index_candidates
        kk = candidate_k(k, n, 8, 64) if isinstance(index, Int8Candidates) else candidate_k(k, n)
        while True:
            rows, approx, eps = candidates(kk)
            exact_scores = rescore(self.matrix, rows, q)
            order = np.lexsort((rows, -exact_scores))[:k]  # score desc, then storage order
            top_rows, top_scores = rows[order], exact_scores[order]
            if kk >= n or rows.size < kk:
                return top_rows, top_scores
            # a row outside the candidates has approx <= min(approx), so its exact score <= that + eps
            if len(top_scores) == k and float(top_scores[-1]) > float(approx.min()) + eps:
                return top_rows, top_scores
            self.exact_fallbacks += 1
            kk = min(n, kk * 4)
            if candidates is index_candidates and kk > max(4096, n // 8):
                candidates, kk = numpy_candidates, candidate_k(k, n)  # exhaustive float32 scan instead


class Int8Candidates:
    """Candidate index: faiss ``QT_8bit_direct_signed`` over per-dimension scaled, rounded vectors.

    Codes ``c = rint(x * s)`` (``s_j = 127 / max|x_.j|``) are stored as exact small integers; a
    query ``q`` is searched as ``qh = rint(q / s * t)`` (``t = 127 / max|q / s|``), so faiss' score
    ``qh . c`` is an exact integer and ``approx = qh . c / t`` differs from the cosine ``q . x`` by
    at most ``eps = min(|q| max|e|, sum |q_j| 0.5 / s_j) + |delta| max|c|`` with ``e = x - c / s``
    (per row) and ``delta = q / s - qh / t`` (per query), both known exactly. 1 byte per
    dimension: 38.4 MB per 100k x 384 (fp16: 76.8 MB) and 1.7 ms/query instead of 4.3 (fp16) or
    7.4 (IndexFlatIP), single-threaded."""

    def __init__(self, matrix: np.ndarray) -> None:
        faiss = _faiss()
        n, d = matrix.shape
        maxabs = np.abs(matrix).max(axis=0).astype(np.float64)
        maxabs[maxabs == 0] = 1.0
        self.scale = 127.0 / maxabs
        codes = np.clip(np.rint(matrix * self.scale), -127, 127).astype(np.float32)
        self.err_l1 = 0.5 / self.scale  # |e_j| <= 0.5 / s_j
        err_norm = 0.0
        code_norm = 0.0
        for start in range(0, n, 8192):  # bounded temporaries
            block = codes[start:start + 8192]
            err = matrix[start:start + 8192] - block / self.scale.astype(np.float32)
            err_norm = max(err_norm, float(np.sqrt((err.astype(np.float64) ** 2).sum(axis=1)).max()))
            code_norm = max(code_norm, float(np.sqrt((block.astype(np.float64) ** 2).sum(axis=1)).max()))
        self.err_norm = err_norm * (1 + 1e-6) + 1e-9
        self.code_norm = code_norm * (1 + 1e-6)
        self.d = d
        self.ntotal = n
        self.code_size = d
        self.index = faiss.IndexScalarQuantizer(d, faiss.ScalarQuantizer.QT_8bit_direct_signed,
                                                faiss.METRIC_INNER_PRODUCT)
        self.index.train(codes[:1])
        self.index.add(codes)
        # self-check: faiss must compute the exact integer product this class relies on
        probe = np.clip(np.rint(np.linspace(-127, 127, d)), -127, 127).astype(np.float32)
        kk = min(8, n)
        s, r = self.index.search(probe.reshape(1, -1), kk)
        want = codes[r[0]].astype(np.float64) @ probe.astype(np.float64)
        self.verified = bool(np.array_equal(s[0].astype(np.float64), want))

    @classmethod
    def from_parts(cls, index: Any, *, scale: np.ndarray, err_l1: np.ndarray, err_norm: float,
                   code_norm: float, verified: bool) -> Int8Candidates:
        """The candidate index over an existing faiss ``index`` of the codes (e.g. one mapped
        from a file, host_facades.shared_vectors) and the quantizer's saved parameters."""
        self = cls.__new__(cls)
        self.index = index
        self.scale = np.asarray(scale, dtype=np.float64)
        self.err_l1 = np.asarray(err_l1, dtype=np.float64)
        self.err_norm = float(err_norm)
        self.code_norm = float(code_norm)
        self.d = int(index.d)
        self.ntotal = int(index.ntotal)
        self.code_size = self.d
        self.verified = bool(verified)
        return self

    def search(self, q: np.ndarray, kk: int) -> tuple[np.ndarray, np.ndarray, float]:
        """``(rows, approx scores, eps)`` of the ``kk`` best rows for the unit query ``q``."""
        qs = q.astype(np.float64) / self.scale
        m = float(np.abs(qs).max())
        t = 127.0 / m if m > 0 else 1.0
        qh = np.rint(qs * t)
        s, r = self.index.search(qh.astype(np.float32).reshape(1, -1), kk)
        keep = r[0] >= 0
        delta = qs - qh / t
        eps = (min(float(np.linalg.norm(q)) * self.err_norm, float(np.abs(q) @ self.err_l1))
               + float(np.linalg.norm(delta)) * self.code_norm + 2.0 ** -20)
        return r[0][keep].astype(np.int64), s[0][keep].astype(np.float64) / t, eps


def _index_nbytes(index: object | None, matrix: np.ndarray) -> int:
    if index is None or type(index).__name__ == "IndexFlatIP":
        return 0  # flat storage is the matrix itself
    return int(matrix.shape[0]) * int(getattr(index, "code_size", 0))


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
        models = [model] if isinstance(model, str) else list(model)
        rows = conn.execute(
            f"SELECT id, source, embedding FROM memory_index_chunks WHERE model IN ({','.join('?' * len(models))})"
            " AND length(embedding) > 0 ORDER BY chunk_rowid",
            models,
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
    if use_faiss and _faiss() is not None and len(ids):
        index, matrix = build_index(matrix)
    return VectorState(key, ids, sources, matrix, index)


def _chunk_count(conn: apsw.Connection) -> int | None:
    """Rows of the chunk table (an upper bound on a generation's vectors), None if unreadable."""
    try:
        return int(conn.execute("SELECT count(*) FROM memory_index_chunks").fetchone()[0])
    except apsw.Error:
        return None


def build_index(matrix: np.ndarray, *, kind: str | None = None) -> tuple[object, np.ndarray]:
    """The candidate index for ``matrix`` and the float32 matrix to keep next to it.

    ``kind`` (default: ``"flat"`` below :data:`FP16_MIN_ROWS` rows, else :data:`CANDIDATE_INDEX`):
    ``"flat"`` = ``IndexFlatIP`` plus a zero-copy view of its storage (vectors held once);
    ``"int8"`` = :class:`Int8Candidates` plus ``matrix`` (exact rescoring); ``"fp16"`` = an fp16
    ``IndexScalarQuantizer`` plus ``matrix``."""
    faiss = _faiss()
    n, d = matrix.shape
    if kind is None:
        kind = "flat" if n < FP16_MIN_ROWS else CANDIDATE_INDEX
    if kind == "int8":
        cand = Int8Candidates(matrix)
        if cand.verified:
            return cand, matrix
        kind = "fp16"  # this faiss build does not compute what Int8Candidates relies on
    if kind == "fp16":
        index = faiss.IndexScalarQuantizer(d, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
        index.train(matrix[:1])
        index.add(matrix)
        return index, matrix
    index = faiss.IndexFlatIP(d)
    index.add(matrix)
    view = faiss.rev_swig_ptr(index.get_xb(), n * d).reshape(n, d)
    return index, view


_flat_index = build_index  # the former name


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
            from host_facades import shared_vectors

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
