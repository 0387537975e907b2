"""Passage vectors: a long chunk also gets one vector per passage, and its vector score is the best
of its own cosine and its passages' (host_facades.chunking.pipeline.split_passages, vector_state, vector_search)."""

from __future__ import annotations

import numpy as np
import pytest

from host_facades.retrieval import vector_search
from host_facades.chunking.pipeline import split_passages
from host_facades.db.sqlite_read import open_readonly, read_snapshot
from host_facades.chunking.pipeline import hash_text
from memory_core.embeddings import embed_with_passages
from memory_core.store.writer import IndexWriter
from tests.search_fixtures import FakeEmbedder
from tests.test_store import chunk, entry

FRUIT = "apples pears plums cherries apricots peaches quinces nectarines damsons greengages medlars"
MUSIC = "violins cellos violas harps flutes oboes clarinets bassoons trumpets trombones tubas"
STONE = "granite basalt marble slate quartzite gneiss schist obsidian pumice sandstone limestone"
LONG = "\n".join([FRUIT, MUSIC, STONE])  # three unrelated lines: three passages


class CountingCache:
    """An in-memory embedding cache that records the hashes it was asked for."""

    def __init__(self) -> None:
        self.rows: dict[str, np.ndarray] = {}

    def get_many(self, provider, model, provider_key, hashes):
        return {h: self.rows[h] for h in hashes if h in self.rows}

    def put_many(self, provider, model, provider_key, items):
        self.rows.update(items)


def test_split_passages_gives_each_line_a_passage_and_short_lines_to_their_neighbours():
    assert split_passages(LONG) == [FRUIT, MUSIC, STONE]
    assert split_passages("a short note\n\n  and its second line  ") == []  # one passage: no extra vectors
    assert split_passages("## Notes\nthe build is green since tuesday morning\n- ok\n\n"
                          "release train leaves on friday at noon\nend") == [
        "## Notes\nthe build is green since tuesday morning", "- ok\nrelease train leaves on friday at noon\nend"]
    assert split_passages("one\ntwo\nthree\nfour", min_chars=7) == ["one\ntwo", "three\nfour"]


def embed_passages(emb, texts, cache):
    return embed_with_passages(emb, texts, [hash_text(t) for t in texts], cache)[1]


def test_embed_with_passages_skips_one_passage_chunks_and_goes_through_the_cache():
    emb, cache = FakeEmbedder(dims=4096), CountingCache()
    chunks, out = embed_with_passages(emb, [LONG, "kiwi mango"], [hash_text(LONG), hash_text("kiwi mango")], cache)
    assert chunks.shape == (2, 4096) and round(float(chunks[1] @ emb.vector("kiwi mango")), 6) == 1.0
    assert [None if v is None else v.shape for v in out] == [(3, 4096), None]
    assert round(float(out[0][1] @ emb.vector(MUSIC)), 6) == 1.0
    assert emb.calls == 1  # chunks and passages in one batch
    embed_passages(emb, [LONG], cache)
    assert emb.calls == 1  # the chunk and every passage came from the cache


@pytest.fixture
def passage_index(tmp_path):
    """Chunk ``long`` (three unrelated lines) and the one-passage chunks ``harps`` and ``kiwi``."""
    emb = FakeEmbedder(dims=4096)
    path = str(tmp_path / "p.sqlite")
    w = IndexWriter(path)
    texts = {"long.md": LONG, "harps.md": "harps oboes", "kiwi.md": "kiwi mango papaya lychee"}
    for name, text in texts.items():
        ch = chunk(f"memory/{name}", text, 1, text.count("\n") + 1)
        w.replace_source(entry(f"memory/{name}", text), [ch], emb.embed_batch([text]), emb.model,
                         passages=embed_passages(emb, [text], None))
    yield w, path, emb
    w.close()


def _search(path: str, query: np.ndarray, backend: str, limit: int = 3) -> list[tuple[str, float]]:
    vector_search.clear_cache()
    conn = open_readonly(path)
    try:
        with read_snapshot(conn):
            if backend == "scan":
                rows = vector_search.cosine_scan(conn, query, limit=limit, model="fake-model")
            else:
                rows = vector_search.knn_search(conn, query, limit=limit, model="fake-model", backend=backend)
    finally:
        conn.close()
    return [(r["path"].split("/")[-1], round(r["vector_score"], 6)) for r in rows]


