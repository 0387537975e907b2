"""Lexical retrieval over the FTS5 tables (spec §4). Pure retrieval: runs in workers too.

Every function takes a (read-only) apsw connection and returns plain data (dicts, lists,
strings). Nothing here raises on odd query text: an FTS error becomes a LIKE fallback, and the
error text is reported in the result instead.

Hit dicts (keyword side) carry: ``id, path, source, start_line, end_line, snippet,
text_score`` (BM25 mapped, 0 for LIKE-only and path-only hits, D3), ``score`` (the boosted
ranking score of §4.4, or the path score / 1 for path-only hits), ``path_score``,
``exact`` (exact-path specificity 0..3) and ``has_body_match``.
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

import apsw

try:  # the `regex` module knows \p{L}; the fallback below is equivalent, only slower
    import regex as _regex
except ImportError:  # pragma: no cover - exercised only without `regex`
    _regex = None

SNIPPET_MAX_CHARS = 700
KEYWORD_FALLBACK_SEARCH_TERM_LIMIT = 6
EXACT_PATH_CANDIDATE_LIMIT = 200
FTS_TABLE = "memory_index_chunks_fts"
PATH_FTS_TABLE = "memory_index_paths_fts"
CHUNKS_TABLE = "memory_index_chunks"
MAX_QUERY_TERMS = 64  # bounds the work a 100 kB prompt can cause; upstream has no such cap

# ---------------------------------------------------------------------------------------------
# Tokenisation
# ---------------------------------------------------------------------------------------------

if _regex is not None:
    _WORD_RE = _regex.compile(r"[\p{L}\p{N}_]+")
    _TERM_RE = _regex.compile(r"[\p{L}\p{N}_][\p{L}\p{M}\p{N}_]*")
else:  # pragma: no cover
    _WORD_RE = _TERM_RE = None


def _is_word_char(ch: str) -> bool:
    cat = unicodedata.category(ch)
    return cat[0] in "LN" or ch == "_"


def _scan(text: str, allow_marks: bool) -> list[str]:  # pragma: no cover - fallback path
    out: list[str] = []
    cur: list[str] = []
    for ch in text:
        if _is_word_char(ch) or (allow_marks and cur and unicodedata.category(ch)[0] == "M"):
            cur.append(ch)
        elif cur:
            out.append("".join(cur))
            cur = []
    if cur:
        out.append("".join(cur))
    return out


_ASCII_WORDS = re.compile(r"[A-Za-z0-9_]+")


def word_tokens(text: str) -> list[str]:
    """Unicode word tokens ``[\\p{L}\\p{N}_]+`` (letters, digits, underscore)."""
    if text.isascii():
        return _ASCII_WORDS.findall(text)
    return _WORD_RE.findall(text) if _WORD_RE is not None else _scan(text, False)


def query_terms(text: str) -> list[str]:
    """Query terms: a word start followed by letters, marks, digits or underscore (keeps NFD words whole)."""
    if text.isascii():
        return _ASCII_WORDS.findall(text)
    return _TERM_RE.findall(text) if _TERM_RE is not None else _scan(text, True)


def _unique(items: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


# ---------------------------------------------------------------------------------------------
# Query planning (§4.1)
# ---------------------------------------------------------------------------------------------


def build_fts_query(raw: str) -> str | None:
    """``hybrid.ts`` buildFtsQuery: quoted word tokens joined with AND; no tokens -> None."""
    tokens = [t for t in word_tokens(raw or "") if t]
    if not tokens:
        return None
    return " AND ".join(f'"{t.replace(chr(34), "")}"' for t in tokens)


# sqlite3Fts5UnicodeIsdiacritic: the marks unicode61 removes (remove_diacritics=1).
_UNICODE61_DIACRITIC = re.compile(
    "[\u0300-\u0304\u0306-\u030c\u030f\u0311\u031b\u0323-\u0328\u032d\u032e\u0330\u0331]"
)


def _simple_case_fold(ch: str) -> str:
    upper = ch.upper()
    folded = upper.lower() if len(upper) == 1 else ch.lower()
    return folded if len(folded) == 1 else ch


def _unicode61_key(term: str) -> str:
    """What unicode61 makes of ``term`` (case fold, diacritics dropped, other marks split)."""
    key: list[str] = []
    for ch in term:
        if _UNICODE61_DIACRITIC.match(ch):
            continue
        if unicodedata.category(ch)[0] == "M":
            key.append(" ")
            continue
        decomposed = unicodedata.normalize("NFD", ch)
        base = _simple_case_fold(decomposed[0]) if decomposed else ""
        if len(decomposed) == 2 and _UNICODE61_DIACRITIC.match(decomposed[1]) and "a" <= base <= "z":
            key.append(base)
            continue
        key.append(_simple_case_fold(ch))
    return re.sub(" +", " ", "".join(key)).strip()


@functools.lru_cache(maxsize=4096)
def canonical_forms(term: str, tokenizer: str | None) -> tuple[str, ...]:
    """The distinct NFC/NFD spellings of ``term`` that the FTS tokenizer would not fold together."""
    if not tokenizer:
        return (term,)
    seen: set[str] = set()
    out: list[str] = []
    for form in (term, unicodedata.normalize("NFC", term), unicodedata.normalize("NFD", term)):
        key = _unicode61_key(form) if tokenizer == "unicode61" else "".join(map(_simple_case_fold, form))
        if key in seen:
            continue
        seen.add(key)
        out.append(form)
    return tuple(out)


_STEM_SUFFIXES = ("ations", "ation", "ingly", "ings", "ing", "edly", "ed", "ies", "es", "s", "ly", "est", "er", "e")
_ASCII_WORD = re.compile(r"[a-z]+")


def light_stem(word: str) -> str | None:
    """A crude English stem (>= 4 letters) for prefix probes: ``respiring``/``respire`` -> ``respir``.

    memory-core addition: used only in the OR probe of the conversational fallback, as an extra
    ``"stem"*`` alternative, so inflected query words reach their lemma (WordNet bench: +0.02-0.14
    nDCG@10 for keyword-only). None when the word is not plain ASCII or too short.
    """
    w = word.lower()
    if len(w) < 5 or not _ASCII_WORD.fullmatch(w):
        return None
    for suffix in _STEM_SUFFIXES:
        if w.endswith(suffix) and len(w) - len(suffix) >= 4:
            return w[: -len(suffix)]
    return None


def _match_from_terms(terms: Sequence[str], tokenizer: str | None, match_any: bool = False) -> str | None:
    if not terms:
        return None
    parts = []
    for term in _unique(terms):
        alts = [f'"{f.replace(chr(34), "")}"' for f in canonical_forms(term, tokenizer)]
        stem = light_stem(term) if (match_any and tokenizer == "unicode61") else None
        if stem:
            alts.append(f'"{stem}"*')
        parts.append(alts[0] if len(alts) == 1 else "(" + " OR ".join(alts) + ")")
    return (" OR " if match_any else " AND ").join(parts)


def plan_keyword_search(
    query: str, tokenizer: str = "unicode61", *, match_any: bool = False, extra_terms: Sequence[str] = ()
) -> dict[str, Any]:
    """``planKeywordSearch``: ``{match_query, substring_terms, tokens}``.

    Canonical NFC/NFD variants are on; with the trigram tokenizer terms shorter than three code
    points (in any canonical form) become escaped LIKE substring terms.
    """
    tokens = _unique(t for t in query_terms(query or "") if t)[:MAX_QUERY_TERMS]
    if extra_terms:
        seen = {unicodedata.normalize("NFC", t).lower() for t in tokens}
        for term in query_terms(" ".join(extra_terms)):
            key = unicodedata.normalize("NFC", term).lower()
            if key not in seen:
                seen.add(key)
                tokens.append(term)
    if tokenizer != "trigram":
        return {"match_query": _match_from_terms(tokens, tokenizer, match_any), "substring_terms": [], "tokens": tokens}
    match_terms: list[str] = []
    substring_terms: list[str] = []
    for token in tokens:
        if any(len(f) < 3 for f in canonical_forms(token, tokenizer)):
            substring_terms.append(token)
        else:
            match_terms.append(token)
    return {
        "match_query": _match_from_terms(match_terms, tokenizer, match_any),
        "substring_terms": substring_terms,
        "tokens": tokens,
    }


def escape_like(term: str) -> str:
    return term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def bm25_rank_to_score(rank: float) -> float:
    """Map an FTS5 bm25() rank to (0, 1], preserving order (§4.3)."""
    try:
        r = float(rank)
    except (TypeError, ValueError):
        return 1 / (1 + 999)
    if not math.isfinite(r):
        return 1 / (1 + 999)
    if r < 0:
        rel = -r
        return rel / (1 + rel)
    return 1 / (1 + r)


_ASTRAL = re.compile("[\U00010000-\U0010FFFF]")


def truncate_snippet(text: str, limit: int = SNIPPET_MAX_CHARS) -> str:
    """Truncate to ``limit`` UTF-16 code units without splitting a surrogate pair."""
    if len(text) <= limit // 2:
        return text
    if not _ASTRAL.search(text, 0, limit + 1):
        return text[:limit]  # all BMP: code points = UTF-16 units
    units = 0
    for i, ch in enumerate(text):
        units += 2 if ord(ch) > 0xFFFF else 1
        if units > limit:
            return text[:i]
    return text


_ASCII_WORD_TOKEN = re.compile(r"[a-z0-9_]+")


def _lower_tokens(text: str) -> list[str]:
    low = text.lower()
    if low.isascii():
        return _ASCII_WORD_TOKEN.findall(low)
    return word_tokens(unicodedata.normalize("NFC", low))


def score_fallback_keyword_result(*, query: str, path: str, text: str, fts_score: float,
                                  query_tokens: Sequence[str] | None = None) -> float:
    """The boosted lexical score of §4.4 (``scoreFallbackKeywordResult``), capped at 1."""
    q_tokens = list(query_tokens) if query_tokens is not None else _unique(_lower_tokens(query))
    if not q_tokens:
        return fts_score
    text_set = set(_lower_tokens(text))
    path_lower = unicodedata.normalize("NFC", path).lower()
    overlap = sum(1 for t in q_tokens if t in text_set)
    unique_overlap = overlap / max(len(q_tokens), 1)
    density = overlap / max(len(text_set), 1)
    path_boost = sum(0.18 for t in q_tokens if t in path_lower)
    length_boost = min(len(text) / 160, 0.18)
    return min(1.0, fts_score + unique_overlap * 0.45 + density * 0.2 + path_boost + length_boost)


def _source_clause(sources: Sequence[str] | None, column: str) -> tuple[str, list[str]]:
    if not sources:
        return "", []
    return f" AND {column} IN ({','.join('?' * len(sources))})", list(sources)


def _like_clauses(terms: Sequence[str], tokenizer: str | None, column: str = "text") -> tuple[str, list[str]]:
    sql: list[str] = []
    params: list[str] = []
    for term in terms:
        forms = canonical_forms(term, tokenizer or "unicode61")
        sql.append("(" + " OR ".join(f"{column} LIKE ? ESCAPE '\\'" for _ in forms) + ")")
        params.extend(f"%{escape_like(f)}%" for f in forms)
    return "".join(f" AND {s}" for s in sql), params


# ---------------------------------------------------------------------------------------------
# Body search (§4.2, §4.4)
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


def body_search_sql(
    plan: dict[str, Any], *, limit: int, sources: Sequence[str] | None, tokenizer: str, like_only: bool = False
) -> tuple[str, list[Any], str]:
    """The SQL the body search runs, with its parameters and its kind (``match`` or ``like``).

    MATCH searches rank by bm25 on the FTS index alone (rowids + rank); the chunk rows are then
    read from ``memory_index_chunks`` by rowid, which drops orphaned FTS rows and applies the
    source filter without reading UNINDEXED FTS columns for every matching row.
    """
    if plan["match_query"] and not like_only:
        like_sql, like_params = _like_clauses(plan["substring_terms"], tokenizer, "text")
        sql = (
            f"SELECT rowid, bm25({FTS_TABLE}) AS rank FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH ?{like_sql}"
            f" ORDER BY rank ASC LIMIT ?"
        )
        return sql, [plan["match_query"], *like_params, int(limit)], "match"
    src_sql, src_params = _source_clause(sources, "f.source")
    exists = f" AND EXISTS (SELECT 1 FROM {CHUNKS_TABLE} c WHERE c.id = f.id)"
    terms = plan["substring_terms"] if not like_only else plan["tokens"]
    like_sql, like_params = _like_clauses(terms, tokenizer, "f.text")
    sql = (
        f"SELECT f.id, f.path, f.source, f.start_line, f.end_line, f.text, NULL AS rank"
        f" FROM {FTS_TABLE} f WHERE 1{like_sql}{exists}{src_sql} ORDER BY f.rowid LIMIT ?"
    )
    return sql, [*like_params, *src_params, int(limit)], "like"


def _match_rows(conn: apsw.Connection, plan: dict[str, Any], *, limit: int, sources, tokenizer) -> list[tuple]:
    filt = _needs_source_filter(conn, sources)
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


def _body_rows(conn: apsw.Connection, plan: dict[str, Any], *, limit: int, sources, tokenizer) -> tuple[list[tuple], str, str | None]:
    if not plan["match_query"] and not plan["substring_terms"]:
        return [], "none", None
    try:
        if plan["match_query"]:
            return _match_rows(conn, plan, limit=limit, sources=sources, tokenizer=tokenizer), "match", None
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
) -> dict[str, Any]:
    """Body FTS search: ``{hits, kind, error, match_query}``; LIKE-only hits get text_score 0 (D3)."""
    plan = plan_keyword_search(query, tokenizer, match_any=match_any, extra_terms=extra_terms)
    rows, kind, error = _body_rows(conn, plan, limit=max(1, int(limit)), sources=sources, tokenizer=tokenizer)
    rq = ranking_query if ranking_query is not None else query
    rq_tokens = _unique(_lower_tokens(rq))
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
# Path search and exact-path tiers (§4.5)
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
    src_sql, src_params = _source_clause(sources, "source")
    try:
        found = []
        for path, source in _exact_candidate_rows(conn, exact_q, tokenizer, src_sql, src_params):
            spec = exact_path_specificity(exact_q, path)
            if spec:
                found.append((path, source, spec))
        found.sort(key=lambda t: (t[0], t[1]))
        for path, source, spec in found[:EXACT_PATH_CANDIDATE_LIMIT]:
            first = _first_chunk(conn, path, source)
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
) -> dict[str, Any]:
    """Exact-path candidates (<= 200) plus partial path-FTS hits (<= limit), each as the file's first chunk.

    ``exact_hits`` (from :func:`exact_path_search`) skips recomputing the exact tier for every probe.
    """
    hits: dict[str, dict[str, Any]] = {}
    error = None
    src_sql, src_params = _source_clause(sources, "source")
    try:
        if exact_hits is None:
            ex = exact_path_search(conn, exact_path_query if exact_path_query is not None else query,
                                   sources=sources, tokenizer=tokenizer)
            exact_hits, error = ex["hits"], ex["error"]
        for hit in exact_hits:
            hits[hit["id"]] = dict(hit)
        plan = plan_keyword_search(query, tokenizer)
        if plan["match_query"] or plan["substring_terms"]:
            if plan["match_query"]:
                like_sql, like_params = _like_clauses(plan["substring_terms"], tokenizer, "path")
                sql = (f"SELECT path, source, bm25({PATH_FTS_TABLE}) AS rank FROM {PATH_FTS_TABLE}"
                       f" WHERE {PATH_FTS_TABLE} MATCH ?{like_sql}{src_sql} ORDER BY rank ASC LIMIT ?")
                params = [plan["match_query"], *like_params, *src_params, int(limit) + len(hits)]
            else:
                like_sql, like_params = _like_clauses(plan["substring_terms"], tokenizer, "path")
                sql = (f"SELECT path, source, NULL FROM {PATH_FTS_TABLE} WHERE 1{like_sql}{src_sql}"
                       " ORDER BY rowid LIMIT ?")
                params = [*like_params, *src_params, int(limit) + len(hits)]
            try:
                prow = list(conn.execute(sql, params))
            except apsw.Error as exc:
                error = f"{type(exc).__name__}: {exc}"
                prow = []
            added = 0
            for path, source, rank in prow:
                if added >= limit:
                    break
                first = _first_chunk(conn, path, source)
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
    """Merge keyword hit lists by chunk id: scores take the max, body snippet wins (§4.5)."""
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
) -> dict[str, Any]:
    """One keyword probe: body search + path search, merged by id and limited."""
    body = body_search(conn, query, limit=limit, sources=sources, tokenizer=tokenizer,
                       ranking_query=ranking_query, boost=boost, match_any=match_any, extra_terms=extra_terms)
    path = path_search(conn, query, limit=limit, sources=sources, tokenizer=tokenizer,
                       exact_path_query=exact_path_query, exact_hits=exact_hits)
    hits = limit_keyword_hits(merge_keyword_hits([body["hits"], path["hits"]]), limit)
    errors = [e for e in (body["error"], path["error"]) if e]
    return {"hits": hits, "body_kind": body["kind"], "match_query": body["match_query"],
            "substring_terms": body["substring_terms"], "errors": errors,
            "body_count": len(body["hits"]), "path_count": len(path["hits"])}


# ---------------------------------------------------------------------------------------------
# Conversational keyword fallback (§4.6, query-expansion.ts)
# ---------------------------------------------------------------------------------------------

STOP_WORDS_EN = frozenset("""a an the this that these those i me my we our you your he she it they them is are was were be
been being have has had do does did will would could should can may might in on at to for of with by from about into
through during before after above below between under over and or but if then because as while when where what which
who how why yesterday today tomorrow earlier later recently ago just now thing things stuff something anything
everything nothing please help find show get tell give""".split())
STOP_WORDS_ES = frozenset("""el la los las un una unos unas este esta ese esa yo me mi nosotros nosotras tu tus usted
ustedes ellos ellas de del a en con por para sobre entre y o pero si porque como es son fue fueron ser estar haber
tener hacer ayer hoy mañana antes despues después ahora recientemente que qué cómo cuando cuándo donde dónde porqué
favor ayuda""".split())
STOP_WORDS_PT = frozenset("""o a os as um uma uns umas este esta esse essa eu me meu minha nos nós você vocês ele ela
eles elas de do da em com por para sobre entre e ou mas se porque como é são foi foram ser estar ter fazer ontem hoje
amanhã antes depois agora recentemente que quê quando onde porquê favor ajuda""".split())
STOP_WORDS_AR = frozenset("""ال و أو لكن ثم بل أنا نحن هو هي هم هذا هذه ذلك تلك هنا هناك من إلى الى في على عن مع بين ل ب ك
كان كانت يكون تكون صار أصبح يمكن ممكن بالأمس امس اليوم غدا الآن قبل بعد مؤخرا لماذا كيف ماذا متى أين هل فضلا ساعد""".split()) | {"من فضلك"}
STOP_WORDS_KO = frozenset("""은 는 이 가 을 를 의 에 에서 로 으로 와 과 도 만 까지 부터 한테 에게 께 처럼 같이 보다 마다 밖에 대로 나 나는
내가 나를 너 우리 저 저희 그 그녀 그들 이것 저것 그것 여기 저기 거기 있다 없다 하다 되다 이다 아니다 주다 오다 가다 것 거 등 수 때
곳 중 분 잘 더 또 매우 정말 아주 많이 너무 좀 그리고 하지만 그래서 그런데 그러나 또는 그러면 왜 어떻게 뭐 언제 어디 누구 무엇 어떤
어제 오늘 내일 최근 지금 아까 나중 전에 제발 부탁""".split())
STOP_WORDS_JA = frozenset("""これ それ あれ この その あの ここ そこ あそこ する した して です ます いる ある なる できる の こと
もの ため そして しかし また でも から まで より だけ なぜ どう 何 いつ どこ 誰 どれ 昨日 今日 明日 最近 今 さっき 前 後""".split())
STOP_WORDS_ZH = frozenset("""我 我们 你 你们 他 她 它 他们 这 那 这个 那个 这些 那些 的 了 着 过 得 地 吗 呢 吧 啊 呀 嘛 啦 是 有 在 被 把 给
让 用 到 去 来 做 说 看 找 想 要 能 会 可以 和 与 或 但 但是 因为 所以 如果 虽然 而 也 都 就 还 又 再 才 只 之前 以前 之后 以后 刚才
现在 昨天 今天 明天 最近 东西 事情 事 什么 哪个 哪些 怎么 为什么 多少 请 帮 帮忙 告诉""".split())
_ALL_STOP = STOP_WORDS_EN | STOP_WORDS_ES | STOP_WORDS_PT | STOP_WORDS_AR | STOP_WORDS_ZH | STOP_WORDS_KO | STOP_WORDS_JA
_KO_PARTICLES = sorted("에서 으로 에게 한테 처럼 같이 보다 까지 부터 마다 밖에 대로 은 는 이 가 을 를 의 에 로 와 과 도 만".split(),
                       key=len, reverse=True)

_SEGMENT_SPLIT = re.compile(r"[\s]+")
_JP_KANA = re.compile("[\u3040-\u30ff]")
_JP_PARTS = re.compile("[a-z0-9_]+|[\u30a0-\u30ffー]+|[\u4e00-\u9fff]+|[\u3040-\u309f]{2,}")
_HAN = re.compile("[\u4e00-\u9fff]")
_HAN_ONLY = re.compile("^[\u4e00-\u9fff]+$")
_HANGUL = re.compile("[\uac00-\ud7af\u3131-\u3163]")
_ASCII_ALPHA = re.compile("^[a-zA-Z]+$")
_DIGITS = re.compile(r"^\d+$")


def is_stop_word(token: str) -> bool:
    return token in _ALL_STOP


def _split_segments(text: str) -> list[str]:
    # split on whitespace and Unicode punctuation (\p{P}); symbols stay inside segments
    out: list[str] = []
    cur: list[str] = []
    for ch in text:
        if ch.isspace() or unicodedata.category(ch).startswith("P"):
            if cur:
                out.append("".join(cur))
                cur = []
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur))
    return out


def _strip_ko_particle(token: str) -> str | None:
    for particle in _KO_PARTICLES:
        if len(token) > len(particle) and token.endswith(particle):
            return token[: -len(particle)]
    return None


def _useful_ko_stem(stem: str) -> bool:
    if re.search("[\uac00-\ud7af]", stem):
        return len(stem) >= 2
    return bool(re.fullmatch("[a-z0-9_]+", stem, re.IGNORECASE))


def _expansion_tokens(text: str, tokenizer: str) -> list[str]:
    trigram = tokenizer == "trigram"
    tokens: list[str] = []
    for seg in _split_segments(text.lower()):
        if _JP_KANA.search(seg):
            for part in _JP_PARTS.findall(seg):
                tokens.append(part)
                if _HAN_ONLY.match(part) and not trigram:
                    tokens.extend(part[i : i + 2] for i in range(len(part) - 1))
        elif _HAN.search(seg):
            chars = [c for c in seg if _HAN.match(c)]
            if trigram:
                tokens.append("".join(chars))
            else:
                tokens.extend(chars)
                tokens.extend(chars[i] + chars[i + 1] for i in range(len(chars) - 1))
        elif _HANGUL.search(seg):
            stem = _strip_ko_particle(seg)
            stem_stop = stem is not None and stem in STOP_WORDS_KO
            if seg not in STOP_WORDS_KO and not stem_stop:
                tokens.append(seg)
            if stem and stem not in STOP_WORDS_KO and _useful_ko_stem(stem):
                tokens.append(stem)
        else:
            tokens.append(seg)
    return tokens


def _valid_keyword(token: str) -> bool:
    if not token:
        return False
    if _ASCII_ALPHA.match(token) and len(token) < 3:
        return False
    if _DIGITS.match(token):
        return False
    if all(unicodedata.category(c)[0] in "PS" for c in token):
        return False
    return True


def extract_keywords(query: str, tokenizer: str = "unicode61") -> list[str]:
    """``extractKeywords``: stop-word-filtered keywords (7 languages, CJK unigrams + bigrams)."""
    out: list[str] = []
    seen: set[str] = set()
    for token in _expansion_tokens(query or "", tokenizer):
        if is_stop_word(token) or not _valid_keyword(token) or token in seen:
            continue
        seen.add(token)
        out.append(token)
    return out


def fallback_terms(query: str, tokenizer: str = "unicode61") -> list[str]:
    """Keywords for the extra probes: not the whole query itself, at most 6."""
    whole = (query or "").strip().lower()
    return [k for k in extract_keywords(query, tokenizer) if k != whole][:KEYWORD_FALLBACK_SEARCH_TERM_LIMIT]


def keyword_search_with_fallback(
    conn: apsw.Connection,
    query: str,
    *,
    limit: int,
    sources: Sequence[str] | None = None,
    tokenizer: str = "unicode61",
    or_fallback: bool = True,
) -> dict[str, Any]:
    """``searchKeywordWithFallback``: the strict query, then (when thin) keyword probes.

    memory-core addition (``or_fallback``, on by default): before the per-keyword probes, one
    BM25-ranked OR probe over all the query's keywords (up to 64, light-stem prefixes added); the
    per-keyword probes (first 6 keywords) only run
    when the OR probe could not run cleanly and the pool is still thin. Upstream's per-term probes rank each term alone, so a
    conversational query lost the BM25 evidence that several terms co-occur.
    """
    limit = max(1, int(limit))
    # the exact-path tier depends only on the original query: compute it once for every probe
    exact = exact_path_search(conn, query, sources=sources, tokenizer=tokenizer)
    full = keyword_search(conn, query, limit=limit, sources=sources, tokenizer=tokenizer, exact_hits=exact["hits"])
    if exact["error"]:
        full["errors"].append(exact["error"])
    info: dict[str, Any] = {"match_query": full["match_query"], "substring_terms": full["substring_terms"],
                            "body_kind": full["body_kind"], "errors": list(full["errors"]), "probes": [],
                            "full_count": len(full["hits"])}
    hits = full["hits"]
    if sum(1 for h in hits if h["exact"] == 0) >= limit:
        info["hits"] = hits
        return info
    terms = fallback_terms(query, tokenizer)
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
        whole = (query or "").strip().lower()
        or_terms = [k for k in extract_keywords(query, tokenizer) if k != whole][:MAX_QUERY_TERMS] or terms
        probe = keyword_search(conn, " ".join(or_terms), limit=limit, sources=sources, tokenizer=tokenizer,
                               ranking_query=query, match_any=True, exact_hits=exact["hits"])
        info["probes"].append({"or": probe["match_query"], "count": len(probe["hits"])})
        info["errors"].extend(probe["errors"])
        sets.append(probe["hits"])
    # An OR probe that ran cleanly already found every row holding any keyword (up to ``limit``):
    # per-term probes would only re-find those rows with single-term BM25 scores that ignore the
    # other query words, letting one incidental word outrank rows that match several.
    or_complete = or_fallback and not probe["errors"]
    if not or_complete and sum(1 for h in merge_keyword_hits(sets) if h["exact"] == 0) < limit:
        for term in terms:
            probe = keyword_search(conn, term, limit=limit, sources=sources, tokenizer=tokenizer,
                                   ranking_query=query, exact_hits=exact["hits"])
            info["probes"].append({"term": term, "count": len(probe["hits"])})
            info["errors"].extend(probe["errors"])
            sets.append(probe["hits"])
    info["hits"] = limit_keyword_hits(merge_keyword_hits(sets), limit)
    return info


def explain_fts(raw: str, *, tokenizer: str = "unicode61", limit: int = 24, sources: Sequence[str] | None = None) -> dict[str, Any]:
    """The explain twin of the keyword search: FTS strings, keyword probes and the body SQL."""
    plan = plan_keyword_search(raw, tokenizer)
    sql, params, kind = body_search_sql(plan, limit=limit, sources=sources, tokenizer=tokenizer)
    terms = fallback_terms(raw, tokenizer)
    return {
        "fts_query": build_fts_query(raw),
        "match_query": plan["match_query"],
        "substring_terms": plan["substring_terms"],
        "tokens": plan["tokens"],
        "body_sql": sql,
        "body_params": params,
        "body_kind": kind if (plan["match_query"] or plan["substring_terms"]) else "none",
        "fallback_terms": terms,
        "or_probe": plan_keyword_search(" ".join(terms), tokenizer, match_any=True)["match_query"] if terms else None,
    }


# ---------------------------------------------------------------------------------------------
# Recall metadata, read after retrieval in the same snapshot (§6.1, F30)
# ---------------------------------------------------------------------------------------------


def recall_metadata(conn: apsw.Connection, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Metadata per chunk id (left joins); ids whose chunk is gone are absent from the result."""
    out: dict[str, dict[str, Any]] = {}
    ids = list(dict.fromkeys(ids))
    for i in range(0, len(ids), 500):
        batch = ids[i : i + 500]
        rows = conn.execute(
            f"SELECT c.id, r.importance, r.triggers, r.project_key, p.origin_class, p.session_kind,"
            f" p.observed_at, p.supersedes_key, s.mtime, c.text FROM {CHUNKS_TABLE} c"
            " LEFT JOIN memory_index_chunk_recall_metadata r ON r.chunk_id = c.id"
            " LEFT JOIN memory_index_chunk_provenance p ON p.chunk_id = c.id"
            " LEFT JOIN memory_index_sources s ON s.path = c.path AND s.source = c.source"
            f" WHERE c.id IN ({','.join('?' * len(batch))})",
            batch,
        )
        for cid, imp, trig, proj, origin, kind, observed, supersedes, mtime, text in rows:
            out[cid] = {
                "importance": imp, "triggers": trig, "project_key": proj,
                "provenance": None if origin is None else {
                    "origin_class": origin, "session_kind": kind, "observed_at": observed,
                    **({"supersedes_key": supersedes} if supersedes is not None else {}),
                },
                "source_mtime": mtime,
                "text": text,
            }
    return out
