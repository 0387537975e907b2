"""The keyword stage's statements: what a long query runs on one snapshot, and that the source
filter is probed once per search (not once per probe) with the same answers."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from host_facades.db.sqlite_read import open_readonly
from host_facades.retrieval import fts_query, fts_search
from tests.search_fixtures import build_index

SOURCE_PROBE = "SELECT EXISTS(SELECT 1 FROM memory_index_chunks WHERE source = ?)"


def _traced(conn):
    statements: list[str] = []

    def trace(cursor, sql, bindings):
        statements.append(sql)
        return True

    conn.exec_trace = trace
    return statements


def test_the_source_filter_is_probed_once_for_every_probe_of_a_search(tmp_path):
    db = build_index(tmp_path / "s.sqlite", [
        {"id": "m1", "path": "memory/rocket.md", "text": "the rocket deploy key rotates every quarter"},
        {"id": "m2", "path": "memory/coffee.md", "text": "dark roast coffee from the rocket cafe"},
        {"id": "s1", "path": "sessions/a.jsonl", "source": "sessions", "text": "rocket deploy key in vault"},
    ])
    conn = open_readonly(db)
    statements = _traced(conn)
    # a sentence the strict AND query cannot match (7 words: not a long query): the strict probe, then
    # the OR probe, both MATCH
    found = fts_search.keyword_search_with_fallback(conn, "where does the rocket deploy key live",
                                                    limit=10, sources=["memory"])
    assert [s for s in statements if s == SOURCE_PROBE] == [SOURCE_PROBE]
    assert sum("MATCH" in s and "bm25(memory_index_chunks_fts)" in s for s in statements) == 2
    assert sorted(h["id"] for h in found["hits"]) == ["m1", "m2"]  # the session chunk is filtered out
    both = fts_search.keyword_search_with_fallback(conn, "where does the rocket deploy key live",
                                                   limit=10, sources=["memory", "sessions"])
    assert sorted(h["id"] for h in both["hits"]) == ["m1", "m2", "s1"]
    conn.close()


BODY_MATCH = "bm25(memory_index_chunks_fts)"


def test_a_long_query_skips_the_strict_pass_and_keeps_what_the_or_probe_ranks(tmp_path):
    db = build_index(tmp_path / "s.sqlite", [
        {"id": "all", "path": "memory/all.md", "text": "where does the rocket deploy key live today, asks the crew"},
        {"id": "some", "path": "memory/some.md", "text": "the rocket deploy key rotates every quarter"},
        {"id": "none", "path": "memory/none.md", "text": "dark roast coffee"},
    ])
    conn = open_readonly(db)
    statements = _traced(conn)
    found = fts_search.keyword_search_with_fallback(conn, "where does the rocket deploy key live today",
                                                    limit=10, sources=["memory"])
    # 8 distinct words: the OR probe alone, which still finds the chunk holding every word first
    assert sum(BODY_MATCH in s for s in statements) == 1
    assert [h["id"] for h in found["hits"]] == ["all", "some"]
    assert found["strict_skipped"] == 8 and found["full_count"] == 0 and "strict" not in found["statements_ms"]
    statements.clear()
    short = fts_search.keyword_search_with_fallback(conn, "where does the rocket deploy key live",
                                                    limit=10, sources=["memory"])
    assert sum(BODY_MATCH in s for s in statements) == 2 and "strict_skipped" not in short
    statements.clear()
    # without the OR probe (upstream's per-term probes) the strict pass runs whatever the length
    upstream = fts_search.keyword_search_with_fallback(conn, "where does the rocket deploy key live today",
                                                       limit=10, sources=["memory"], or_fallback=False)
    assert upstream["full_count"] == 1 and "strict_skipped" not in upstream
    conn.close()


def test_explain_shows_the_or_probe_that_runs_with_every_keyword(tmp_path):
    """The per-term probes take the first 6 keywords, the OR probe all of them (up to 64):
    ``explain_fts``'s ``or_probe`` is the MATCH string the OR probe binds, not one of the first 6."""
    db = build_index(tmp_path / "s.sqlite", [
        {"id": "m1", "path": "memory/a.md", "text": "rocket deploy key vault quarter crew coffee roast harbour"},
    ])
    conn = open_readonly(db)
    bound: list[str] = []

    def trace(cursor, sql, bindings):
        if BODY_MATCH in sql and bindings:
            bound.extend(b for b in bindings if isinstance(b, str) and " OR " in b)
        return True

    conn.exec_trace = trace
    query = "rocket deploy key vault quarter crew coffee roast harbour"
    fts_search.keyword_search_with_fallback(conn, query, limit=10, sources=["memory"])
    plan = fts_query.explain_fts(query)
    assert len(plan["fallback_terms"]) == 6 and bound == [plan["or_probe"]]
    assert all(word in plan["or_probe"] for word in ("coffee", "roast", "harbour"))  # past the first 6
    conn.close()


def test_a_long_query_of_stop_words_alone_keeps_the_strict_pass(tmp_path):
    db = build_index(tmp_path / "s.sqlite", [
        {"id": "m1", "path": "memory/a.md", "text": "it was what we had to do and then some of it was done"},
    ])
    conn = open_readonly(db)
    # no keyword for an OR probe: skipping the strict query would leave nothing to search with
    found = fts_search.keyword_search_with_fallback(conn, "what we had to do and then it was", limit=10,
                                                    sources=["memory"])
    assert [h["id"] for h in found["hits"]] == ["m1"] and "strict_skipped" not in found
    conn.close()


def test_an_ascii_snippet_is_cut_at_the_limit_and_an_astral_one_between_pairs():
    ascii_text = "a" * 1000
    assert fts_query.truncate_snippet(ascii_text) == "a" * 700
    astral = "a" * 699 + "\U0001F600" + "b" * 400  # the emoji takes units 700-701: cut before it
    assert fts_query.truncate_snippet(astral) == "a" * 699
    assert fts_query.truncate_snippet("short") == "short"


def _boosted_score_in_full(query_tokens, path, text, fts_score):
    """score_fallback_keyword_result without its early return: every boost summed, then capped."""
    text_set = set(fts_query.lower_tokens(text))
    overlap = sum(1 for t in query_tokens if t in text_set)
    path_lower = path.lower()
    return min(1.0, fts_score + overlap / len(query_tokens) * 0.45 + overlap / max(len(text_set), 1) * 0.2
               + sum(0.18 for t in query_tokens if t in path_lower) + min(len(text) / 160, 0.18))


@settings(max_examples=400, deadline=None)
@given(fts_score=st.one_of(st.floats(0.0, 1.0), st.sampled_from([0.0, 0.82, 0.8200000000000001, 1.0])),
       words=st.lists(st.sampled_from(["deploy", "key", "rocket", "the", "notes", "x"]), min_size=1, max_size=40),
       query=st.lists(st.sampled_from(["deploy", "key", "rocket", "vault", "notes"]), min_size=1, max_size=5),
       path=st.sampled_from(["memory/rocket.md", "memory/a.md", "notes/key-deploy.md"]))
def test_the_boosted_score_skips_the_text_only_when_the_cap_is_reached_anyway(fts_score, words, query, path):
    text = " ".join(words)
    tokens = fts_query.unique_terms(query)
    expected = _boosted_score_in_full(tokens, path, text, fts_score)
    assert fts_query.score_fallback_keyword_result(query=" ".join(query), path=path, text=text, fts_score=fts_score,
                                                   query_tokens=tokens) == expected