@pytest.mark.parametrize("backend", ["numpy", "faiss", "sqlite-vec", "scan"])
def test_a_long_chunk_scores_the_passage_the_query_matches(passage_index, backend):
    _w, path, emb = passage_index
    # "harps flutes" is in the second line of long.md only: the whole chunk's cosine is 0.246183,
    # its MUSIC passage's 0.426401; harps.md has one passage and keeps its own cosine
    assert _search(path, emb.vector("harps flutes"), backend) == [
        ("harps.md", 0.5), ("long.md", 0.426401), ("kiwi.md", 0.0)]
    assert _search(path, emb.vector(MUSIC), backend, limit=1) == [("long.md", 1.0)]  # once, at its best


@pytest.mark.parametrize("backend", ["numpy", "sqlite-vec"])
def test_an_index_without_passage_vectors_scores_whole_chunks(passage_index, backend):
    w, path, emb = passage_index
    w.connection().execute("DELETE FROM memory_index_passage_vectors")
    assert _search(path, emb.vector("harps flutes"), backend) == [
        ("harps.md", 0.5), ("long.md", 0.246183), ("kiwi.md", 0.0)]
    w.connection().execute("DROP TABLE memory_index_passage_vectors")  # an index from before the table
    assert _search(path, emb.vector("harps flutes"), backend) == [
        ("harps.md", 0.5), ("long.md", 0.246183), ("kiwi.md", 0.0)]


def test_writer_keeps_passage_rows_only_for_long_chunks_and_drops_them_with_the_chunk(passage_index):
    w, _path, _emb = passage_index
    conn = w.connection()
    rows = lambda: [tuple(r) for r in conn.execute(  # noqa: E731
        "SELECT c.path, p.seq FROM memory_index_passage_vectors p JOIN memory_index_chunks c"
        " ON c.chunk_rowid = p.chunk_rowid"
        " ORDER BY c.path, p.seq")]
    assert rows() == [("memory/long.md", 0), ("memory/long.md", 1), ("memory/long.md", 2)]
    w.delete_source("memory/long.md", "memory")
    assert rows() == []
    assert conn.execute("SELECT count(*) FROM memory_index_passage_vectors").fetchone()[0] == 0


def test_a_compact_state_keeps_reducing_passages_to_chunks(passage_index):
    from host_facades.retrieval.vector_compact import compact_state
    from host_facades.retrieval.vector_state import load_vector_state, read_rows

    _w, path, emb = passage_index
    q = emb.vector("harps flutes")
    conn = open_readonly(path)
    try:
        with read_snapshot(conn):
            built = load_vector_state(conn, ("db", 1, "fake-model"))
            compact = compact_state(("db", 1, "fake-model"), read_rows(conn, ("db", 1, "fake-model")))
            assert (len(built.ids), built.passages, len(compact), compact.passages) == (6, 3, 6, 3)
            top = compact.search(q, 3, conn=conn)  # the passage rows read back and decoded from int8
    finally:
        conn.close()
    assert top == built.search(q, 3)
    assert [round(s, 6) for _, s in top] == [0.5, 0.426401, 0.0] and len({i for i, _ in top}) == 3


def test_int8_passage_codes_round_trip_within_a_step_of_their_scale():
    from host_facades.db.vectors import decode_int8, encode_int8

    v = np.random.default_rng(3).standard_normal(384).astype(np.float32)
    codes, scale = encode_int8(v)
    assert len(codes) == 384 and scale == pytest.approx(float(np.abs(v).max()) / 127)
    back = decode_int8(codes, scale)
    assert float(np.abs(back - v).max()) <= scale / 2 + 1e-6
    assert encode_int8(back) == (codes, scale)  # a reused vector is stored unchanged
    from host_facades.db.vectors import decode_int8_rows

    many = [encode_int8(r) for r in np.random.default_rng(4).standard_normal((5, 384)).astype(np.float32)]
    together = decode_int8_rows(b"".join(c for c, _ in many), [s for _, s in many])
    assert all(np.array_equal(row, decode_int8(c, s)) for row, (c, s) in zip(together, many))  # bit for bit
    assert split_passages("one line\nand a second line") == []  # two lines: no passage vectors


@pytest.mark.parametrize("backend", ["numpy", "sqlite-vec"])
def test_float32_passage_rows_written_before_migration_4_still_count(passage_index, backend):
    from host_facades.db.vectors import decode_int8, encode_vector

    w, path, emb = passage_index
    conn = w.connection()
    rows = [tuple(r) for r in conn.execute("SELECT chunk_rowid, seq, embedding, scale FROM memory_index_passage_vectors")]
    assert rows and all(len(blob) == 4096 and scale > 0 for _, _, blob, scale in rows)  # int8: 1 byte a dimension
    with conn:
        conn.executemany("UPDATE memory_index_passage_vectors SET embedding = ?, scale = NULL WHERE chunk_rowid = ?"
                         " AND seq = ?", [(encode_vector(decode_int8(b, s)), c, q) for c, q, b, s in rows])
    assert _search(path, emb.vector("harps flutes"), backend) == [
        ("harps.md", 0.5), ("long.md", 0.426401), ("kiwi.md", 0.0)]
    assert [round(s, 6) for _, s in _compact_top(path, emb.vector("harps flutes"))] == [0.5, 0.426401, 0.0]


