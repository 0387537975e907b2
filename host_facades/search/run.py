"""One whole search on one read snapshot: retrieval, metadata, ranking, selection (upstream
`memory/manager.ts`).

:func:`run_search` is the single implementation both the in-process path
(``memory_core.search.engine.SearchEngine``) and the worker task (``workers.tasks`` op
``run_search``) call, so pooled and in-process results are identical by construction. It takes a
:class:`~host_facades.search.edge.SearchRequest` and returns a compact
:class:`~host_facades.search.edge.SearchReply`: the selected hits as rows (snippets are <= 700
chars, no chunk text), plus the explain details only when asked.

The caller owns the read transaction (``host_facades.db.sqlite_read.read_snapshot``); the only
difference between callers is where the generation's vector state comes from
(``vector_state(conn, model)``: the process cache in-process, the worker's derived-state cache
in a worker).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import apsw
import numpy as np

from host_facades.ranking import rank as ranking

from host_facades.retrieval import fts_search, vector_search
from host_facades.db.chunk_rows import read_chunks
from host_facades.search.hit import hit_row
from host_facades.search.edge import SearchReply, SearchRequest

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


def ranking_options(req: SearchRequest) -> ranking.RankingOptions:
    """The request's configured ranking knobs with its own decay clock and project filter."""
    return replace(req.ranking, now_ms=req.now_ms, active_project_keys=req.active_project_keys)


def vector_rows(conn: apsw.Connection, req: SearchRequest, q: np.ndarray,
                vector_state: VectorStateFn | None, db_id: str | None) -> list[dict[str, Any]]:
    """Vector retriever (upstream `memory/manager-search-vector.ts`): faiss/numpy on the generation's
    derived state, else sqlite-vec/scan."""
    return vector_search.knn_search(conn, q, limit=req.candidates, model=req.model, sources=list(req.sources),
                                    backend=req.backend, db_id=db_id, vector_state=vector_state)


# the ``keyword`` task's answer (workers.tasks): (db_id, revision, tokenizer or None, keyword stage or
# None, the stage's ms in the worker)
KeywordAhead = tuple[str, int, str | None, dict[str, Any] | None, float]


def keyword_stage(conn: apsw.Connection, req: SearchRequest) -> tuple[str | None, dict[str, Any] | None]:
    """The keyword retriever of ``req`` on the caller's snapshot: ``(tokenizer, keyword stage)``;
    the tokenizer is None without an FTS table, the stage None when it does not run."""
    tokenizer = fts_tokenizer_of(conn)
    if tokenizer is None or not req.want_keyword:
        return tokenizer, None
    return tokenizer, fts_search.keyword_search_with_fallback(
        conn, req.query, limit=req.candidates, sources=list(req.sources), tokenizer=tokenizer,
        or_fallback=req.or_fallback)


def ahead_applies(ahead: KeywordAhead | None, db_id: str | None, revision: int | None) -> bool:
    """Whether a keyword stage run ahead (the ``keyword`` task's answer) was read from the same
    database file (``db_id``) and generation (``revision``) as this snapshot: only then may the
    search use it instead of running the stage itself."""
    return (ahead is not None and db_id is not None and revision is not None
            and ahead[0] == db_id and ahead[1] == revision)


def run_search(conn: apsw.Connection, req: SearchRequest, *, revision: int | None = None,
               vector_state: VectorStateFn | None = None, db_id: str | None = None,
               keyword_ahead: KeywordAhead | None = None) -> SearchReply:
    """Answer ``req`` inside the caller's read transaction (on generation ``revision``).
    ``keyword_ahead``: the keyword stage of ``req`` run ahead (the ``keyword`` task, while the owner
    embedded the query), used only when it read this file and generation (:func:`ahead_applies`),
    else the stage runs here."""
    if not isinstance(req, SearchRequest):
        raise TypeError(f"run_search takes a host_facades.search.edge.SearchRequest, got {type(req).__name__}")
    if req.probe_content and not has_content(conn):
        return SearchReply(mode="empty", revision=revision, empty_index=True)
    details = req.details
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    if ahead_applies(keyword_ahead, db_id, revision):
        tokenizer, keyword = keyword_ahead[2], keyword_ahead[3]  # type: ignore[index]
    else:
        tokenizer, keyword = keyword_stage(conn, req)
        if details and keyword is not None:
            timings["keyword"] = (time.perf_counter() - t0) * 1000
    tokenizer = tokenizer or "unicode61"
    vector = None
    if req.qvec is not None:
        t1 = time.perf_counter()
        vector = vector_rows(conn, req, np.asarray(req.qvec, dtype=np.float32).reshape(-1), vector_state, db_id)
        if details:
            timings["vector"] = (time.perf_counter() - t1) * 1000
    if keyword is None and vector is None:
        return SearchReply(mode="empty", tokenizer=tokenizer, revision=revision)
    mode = "keyword" if vector is None else ("vector" if keyword is None else "hybrid")
    kw_hits = keyword["hits"] if keyword else []
    t2 = time.perf_counter()
    meta = read_chunks(conn, [h["id"] for h in kw_hits] + [h["id"] for h in (vector or ())], text=False)
    t3 = time.perf_counter()
    selected, ordered, vector_mode = ranking.rank_and_select(
        mode=mode, keyword_hits=kw_hits, vector_hits=vector, metadata=meta, opts=ranking_options(req),
        max_results=req.max_results, min_score=req.min_score, limit=req.candidates, selected_only=not details)
    hits = tuple([hit_row(c, vector_mode=vector_mode) for c in selected])
    if not details:
        return SearchReply(mode=mode, hits=hits, tokenizer=tokenizer, revision=revision)
    timings["metadata"] = (t3 - t2) * 1000
    timings["rank"] = (time.perf_counter() - t3) * 1000
    return SearchReply(mode=mode, hits=hits, tokenizer=tokenizer, revision=revision, keyword=keyword,
                       vector=None if vector is None else tuple(vector), ranked=tuple(c.parts() for c in ordered),
                       timings_ms=timings)
