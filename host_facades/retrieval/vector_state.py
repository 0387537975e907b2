"""A generation's vectors of one model in memory, and the one exact top-k search over them.

:class:`VectorState` holds ids, sources, the L2-normalised float32 matrix and a faiss candidate
index, keyed by :data:`DerivedKey` = (database identity, revision, model). It is derived state,
built from SQLite (:func:`load_vector_state`, :func:`build_index`) and kept by
:mod:`host_facades.retrieval.vector_cache`. Worker tasks and in-process searches both search with
:meth:`VectorState.search`, so pooled and in-process results are identical.

Search = candidates + exact rescoring: from :data:`FP16_MIN_ROWS` rows a compressed index
(:class:`Int8Candidates` by default, or faiss fp16) proposes candidates that are rescored exactly
from the float32 matrix (:func:`rescore`); below, an ``IndexFlatIP`` whose storage is the matrix;
without faiss, numpy scans the matrix. Every candidate index reports a bound eps on
|approximate - exact| score: when the exact k-th score exceeds the lowest candidate's approximate
score by more than eps, no other row can reach the top k; otherwise the candidate set grows, and
past a limit an exhaustive float32 scan takes over. The float32 matrix is kept so that rescoring
never touches SQLite (the state outlives the read transaction); from
``vector_compact.COMPACT_MIN_ROWS`` rows a ``CompactState`` keeps the int8 codes alone and reads
its candidates' rows back from the search's read transaction instead.
Imported by workers: standard library, numpy, faiss and apsw only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import apsw
import numpy as np

from host_facades.db.vectors import VECTOR_DTYPE, decode_int8, normalize_rows

# (db identity "dev:inode", revision, model); model "" = every model, a tuple = several models
DerivedKey = tuple  # tuple[str, int, str | tuple[str, ...]]

# from this many rows searches use a compressed candidate index + exact rescoring; below, IndexFlatIP.
# `python -m benchmarks.vector_candidates` (one thread, top 48): int8 candidates catch up with the
# flat scan at about 6,000 rows of 384 dims and 3,000 of 1,536, and pull away above, more so with the
# caches cold, as a server's are between two searches (13,559 x 384: flat 0.92 ms hot / 1.64 cold,
# int8 0.66 / 1.12). Below, the flat scan reads little and rescores nothing.
FP16_MIN_ROWS = int(os.environ.get("MEMORY_CORE_FP16_MIN_ROWS", "6000"))
CANDIDATE_INDEX = os.environ.get("MEMORY_CORE_CANDIDATE_INDEX", "int8")  # "int8" | "fp16" | "flat"
FP16_REL_ERROR = 2.0 ** -10  # |x16 - x| <= 2^-11 |x| rounding to nearest, 2^-10 even if truncating


def candidate_k(k: int, n: int, multiplier: int = 4, extra: int = 32) -> int:
    """Candidates fetched from the approximate index for a top-``k``: max(4k, k + 32), capped at n
    (int8 candidates are asked for max(8k, k + 64))."""
    return min(int(n), max(multiplier * int(k), int(k) + extra))


def model_key(model: str | Sequence[str] | None) -> str | tuple[str, ...]:
    """The model part of a :data:`DerivedKey`: "" for no filter, the name, or a sorted tuple."""
    if model is None:
        return ""
    if isinstance(model, str):
        return model
    models = tuple(sorted(set(map(str, model))))
    return models[0] if len(models) == 1 else models


def load_faiss():
    """The faiss module, or None where it is not installed."""
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


def certified(top_scores: np.ndarray, k: int, bound: float) -> bool:
    """Whether a top-``k`` is final: ``k`` exact scores, the last above ``bound``, the most any row
    not rescored can score (its approximate score's ceiling, e.g. ``min(candidates' approx) + eps``:
    a row outside the candidates has approx <= that minimum, so its exact score <= that + eps)."""
    return len(top_scores) == k and float(top_scores[-1]) > bound


def unit_query(qvec: np.ndarray, dims: int) -> np.ndarray | None:
    """``qvec`` as a contiguous float32 unit vector, or None when it is zero or not ``dims`` long."""
    q = np.asarray(qvec, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(q))
    if q.shape[0] != dims or norm == 0.0:
        return None
    return np.ascontiguousarray(q / norm, dtype=np.float32)


@dataclass
class VectorState:
    """All vectors of one model in one generation: ids, sources, L2-normalised rows, faiss index.

    ``index`` is an ``IndexFlatIP`` (storage shared with ``matrix``) or, from
    :data:`FP16_MIN_ROWS` rows, a candidate index (:class:`Int8Candidates`, or an fp16
    ``IndexScalarQuantizer``) whose candidates are rescored from ``matrix``; None means numpy."""

    key: DerivedKey
    ids: list[str]
    sources: np.ndarray
    matrix: np.ndarray
    index: object | None = None
    passages: int = 0  # rows that are passage vectors (an id then has several rows)
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
        sub = VectorState(self.key, [self.ids[int(i)] for i in rows], self.sources[rows], matrix, index,
                          passages=self.passages)  # an upper bound: only "has passages" matters
        self._subsets[wanted] = sub
        self.nbytes += sub.nbytes
        return sub

    def search(self, qvec: np.ndarray, limit: int, *, sources: Sequence[str] | None = None,
               exact: bool = False, conn: apsw.Connection | None = None) -> list[tuple[str, float]]:
        """Top-``limit`` (id, exact cosine) pairs, best first; ties broken by storage (chunk_rowid) order.

        ``exact=True`` scans the float32 matrix with numpy (the numpy backend) instead of the faiss
        index. ``conn`` is not read (the matrix holds every row); the signature is
        :meth:`~host_facades.retrieval.vector_compact.CompactState.search`'s.
        """
        state = self.for_sources(sources)
        n = len(state.ids)
        q = unit_query(qvec, state.dims) if n and limit > 0 else None
        if q is None:
            return []
        k = min(int(limit), n)
        if not state.passages:
            rows, scores = state._top_rows(q, k, exact=exact)
            return [(state.ids[int(r)], float(s)) for r, s in zip(rows, scores)]
        return state._top_ids(q, k, exact=exact)

    def _top_ids(self, q: np.ndarray, k: int, *, exact: bool) -> list[tuple[str, float]]:
        """Top-``k`` distinct ids when an id has several rows (its chunk vector and its passages'),
        each with its best row's score: rows are taken best first until ``k`` ids are seen. An id
        left out has every row at or below the rows taken, so no score or order is approximate."""
        n = len(self.ids)
        kk = min(n, 2 * k)
        while True:
            rows, scores = self._top_rows(q, kk, exact=exact)
            best: dict[str, float] = {}
            for r, s in zip(rows, scores):
                best.setdefault(self.ids[int(r)], float(s))
            if len(best) >= k or kk >= n:
                return list(best.items())[:k]
            kk = min(n, kk * 4)

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
            if certified(top_scores, k, float(approx.min()) + eps):
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
    dimension, half of fp16's codes."""

    def __init__(self, matrix: np.ndarray) -> None:
        faiss = load_faiss()
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
    """Build the state for ``key`` from the connection's current read transaction."""
    return state_of_rows(key, read_rows(conn, key), use_faiss=use_faiss)


def state_of_rows(key: DerivedKey, rows: Sequence[tuple], *, use_faiss: bool = True) -> VectorState:
    """The state of :func:`read_rows`' ``rows``."""
    if not rows:
        return VectorState(key, [], np.zeros(0, dtype=object), np.zeros((0, 0), dtype=np.float32))
    ids = [r[0] for r in rows]
    extra = sum(1 for r in rows if r[4] >= 0)
    sources = np.array([r[1] for r in rows], dtype=object)
    matrix = rows_matrix(rows)
    index = None
    if use_faiss and load_faiss() is not None and len(ids):
        index, matrix = build_index(matrix)
    return VectorState(key, ids, sources, matrix, index, passages=extra)


def read_rows(conn: apsw.Connection, key: DerivedKey) -> list[tuple]:
    """``(chunk id, source, float32 BLOB, chunk_rowid, seq)`` of every vector of ``key``'s model in
    storage order (a chunk's row, seq -1, then its passages'), from the current read transaction.

    Rows whose vector length differs from the most common one for the model are left out (they
    belong to a half-migrated index and are rebuilt by ``memory-core index --force``).
    """
    model = key[2]
    if model == "":  # no model filter (a search without a provider model)
        where, params = "", []
    else:
        models = [model] if isinstance(model, str) else list(model)
        where, params = f" AND c.model IN ({','.join('?' * len(models))})", models
    rows = conn.execute(
        "SELECT c.id, c.source, c.embedding, c.chunk_rowid, -1 FROM memory_index_chunks c"
        f" WHERE length(c.embedding) > 0{where} ORDER BY c.chunk_rowid", params).fetchall()
    passages = passage_rows(conn, where, params)
    if passages:  # each chunk's row, then its passages': ties keep resolving by storage order
        rows = sorted(rows + passages, key=lambda r: (r[3], r[4]))
    if not rows:
        return []
    lengths = np.fromiter((len(r[2]) for r in rows), dtype=np.int64, count=len(rows))
    values, counts = np.unique(lengths, return_counts=True)
    width = int(values[int(np.argmax(counts))])
    if width % 4 != 0:
        rows = [r for r in rows if len(r[2]) % 4 == 0]
        width = len(rows[0][2]) if rows else 4
    if not bool(np.all(lengths == width)):
        rows = [r for r in rows if len(r[2]) == width]
    return rows


def rows_matrix(rows: Sequence[tuple]) -> np.ndarray:
    """The L2-normalised float32 matrix of :func:`read_rows`' BLOBs (one width), row by row: a row
    comes out bit-identical whichever other rows are read with it."""
    blobs = [r[2] for r in rows]
    width = len(blobs[0]) if blobs else 0
    matrix = np.frombuffer(b"".join(blobs), dtype=VECTOR_DTYPE).reshape(len(blobs), width // 4)
    return np.ascontiguousarray(normalize_rows(matrix), dtype=np.float32)


def has_passage_table(conn: apsw.Connection) -> bool:
    """Whether the index has the passage-vector table (written by schema migration 3)."""
    return conn.execute(
        "SELECT 1 FROM sqlite_master WHERE name = 'memory_index_passage_vectors'").fetchone() is not None


def passage_join(conn: apsw.Connection) -> tuple[str, str] | None:
    """``(join condition, scale column)`` of the passage table (alias ``p``) with the chunk table
    (alias ``c``), in the layout this index has, or None when it has no passage table. Rows are keyed
    by ``chunk_rowid`` since schema migration 5 (by ``chunk_id`` before); the int8 ``scale`` column
    exists since migration 4 (``NULL`` stands in for it before)."""
    cols = {r[1] for r in conn.execute("PRAGMA table_info(memory_index_passage_vectors)")}
    if not cols:
        return None
    on = "c.chunk_rowid = p.chunk_rowid" if "chunk_rowid" in cols else "c.id = p.chunk_id"
    return on, "p.scale" if "scale" in cols else "NULL"


def passage_rows(conn: apsw.Connection, where: str = "", params: Sequence[Any] = ()) -> list[tuple]:
    """``(chunk id, source, embedding, chunk_rowid, seq)`` of every passage vector whose chunk has a
    vector and passes ``where`` (SQL on the chunk, alias ``c``); [] on an index without passages.
    ``embedding`` is a canonical float32 BLOB: int8 rows (schema migration 4) are decoded here."""
    layout = passage_join(conn)
    if layout is None:
        return []
    on, scale = layout
    rows = conn.execute(
        f"SELECT c.id, c.source, p.embedding, c.chunk_rowid, p.seq, {scale} FROM memory_index_passage_vectors p"
        f" JOIN memory_index_chunks c ON {on} WHERE length(c.embedding) > 0{where}",
        list(params)).fetchall()
    return [(cid, src, blob if scale is None else decode_int8(blob, scale).astype(VECTOR_DTYPE).tobytes(), rowid, seq)
            for cid, src, blob, rowid, seq, scale in rows]


def build_index(matrix: np.ndarray, *, kind: str | None = None) -> tuple[object, np.ndarray]:
    """The candidate index for ``matrix`` and the float32 matrix to keep next to it.

    ``kind`` (default: ``"flat"`` below :data:`FP16_MIN_ROWS` rows, else :data:`CANDIDATE_INDEX`):
    ``"flat"`` = ``IndexFlatIP`` plus a zero-copy view of its storage (vectors held once);
    ``"int8"`` = :class:`Int8Candidates` plus ``matrix`` (exact rescoring); ``"fp16"`` = an fp16
    ``IndexScalarQuantizer`` plus ``matrix``."""
    faiss = load_faiss()
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
