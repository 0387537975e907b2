"""The hybrid's text half carries the keyword order; fusions, tie-breaking and explain parts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.config import MemoryCoreConfig
from host_facades.ranking import rank as ranking
from memory_core.search.engine import SearchEngine
from host_facades.ranking.rank import RankingOptions
from tests.search_fixtures import FakeEmbedder, build_index
from tests.test_search_cases import kw, ranked, vec

PLAIN = dict(mmr_enabled=False, decay_enabled=False)


def saturated_long_query_hits():
    """Five hits of a long query: the boosted score is 1.0 for all (saturated), BM25 falls a to e;
    the paths sort e..a, so a path tie-break alone would reverse the keyword order."""
    names = "abcde"
    keyword = [kw(n, f"memory/{'edcba'[i]}.md", ts, score=1.0) for i, (n, ts) in enumerate(zip(names, (0.9, 0.8, 0.7, 0.6, 0.5)))]
    flat = [vec(n, f"memory/{'edcba'[i]}.md", 0.5) for i, n in enumerate(names)]
    return flat, keyword


def test_keyword_order_survives_a_flat_vector_half():
    flat, keyword = saturated_long_query_hits()
    out = ranked(flat, keyword, RankingOptions(**PLAIN))
    # text half = BM25 relevance over the best's (9, 4, 2.33, 1.5, 1); each half over its best
    # (vector 0.5 / 0.5 = 1), scaled by 0.7 x 0.5 + 0.3 x 1 = 0.65: 0.65 x (0.7 + 0.3 x ratio)
    assert [(c.id, round(c.score, 4)) for c in out] == [
        ("a", 0.65), ("b", 0.5417), ("c", 0.5056), ("d", 0.4875), ("e", 0.4767)]


def test_upstream_weighted_merge_stays_available_and_loses_the_keyword_order():
    flat, keyword = saturated_long_query_hits()
    out = ranked(flat, keyword, RankingOptions(fusion="upstream", **PLAIN))
    # upstream's text half is the saturated boosted score: every hit 0.65, the tie then goes to
    # the keyword order (BM25), no longer to the path
    assert [(c.id, round(c.score, 4)) for c in out] == [(n, 0.65) for n in "abcde"]
    assert [round(c.text_half, 4) for c in out] == [1.0, 0.4444, 0.2593, 0.1667, 0.1111]


@pytest.mark.parametrize("fusion, expected", [
    ("rrf", ["a", "b", "c", "d", "e"]),
    ("minmax", ["a", "b", "c", "d", "e"]),
    ("zscore", ["a", "b", "c", "d", "e"]),
])
def test_every_fusion_keeps_the_keyword_order_under_a_flat_vector_half(fusion, expected):
    flat, keyword = saturated_long_query_hits()
    assert [c.id for c in ranked(flat, keyword, RankingOptions(fusion=fusion, **PLAIN))] == expected


def test_ties_are_broken_by_the_keyword_order_then_bm25_then_path():
    opts = RankingOptions(fusion="rrf", **PLAIN)
    # paths sort the vector-only hits first, so a path tie-break alone would put them first
    out = ranked([vec("v1", "memory/a1.md", 0.9), vec("y", "memory/a2.md", 0.8), vec("z", "memory/0.md", 0.7)],
                 [kw("k1", "memory/z1.md", 0.9), kw("x", "memory/z2.md", 0.6)], opts)
    # v1 and k1 tie (rank 1 in one list): k1 has keyword evidence; y and x tie (rank 2): x has it
    assert [c.id for c in out] == ["k1", "v1", "x", "y", "z"]
    same = ranked([vec("p", "memory/b.md", 0.5), vec("q", "memory/a.md", 0.5)], [], RankingOptions(**PLAIN))
    assert [c.id for c in same] == ["q", "p"]  # no keyword evidence at all: path order


def test_weighted_text_half_equals_upstream_with_one_keyword_candidate():
    out = ranked([vec("x", "memory/x.md", 0.2)], [kw("x", "memory/x.md", 0.2)],
                 RankingOptions(vector_weight=0.5, text_weight=0.5, **PLAIN))
    assert (round(out[0].text_half, 6), round(out[0].score, 6)) == (0.2, 0.2)


candidate = st.tuples(st.floats(0.01, 0.99), st.floats(0.0, 0.4), st.integers(0, 2), st.floats(0.0, 1.0))


@settings(max_examples=150, deadline=None)
@given(st.lists(candidate, min_size=1, max_size=12))
def test_vector_weight_zero_ranks_exactly_as_keyword_only(rows):
    """vectorWeight 0 (MMR off) orders the keyword candidates exactly as keyword-only search does,
    whatever the vector scores, including ties of the boosted score."""
    keyword = [kw(f"c{i}", f"memory/{i % 3}.md", ts, score=min(1.0, ts + boost), start=i + 1, end=i + 1)
               for i, (ts, boost, _, _) in enumerate(rows)]
    vector = [vec(f"c{i}", f"memory/{i % 3}.md", v, start=i + 1, end=i + 1) for i, (_, _, _, v) in enumerate(rows)]
    opts = RankingOptions(vector_weight=0.0, text_weight=1.0, **PLAIN)
    hybrid = [c.id for c in ranked(vector, keyword, opts) if c.in_keyword]
    only = [c.id for c in ranking.rank_keyword_only(ranking.union_candidates([], keyword), opts)]
    assert hybrid == only


def test_explain_shows_each_part_of_a_hits_score(tmp_path):
    emb = FakeEmbedder()
    db = build_index(tmp_path / "e.sqlite", [
        {"path": "memory/cats.md", "text": "cats purr and sleep all day"},
        {"path": "memory/dogs.md", "text": "dogs bark at the mail carrier"},
    ], embedder=emb)
    cfg = MemoryCoreConfig(provider="fake", query={"hybrid": {"mmr": {"enabled": False}}})
    engine = SearchEngine(cfg, db, emb)
    try:
        data = engine.explain("cats purr", min_score=0.0).to_dict()
    finally:
        engine.close()
    top = data["ranked"][0]
    cos = float(emb.vector("cats purr") @ emb.vector("cats purr and sleep all day"))
    stages = top["stages"]
    assert top["citation"] == "memory/cats.md#L1"
    assert stages["keyword"]["order"] == 1 and stages["vector"]["rank"] == 1
    assert stages["keyword"]["half"] == pytest.approx(top["ranking_score"])  # the only keyword hit
    assert stages["vector"]["score"] == pytest.approx(cos, abs=1e-5)
    assert stages["vector"]["half"] == pytest.approx(cos, abs=1e-5)  # returned by the vector search
    assert stages["fusion"]["content"] == pytest.approx(0.7 * cos + 0.3 * top["ranking_score"], abs=1e-5)
    # best in both lists: each half over its best is 1, so the content is the query's scale
    assert stages["fusion"]["scale"] == pytest.approx(stages["fusion"]["content"])
    assert stages["adjust"] == {"decay": 1.0, "importance": 1.0, "project": 1.0,
                                "rank_score": pytest.approx(stages["fusion"]["content"]),
                                "score": pytest.approx(stages["fusion"]["content"])}
    assert stages["mmr"] == {"before": 1, "after": 1}
    assert data["params"]["fusion"] == "weighted"


def full_vector_list_fixture():
    """The vector search returns its 3 hits (a, b, c: close, flat scores); the keyword search's
    best hit d is not among them, a is its weak second."""
    vector = [vec("a", "memory/a.md", 0.50), vec("b", "memory/b.md", 0.48), vec("c", "memory/c.md", 0.46)]
    keyword = [kw("d", "memory/d.md", 0.9), kw("a", "memory/a.md", 0.5)]
    return vector, keyword, {i: {} for i in "abcd"}


@pytest.mark.parametrize("limit, expected", [
    # full list: d's vector half is the list's floor 0.46, 0.92 of the best (a's 0.5); its text
    # half is the best (1.0); scale 0.7 x 0.5 + 0.3 x 0.9 = 0.62: 0.62 x (0.7 x 0.92 + 0.3 x 1)
    (3, [("d", 0.5853), ("a", 0.4547), ("b", 0.4166), ("c", 0.3993)]),
    # a short list returned every chunk with a vector: d has none, its vector half is 0
    (4, [("a", 0.4547), ("b", 0.4166), ("c", 0.3993), ("d", 0.186)]),
    (None, [("a", 0.4547), ("b", 0.4166), ("c", 0.3993), ("d", 0.186)]),
])
def test_a_keyword_hit_the_full_vector_list_missed_gets_its_floor_not_zero(limit, expected):
    vector, keyword, meta = full_vector_list_fixture()
    _, ordered, _ = ranking.rank_and_select(mode="hybrid", keyword_hits=keyword, vector_hits=vector, metadata=meta,
                                            opts=RankingOptions(**PLAIN), max_results=10, min_score=0.0,
                                            limit=limit)
    assert [(c.id, round(c.score, 4)) for c in ordered] == expected
    # the public vector score stays what the vector search said (0: not returned)
    assert {c.id: c.vector_score for c in ordered}["d"] == 0.0


def test_upstream_merge_keeps_zero_for_a_hit_the_vector_list_missed():
    vector, keyword, meta = full_vector_list_fixture()
    _, ordered, _ = ranking.rank_and_select(mode="hybrid", keyword_hits=keyword, vector_hits=vector, metadata=meta,
                                            opts=RankingOptions(fusion="upstream", **PLAIN), max_results=10,
                                            min_score=0.0, limit=3)
    # upstream: 0.7 x vector (0 when not returned) + 0.3 x boosted score
    assert [(c.id, round(c.score, 4)) for c in ordered] == [("a", 0.5), ("b", 0.336), ("c", 0.322), ("d", 0.27)]


def strong_vector_fixture():
    """r leads the vector list by a wide margin (0.6 against k's 0.3) and is the keyword search's
    weak second; k leads the keyword list. Cosines bunch, the text half spans 0..1."""
    vector = [vec("r", "memory/r.md", 0.6), vec("k", "memory/k.md", 0.3)]
    keyword = [kw("k", "memory/k.md", 0.9), kw("r", "memory/r.md", 0.6)]
    return vector, keyword


def test_each_half_over_its_best_so_the_weights_mean_what_they_say():
    vector, keyword = strong_vector_fixture()
    out = ranked(vector, keyword, RankingOptions(**PLAIN))
    # text halves k 0.9 (the best boosted score), r 0.9 x 1.5 / 9 = 0.15; over their best: r (1.0,
    # 1/6), k (0.5, 1.0); scale 0.7 x 0.6 + 0.3 x 0.9 = 0.69: r 0.69 x 0.75, k 0.69 x 0.65
    assert [(c.id, round(c.score, 4)) for c in out] == [("r", 0.5175), ("k", 0.4485)]
    assert [(round(c.vector_norm, 4), round(c.text_norm, 4), round(c.fusion_scale, 4)) for c in out] == [
        (1.0, 0.1667, 0.69), (0.5, 1.0, 0.69)]
    # the raw mix of the same halves lets the text half decide: k 0.21 + 0.27, r 0.42 + 0.045
    raw = {c.id: 0.7 * c.vector_half + 0.3 * c.text_half for c in out}
    assert (round(raw["k"], 4), round(raw["r"], 4)) == (0.48, 0.465)


def test_a_hit_best_in_both_lists_keeps_its_raw_score_so_min_score_still_means_something():
    weak = [vec("x", "memory/x.md", 0.1), vec("y", "memory/y.md", 0.05)]
    out = ranked(weak, [kw("x", "memory/x.md", 0.1)], RankingOptions(**PLAIN))
    assert round(out[0].score, 4) == round(0.7 * 0.1 + 0.3 * 0.1, 4) == 0.1


VECTOR_OF_3 = [vec("v", "memory/v.md", 0.6), vec("k2", "memory/k2.md", 0.5), vec("x", "memory/x.md", 0.4)]


@pytest.mark.parametrize("keyword, absent_text_half, expected", [
    # the BM25 list returned all 3 it was asked for: v and x get its lowest text half, k3's
    # (0.9 x (0.3 / 0.7) / 9 = 0.0429); x then ties k3, which the keyword order puts first
    ([kw("k1", "memory/k1.md", 0.9), kw("k2", "memory/k2.md", 0.5), kw("k3", "memory/k3.md", 0.3)], 0.0429,
     [("k1", 0.529), ("v", 0.4929), ("k2", 0.4255), ("k3", 0.3319), ("x", 0.3319)]),
    # a short BM25 list matched every chunk it could: no keyword evidence is 0
    ([kw("k1", "memory/k1.md", 0.9), kw("k2", "memory/k2.md", 0.5)], 0.0,
     [("k1", 0.529), ("v", 0.483), ("k2", 0.4255), ("x", 0.322)]),
])
def test_a_hit_the_full_keyword_list_missed_gets_its_floor_not_zero(keyword, absent_text_half, expected):
    _, ordered, _ = ranking.rank_and_select(mode="hybrid", keyword_hits=keyword, vector_hits=VECTOR_OF_3,
                                            metadata={i: {} for i in ("v", "x", "k1", "k2", "k3")},
                                            opts=RankingOptions(**PLAIN), max_results=10, min_score=0.0, limit=3)
    assert [(c.id, round(c.score, 4)) for c in ordered] == expected
    v = next(c for c in ordered if c.id == "v")
    assert (round(v.text_half, 4), v.keyword_order, v.text_score) == (absent_text_half, None, 0.0)
