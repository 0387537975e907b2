"""Keyword retrieval over the FTS5 tables (upstream `memory/manager-search.ts`,
`memory/manager-keyword-retrieval.ts`). Runs in workers too.

Every function takes a (read-only) apsw connection and returns plain data. Nothing here raises on
odd query text: an FTS error becomes a LIKE fallback, and the error text is reported in the result.

Hit dicts carry: ``id, path, source, start_line, end_line, snippet, text_score`` (BM25 mapped, 0 for
LIKE-only and path-only hits), ``score`` (the boosted ranking score of `memory/manager-search.ts`, or the
path score for
path-only hits), ``path_score``, ``exact`` (exact-path specificity 0..3) and ``has_body_match``.
"""

from __future__ import annotations

import functools
import time
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import apsw

from host_facades.retrieval.fts_query import (
    CHUNKS_TABLE, MAX_QUERY_TERMS, like_clauses, lower_tokens,
    source_clause, unique_terms, bm25_rank_to_score, body_search_sql, build_fts_query, escape_like, plan_keyword_search,
    score_fallback_keyword_result, truncate_snippet, word_tokens,
)
from host_facades.retrieval.keywords import KEYWORD_FALLBACK_SEARCH_TERM_LIMIT, probe_keywords

EXACT_PATH_CANDIDATE_LIMIT = 200
PATH_FTS_TABLE = "memory_index_paths_fts"





# ---------------------------------------------------------------------------------------------
# Body search (upstream `memory/manager-search.ts`)
# ---------------------------------------------------------------------------------------------


def _needs_source_filter(conn: apsw.Connection, sources: Sequence[str] | None) -> bool:
    """False when every indexed source is requested, so the per-row filter can be skipped."""
    if not sources:
        return False
    # equality probes on the source index (O(log n)); the schema knows two sources
    for other in ("memory", "sessions"):
        if other not in sources and conn.execute(
                f"SELECT EXISTS(SELECT 1 FROM {CHUNKS_TABLE} WHERE source = ?)", (other,)).fetchone()[0]:
            return True
    return False


def _match_rows(conn: apsw.Connection, plan: dict[str, Any], *, limit: int, sources, tokenizer,
                needs_filter: Callable[[], bool] | None = None) -> list[tuple]:
    filt = needs_filter() if needs_filter is not None else _needs_source_filter(conn, sources)
    wanted = set(sources or ())
    fetch = limit if not filt else limit * 2 + 8
    while True:
        sql, params, _ = body_search_sql(plan, limit=fetch, sources=sources, tokenizer=tokenizer)
        ranked = list(conn.execute(sql, params))
        if not ranked:
            return []
        rows: dict[int, tuple] = {}
        rowids = [r[0] for r in ranked]
        for i in range(0, len(rowids), 500):
            batch = rowids[i : i + 500]
            for row in conn.execute(
                f"SELECT chunk_rowid, id, path, source, start_line, end_line, text FROM {CHUNKS_TABLE}"
                f" WHERE chunk_rowid IN ({','.join('?' * len(batch))})", batch):
                rows[row[0]] = row
        out = []
        for rowid, rank in ranked:
            row = rows.get(rowid)
            if row is None or (filt and row[3] not in wanted):
                continue  # orphaned FTS row, or another source
            out.append((*row[1:], rank))
            if len(out) >= limit:
                return out
        if len(ranked) < fetch:
            return out
        fetch *= 4


def _body_rows(conn: apsw.Connection, plan: dict[str, Any], *, limit: int, sources, tokenizer,
               needs_filter: Callable[[], bool] | None = None) -> tuple[list[tuple], str, str | None]:
    if not plan["match_query"] and not plan["substring_terms"]:
        return [], "none", None
    try:
        if plan["match_query"]:
            return (_match_rows(conn, plan, limit=limit, sources=sources, tokenizer=tokenizer,
                                needs_filter=needs_filter), "match", None)
        sql, params, kind = body_search_sql(plan, limit=limit, sources=sources, tokenizer=tokenizer)
        return list(conn.execute(sql, params)), kind, None
    except apsw.Error as exc:
        error = f"{type(exc).__name__}: {exc}"
    if not plan["tokens"]:
        return [], "like", error
    sql, params, _ = body_search_sql(plan, limit=limit, sources=sources, tokenizer=tokenizer, like_only=True)
    try:
        return list(conn.execute(sql, params)), "like", error
    except apsw.Error as exc:  # a broken FTS table: report, never raise
        return [], "like", f"{error}; LIKE fallback failed: {exc}"


