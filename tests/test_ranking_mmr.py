"""MMR (host_facades.ranking.rank.mmr_rerank) against the plain greedy loop: each pick is the
best lambda x relevance - (1 - lambda) x max similarity to the picks so far, ties to the higher
original score, then the earlier item; similarities are each pair's Jaccard (ranking.jaccard) in float32,
which similarity_matrix computes from bit-packed token sets."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from host_facades.ranking import rank as ranking

WORDS = st.sampled_from("falcon billing deploy window coffee roast alice owns the staging".split())
ITEMS = st.lists(st.tuples(st.lists(WORDS, max_size=8).map(" ".join),
                           st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.9, 1.0])), max_size=14)


def greedy(items, lam):
    scores = [s for _, s in items]
    lo, hi = min(scores), max(scores)
    rel = [1.0 if hi == lo else (s - lo) / (hi - lo) for s in scores]
    sets = [set(ranking.mmr_tokenize(t)) for t, _ in items]
    sim = [[float(np.float32(ranking.jaccard(a, b))) for b in sets] for a in sets]
    remaining, max_sim, out = list(range(len(items))), [0.0] * len(items), []
    while remaining:
        best, best_val = None, -math.inf
        for i in remaining:
            val = ranking.compute_mmr_score(rel[i], max_sim[i], lam)
            if val > best_val or (val == best_val and best is not None and scores[i] > scores[best]):
                best, best_val = i, val
        out.append(best)
        remaining.remove(best)
        for i in remaining:
            max_sim[i] = max(max_sim[i], sim[best][i])
    return [items[i] for i in out]


@settings(max_examples=300, deadline=None)
@given(ITEMS, st.sampled_from([0.0, 0.3, 0.7, 0.95]))
def test_mmr_picks_as_the_greedy_loop(items, lam):
    got = ranking.mmr_rerank(items, lam=lam, score=lambda it: it[1], text=lambda it: it[0])
    assert got == (greedy(items, lam) if len(items) > 1 else items)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(WORDS, max_size=6).map(frozenset), max_size=10))
def test_similarity_rows_are_the_jaccard_of_each_pair(sets):
    m = ranking.similarity_matrix(sets)
    for i, a in enumerate(sets):
        for j, b in enumerate(sets):
            assert m[i][j] == pytest.approx(ranking.jaccard(set(a), set(b)), abs=1e-6)


@settings(max_examples=300, deadline=None)
@given(ITEMS, st.sampled_from([0.0, 0.3, 0.7, 0.95]), st.integers(min_value=1, max_value=15))
def test_mmr_stopped_early_picks_the_greedy_prefix(items, lam, k):
    # ``done`` after k picks: the greedy loop's first k picks, then the rest in input order (items
    # come in any order of score: the prefix search visits them by relevance itself)
    told = []

    def done(item):
        told.append(item)
        return len(told) >= k

    got = ranking.mmr_rerank(items, lam=lam, score=lambda it: it[1], text=lambda it: it[0], done=done)
    if len(items) <= 1:
        assert got == items
        return
    picks = greedy(items, lam)[:k]
    rest = list(items)
    for p in picks:
        rest.remove(p)
    assert got == picks + rest
    assert told == picks


def test_mmr_stopped_early_tokenizes_only_what_it_visits():
    # far below the first pick's value, the tail is never looked at
    items = [("falcon billing", 1.0), ("falcon billing deploy", 0.9)] + [(f"coffee {i}", 0.0) for i in range(50)]
    seen = []

    def text(it):
        seen.append(it[0])
        return it[0]

    got = ranking.mmr_rerank(items, lam=0.7, score=lambda it: it[1], text=text, done=lambda it: True)
    assert got == items
    assert seen == ["falcon billing"]
