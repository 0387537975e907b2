"""The embedding cache of an index (memory_core.store.cache): keyed by provider, model, provider key
and chunk hash; pruned oldest first; seeded into a rebuild."""

from __future__ import annotations

import apsw
import numpy as np
import pytest

from memory_core.store import cache as cache_module
from memory_core.store.cache import EmbeddingCache
from memory_core.store.writer import IndexWriter

KEY = ("openai", "text-embedding-3-small", "key-1")


@pytest.fixture
def writer(tmp_path):
    w = IndexWriter(str(tmp_path / "index.sqlite"), vector_enabled=False)
    yield w
    w.close()


def as_lists(found: dict) -> dict:
    return {h: v.tolist() for h, v in found.items()}


def rows(w: IndexWriter) -> list[tuple]:
    return [tuple(r) for r in w.conn.execute(
        "SELECT provider, model, provider_key, hash, dims, updated_at FROM memory_embedding_cache ORDER BY hash")]


@pytest.fixture
def clock(monkeypatch):
    """The cache's clock, in seconds: ``updated_at`` is this times 1000."""
    now = [1_700_000_000.0]
    monkeypatch.setattr(cache_module.time, "time", lambda: now[0])
    return now


def test_the_writer_embeds_through_its_cache(writer):
    assert isinstance(writer.cache, EmbeddingCache)
    assert writer.cache.enabled is True and writer.cache.max_entries is None


def test_a_hit_needs_provider_model_provider_key_and_hash_to_match(writer):
    writer.cache.put_many(*KEY, {"h1": np.array([0.5, 0.25]), "h2": np.array([1.0, 0.0])})
    assert as_lists(writer.cache.get_many(*KEY, ["h1", "h2", "h3"])) == {"h1": [0.5, 0.25], "h2": [1.0, 0.0]}
    assert writer.cache.get_many("local", KEY[1], KEY[2], ["h1"]) == {}
    assert writer.cache.get_many(KEY[0], "text-embedding-3-large", KEY[2], ["h1"]) == {}
    assert writer.cache.get_many(KEY[0], KEY[1], "key-2", ["h1"]) == {}
    assert writer.cache.get_many(*KEY, ["h9"]) == {}
    assert writer.cache.count() == 2


def test_put_replaces_the_vector_of_the_same_key(writer, clock):
    writer.cache.put_many(*KEY, {"h1": np.array([0.5, 0.25])})
    clock[0] += 1
    writer.cache.put_many(*KEY, {"h1": np.array([0.0, 1.0, 0.0])})
    assert as_lists(writer.cache.get_many(*KEY, ["h1"])) == {"h1": [0.0, 1.0, 0.0]}
    assert rows(writer) == [("openai", "text-embedding-3-small", "key-1", "h1", 3, 1_700_000_001_000)]


def test_the_same_hash_under_two_models_is_two_entries(writer):
    writer.cache.put_many(*KEY, {"h1": np.array([1.0, 0.0])})
    writer.cache.put_many(KEY[0], "other-model", KEY[2], {"h1": np.array([0.0, 1.0])})
    assert as_lists(writer.cache.get_many(*KEY, ["h1"])) == {"h1": [1.0, 0.0]}
    assert as_lists(writer.cache.get_many(KEY[0], "other-model", KEY[2], ["h1"])) == {"h1": [0.0, 1.0]}
    assert writer.cache.count() == 2


def test_a_full_cache_drops_its_oldest_entries(tmp_path, clock):
    w = IndexWriter(str(tmp_path / "index.sqlite"), vector_enabled=False, cache_max_entries=2)
    try:
        for i, h in enumerate(["h1", "h2", "h3"]):
            clock[0] = 1_700_000_000.0 + i
            w.cache.put_many(*KEY, {h: np.array([float(i), 1.0])})
        assert as_lists(w.cache.get_many(*KEY, ["h1", "h2", "h3"])) == {"h2": [1.0, 1.0], "h3": [2.0, 1.0]}
        assert w.cache.prune(1) == 1
        assert list(w.cache.get_many(*KEY, ["h2", "h3"])) == ["h3"]
    finally:
        w.close()


def test_a_disabled_cache_stores_and_finds_nothing(tmp_path):
    w = IndexWriter(str(tmp_path / "index.sqlite"), vector_enabled=False, cache_enabled=False)
    try:
        w.cache.put_many(*KEY, {"h1": np.array([1.0, 0.0])})
        assert w.cache.get_many(*KEY, ["h1"]) == {}
        assert w.cache.count() == 0
    finally:
        w.close()


def test_seeding_a_rebuild_copies_the_entries_it_lacks_with_their_time(tmp_path, clock):
    live = IndexWriter(str(tmp_path / "live.sqlite"), vector_enabled=False)
    live.cache.put_many(*KEY, {"h1": np.array([1.0, 0.0]), "h2": np.array([0.0, 1.0])})
    live.close()
    clock[0] += 5
    fresh = IndexWriter(str(tmp_path / "fresh.sqlite"), vector_enabled=False)
    try:
        fresh.cache.put_many(*KEY, {"h2": np.array([0.5, 0.5])})
        assert fresh.seed_from(str(tmp_path / "live.sqlite")) == 2  # rows read; h2 is kept as it was
        assert as_lists(fresh.cache.get_many(*KEY, ["h1", "h2"])) == {"h1": [1.0, 0.0], "h2": [0.5, 0.5]}
        assert [(r[3], r[5]) for r in rows(fresh)] == [("h1", 1_700_000_000_000), ("h2", 1_700_000_005_000)]
        assert fresh.seed_from(str(tmp_path / "missing.sqlite")) == 0
    finally:
        fresh.close()


def test_copy_from_reads_an_open_database(tmp_path):
    live = IndexWriter(str(tmp_path / "live.sqlite"), vector_enabled=False)
    live.cache.put_many(*KEY, {f"h{i}": np.array([float(i)]) for i in range(5)})
    live.close()
    fresh = IndexWriter(str(tmp_path / "fresh.sqlite"), vector_enabled=False)
    src = apsw.Connection(str(tmp_path / "live.sqlite"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert fresh.cache.copy_from(src, batch=2) == 5
        assert fresh.cache.count() == 5
    finally:
        src.close()
        fresh.close()
