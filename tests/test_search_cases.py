"""Spec §11.2 cases 1-13 (search semantics) with their literal expected values."""

from __future__ import annotations

import calendar
import math

import pytest

from host_facades.retrieval import fts_query, fts_search
from memory_core.config import MemoryCoreConfig
from host_facades.ranking import rank as ranking
from memory_core.search.engine import SearchEngine, candidate_count
from host_facades.ranking.rank import RankingOptions
from tests.search_fixtures import build_index

NO_MMR_NO_DECAY = RankingOptions(mmr_enabled=False, decay_enabled=False)


def vec(id, path, score, snippet="", start=1, end=1, source="memory"):
    return {"id": id, "path": path, "source": source, "start_line": start, "end_line": end,
            "snippet": snippet, "vector_score": score}


def kw(id, path, text_score, snippet="", *, score=None, path_score=0.0, exact=0, body=None, start=1, end=1):
    return {"id": id, "path": path, "source": "memory", "start_line": start, "end_line": end, "snippet": snippet,
            "text_score": text_score, "score": text_score if score is None else score, "path_score": path_score,
            "exact": exact, "has_body_match": (text_score > 0) if body is None else body}


def ranked(vector, keyword, opts=NO_MMR_NO_DECAY, **meta):
    cands = ranking.union_candidates(vector, keyword)
    for c in cands:
        for k, v in meta.get(c.id, {}).items():
            setattr(c, k, v)
    return ranking.rank_hybrid(cands, opts)


# --- case 1 ------------------------------------------------------------------------------------
@pytest.mark.parametrize("raw, expected", [
    ("hello world", '"hello" AND "world"'),
    ("FOO_bar baz-1", '"FOO_bar" AND "baz" AND "1"'),
    ("金银价格", '"金银价格"'),
    ("価格 2026年", '"価格" AND "2026年"'),
    ("   ", None),
])
def test_case_01_fts_query(raw, expected):
    assert fts_query.build_fts_query(raw) == expected


# --- case 2 ------------------------------------------------------------------------------------
def test_case_02_bm25_mapping():
    s = fts_query.bm25_rank_to_score
    assert s(0) == pytest.approx(1)
    assert s(1) == pytest.approx(0.5)
    assert s(10) < s(1)
    assert round(s(-100), 1) == 1.0
    assert s(-4.2) > s(-2.1) > s(-0.5)
    assert (round(s(-4.2), 3), round(s(-2.1), 3), round(s(-0.5), 3)) == (0.808, 0.677, 0.333)
    assert s(float("nan")) == s(float("inf")) == pytest.approx(0.001)


# --- case 3 ------------------------------------------------------------------------------------
def test_case_03_weighted_union():
    # the spec's "old formula" is upstream's merge, kept as fusion "upstream"
    upstream = RankingOptions(fusion="upstream", mmr_enabled=False, decay_enabled=False)
    out = ranked([vec("a", "memory/a.md", 0.9)], [kw("b", "memory/b.md", 1.0)], upstream)
    assert [(c.id, round(c.score, 6)) for c in out] == [("a", 0.63), ("b", 0.3)]
    # the default weighs each half over its best, scaled by 0.7 x 0.9 + 0.3 x 1.0 = 0.93: same order
    out = ranked([vec("a", "memory/a.md", 0.9)], [kw("b", "memory/b.md", 1.0)])
    assert [(c.id, round(c.score, 6)) for c in out] == [("a", 0.651), ("b", 0.279)]


# --- case 4 ------------------------------------------------------------------------------------
def test_case_04_snippet_preference():
    opts = RankingOptions(vector_weight=0.5, text_weight=0.5, mmr_enabled=False, decay_enabled=False)
    out = ranked([vec("a", "memory/a.md", 0.2, "vec-a")], [kw("a", "memory/a.md", 1.0, "kw-a")], opts)
    assert [(c.id, c.snippet, round(c.score, 6), c.vector_score, c.text_score) for c in out] == [
        ("a", "kw-a", 0.6, 0.2, 1.0)]


