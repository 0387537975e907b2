"""Vector retrieval (upstream `memory/manager-search-vector.ts`): one ``knn_search`` over four backends,
rows attached. Runs in workers too.

``knn_search(conn, qvec, limit=, model=, sources=, backend=)`` returns ``[{id, path, source,
start_line, end_line, snippet, vector_score}]`` ordered by cosine similarity, whatever backend:

- ``sqlite-vec``: ``vec0`` KNN (``MATCH ? AND k = ?``, k = min(8 x limit, 4096)), widening to
  k = min(total, 4096), then the scan fallback when the cap hides the model's chunks;
- ``numpy``: an exact scan of the generation's float32 matrix;
- ``faiss``: candidates from the generation's faiss index (``IndexFlatIP``, or from
  ``vector_state.FP16_MIN_ROWS`` rows int8 codes) rescored exactly from the same float32 matrix,
  or from ``vector_compact.COMPACT_MIN_ROWS`` rows from the rows read back from SQLite;
- ``auto``: faiss, else numpy (both exact and fastest in memory), sqlite-vec never required;
- ``scan`` (sqlite-vec asked for but not loadable): :func:`cosine_scan`, upstream's 256-row
  batched scan (upstream `memory/manager-search-vector.ts`), which needs no in-memory state.

A chunk with several passages (``host_facades.chunking.pipeline.split_passages``) also has passage vectors
(``memory_index_passage_vectors``); every backend scores it by the best of its own and its
passages' cosines and returns it once. numpy and faiss search the passage rows in the same matrix;
sqlite-vec and the scan score the passage rows by a scan (:func:`with_passages`).

numpy and faiss are ``host_facades.retrieval.vector_state.VectorState.search`` on the generation's state from
``vector_cache.PROCESS_CACHE`` - the same code workers run on their own cache, so in-process and
pooled searches return identical ``(id, score)`` lists. :func:`load_rows` attaches the row payloads.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import apsw
import numpy as np

from host_facades.retrieval import vector_cache
from host_facades.retrieval.fts_query import truncate_snippet
from host_facades.retrieval.vector_state import passage_rows
from host_facades.db.vectors import decode_vector

VECTOR_KNN_OVERSAMPLE_FACTOR = 8
MAX_VECTOR_KNN_K = 4096
FALLBACK_VECTOR_BATCH_SIZE = 256
BACKENDS = ("auto", "sqlite-vec", "faiss", "numpy")
SNIPPET_MAX_CHARS = 700

try:
    import faiss as _faiss

    # one query at a time per process: OpenMP threads would only compete with the other workers
    _faiss.omp_set_num_threads(int(os.environ.get("MEMORY_CORE_FAISS_THREADS", "1")))
    HAVE_FAISS = True
except ImportError:  # pragma: no cover
    HAVE_FAISS = False


def knn_k(limit: int) -> int:
    return min(max(1, int(limit)) * VECTOR_KNN_OVERSAMPLE_FACTOR, MAX_VECTOR_KNN_K)


def is_zero_vector(qvec: Any) -> bool:
    v = np.asarray(qvec, dtype=np.float32).reshape(-1)
    return v.size == 0 or not np.any(v)


def cosine_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine over the shorter length; 0 for empty or zero-norm vectors (upstream
    `memory/manager-search-vector.ts`)."""
    n = min(a.size, b.size)
    if n == 0:
        return 0.0
    a = a[:n].astype(np.float64)
    b = b[:n].astype(np.float64)
    na = float(np.linalg.norm(a))
    nb = float(np.linalg.norm(b))
    if na == 0 or nb == 0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def _filter_sql(model: str | Sequence[str] | None, sources: Sequence[str] | None, alias: str = "c") -> tuple[str, list[Any]]:
    sql = ""
    params: list[Any] = []
    if model is not None:
        models = [model] if isinstance(model, str) else list(model)
        sql += f" AND {alias}.model IN ({','.join('?' * len(models))})"
        params += models
    if sources:
        sql += f" AND {alias}.source IN ({','.join('?' * len(sources))})"
        params += list(sources)
    return sql, params


