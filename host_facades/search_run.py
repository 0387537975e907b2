"""One whole search on one read snapshot: retrieval, metadata, ranking, selection (spec §6.1).

:func:`run_search` is the single implementation both the in-process path
(``memory_core.search.engine.SearchEngine``) and the worker task (``workers.tasks`` op
``run_search``) call, so pooled and in-process results are identical by construction. It takes
plain data and returns plain, compact data: the selected hits as ``Candidate.hit_row`` tuples
(snippets are <= 700 chars, no chunk text), plus the explain details only when asked.

The caller owns the read transaction (``host_facades.sqlite_read.read_snapshot``); the only
difference between callers is where the generation's vector state comes from
(``vector_state(conn, model)``: the process cache in-process, the worker's derived-state cache
in a worker).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import apsw
import numpy as np

from host_facades import fts_search, ranking, vector_search
from host_facades.vectors import decode_vector

VectorStateFn = Callable[[apsw.Connection, Any], Any]


def has_content(conn: apsw.Connection) -> bool:
    try:
        return conn.execute("SELECT EXISTS(SELECT 1 FROM memory_index_chunks)").fetchone()[0] == 1
    except apsw.SQLError:
        return False


def fts_tokenizer_of(conn: apsw.Connection) -> str | None:
    """``"trigram"`` / ``"unicode61"`` of the chunk FTS table, None when there is no FTS table."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'memory_index_chunks_fts'").fetchone()
    if row is None:
        return None
    return "trigram" if row[0] and "trigram" in row[0] else "unicode61"


def ranking_options(data: dict[str, Any]) -> ranking.RankingOptions:
    keys = data.get("active_project_keys")
    return ranking.RankingOptions(**{**data, "active_project_keys": None if keys is None else tuple(keys)})


def vector_rows(conn: apsw.Connection, req: dict[str, Any], q: np.ndarray,
                vector_state: VectorStateFn | None, db_id: str | None) -> list[dict[str, Any]]:
    """Vector retriever (§5): faiss/numpy on the generation's derived state, else sqlite-vec/scan."""
    sources = list(req.get("sources") or ())
    limit = int(req["candidates"])
    backend = str(req.get("backend") or "auto")
    if vector_search.is_zero_vector(q):
        return []
    used = vector_search.resolve_backend(conn, backend)
    if used in ("faiss", "numpy") and vector_state is not None:
        state = vector_state(conn, req.get("model"))
        pairs = state.search(q, max(1, limit), sources=sources or None, exact=used == "numpy")
        return vector_search.load_rows(conn, pairs)
    return vector_search.knn_search(conn, q, limit=limit, model=req.get("model"), sources=sources,
                                    backend=backend, db_id=db_id)


def run_search(conn: apsw.Connection, req: dict[str, Any], *, vector_state: VectorStateFn | None = None,
               db_id: str | None = None) -> dict[str, Any]:
    """Run one search inside the caller's read transaction.

    ``req``: ``query`` (trimmed, non-empty), ``candidates``, ``sources``, ``model``, ``backend``,
    ``or_fallback``, ``want_keyword``, ``qvec`` (float32 bytes / array / None = no vector search),
    ``ranking`` (RankingOptions fields), ``max_results``, ``min_score``, ``probe_content`` (answer
    ``{"empty_index": True}`` when the index has no chunks), ``details`` (also return the retriever
    candidates and score parts, for explain).

    Returns ``{"mode", "tokenizer", "hits": [hit_row, ...]}`` plus, with ``details``, ``keyword``,
    ``vector``, ``ranked`` and ``timings_ms``.
    """
    if req.get("probe_content") and not has_content(conn):
        return {"empty_index": True, "mode": "empty", "hits": []}
    details = bool(req.get("details"))
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    tokenizer = fts_tokenizer_of(conn)
    has_fts = tokenizer is not None
    tokenizer = tokenizer or "unicode61"
    sources = list(req.get("sources") or ())
    keyword = None
    if has_fts and req.get("want_keyword", True):
        keyword = fts_search.keyword_search_with_fallback(
            conn, req["query"], limit=int(req["candidates"]), sources=sources, tokenizer=tokenizer,
            or_fallback=bool(req.get("or_fallback", True)))
        if details:
            timings["keyword"] = (time.perf_counter() - t0) * 1000
    vector = None
    qvec = req.get("qvec")
    if qvec is not None:
        t1 = time.perf_counter()
        q = decode_vector(qvec) if isinstance(qvec, (bytes, bytearray)) else np.asarray(qvec, dtype=np.float32)
        vector = vector_rows(conn, req, q.reshape(-1), vector_state, db_id)
        if details:
            timings["vector"] = (time.perf_counter() - t1) * 1000
    if keyword is None and vector is None:
        return {"mode": "empty", "tokenizer": tokenizer, "hits": []}
    mode = "keyword" if vector is None else ("vector" if keyword is None else "hybrid")
    kw_hits = keyword["hits"] if keyword else []
    t2 = time.perf_counter()
    meta = fts_search.recall_metadata(conn, [h["id"] for h in kw_hits] + [h["id"] for h in (vector or ())])
    t3 = time.perf_counter()
    selected, ordered, vector_mode = ranking.rank_and_select(
        mode=mode, keyword_hits=kw_hits, vector_hits=vector, metadata=meta, opts=ranking_options(req["ranking"]),
        max_results=int(req["max_results"]), min_score=float(req["min_score"]), vector_limit=int(req["candidates"]))
    out: dict[str, Any] = {"mode": mode, "tokenizer": tokenizer,
                           "hits": [c.hit_row(vector_mode=vector_mode) for c in selected]}
    if details:
        timings["metadata"] = (t3 - t2) * 1000
        timings["rank"] = (time.perf_counter() - t3) * 1000
        out.update(keyword=keyword, vector=vector, ranked=[c.parts() for c in ordered], timings_ms=timings)
    return out