# --- case 5 ------------------------------------------------------------------------------------
def test_case_05_strict_results_not_displaced():
    opts = RankingOptions(mmr_enabled=True, mmr_lambda=0.2, decay_enabled=False)
    out = ranked(
        [vec("strict-first", "memory/s1.md", 1.0, "shared semantic topic"),
         vec("strict-later", "memory/s2.md", 0.9, "shared semantic topic")],
        [kw("keyword-first", "memory/k.md", 1.0, "unrelated lexical topic")], opts)
    assert [c.id for c in out] == ["strict-first", "keyword-first", "strict-later"]
    keys = {c.key for c in out if c.in_keyword}
    sel = ranking.select_hybrid(out, max_results=2, min_score=0.35, keyword_keys=keys)
    assert [c.id for c in sel] == ["strict-first", "strict-later"]


# --- case 6 ------------------------------------------------------------------------------------
def test_case_06_relaxed_fallback():
    opts = RankingOptions(vector_weight=0.5, text_weight=0.5, mmr_enabled=False, decay_enabled=False)
    out = ranked([vec("x", "memory/x.md", 0.2)], [kw("x", "memory/x.md", 0.2)], opts)
    assert round(out[0].score, 6) == 0.2
    sel = ranking.select_hybrid(out, max_results=1, min_score=0.35, keyword_keys={out[0].key})
    assert [c.id for c in sel] == ["x"]


def test_case_06b_spare_slots_filled_by_keyword_only_hits():
    out = ranked([vec("v", "memory/v.md", 0.9)], [kw("k", "memory/k.md", 0.5)])
    sel = ranking.select_hybrid(out, max_results=3, min_score=0.35, keyword_keys={c.key for c in out if c.in_keyword})
    # scale 0.7 x 0.9 + 0.3 x 0.5 = 0.78: v 0.78 x 0.7 passes minScore, k 0.78 x 0.3 fills a spare slot
    assert [(c.id, round(c.score, 3)) for c in sel] == [("v", 0.546), ("k", 0.234)]


# --- case 7 ------------------------------------------------------------------------------------
def test_case_07_importance():
    opts = RankingOptions(vector_weight=1.0, text_weight=0.0, mmr_enabled=False, decay_enabled=False)
    out = ranked([vec("none", "memory/a.md", 0.8), vec("ten", "memory/b.md", 0.8), vec("one", "memory/c.md", 0.8)],
                 [], opts, ten={"importance": 10}, one={"importance": 1})
    assert [(c.id, round(c.score, 6)) for c in out] == [("ten", 1.0), ("none", 0.8), ("one", 0.64)]


# --- case 8 ------------------------------------------------------------------------------------
def test_case_08_project_affinity():
    key = "github.com/openclaw/openclaw"
    opts = RankingOptions(vector_weight=1.0, text_weight=0.0, mmr_enabled=False, decay_enabled=False,
                          active_project_keys=(key,))
    out = ranked([vec("other", "memory/a.md", 0.8), vec("nokey", "memory/b.md", 0.8), vec("same", "memory/c.md", 0.8)],
                 [], opts, same={"project_key": key}, other={"project_key": "github.com/else/where"})
    assert [(c.id, round(c.score, 6)) for c in out] == [("same", 0.92), ("nokey", 0.8), ("other", 0.72)]


def test_case_08b_invalid_project_annotation_is_neutral():
    assert ranking.project_multiplier(" ; ", frozenset({"k"})) == 1.0
    assert ranking.project_multiplier("k; ", frozenset({"k"})) == 1.15
    assert ranking.project_multiplier("k;j", frozenset({"k"})) == 0.9


# --- case 9 ------------------------------------------------------------------------------------
def test_case_09_path_only_partial_hit():
    out = ranked([], [kw("p", "memory/notes.md", 0.0, path_score=0.8, score=0.8, body=False)])
    assert [(c.id, round(c.score, 6), c.text_score) for c in out] == [("p", 0.24, 0.0)]


