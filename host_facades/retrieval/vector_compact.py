"""A large generation's vectors held as int8 candidate codes only, rescored from the database.

From :data:`COMPACT_MIN_ROWS` vectors a :class:`CompactState` replaces the float32 matrix of
:class:`~host_facades.retrieval.vector_state.VectorState`: it keeps the
:class:`~host_facades.retrieval.vector_state.Int8Candidates` codes (one byte per dimension) and, per
row, its ``(chunk_rowid, seq)`` and source, and reads the float32 rows of its candidates from the
search's own read transaction (chunk vectors as stored, passage vectors decoded from their int8
codes, exactly as :func:`~host_facades.retrieval.vector_state.read_rows` reads them). The search is
the same certified one: candidates, exact rescoring, widening while the int8 error bound leaves a row
outside the candidates able to reach the top ``k``, and past a limit an exhaustive scan of the rows
(:func:`~host_facades.retrieval.vector_state.load_vector_state` without faiss). So its ``(id,
score)`` pairs are the ones the float32 matrix gives, bit for bit, while a worker holds a quarter of
the bytes and nothing is written to disk beside the database.

Imported by workers: standard library, numpy, faiss and apsw only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

import apsw
import numpy as np

from host_facades.db.vectors import VECTOR_DTYPE, decode_int8_rows
from host_facades.retrieval.vector_state import (
    DerivedKey,
    Int8Candidates,
    VectorState,
    candidate_k,
    certified,
    load_faiss,
    load_vector_state,
    passage_join,
    read_rows,
    rows_matrix,
    state_of_rows,
    unit_query,
)

# from this many vectors a generation keeps int8 codes only (below, the float32 matrix: small,
# and rescoring it never reads SQLite). 20,000 x 384 dims: 7.7 MB of codes instead of 30.7 MB.
COMPACT_MIN_ROWS = int(os.environ.get("MEMORY_CORE_COMPACT_VECTORS_MIN_ROWS", "20000"))
_FETCH_BATCH = 8192  # rows per statement when a whole subset is read (a source filter's state)


def compact_layout(conn: apsw.Connection) -> bool:
    """Whether rows can be read back by ``(chunk_rowid, seq)``: no passage table, or one keyed by
    ``chunk_rowid`` (schema migration 5)."""
    layout = passage_join(conn)
    return layout is None or layout[0].startswith("c.chunk_rowid")


def load_state(conn: apsw.Connection, key: DerivedKey, *, use_faiss: bool = True) -> VectorState | CompactState:
    """The state for ``key`` from the connection's read transaction: a :class:`CompactState` from
    :data:`COMPACT_MIN_ROWS` vectors (with faiss, on an index whose rows can be read back), else
    a :class:`VectorState`."""
    if not use_faiss or load_faiss() is None or not compact_layout(conn):
        return load_vector_state(conn, key, use_faiss=use_faiss)
    rows = read_rows(conn, key)
    state = compact_state(key, rows) if len(rows) >= COMPACT_MIN_ROWS else None
    return state if state is not None else state_of_rows(key, rows, use_faiss=use_faiss)


def compact_state(key: DerivedKey, rows: Sequence[tuple]) -> CompactState | None:
    """The :class:`CompactState` of :func:`read_rows`' ``rows`` (any number of them), or None when
    this faiss build cannot certify int8 candidates (the float32 matrix must stay then)."""
    candidates = Int8Candidates(rows_matrix(rows))
    if not candidates.verified:
        return None
    names, codes = np.unique(np.asarray([r[1] for r in rows], dtype=object).astype(str), return_inverse=True)
    return CompactState(
        key, np.fromiter((r[3] for r in rows), dtype=np.int64, count=len(rows)),
        np.fromiter((r[4] for r in rows), dtype=np.int32, count=len(rows)),
        [str(s) for s in names], codes.astype(np.int32), candidates)


class CompactState:
    """All vectors of one model in one generation as int8 candidate codes plus, per row, its
    ``chunk_rowid``, ``seq`` (-1 = the chunk's own vector, else its passage's) and source code.

    :meth:`search` answers what :meth:`VectorState.search` answers on the same rows; it needs the
    search's connection, inside a read transaction on this generation."""

    index_kind = "compact"

    def __init__(self, key: DerivedKey, rowids: np.ndarray, seqs: np.ndarray, source_names: list[str],
                 source_codes: np.ndarray, index: Int8Candidates) -> None:
        self.key = key
        self.rowids = rowids
        self.seqs = seqs
        self.source_names = source_names
        self.source_codes = source_codes
        self.index = index
        self.passages = int(np.count_nonzero(seqs >= 0))
        self.nbytes = int(rowids.nbytes + seqs.nbytes + source_codes.nbytes) + len(rowids) * index.code_size
        self.exact_fallbacks = 0  # searches whose candidates had to be widened
        self.exhaustive_scans = 0  # searches answered by reading every row
        self._subsets: dict[tuple[str, ...], CompactState] = {}
        self._exact: VectorState | None = None  # the numpy backend's float32 state, once it asks

    def __len__(self) -> int:
        return len(self.rowids)

    @property
    def dims(self) -> int:
        return int(self.index.d)

    def for_sources(self, conn: apsw.Connection, sources: Sequence[str] | None) -> CompactState:
        """The sub-state holding only rows of ``sources`` (memoised; its codes are built once from
        the rows read back); ``self`` when nothing is filtered."""
        if not sources or len(self) == 0:
            return self
        wanted = tuple(sorted(set(sources)))
        cached = self._subsets.get(wanted)
        if cached is not None:
            return cached
        keep = [i for i, name in enumerate(self.source_names) if name in wanted]
        mask = np.isin(self.source_codes, keep)
        if bool(mask.all()):
            self._subsets[wanted] = self
            return self
        rows = np.flatnonzero(mask)
        if rows.size == 0:
            sub = CompactState(self.key, rowids=rows.astype(np.int64), seqs=rows.astype(np.int32),
                               source_names=self.source_names, source_codes=rows.astype(np.int32), index=self.index)
        else:
            matrix = np.concatenate([self.fetch(conn, rows[i:i + _FETCH_BATCH])
                                     for i in range(0, rows.size, _FETCH_BATCH)])
            sub = CompactState(self.key, self.rowids[rows], self.seqs[rows], self.source_names,
                               self.source_codes[rows], Int8Candidates(matrix))
        self._subsets[wanted] = sub
        self.nbytes += sub.nbytes
        return sub

    def search(self, qvec: np.ndarray, limit: int, *, sources: Sequence[str] | None = None,
               exact: bool = False, conn: apsw.Connection | None = None) -> list[tuple[str, float]]:
        """Top-``limit`` (id, exact cosine) pairs, best first, ties in storage order: the answer of
        :meth:`VectorState.search` on the same rows. ``exact=True`` (the numpy backend) scans the
        float32 rows, read on its first search and kept from then on."""
        if conn is None:
            raise ValueError("a compact vector state reads its candidates' rows: pass the search's connection")
        if exact:  # the numpy backend scans the float32 rows: they are read once and kept
            if self._exact is None:
                self._exact = load_vector_state(conn, self.key, use_faiss=False)
                self.nbytes += self._exact.nbytes
            return self._exact.search(qvec, limit, sources=sources, exact=True)
        state = self.for_sources(conn, sources)
        n = len(state)
        q = unit_query(qvec, state.dims) if n and limit > 0 else None
        if q is None:
            return []
        found = state._top_ids(conn, q, min(int(limit), n))
        if found is None:  # uncertifiable within the widening limit: scan every row (read for this search)
            self.exhaustive_scans += 1
            rows = self._exact if self._exact is not None else load_vector_state(conn, self.key, use_faiss=False)
            return rows.search(qvec, limit, sources=sources, exact=True)
        return found

    def _top_ids(self, conn: apsw.Connection, q: np.ndarray, k: int) -> list[tuple[str, float]] | None:
        """Top-``k`` distinct chunks, each scored by its best row (as ``VectorState._top_ids``);
        None when the candidates could not be certified within the widening limit."""
        n = len(self)
        kk = min(n, 2 * k) if self.passages else k
        while True:
            top = self._top_rows(conn, q, kk)
            if top is None:
                return None
            rows, scores = top
            best: dict[int, float] = {}
            for r, s in zip(rows, scores):
                best.setdefault(int(self.rowids[int(r)]), float(s))
            if len(best) >= k or kk >= n:
                chosen = list(best.items())[:k]
                ids = self.chunk_ids(conn, [rowid for rowid, _ in chosen])
                return [(ids[rowid], score) for rowid, score in chosen]
            kk = min(n, kk * 4)

    def _top_rows(self, conn: apsw.Connection, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray] | None:
        """``VectorState._top_rows`` reading rows back: the int8 candidates come best first, so
        they are rescored a batch at a time, from the best, until the rows left (every one at or
        below the first not rescored, plus eps) cannot reach the top ``k``."""
        n = len(self)
        kk = candidate_k(k, n, 8, 64)
        while True:
            rows, approx, eps = self.index.search(q, kk)
            exact = np.zeros(0, dtype=np.float32)
            m = 0
            while True:
                step = min(rows.size, max(2 * k, k + 16) if m == 0 else 2 * m)
                exact = np.concatenate([exact, (self.fetch(conn, rows[m:step]).astype(np.float64)
                                                @ q.astype(np.float64)).astype(np.float32)])
                m = step
                order = np.lexsort((rows[:m], -exact))[:k]  # score desc, then storage order
                top_rows, top_scores = rows[:m][order], exact[order]
                if m == rows.size:
                    break
                if certified(top_scores, k, float(approx[m]) + eps):
                    return top_rows, top_scores  # every row left has approx <= approx[m]
            if kk >= n or rows.size < kk or certified(top_scores, k, float(approx.min()) + eps):
                return top_rows, top_scores
            self.exact_fallbacks += 1
            kk = min(n, kk * 4)
            if kk > max(4096, n // 8):
                return None

    def fetch(self, conn: apsw.Connection, rows: np.ndarray) -> np.ndarray:
        """The L2-normalised float32 vectors of ``rows`` (indexes into this state), read from the
        connection's read transaction: the rows :func:`read_rows` read for this generation."""
        rowids, seqs = self.rowids[rows], self.seqs[rows]
        blobs: dict[tuple[int, int], bytes] = {}
        own = seqs < 0
        if own.any():
            for rowid, blob in conn.execute(
                    "SELECT chunk_rowid, embedding FROM memory_index_chunks"
                    " WHERE chunk_rowid IN (SELECT value FROM json_each(?))",
                    (json.dumps(rowids[own].tolist()),)):
                blobs[(rowid, -1)] = blob
        if not own.all():  # a compact state's passage table is keyed by chunk_rowid: it has ``scale``
            pairs = json.dumps(np.stack([rowids[~own], seqs[~own]], axis=1).tolist())
            found = conn.execute(
                "SELECT chunk_rowid, seq, embedding, scale FROM memory_index_passage_vectors"
                " WHERE (chunk_rowid, seq) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?))", (pairs,)).fetchall()
            coded = [r for r in found if r[3] is not None]
            if coded:  # as passage_rows decodes them, all at once
                decoded = decode_int8_rows(b"".join(r[2] for r in coded), [r[3] for r in coded]).astype(VECTOR_DTYPE)
                blobs.update(((r[0], r[1]), v.tobytes()) for r, v in zip(coded, decoded))
            blobs.update(((r[0], r[1]), r[2]) for r in found if r[3] is None)  # float32, before migration 4
        try:
            ordered = [blobs[(int(r), int(s))] for r, s in zip(rowids, seqs)]
        except KeyError as missing:
            raise RuntimeError(f"vector row {missing} of generation {self.key[1]} is gone from the index it"
                               " was read from; the search must run inside that generation's read transaction"
                               ) from None
        if not ordered:
            return np.zeros((0, self.dims), dtype=np.float32)
        return rows_matrix([(None, None, b) for b in ordered])

    def chunk_ids(self, conn: apsw.Connection, rowids: Sequence[int]) -> dict[int, str]:
        """``chunk_rowid -> id`` of ``rowids``."""
        if not rowids:
            return {}
        return dict(conn.execute("SELECT chunk_rowid, id FROM memory_index_chunks"
                                 " WHERE chunk_rowid IN (SELECT value FROM json_each(?))",
                                 (json.dumps([int(r) for r in rowids]),)))