def _truncate(text: str) -> str:
    return truncate_snippet(text, SNIPPET_MAX_CHARS)


def load_rows(conn: apsw.Connection, scored: Sequence[tuple[str, float]]) -> list[dict[str, Any]]:
    """Attach row payloads to ``(id, score)`` pairs, keeping their order; vanished ids drop out."""
    if not scored:
        return []
    ids = [cid for cid, _ in scored]
    rows: dict[str, tuple] = {}
    for i in range(0, len(ids), 500):
        batch = ids[i : i + 500]
        for row in conn.execute(
            "SELECT id, path, source, start_line, end_line, text FROM memory_index_chunks"
            f" WHERE id IN ({','.join('?' * len(batch))})",
            batch,
        ):
            rows[row[0]] = row
    out = []
    for cid, score in scored:
        row = rows.get(cid)
        if row is None:
            continue
        out.append({"id": cid, "path": row[1], "source": row[2], "start_line": int(row[3]),
                    "end_line": int(row[4]), "snippet": _truncate(row[5]), "vector_score": float(score)})
    return out


# ---------------------------------------------------------------------------------------------
# Scan fallback (upstream `memory/manager-search-vector.ts`)
# ---------------------------------------------------------------------------------------------


def cosine_scan(
    conn: apsw.Connection,
    qvec: Any,
    *,
    limit: int,
    model: str | Sequence[str] | None = None,
    sources: Sequence[str] | None = None,
    batch_size: int = FALLBACK_VECTOR_BATCH_SIZE,
    between_batches: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """Scan chunks by rowid cursor in batches; rows inserted between batches are seen.

    ``between_batches(batch_no)`` runs after each batch (upstream yields to the event loop
    there); it may raise to abort.
    """
    q = np.asarray(qvec, dtype=np.float32).reshape(-1)
    limit = max(1, int(limit))
    if is_zero_vector(q):
        return []
    filt, params = _filter_sql(model, sources)
    top: list[tuple[float, int, str]] = []  # (score, -rowid, id) kept sorted desc
    last = -1
    batch_no = 0
    while True:
        rows = list(conn.execute(
            f"SELECT c.chunk_rowid, c.id, c.embedding FROM memory_index_chunks c WHERE c.chunk_rowid > ?{filt}"
            " ORDER BY c.chunk_rowid LIMIT ?",
            [last, *params, int(batch_size)],
        ))
        if not rows:
            break
        for rowid, cid, blob in rows:
            score = cosine_similarity(q, decode_vector(blob))
            if len(top) < limit or score > top[-1][0]:
                top.append((score, -rowid, cid))
                top.sort(key=lambda t: (-t[0], -t[1]))
                del top[limit:]
        last = rows[-1][0]
        batch_no += 1
        if between_batches is not None:
            between_batches(batch_no)
        if len(rows) < batch_size:
            # one more look: rows appended during the callback have higher rowids
            if between_batches is None:
                break
    return load_rows(conn, with_passages(conn, q, [(cid, s) for s, _, cid in top], limit=limit, model=model,
                                         sources=sources))


def with_passages(conn: apsw.Connection, qvec: Any, scored: Sequence[tuple[str, float]], *, limit: int,
                  model: str | Sequence[str] | None = None,
                  sources: Sequence[str] | None = None) -> list[tuple[str, float]]:
    """The top-``limit`` of ``scored`` (the chunk vectors' top-``limit`` ``(id, cosine)``, best first)
    once passage vectors count: a chunk scores the best of its own cosine and its passages'. Passage
    rows are scanned; a chunk that enters the top through a passage has its own vector rescored."""
    filt, params = _filter_sql(model, sources)
    rows = passage_rows(conn, filt, params)
    if not rows:
        return list(scored)
    q = np.asarray(qvec, dtype=np.float32).reshape(-1)
    best = dict(scored)
    order = {cid: i for i, (cid, _) in enumerate(scored)}
    for cid, _, blob, rowid, _seq in rows:
        s = cosine_similarity(q, decode_vector(blob))
        if s > best.get(cid, -math.inf):
            best[cid] = s
        order.setdefault(cid, len(scored) + int(rowid))
    top = sorted(best, key=lambda cid: (-best[cid], order[cid]))[: max(1, int(limit))]
    # a chunk outside ``scored`` scored below all of it by its own vector: only newcomers to the top
    # can have an own cosine above their passages'
    newcomers = [cid for cid in top if order[cid] >= len(scored)]
    for i in range(0, len(newcomers), 500):
        batch = newcomers[i : i + 500]
        for cid, blob in conn.execute(
                f"SELECT id, embedding FROM memory_index_chunks WHERE id IN ({','.join('?' * len(batch))})", batch):
            best[cid] = max(best[cid], cosine_similarity(q, decode_vector(blob)))
    top.sort(key=lambda cid: (-best[cid], order[cid]))
    return [(cid, best[cid]) for cid in top]


# ---------------------------------------------------------------------------------------------
# sqlite-vec KNN (upstream `memory/manager-search-knn.ts`)
# ---------------------------------------------------------------------------------------------


def _vec_table_exists(conn: apsw.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'memory_index_chunks_vec'").fetchone() is not None


def sqlite_vec_available(conn: apsw.Connection) -> bool:
    try:
        conn.execute("SELECT vec_version()").fetchone()
    except apsw.Error:
        return False
    return _vec_table_exists(conn)


def _knn_rows(conn, qblob: bytes, k: int, limit: int, filt: str, params: list[Any]) -> list[tuple[str, float]]:
    rows = conn.execute(
        "SELECT c.id, vec_distance_cosine(v.embedding, ?) AS dist FROM memory_index_chunks_vec v"
        " JOIN memory_index_chunks c ON c.id = v.id"
        f" WHERE v.embedding MATCH ? AND k = ?{filt} ORDER BY dist ASC, c.id ASC LIMIT ?",
        [qblob, qblob, int(k), *params, int(limit)],
    )
    return [(cid, 1.0 - float(dist)) for cid, dist in rows]


def sqlite_vec_knn(
    conn: apsw.Connection,
    qvec: Any,
    *,
    limit: int,
    model: str | Sequence[str] | None = None,
    sources: Sequence[str] | None = None,
) -> dict[str, Any]:
    """KNN through vec0 with widening; ``{"rows": [(id, score)], "fallback_scan_required": bool, "k": k}``."""
    q = np.asarray(qvec, dtype="<f4").reshape(-1)
    qblob = q.tobytes()
    limit = max(1, int(limit))
    filt, params = _filter_sql(model, sources)
    k = knn_k(limit)
    rows = _knn_rows(conn, qblob, k, limit, filt, params)
    if len(rows) >= limit:
        return {"rows": rows, "fallback_scan_required": False, "k": k}
    total = int(conn.execute("SELECT count(*) FROM memory_index_chunks_vec").fetchone()[0])
    matching = int(conn.execute(
        f"SELECT count(*) FROM memory_index_chunks c WHERE length(c.embedding) > 0{filt}", params
    ).fetchone()[0])
    if matching <= len(rows):
        return {"rows": rows, "fallback_scan_required": False, "k": k}
    wide = min(total, MAX_VECTOR_KNN_K)
    if wide > k:
        k = wide
        rows = _knn_rows(conn, qblob, k, limit, filt, params)
    if len(rows) < min(limit, matching) and total > MAX_VECTOR_KNN_K:
        return {"rows": rows, "fallback_scan_required": True, "k": k}
    return {"rows": rows, "fallback_scan_required": False, "k": k}


# ---------------------------------------------------------------------------------------------
# In-memory exact backends (numpy, faiss): host_facades.retrieval.vector_state's per-generation VectorState
# ---------------------------------------------------------------------------------------------
# One implementation for in-process and pooled searches: the state (matrix + faiss index) comes
# from vector_cache.PROCESS_CACHE here and from the worker's DerivedStateCache in workers/tasks.py;
# both search with VectorState.search (candidates + exact float32 rescoring, see vector_state).


def _state(conn: apsw.Connection, model, db_id: str | None):
    return vector_cache.process_state(conn, model, db_id)


def clear_cache() -> None:
    """Forget every in-process vector state (tests, benchmarks)."""
    vector_cache.PROCESS_CACHE.drop_database(None)


def numpy_knn(conn, qvec, *, limit: int, model=None, sources=None, db_id: str | None = None) -> list[tuple[str, float]]:
    """Exact cosine top-``limit`` by a numpy scan of the generation's float32 matrix."""
    q = np.asarray(qvec, dtype=np.float32).reshape(-1)
    return _state(conn, model, db_id).search(q, max(1, int(limit)), sources=sources or None, exact=True, conn=conn)


def faiss_knn(conn, qvec, *, limit: int, model=None, sources=None, db_id: str | None = None) -> list[tuple[str, float]]:
    """Exact cosine top-``limit``: faiss candidates (flat, or int8 codes from ``FP16_MIN_ROWS`` rows) rescored exactly."""
    q = np.asarray(qvec, dtype=np.float32).reshape(-1)
    return _state(conn, model, db_id).search(q, max(1, int(limit)), sources=sources or None, exact=not HAVE_FAISS,
                                            conn=conn)


def resolve_backend(conn: apsw.Connection, backend: str = "auto") -> str:
    """The backend a search will use: ``auto`` = faiss, else numpy; an unknown name raises ValueError."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown vector backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if backend == "auto":
        return "faiss" if HAVE_FAISS else "numpy"
    if backend == "faiss" and not HAVE_FAISS:
        return "numpy"
    if backend == "sqlite-vec" and not sqlite_vec_available(conn):
        return "scan"
    return backend


def knn_search(
    conn: apsw.Connection,
    qvec: Any,
    *,
    limit: int,
    model: str | Sequence[str] | None = None,
    sources: Sequence[str] | None = None,
    backend: str = "auto",
    db_id: str | None = None,
    vector_state: Callable[[apsw.Connection, Any], Any] | None = None,
    pairs: bool = False,
) -> list[Any]:
    """Top-``limit`` chunks by cosine similarity to ``qvec``; an all-zero vector returns []: the one
    backend dispatcher (in-process searches, the pooled ``search`` task and the ``vector`` op).
    faiss and numpy search a generation's :class:`VectorState`: ``vector_state(conn, model)`` (a
    worker's cache), else the process cache keyed by ``db_id``, the ``dev:inode`` identity of the
    file ``conn`` has open (stat'ed when omitted); with ``pairs`` they answer ``(id, score)`` pairs
    instead of rows."""
    if is_zero_vector(qvec):
        return []
    used = resolve_backend(conn, backend)
    if used in ("faiss", "numpy"):
        q = np.asarray(qvec, dtype=np.float32).reshape(-1)
        state = vector_state(conn, model) if vector_state is not None else _state(conn, model, db_id)
        found = state.search(q, max(1, int(limit)), sources=sources or None, exact=used == "numpy", conn=conn)
        return found if pairs else load_rows(conn, found)
    if used == "sqlite-vec":
        res = sqlite_vec_knn(conn, qvec, limit=limit, model=model, sources=sources)
        if res["fallback_scan_required"]:
            return cosine_scan(conn, qvec, limit=limit, model=model, sources=sources)
        return load_rows(conn, with_passages(conn, qvec, res["rows"], limit=limit, model=model, sources=sources))
    return cosine_scan(conn, qvec, limit=limit, model=model, sources=sources)  # "scan": no sqlite-vec
