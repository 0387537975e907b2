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
