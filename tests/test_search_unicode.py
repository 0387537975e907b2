"""Spec §11.2 case 17 (Unicode FTS, trigram, broken MATCH) and odd-input robustness."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from host_facades.retrieval import fts_query, fts_search, keywords
from host_facades.db.sqlite_read import open_readonly
from memory_core.config import MemoryCoreConfig
from memory_core.search.engine import SearchEngine
from tests.search_fixtures import FakeEmbedder, build_index

NFC = unicodedata.normalize("NFC", "München")
NFD = unicodedata.normalize("NFD", "München")


def _ids(conn, query, tokenizer, limit=10):
    res = fts_search.body_search(conn, query, limit=limit, tokenizer=tokenizer)
    return sorted(h["id"] for h in res["hits"]), res


@pytest.mark.parametrize("tokenizer", ["unicode61", "trigram"])
@pytest.mark.parametrize("doc_form", [NFC, NFD])
@pytest.mark.parametrize("query_form", [NFC, NFD])
def test_case_17_nfc_nfd_found_in_either_form(tmp_path, tokenizer, doc_form, query_form):
    db = build_index(tmp_path / "u.sqlite", [
        {"id": "doc", "path": "memory/w.md", "text": f"{doc_form} weather"},
        {"id": "split-space", "path": "memory/s.md", "text": "Mu nchen weather"},
        {"id": "split-dash", "path": "memory/d.md", "text": "Mu-nchen weather"},
    ], tokenizer=tokenizer)
    conn = open_readonly(db)
    ids, res = _ids(conn, query_form, tokenizer)
    assert ids == ["doc"]
    assert res["hits"][0]["text_score"] > 0
    conn.close()


def test_case_17_match_query_has_canonical_alternatives():
    assert fts_query.plan_keyword_search(NFC, "trigram")["match_query"] == f'("{NFC}" OR "{NFD}")'
    assert fts_query.plan_keyword_search(NFD, "unicode61")["match_query"] == f'"{NFD}"'


@pytest.mark.parametrize("tokenizer", ["unicode61", "trigram"])
def test_case_17_and_semantics(tmp_path, tokenizer):
    db = build_index(tmp_path / "a.sqlite", [
        {"id": "both", "path": "memory/b.md", "text": "München caféteria lunch"},
        {"id": "city", "path": "memory/c.md", "text": "München weather"},
        {"id": "cafe", "path": "memory/f.md", "text": "caféteria menu"},
    ], tokenizer=tokenizer)
    conn = open_readonly(db)
    assert _ids(conn, "München caféteria", tokenizer)[0] == ["both"]
    conn.close()


def test_case_17_broken_match_falls_back_to_like(tmp_path, monkeypatch):
    db = build_index(tmp_path / "b.sqlite", [
        {"id": "city", "path": "memory/c.md", "text": "the city lights"},
        {"id": "split", "path": "memory/s.md", "text": "ci ty split word"},
    ])
    real = fts_query.plan_keyword_search

    def broken(query, tokenizer="unicode61", **kw):
        plan = real(query, tokenizer, **kw)
        return {**plan, "match_query": plan["match_query"] + " AND ("}

    monkeypatch.setattr(fts_search, "plan_keyword_search", broken)
    conn = open_readonly(db)
    res = fts_search.body_search(conn, "city", limit=10)
    assert [(h["id"], h["text_score"]) for h in res["hits"]] == [("city", 0.0)]
    assert res["kind"] == "like" and "fts5: syntax error" in res["error"]
    assert res["hits"][0]["score"] > 0  # the boosted ranking score still orders LIKE-only hits (D3)
    conn.close()


def test_case_17_trigram_short_term_substring(tmp_path):
    db = build_index(tmp_path / "t.sqlite", [
        {"id": "noir", "path": "memory/n.md", "text": "fé noir"},
        {"id": "fe", "path": "memory/f.md", "text": "fe plain"},
        {"id": "cafe", "path": "memory/c.md", "text": "coffee shop"},
    ], tokenizer="trigram")
    conn = open_readonly(db)
    plan = fts_query.plan_keyword_search("fé", "trigram")
    assert (plan["match_query"], plan["substring_terms"]) == (None, ["fé"])
    ids, res = _ids(conn, "fé", "trigram")
    assert ids == ["noir"] and res["hits"][0]["text_score"] == 0.0
    conn.close()


def test_like_escapes_wildcards(tmp_path):
    db = build_index(tmp_path / "w.sqlite", [
        {"id": "under", "path": "memory/p.md", "text": "x_ here"},
        {"id": "plain", "path": "memory/q.md", "text": "xy here"},
    ], tokenizer="trigram")
    conn = open_readonly(db)
    assert fts_query.escape_like("a%b_c\\") == "a\\%b\\_c\\\\"
    res = fts_search.body_search(conn, "x_", limit=5, tokenizer="trigram")
    assert [h["id"] for h in res["hits"]] == ["under"]
    conn.close()


def test_conversational_fallback_keywords():
    assert keywords.extract_keywords("that thing we discussed about the API") == ["discussed", "api"]
    assert keywords.extract_keywords("之前讨论的那个方案") == [
        "之", "讨", "论", "个", "方", "案", "前讨", "讨论", "论的", "的那", "个方", "方案"]
    assert keywords.extract_keywords("APIのバグを修正した") == ["api", "バグ", "修正"]
    assert keywords.extract_keywords("what was the solution for the bug") == ["solution", "bug"]
    assert keywords.extract_keywords("¿dónde está el informe de ventas?") == ["está", "informe", "ventas"]
    assert keywords.extract_keywords("API를 수정했다") == ["api를", "api", "수정했다"]
    assert len(keywords.fallback_terms("alpha beta gamma delta epsilon zeta eta theta")) == 6


def test_conversational_query_finds_keyword_hits(tmp_path):
    db = build_index(tmp_path / "c.sqlite", [
        {"id": "api", "path": "memory/api.md", "text": "We discussed the API rate limits with the vendor."},
        {"id": "other", "path": "memory/other.md", "text": "Garden notes: tomatoes and basil."},
    ])
    engine = SearchEngine(MemoryCoreConfig(), db)
    details = engine.explain("what did we decide about that api thing yesterday?", min_score=0.0)
    assert [h.id for h in details.hits] == ["api"]
    assert details.keyword["full_count"] == 0 and details.keyword["probes"][0]["or"] == '("decide" OR "decid"*) OR "api"'
    engine.close()


ODD = ['"', '""', 'NEAR(', 'a NEAR b', '*', '-', 'foo*', '-bar', 'AND', 'OR NOT', '(', ')', '\x00', '\x01\x02',
       'col:val', '^start', '{a b}', '\\', '%', '_', "'", 'x' * 100_000, ("word " * 20_000), '\ud7ff', 'é' * 3,
       '\u0301', 'NEAR("a" "b", 3)']


@pytest.fixture(scope="module")
def odd_engine(tmp_path_factory):
    path = tmp_path_factory.mktemp("odd") / "o.sqlite"
    emb = FakeEmbedder()
    build_index(path, [
        {"path": "memory/a.md", "text": "NEAR and quotes \" and stars * and dashes - here"},
        {"path": "memory/b.md", "text": "plain words about cats"},
    ], embedder=emb)
    engines = [SearchEngine(MemoryCoreConfig(), str(path)),
               SearchEngine(MemoryCoreConfig(provider="fake"), str(path), emb)]
    yield engines
    for e in engines:
        e.close()


@pytest.mark.parametrize("text", ODD)
def test_odd_input_never_raises(odd_engine, text):
    for engine in odd_engine:
        assert isinstance(engine.search(text), list)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=300))
def test_property_any_text_returns_a_list(odd_engine, text):
    for engine in odd_engine:
        hits = engine.search(text, min_score=0.0)
        assert isinstance(hits, list)
        assert all(len(h.snippet) <= 700 for h in hits)


def test_source_filter_and_orphaned_fts_rows(tmp_path):
    db = build_index(tmp_path / "s.sqlite", [
        {"id": "m", "path": "memory/a.md", "text": "alpha beta"},
        {"id": "s", "path": "sessions/x.jsonl", "source": "sessions", "text": "alpha gamma"},
    ])
    import apsw

    w = apsw.Connection(db)
    w.execute("INSERT INTO memory_index_chunks_fts(rowid, text, id, path, source, model, start_line, end_line)"
              " VALUES (999, 'alpha orphan', 'ghost', 'memory/g.md', 'memory', 'fts-only', 1, 1)")
    w.close()
    conn = open_readonly(db)
    ids = {tuple(src): [h["id"] for h in fts_search.body_search(conn, "alpha", limit=5, sources=src)["hits"]]
           for src in (["memory"], ["sessions"], ["memory", "sessions"])}
    assert ids == {("memory",): ["m"], ("sessions",): ["s"], ("memory", "sessions"): ["m", "s"]}
    conn.close()
