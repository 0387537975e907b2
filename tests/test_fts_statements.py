"""The keyword stage's statements: what a long query runs on one snapshot, and that the source
filter is probed once per search (not once per probe) with the same answers."""

from __future__ import annotations

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
    # a sentence the strict AND query cannot match: the strict probe, then the OR probe, both MATCH
    found = fts_search.keyword_search_with_fallback(conn, "where does the rocket deploy key live today",
                                                    limit=10, sources=["memory"])
    assert [s for s in statements if s == SOURCE_PROBE] == [SOURCE_PROBE]
    assert sum("MATCH" in s and "bm25(memory_index_chunks_fts)" in s for s in statements) == 2
    assert sorted(h["id"] for h in found["hits"]) == ["m1", "m2"]  # the session chunk is filtered out
    both = fts_search.keyword_search_with_fallback(conn, "where does the rocket deploy key live today",
                                                   limit=10, sources=["memory", "sessions"])
    assert sorted(h["id"] for h in both["hits"]) == ["m1", "m2", "s1"]
    conn.close()


def test_an_ascii_snippet_is_cut_at_the_limit_and_an_astral_one_between_pairs():
    ascii_text = "a" * 1000
    assert fts_query.truncate_snippet(ascii_text) == "a" * 700
    astral = "a" * 699 + "\U0001F600" + "b" * 400  # the emoji takes units 700-701: cut before it
    assert fts_query.truncate_snippet(astral) == "a" * 699
    assert fts_query.truncate_snippet("short") == "short"