def _compact_top(path: str, q, k: int = 3) -> list[tuple[str, float]]:
    from host_facades.retrieval.vector_compact import compact_state
    from host_facades.retrieval.vector_state import read_rows

    conn = open_readonly(path)
    try:
        with read_snapshot(conn):
            return compact_state(("db", 1, "fake-model"), read_rows(conn, ("db", 1, "fake-model"))).search(
                q, k, conn=conn)
    finally:
        conn.close()


def test_passages_keyed_by_chunk_id_keep_the_float32_state(passage_index):
    from host_facades.retrieval.vector_compact import compact_layout

    w, path, _emb = passage_index
    assert compact_layout(w.connection())
    _to_layout_before_migration_5(w.connection())  # rows cannot be read back by chunk_rowid
    assert not compact_layout(w.connection())



def _to_layout_before_migration_5(conn) -> None:
    """Rewrite the passage table as releases before schema migration 5 kept it: keyed by chunk id."""
    with conn:
        conn.execute("ALTER TABLE memory_index_passage_vectors RENAME TO p5")
        conn.execute("CREATE TABLE memory_index_passage_vectors (chunk_id TEXT NOT NULL REFERENCES"
                     " memory_index_chunks(id) ON DELETE CASCADE, seq INTEGER NOT NULL, embedding BLOB NOT NULL,"
                     " scale REAL, PRIMARY KEY (chunk_id, seq)) STRICT")
        conn.execute("INSERT INTO memory_index_passage_vectors SELECT c.id, p.seq, p.embedding, p.scale FROM p5 p"
                     " JOIN memory_index_chunks c ON c.chunk_rowid = p.chunk_rowid")
        conn.execute("DROP TABLE p5")
        conn.execute("PRAGMA user_version=4")


@pytest.mark.parametrize("backend", ["numpy", "sqlite-vec", "scan"])
def test_an_index_with_passages_keyed_by_chunk_id_is_searched_then_migrated(passage_index, backend):
    w, path, emb = passage_index
    conn = w.connection()
    before = [tuple(r) for r in conn.execute(
        "SELECT c.id, p.seq, p.embedding, p.scale FROM memory_index_passage_vectors p"
        " JOIN memory_index_chunks c ON c.chunk_rowid = p.chunk_rowid ORDER BY c.id, p.seq")]
    assert len(before) == 3
    _to_layout_before_migration_5(conn)
    w.close()
    expected = [("harps.md", 0.5), ("long.md", 0.426401), ("kiwi.md", 0.0)]
    assert _search(path, emb.vector("harps flutes"), backend) == expected  # read as it is, not migrated
    w = IndexWriter(path)  # the writer migrates it
    try:
        conn = w.connection()
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
        assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0  # the old table's pages went back
        assert [r[1] for r in conn.execute("PRAGMA table_info(memory_index_passage_vectors)")] == [
            "chunk_rowid", "seq", "embedding", "scale"]
        assert [tuple(r) for r in conn.execute(
            "SELECT c.id, p.seq, p.embedding, p.scale FROM memory_index_passage_vectors p"
            " JOIN memory_index_chunks c ON c.chunk_rowid = p.chunk_rowid ORDER BY c.id, p.seq")] == before
        assert _search(path, emb.vector("harps flutes"), backend) == expected
        w.delete_source("memory/long.md", "memory")
        assert conn.execute("SELECT count(*) FROM memory_index_passage_vectors").fetchone()[0] == 0
    finally:
        w.close()


def test_rows_copied_from_an_index_keyed_by_chunk_id_keep_their_passages(passage_index, tmp_path):
    from memory_core.store.source_rows import read_rows

    w, path, _emb = passage_index
    _to_layout_before_migration_5(w.connection())
    w.close()
    src = open_readonly(path, load_vec=False)
    try:
        rows, _mtime, _size = read_rows(src, "memory/long.md", "memory", model="fake-model")
    finally:
        src.close()
    assert [(cid == rows.chunks[0][0], seq, len(blob), scale > 0) for cid, seq, blob, scale in rows.passages] == [
        (True, 0, 4096, True), (True, 1, 4096, True), (True, 2, 4096, True)]