def body_search(
    conn: apsw.Connection,
    query: str,
    *,
    limit: int,
    sources: Sequence[str] | None = None,
    tokenizer: str = "unicode61",
    ranking_query: str | None = None,
    boost: bool = True,
    match_any: bool = False,
    extra_terms: Sequence[str] = (),
    needs_filter: Callable[[], bool] | None = None,
    plan: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Body FTS search: ``{hits, kind, error, match_query}``; LIKE-only hits get text_score 0 (D3).
    ``needs_filter()``: whether other sources than ``sources`` hold chunks (default: asked here).
    ``plan``: ``plan_keyword_search`` of these arguments when the caller has it already."""
    if plan is None:
        plan = plan_keyword_search(query, tokenizer, match_any=match_any, extra_terms=extra_terms)
    rows, kind, error = _body_rows(conn, plan, limit=max(1, int(limit)), sources=sources, tokenizer=tokenizer,
                                   needs_filter=needs_filter)
    rq = ranking_query if ranking_query is not None else query
    rq_tokens = unique_terms(lower_tokens(rq))
    hits = []
    for cid, path, source, start, end, text, rank in rows:
        text_score = bm25_rank_to_score(rank) if kind == "match" else 0.0
        score = (score_fallback_keyword_result(query=rq, path=path, text=text, fts_score=text_score,
                                               query_tokens=rq_tokens) if boost else text_score)
        hits.append({
            "id": cid, "path": path, "source": source, "start_line": int(start), "end_line": int(end),
            "snippet": truncate_snippet(text), "text_score": text_score, "score": score,
            "path_score": 0.0, "exact": 0, "has_body_match": True,
        })
    return {"hits": hits, "kind": kind, "error": error, "match_query": plan["match_query"],
            "substring_terms": plan["substring_terms"]}


# ---------------------------------------------------------------------------------------------
# Path search and exact-path tiers (upstream `memory/manager-search.ts`)
# ---------------------------------------------------------------------------------------------


def normalize_path_query(value: str) -> str:
    v = (value or "").strip().replace("\\", "/")
    if v.startswith("./"):
        v = v[2:]
    return unicodedata.normalize("NFC", v).lower()


def exact_path_specificity(query: str, path: str) -> int:
    """3 full path, 2 basename (query without '/'), 1 stem, 0 otherwise."""
    q = normalize_path_query(query)
    p = normalize_path_query(path)
    if not q:
        return 0
    if p == q:
        return 3
    base = p.rsplit("/", 1)[-1]
    if "/" not in q and base == q:
        return 2
    stem = base.rsplit(".", 1)[0] if "." in base else base
    if stem == q:
        return 1
    return 0


def _first_chunk(conn: apsw.Connection, path: str, source: str) -> tuple | None:
    return conn.execute(
        f"SELECT id, start_line, end_line, text FROM {CHUNKS_TABLE} WHERE path = ? AND source = ?"
        " ORDER BY start_line, end_line, id LIMIT 1",
        (path, source),
    ).fetchone()


def _first_chunks(conn: apsw.Connection, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], tuple]:
    """:func:`_first_chunk` of many ``(path, source)`` pairs in one statement per 400 pairs (a long
    query's path probe matches many files: one statement each was most of its keyword stage)."""
    out: dict[tuple[str, str], tuple] = {}
    wanted = list(dict.fromkeys(pairs))
    for i in range(0, len(wanted), 400):
        part = wanted[i:i + 400]
        values = ",".join("(?,?)" for _ in part)
        for path, source, cid, start, end, text in conn.execute(
            f"SELECT v.column1, v.column2, c.id, c.start_line, c.end_line, c.text FROM (VALUES {values}) v"
            f" JOIN {CHUNKS_TABLE} c ON c.chunk_rowid = (SELECT f.chunk_rowid FROM {CHUNKS_TABLE} f"
            " WHERE f.path = v.column1 AND f.source = v.column2 ORDER BY f.start_line, f.end_line, f.id LIMIT 1)",
            [x for pair in part for x in pair]):
            out[(path, source)] = (cid, start, end, text)
    return out


def _exact_candidate_rows(conn: apsw.Connection, exact_q: str, tokenizer: str, src_sql: str,
                          src_params: list[str]) -> list[tuple[str, str]]:
    """Paths that may have exact specificity > 0 for ``exact_q`` (verified by the caller).

    A path whose full path, basename or stem equals the query contains the query's tokens as a
    phrase, so the path FTS index narrows the candidates; queries the index cannot express (no
    word tokens, or trigram terms under three characters) scan the sources table with the four
    LIKE patterns ``q``, ``q.%``, ``%/q``, ``%/q.%`` instead.
    """
    words = word_tokens(exact_q)
    phrase_ok = bool(words) and (tokenizer != "trigram" or len(exact_q) >= 3)
    if phrase_ok:
        phrase = '"' + (exact_q if tokenizer == "trigram" else " ".join(words)).replace('"', '""') + '"'
        cap = EXACT_PATH_CANDIDATE_LIMIT * 10
        try:
            rows = list(conn.execute(
                f"SELECT path, source FROM {PATH_FTS_TABLE} WHERE {PATH_FTS_TABLE} MATCH ?{src_sql} LIMIT ?",
                [phrase, *src_params, cap],
            ))
            if len(rows) < cap:  # a capped prefilter could hide exact paths: scan instead
                return rows
        except apsw.Error:
            pass
    e = escape_like(exact_q)
    return list(conn.execute(
        "SELECT path, source FROM memory_index_sources WHERE (path LIKE ? ESCAPE '\\'"
        " OR path LIKE ? ESCAPE '\\' OR path LIKE ? ESCAPE '\\' OR path LIKE ? ESCAPE '\\')"
        f"{src_sql} ORDER BY path LIMIT ?",
        [e, f"{e}.%", f"%/{e}", f"%/{e}.%", *src_params, EXACT_PATH_CANDIDATE_LIMIT * 10],
    ))


def exact_path_search(
    conn: apsw.Connection, query: str, *, sources: Sequence[str] | None = None, tokenizer: str = "unicode61"
) -> dict[str, Any]:
    """Exact-path hits (<= 200 paths, specificity 3/2/1), each projected to the file's first chunk."""
    exact_q = normalize_path_query(query)
    hits: list[dict[str, Any]] = []
    if not exact_q or len(exact_q) > 4096:
        return {"hits": hits, "error": None}
    src_sql, src_params = source_clause(sources, "source")
    try:
        found = []
        for path, source in _exact_candidate_rows(conn, exact_q, tokenizer, src_sql, src_params):
            spec = exact_path_specificity(exact_q, path)
            if spec:
                found.append((path, source, spec))
        found.sort(key=lambda t: (t[0], t[1]))
        firsts = _first_chunks(conn, [(path, source) for path, source, _ in found[:EXACT_PATH_CANDIDATE_LIMIT]])
        for path, source, spec in found[:EXACT_PATH_CANDIDATE_LIMIT]:
            first = firsts.get((path, source))
            if first is None:
                continue
            cid, start, end, text = first
            hits.append({
                "id": cid, "path": path, "source": source, "start_line": int(start), "end_line": int(end),
                "snippet": truncate_snippet(text), "text_score": 0.0, "score": 0.0, "path_score": 0.0,
                "exact": spec, "has_body_match": False,
            })
    except apsw.Error as exc:
        return {"hits": hits, "error": f"{type(exc).__name__}: {exc}"}
    return {"hits": hits, "error": None}


def path_search(
    conn: apsw.Connection,
    query: str,
    *,
    limit: int,
    sources: Sequence[str] | None = None,
    tokenizer: str = "unicode61",
    exact_path_query: str | None = None,
    exact_hits: Sequence[dict[str, Any]] | None = None,
    plan: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Exact-path candidates (<= 200) plus partial path-FTS hits (<= limit), each as the file's first chunk.

    ``exact_hits`` (from :func:`exact_path_search`) skips recomputing the exact tier for every probe;
    ``plan``: ``plan_keyword_search(query, tokenizer)`` when the caller has it already.
    """
    hits: dict[str, dict[str, Any]] = {}
    error = None
    src_sql, src_params = source_clause(sources, "source")
    try:
        if exact_hits is None:
            ex = exact_path_search(conn, exact_path_query if exact_path_query is not None else query,
                                   sources=sources, tokenizer=tokenizer)
            exact_hits, error = ex["hits"], ex["error"]
        for hit in exact_hits:
            hits[hit["id"]] = dict(hit)
        if plan is None:
            plan = plan_keyword_search(query, tokenizer)
        if plan["match_query"] or plan["substring_terms"]:
            if plan["match_query"]:
                like_sql, like_params = like_clauses(plan["substring_terms"], tokenizer, "path")
                sql = (f"SELECT path, source, bm25({PATH_FTS_TABLE}) AS rank FROM {PATH_FTS_TABLE}"
                       f" WHERE {PATH_FTS_TABLE} MATCH ?{like_sql}{src_sql} ORDER BY rank ASC LIMIT ?")
                params = [plan["match_query"], *like_params, *src_params, int(limit) + len(hits)]
            else:
                like_sql, like_params = like_clauses(plan["substring_terms"], tokenizer, "path")
                sql = (f"SELECT path, source, NULL FROM {PATH_FTS_TABLE} WHERE 1{like_sql}{src_sql}"
                       " ORDER BY rowid LIMIT ?")
                params = [*like_params, *src_params, int(limit) + len(hits)]
            try:
                prow = list(conn.execute(sql, params))
            except apsw.Error as exc:
                error = f"{type(exc).__name__}: {exc}"
                prow = []
            added = 0
            firsts = _first_chunks(conn, [(path, source) for path, source, _ in prow])
            for path, source, rank in prow:
                if added >= limit:
                    break
                first = firsts.get((path, source))
                if first is None:
                    continue
                cid, start, end, text = first
                pscore = bm25_rank_to_score(rank) if rank is not None else 1.0
                if cid in hits:
                    hits[cid]["path_score"] = max(hits[cid]["path_score"], pscore)
                    continue
                added += 1
                hits[cid] = {
                    "id": cid, "path": path, "source": source, "start_line": int(start), "end_line": int(end),
                    "snippet": truncate_snippet(text), "text_score": 0.0, "score": pscore, "path_score": pscore,
                    "exact": 0, "has_body_match": False,
                }
    except apsw.Error as exc:
        error = f"{type(exc).__name__}: {exc}"
    return {"hits": list(hits.values()), "error": error}


# ---------------------------------------------------------------------------------------------
# Merge, order, limit
# ---------------------------------------------------------------------------------------------


def merge_keyword_hits(result_sets: Iterable[Iterable[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Merge keyword hit lists by chunk id: scores take the max, body snippet wins (upstream
    `memory/manager-search.ts`)."""
    merged: dict[str, dict[str, Any]] = {}
    for hits in result_sets:
        for hit in hits:
            cur = merged.get(hit["id"])
            if cur is None:
                merged[hit["id"]] = dict(hit)
                continue
            body_new = hit["has_body_match"] and not cur["has_body_match"]
            if body_new:
                cur["snippet"] = hit["snippet"]
            if hit["has_body_match"]:
                cur["score"] = max(cur["score"] if cur["has_body_match"] else 0.0, hit["score"])
            cur["text_score"] = max(cur["text_score"], hit["text_score"])
            cur["path_score"] = max(cur["path_score"], hit["path_score"])
            cur["exact"] = max(cur["exact"], hit["exact"])
            cur["has_body_match"] = cur["has_body_match"] or hit["has_body_match"]
    for hit in merged.values():
        if not hit["has_body_match"]:
            hit["score"] = 1.0 if hit["exact"] else hit["path_score"]
    return list(merged.values())


def keyword_sort_key(hit: dict[str, Any], prefer_exact_body: bool = True) -> tuple:
    """``compareKeywordSearchHits`` as a sort key."""
    exact = hit["exact"]
    return (
        -exact,
        -(1 if hit["has_body_match"] else 0) if (prefer_exact_body and exact > 0) else 0,
        -hit["score"],
        -hit["text_score"],
        -hit["path_score"] if exact == 0 else 0.0,
        hit["path"],
        hit["start_line"],
        hit["id"],
    )


def limit_keyword_hits(hits: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    ordered = sorted(hits, key=keyword_sort_key)
    exact = [h for h in ordered if h["exact"] > 0][:EXACT_PATH_CANDIDATE_LIMIT]
    other = [h for h in ordered if h["exact"] == 0][: max(1, int(limit))]
    return exact + other


def keyword_search(
    conn: apsw.Connection,
    query: str,
    *,
    limit: int,
    sources: Sequence[str] | None = None,
    tokenizer: str = "unicode61",
    ranking_query: str | None = None,
    exact_path_query: str | None = None,
    boost: bool = True,
    match_any: bool = False,
    extra_terms: Sequence[str] = (),
    exact_hits: Sequence[dict[str, Any]] | None = None,
    needs_filter: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """One keyword probe: body search + path search, merged by id and limited."""
    # the path search plans the query as given (AND); the body search too unless it widens it
    path_plan = plan_keyword_search(query, tokenizer)
    body = body_search(conn, query, limit=limit, sources=sources, tokenizer=tokenizer,
                       ranking_query=ranking_query, boost=boost, match_any=match_any, extra_terms=extra_terms,
                       needs_filter=needs_filter, plan=None if match_any or extra_terms else path_plan)
    path = path_search(conn, query, limit=limit, sources=sources, tokenizer=tokenizer,
                       exact_path_query=exact_path_query, exact_hits=exact_hits, plan=path_plan)
    hits = limit_keyword_hits(merge_keyword_hits([body["hits"], path["hits"]]), limit)
    errors = [e for e in (body["error"], path["error"]) if e]
    return {"hits": hits, "body_kind": body["kind"], "match_query": body["match_query"],
            "substring_terms": body["substring_terms"], "errors": errors,
            "body_count": len(body["hits"]), "path_count": len(path["hits"])}


# A query of at least this many distinct words skips the strict AND pass when the OR probe runs (on
# the unicode61 tokenizer): such a query rarely has every word in one chunk, and a chunk that has
# them all holds every keyword too, which the OR probe ranks by BM25 over the keywords. On the long
# workload (1,300 queries of 10-20 words, 66% of them with one chunk holding every word) the order of
# the results stayed the same without the pass, which was a third of the keyword stage.
LONG_QUERY_WORDS = 8


def long_query_words(query: str, tokenizer: str) -> int:
    """The distinct words of ``query`` when there are at least :data:`LONG_QUERY_WORDS` of them
    (unicode61 only), else 0: a query whose strict AND pass :func:`keyword_search_with_fallback` skips."""
    if tokenizer != "unicode61":
        return 0
    words = len(set(lower_tokens(query or "")))
    return words if words >= LONG_QUERY_WORDS else 0


def keyword_search_with_fallback(
    conn: apsw.Connection,
    query: str,
    *,
    limit: int,
    sources: Sequence[str] | None = None,
    tokenizer: str = "unicode61",
    or_fallback: bool = True,
) -> dict[str, Any]:
    """``searchKeywordWithFallback``: the strict query, then (when thin) keyword probes. A query of
    :data:`LONG_QUERY_WORDS` distinct words or more goes to the OR probe without the strict query
    (``strict_skipped`` in the answer: the number of words).

    memory-core addition (``or_fallback``, on by default): before the per-keyword probes, one
    BM25-ranked OR probe over all the query's keywords (up to 64, light-stem prefixes added); the
    per-keyword probes (first 6 keywords) only run
    when the OR probe could not run cleanly and the pool is still thin. Upstream's per-term probes rank each term alone, so a
    conversational query lost the BM25 evidence that several terms co-occur.
    """
    limit = max(1, int(limit))
    # what each probe's statements took (``--explain``): the exact-path tier, the strict query, the
    # OR probe, the per-term probes
    ms: dict[str, float] = {}
    t = time.perf_counter()
    # the exact-path tier depends only on the original query: compute it once for every probe
    exact = exact_path_search(conn, query, sources=sources, tokenizer=tokenizer)
    t1 = time.perf_counter()
    ms["exact_path"] = (t1 - t) * 1000
    # whether the body rows need the source filter: one probe of the snapshot for all the statements
    needs_filter = functools.cache(lambda: _needs_source_filter(conn, sources))
    # the keywords are extracted once: the per-term probes take the first 6, the OR probe up to 64
    keywords: list[str] | None = None
    words = long_query_words(query, tokenizer) if or_fallback else 0
    if words:
        keywords = probe_keywords(query, tokenizer)
    if words and keywords:
        # the strict pass skipped: only the exact-path tier, as the strict probe gives it without body hits
        full = {"hits": limit_keyword_hits(merge_keyword_hits([exact["hits"]]), limit), "body_kind": "none",
                "match_query": None, "substring_terms": [], "errors": []}
    else:
        words = 0
        full = keyword_search(conn, query, limit=limit, sources=sources, tokenizer=tokenizer,
                              exact_hits=exact["hits"], needs_filter=needs_filter)
        ms["strict"] = (time.perf_counter() - t1) * 1000
    if exact["error"]:
        full["errors"].append(exact["error"])
    info: dict[str, Any] = {"match_query": full["match_query"], "substring_terms": full["substring_terms"],
                            "body_kind": full["body_kind"], "errors": list(full["errors"]), "probes": [],
                            "full_count": len(full["hits"]), "statements_ms": ms}
    if words:
        info["strict_skipped"] = words
    hits = full["hits"]
    if sum(1 for h in hits if h["exact"] == 0) >= limit:
        info["hits"] = hits
        return info
    if keywords is None:
        keywords = probe_keywords(query, tokenizer)
    terms = keywords[:KEYWORD_FALLBACK_SEARCH_TERM_LIMIT]
    if not terms:
        info["hits"] = hits
        return info
    strict = build_fts_query(query)
    kw = build_fts_query(" ".join(terms))
    if hits and strict is not None and kw is not None and strict.lower() == kw.lower():
        info["hits"] = hits
        return info
    sets = [hits]
    if or_fallback:
        # one query, so its cost is bounded without the 6-term cap of the per-term probes
        or_terms = keywords[:MAX_QUERY_TERMS]
        t = time.perf_counter()
        probe = keyword_search(conn, " ".join(or_terms), limit=limit, sources=sources, tokenizer=tokenizer,
                               ranking_query=query, match_any=True, exact_hits=exact["hits"],
                               needs_filter=needs_filter)
        ms["or"] = (time.perf_counter() - t) * 1000
        info["probes"].append({"or": probe["match_query"], "count": len(probe["hits"])})
        info["errors"].extend(probe["errors"])
        sets.append(probe["hits"])
    # An OR probe that ran cleanly already found every row holding any keyword (up to ``limit``):
    # per-term probes would only re-find those rows with single-term BM25 scores that ignore the
    # other query words, letting one incidental word outrank rows that match several.
    or_complete = or_fallback and not probe["errors"]
    if not or_complete and sum(1 for h in merge_keyword_hits(sets) if h["exact"] == 0) < limit:
        t = time.perf_counter()
        for term in terms:
            probe = keyword_search(conn, term, limit=limit, sources=sources, tokenizer=tokenizer,
                                   ranking_query=query, exact_hits=exact["hits"], needs_filter=needs_filter)
            info["probes"].append({"term": term, "count": len(probe["hits"])})
            info["errors"].extend(probe["errors"])
            sets.append(probe["hits"])
        ms["terms"] = (time.perf_counter() - t) * 1000
    info["hits"] = limit_keyword_hits(merge_keyword_hits(sets), limit)
    return info