# --- case 10 -----------------------------------------------------------------------------------
def test_case_10_exact_path_tiers_ranking():
    out = ranked(
        [vec("z", "memory/z/foo.md", 0.9), vec("a", "memory/a/foo.md", 0.5), vec("full", "memory/full.md", 0.1),
         vec("bak", "memory/foo.md.bak", 1.0), vec("other", "memory/other.md", 0.99)],
        [kw("full", "memory/full.md", 0.0, exact=3, body=False), kw("z", "memory/z/foo.md", 0.0, exact=2, body=False),
         kw("a", "memory/a/foo.md", 0.0, exact=2, body=False), kw("0", "memory/0/foo.md", 0.0, exact=2, body=False),
         kw("bak", "memory/foo.md.bak", 0.0, exact=1, body=False)],
        RankingOptions(mmr_enabled=True, decay_enabled=True, now_ms=0))
    assert [c.path for c in out] == ["memory/full.md", "memory/z/foo.md", "memory/a/foo.md", "memory/0/foo.md",
                                     "memory/foo.md.bak", "memory/other.md"]
    assert [c.score for c in out[:5]] == [1.0] * 5


def test_case_10b_exact_path_specificity():
    f = fts_search.exact_path_specificity
    assert [f("memory/full.md", "memory/full.md"), f("foo.md", "memory/z/foo.md"), f("foo.md", "memory/foo.md.bak"),
            f("./Memory\\Full.md", "memory/full.md"), f("z/foo.md", "memory/z/foo.md"), f("fo", "memory/foo.md")] == [
        3, 2, 1, 3, 0, 0]


def test_case_10c_exact_path_tiers_end_to_end(tmp_path):
    db = build_index(tmp_path / "i.sqlite", [
        {"path": "memory/z/foo.md", "text": "zebra notes about foo"},
        {"path": "memory/a/foo.md", "text": "alpha notes"},
        {"path": "memory/foo.md.bak", "text": "backup"},
        {"path": "memory/bar.md", "text": "mentions foo.md in the body text"},
    ])
    engine = SearchEngine(MemoryCoreConfig(), db)
    hits = engine.search("foo.md", min_score=0.0, max_results=10)
    assert [(h.path, h.score) for h in hits][:3] == [("memory/z/foo.md", 1.0), ("memory/a/foo.md", 1.0),
                                                   ("memory/foo.md.bak", 1.0)]
    assert hits[3].path == "memory/bar.md" and hits[3].text_score > 0
    engine.close()


# --- case 11 -----------------------------------------------------------------------------------
def test_case_11_exact_path_tie_under_decay():
    f = ranking.score_exact_path_tie_for_temporal_decay
    assert [f(-1), f(0), f(0.5), f(2)] == [0.5, 0.5, 0.75, 1.0]


# --- case 12 -----------------------------------------------------------------------------------
def test_case_12_mmr_diversity():
    items = [(1, "machine learning neural networks", 1.0), (2, "machine learning deep learning", 0.95),
             (3, "database systems sql queries", 0.9), (4, "machine learning algorithms", 0.85)]
    out = ranking.mmr_rerank(items, lam=0.5, score=lambda t: t[2], text=lambda t: t[1])
    assert [t[0] for t in out[:2]] == [1, 3]
    assert sorted(t[0] for t in out) == [1, 2, 3, 4]
    assert ranking.compute_mmr_score(1.0, 0.5, 0.7) == pytest.approx(0.55)
    assert ranking.compute_mmr_score(0.8, 0.6, 0.5) == pytest.approx(0.1)


def test_case_12b_mmr_tokenizer_and_jaccard():
    assert ranking.mmr_tokenize("今天讨论") == {"今", "天", "讨", "论", "今天", "天讨", "讨论"}
    assert ranking.mmr_tokenize("我a好") == {"a", "我", "好"}
    assert ranking.jaccard({"a", "b", "c"}, {"b", "c", "d"}) == 0.5
    assert ranking.jaccard(set(), set()) == 1.0
    assert ranking.jaccard({"a"}, set()) == 0.0


# --- case 13 -----------------------------------------------------------------------------------
NOW_2026_02_10 = calendar.timegm((2026, 2, 10, 0, 0, 0)) * 1000.0
MTIME_2010 = calendar.timegm((2010, 1, 1, 0, 0, 0)) * 1000.0


def _decayed(path, score, *, mtime=None, source="memory"):
    return score * ranking.temporal_decay_for(path, source, mtime, half_life_days=30, now_ms=NOW_2026_02_10)


