"""The typed edge of a search: SearchRequest / SearchReply pickle as they are, and the worker's
search task takes nothing else."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

from host_facades.ranking.rank import RankingOptions
from host_facades.search.edge import SearchReply, SearchRequest
from memory_core.errors import InvalidRequest
from tests.search_fixtures import build_index
from workers.pool import InlinePool, WorkerPool
from workers.retriever import PooledRetriever


def test_request_and_reply_survive_a_pickle_round_trip():
    req = SearchRequest(query="rocket release", candidates=24, max_results=6, min_score=0.35,
                        sources=("memory", "sessions"), model="m", backend="numpy", or_fallback=False,
                        want_keyword=False, qvec=np.array([0.6, 0.8], dtype=np.float32),
                        ranking=RankingOptions(fusion="rrf", mmr_enabled=False), now_ms=1.5e12,
                        active_project_keys=("p",), probe_content=True, details=True)
    back = pickle.loads(pickle.dumps(req, protocol=pickle.HIGHEST_PROTOCOL))
    assert type(back) is SearchRequest and back.qvec.dtype == np.float32
    assert back.qvec.tolist() == pytest.approx([0.6, 0.8])
    assert dataclasses.replace(back, qvec=None) == dataclasses.replace(req, qvec=None)
    row = ("c1", "memory/a.md", 3, 5, 0.5, "snippet", "memory", 0.4, 0.25, "memory/a.md#L3-L5", 2, "t", "pk",
           {"origin_class": "agent"}, 1.7e12, "h1")
    reply = SearchReply(mode="hybrid", hits=(row,), revision=7, keyword={"hits": [], "probes": []},
                        vector=({"id": "c1", "vector_score": 0.4},), ranked=({"id": "c1"},), timings_ms={"rank": 0.1})
    assert pickle.loads(pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)) == reply
    with pytest.raises(dataclasses.FrozenInstanceError):
        reply.mode = "keyword"  # type: ignore[misc]


def test_the_search_task_takes_only_a_search_request(tmp_path):
    db = build_index(tmp_path / "e.sqlite", [{"path": "memory/a.md", "text": "rocket release notes"}])
    as_dict = {"query": "rocket", "candidates": 24, "max_results": 6, "min_score": 0.0}
    message = "the search task takes a host_facades.search.edge.SearchRequest as 'req', got dict"
    pool = WorkerPool("retrieval", 1, idle_timeout_s=None)
    try:
        for retriever in (PooledRetriever(db, InlinePool()), PooledRetriever(db, pool)):
            with pytest.raises(InvalidRequest) as err:
                retriever.pool.run("search", {"db_path": db, "keep": [], "req": as_dict})
            assert str(err.value) == message
            reply = retriever.run_search(SearchRequest(query="rocket", candidates=24, max_results=6, min_score=0.0))
            assert (type(reply), reply.mode, [r[9] for r in reply.hits]) == (SearchReply, "keyword", ["memory/a.md#L1"])
    finally:
        pool.close()
