"""The keyword query planner (upstream `memory/hybrid.ts`, `memory/keyword-query.ts`) and its explain twin.
Pure: no connection, runs in workers.

Turns raw query text into FTS5 MATCH strings, LIKE substring terms and the body SQL; scores a
keyword hit (upstream `memory/manager-search.ts`). :func:`explain_fts` shows what a search would run.
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

from host_facades.retrieval.keywords import KEYWORD_FALLBACK_SEARCH_TERM_LIMIT, probe_keywords

try:  # the `regex` module knows \p{L}; the fallback below is equivalent, only slower
    import regex as _regex
except ImportError:  # pragma: no cover - exercised only without `regex`
    _regex = None



SNIPPET_MAX_CHARS = 700
FTS_TABLE = "memory_index_chunks_fts"
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


def unique_terms(items: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


# ---------------------------------------------------------------------------------------------
# Query planning (upstream `memory/keyword-query.ts`)
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
    if not tokenizer or term.isascii():  # ASCII is its own NFC and NFD: one form
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
    for term in unique_terms(terms):
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
    tokens = unique_terms(t for t in query_terms(query or "") if t)[:MAX_QUERY_TERMS]
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
    """Map an FTS5 bm25() rank to (0, 1], preserving order (upstream `memory/hybrid.ts`,
    ``bm25RankToScore``)."""
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
    if text.isascii() or not _ASTRAL.search(text, 0, limit + 1):
        return text[:limit]  # all BMP: code points = UTF-16 units
    units = 0
    for i, ch in enumerate(text):
        units += 2 if ord(ch) > 0xFFFF else 1
        if units > limit:
            return text[:i]
    return text


# every other ASCII character as a space: ``lowered_ascii.translate(ASCII_SEPARATORS).split()`` is
# ``re.findall(r"[a-z0-9_]+", lowered_ascii)`` (the same runs, in order) in half the time
ASCII_SEPARATORS = str.maketrans({chr(i): " " for i in range(128)
                                  if not (chr(i).islower() or chr(i).isdigit() or chr(i) == "_")})


def lower_tokens(text: str) -> list[str]:
    low = text.lower()
    if low.isascii():
        return low.translate(ASCII_SEPARATORS).split()
    return word_tokens(unicodedata.normalize("NFC", low))


def score_fallback_keyword_result(*, query: str, path: str, text: str, fts_score: float,
                                  query_tokens: Sequence[str] | None = None) -> float:
    """The boosted lexical score of upstream `memory/manager-search.ts` (``scoreFallbackKeywordResult``),
    capped at 1."""
    q_tokens = list(query_tokens) if query_tokens is not None else unique_terms(lower_tokens(query))
    if not q_tokens:
        return fts_score
    length_boost = min(len(text) / 160, 0.18)
    # Every boost is >= 0 and float addition is monotone, so the sum below is >= fts_score +
    # length_boost: when that already reaches the cap the answer is 1.0 without tokenizing the text
    # (most hits of a long query: its BM25 score alone is near 1).
    if fts_score + length_boost >= 1.0:
        return 1.0
    text_set = set(lower_tokens(text))
    path_lower = unicodedata.normalize("NFC", path).lower()
    overlap = sum(1 for t in q_tokens if t in text_set)
    unique_overlap = overlap / max(len(q_tokens), 1)
    density = overlap / max(len(text_set), 1)
    path_boost = sum(0.18 for t in q_tokens if t in path_lower)
    return min(1.0, fts_score + unique_overlap * 0.45 + density * 0.2 + path_boost + length_boost)


def source_clause(sources: Sequence[str] | None, column: str) -> tuple[str, list[str]]:
    if not sources:
        return "", []
    return f" AND {column} IN ({','.join('?' * len(sources))})", list(sources)


def like_clauses(terms: Sequence[str], tokenizer: str | None, column: str = "text") -> tuple[str, list[str]]:
    sql: list[str] = []
    params: list[str] = []
    for term in terms:
        forms = canonical_forms(term, tokenizer or "unicode61")
        sql.append("(" + " OR ".join(f"{column} LIKE ? ESCAPE '\\'" for _ in forms) + ")")
        params.extend(f"%{escape_like(f)}%" for f in forms)
    return "".join(f" AND {s}" for s in sql), params


def body_search_sql(
    plan: dict[str, Any], *, limit: int, sources: Sequence[str] | None, tokenizer: str, like_only: bool = False
) -> tuple[str, list[Any], str]:
    """The SQL the body search runs, with its parameters and its kind (``match`` or ``like``).

    MATCH searches rank by bm25 on the FTS index alone (rowids + rank); the chunk rows are then
    read from ``memory_index_chunks`` by rowid, which drops orphaned FTS rows and applies the
    source filter without reading UNINDEXED FTS columns for every matching row.
    """
    if plan["match_query"] and not like_only:
        like_sql, like_params = like_clauses(plan["substring_terms"], tokenizer, "text")
        sql = (
            f"SELECT rowid, bm25({FTS_TABLE}) AS rank FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH ?{like_sql}"
            f" ORDER BY rank ASC LIMIT ?"
        )
        return sql, [plan["match_query"], *like_params, int(limit)], "match"
    src_sql, src_params = source_clause(sources, "f.source")
    exists = f" AND EXISTS (SELECT 1 FROM {CHUNKS_TABLE} c WHERE c.id = f.id)"
    terms = plan["substring_terms"] if not like_only else plan["tokens"]
    like_sql, like_params = like_clauses(terms, tokenizer, "f.text")
    sql = (
        f"SELECT f.id, f.path, f.source, f.start_line, f.end_line, f.text, NULL AS rank"
        f" FROM {FTS_TABLE} f WHERE 1{like_sql}{exists}{src_sql} ORDER BY f.rowid LIMIT ?"
    )
    return sql, [*like_params, *src_params, int(limit)], "like"


def explain_fts(raw: str, *, tokenizer: str = "unicode61", limit: int = 24, sources: Sequence[str] | None = None) -> dict[str, Any]:
    """The explain twin of the keyword search: FTS strings, keyword probes and the body SQL."""
    plan = plan_keyword_search(raw, tokenizer)
    sql, params, kind = body_search_sql(plan, limit=limit, sources=sources, tokenizer=tokenizer)
    keywords = probe_keywords(raw, tokenizer)
    terms = keywords[:KEYWORD_FALLBACK_SEARCH_TERM_LIMIT]  # the per-term probes
    or_terms = keywords[:MAX_QUERY_TERMS]  # the OR probe (keyword_search_with_fallback): all of them
    return {
        "fts_query": build_fts_query(raw),
        "match_query": plan["match_query"],
        "substring_terms": plan["substring_terms"],
        "tokens": plan["tokens"],
        "body_sql": sql,
        "body_params": params,
        "body_kind": kind if (plan["match_query"] or plan["substring_terms"]) else "none",
        "fallback_terms": terms,
        "or_probe": plan_keyword_search(" ".join(or_terms), tokenizer, match_any=True)["match_query"] if or_terms else None,
    }