def test_case_13_temporal_decay():
    assert ranking.decay_multiplier(30, 30) == pytest.approx(0.5)
    assert _decayed("MEMORY.md", 1.0, mtime=MTIME_2010) == 1.0
    assert _decayed("memory/projects.md", 0.75, mtime=MTIME_2010) == 0.75
    assert _decayed("memory/2026-02-10.md", 0.8) > _decayed("memory/2025-01-01.md", 0.95)
    assert _decayed("memory/2099-01-01.md", 0.9) == 0.9
    assert _decayed("memory/2000-01-01.md", 1.0) < 0.001
    assert _decayed("sessions/s.jsonl", 1.0, mtime=NOW_2026_02_10 - 30 * ranking.DAY_MS, source="sessions") == \
        pytest.approx(0.5)
    assert ranking.date_from_path("memory/2025-02-30.md") is None
    assert ranking.decay_multiplier(5, 0) == 1.0


def test_case_13b_decay_orders_hybrid_results():
    opts = RankingOptions(mmr_enabled=False, decay_enabled=True, now_ms=NOW_2026_02_10,
                          vector_weight=1.0, text_weight=0.0)
    out = ranked([vec("old", "memory/2025-01-01.md", 0.95), vec("new", "memory/2026-02-10.md", 0.8)], [], opts)
    assert [(c.id, round(c.score, 6)) for c in out][0] == ("new", 0.8)


def test_candidate_count():
    assert [candidate_count(6, 4), candidate_count(100, 4), candidate_count(1, 0.1)] == [24, 200, 1]


def test_rrf_normalised_scores():
    opts = RankingOptions(fusion="rrf", mmr_enabled=False, decay_enabled=False)
    out = ranked([vec("a", "memory/a.md", 0.9), vec("b", "memory/b.md", 0.8)],
                 [kw("a", "memory/a.md", 0.5), kw("c", "memory/c.md", 0.4)], opts)
    # b and c tie on score; the BM25 evidence breaks the tie (c has some, b none)
    assert [(c.id, round(c.score, 4)) for c in out] == [("a", 1.0), ("c", round(61 / 62 / 2, 4)),
                                                        ("b", round(61 / 62 / 2, 4))]
    assert math.isclose(out[0].score, 1.0)


def test_similarity_matrix_matches_jaccard():
    sets = [frozenset(), frozenset({"a", "b", "c"}), frozenset({"b", "c", "d"}), frozenset({"今", "天", "今天"})]
    m = ranking.similarity_matrix(sets)
    assert [[round(v, 6) for v in row] for row in m] == [
        [round(ranking.jaccard(a, b), 6) for b in sets] for a in sets]


def test_chunks_removed_after_retrieval_drop_out():
    from memory_core.search.engine import rank_results

    kw_hits = [kw("kept", "memory/a.md", 0.9), kw("gone", "memory/b.md", 0.8)]
    hits, _ = rank_results(mode="keyword", keyword_hits=kw_hits, vector_hits=None,
                           metadata={"kept": {"importance": 10, "triggers": '["deploy"]', "project_key": None,
                                              "provenance": None, "source_mtime": None}},
                           opts=NO_MMR_NO_DECAY, max_results=5, min_score=0.0)
    assert [(h.id, h.importance, h.triggers, round(h.score, 4)) for h in hits] == [
        ("kept", 10, '["deploy"]', round(0.9 * 1.25, 4))]


def test_session_mtime_decay_end_to_end(tmp_path):
    day = ranking.DAY_MS
    db = build_index(tmp_path / "d.sqlite", [
        {"path": "sessions/old.jsonl", "source": "sessions", "text": "deploy notes old", "mtime_ms": NOW_2026_02_10 - 30 * day},
        {"path": "sessions/new.jsonl", "source": "sessions", "text": "deploy notes new", "mtime_ms": NOW_2026_02_10},
    ])
    engine = SearchEngine(MemoryCoreConfig(sources=["memory", "sessions"]), db, now_ms=lambda: NOW_2026_02_10)
    hits = engine.search("deploy notes", sources=["sessions"], min_score=0.0)
    assert [h.path for h in hits] == ["sessions/new.jsonl", "sessions/old.jsonl"]
    assert hits[1].score == pytest.approx(hits[0].score * 0.5, rel=1e-6)
    assert hits[1].source_mtime == NOW_2026_02_10 - 30 * day
    engine.close()
