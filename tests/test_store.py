"""The single writer (spec §8.5) and the atomic file-swap reindex (spec §8.6); cases 19-20 of §11.2."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import apsw
import numpy as np
import pytest

from host_facades.chunking.pipeline import PreparedChunk, chunk_id, hash_text
from host_facades.db.vectors import decode_vector
from memory_core.errors import IndexBusy
from memory_core.sources import SourceEntry
from memory_core.store.reindex import atomic_reindex, lock_path, reindex_lock, sweep_temp_files
from memory_core.store.writer import IndexWriter


def entry(path: str, content: str, source: str = "memory", mtime_ms: float = 1_700_000_000_000.0) -> SourceEntry:
    return SourceEntry(
        path=path, abs_path="/ws/" + path, source=source, mtime_ms=mtime_ms,
        size=len(content.encode()), hash=hash_text(content), content=content,
    )


def chunk(path: str, text: str, start: int = 1, end: int = 1, source: str = "memory", **kw) -> PreparedChunk:
    return PreparedChunk(source=source, path=path, start_line=start, end_line=end, text=text,
                         hash=hash_text(text), **kw)


def publish(w: IndexWriter, path: str, *texts: str, source: str = "memory", vecs=None, model="fts-only") -> str:
    chunks = [chunk(path, t, i + 1, i + 1, source=source) for i, t in enumerate(texts)]
    return w.replace_source(entry(path, "\n".join(texts), source), chunks, vecs, model)


def fts(conn: apsw.Connection, word: str) -> list[tuple[str, str]]:
    return [tuple(r) for r in conn.execute(
        "SELECT path, text FROM memory_index_chunks_fts WHERE memory_index_chunks_fts MATCH ? ORDER BY path, text",
        (word,),
    )]


@pytest.fixture
def store(tmp_path):
    w = IndexWriter(str(tmp_path / "main.sqlite"))
    yield w
    w.close()


def test_replace_source_round_trip(store):
    ch = chunk("MEMORY.md", "- prefers tea over coffee", 3, 4, importance=8, triggers=("drinks", "tea"),
               project_key="github.com/acme/rocket", origin_class="owner", observed_at=1234)
    assert store.replace_source(entry("MEMORY.md", "x"), [ch], None, "fts-only") == "published"
    conn = store.conn
    cid = chunk_id("memory", "MEMORY.md", 3, 4, hash_text("- prefers tea over coffee"), "fts-only")
    assert [tuple(r) for r in conn.execute(
        "SELECT id, path, source, start_line, end_line, model, text, embedding FROM memory_index_chunks")] == [
        (cid, "MEMORY.md", "memory", 3, 4, "fts-only", "- prefers tea over coffee", b"")]
    assert [tuple(r) for r in conn.execute("SELECT * FROM memory_index_chunk_recall_metadata")] == [
        (cid, 8, '["drinks", "tea"]', "github.com/acme/rocket")]
    assert [tuple(r) for r in conn.execute("SELECT * FROM memory_index_chunk_provenance")] == [
        (cid, "owner", "unknown", 1234, None)]
    assert [tuple(r) for r in conn.execute("SELECT path, source, hash, size FROM memory_index_sources")] == [
        ("MEMORY.md", "memory", hash_text("x"), 1)]
    assert fts(conn, "coffee") == [("MEMORY.md", "- prefers tea over coffee")]
    assert [tuple(r) for r in conn.execute(
        "SELECT path FROM memory_index_paths_fts WHERE memory_index_paths_fts MATCH 'memory'")] == [("MEMORY.md",)]
    assert store.indexed_hashes("memory") == {"MEMORY.md": hash_text("x")}


def test_replace_replaces_whole_file_and_keeps_other_files(store):
    publish(store, "memory/a.md", "alpha one", "alpha two")
    publish(store, "memory/b.md", "beta")
    publish(store, "memory/a.md", "gamma")
    conn = store.conn
    assert [tuple(r) for r in conn.execute("SELECT path, text FROM memory_index_chunks ORDER BY path")] == [
        ("memory/a.md", "gamma"), ("memory/b.md", "beta")]
    assert fts(conn, "alpha") == []
    assert int(conn.execute("SELECT count(*) FROM memory_index_chunk_provenance").fetchone()[0]) == 2
    assert int(conn.execute("SELECT count(*) FROM memory_index_chunks_fts").fetchone()[0]) == 2


def test_revision_increases_on_each_replace_and_delete(store):
    """§11.2 case 20: every source replace or delete increases memory_index_state.revision."""
    seen = [store.revision]
    publish(store, "memory/a.md", "one")
    seen.append(store.revision)
    publish(store, "memory/a.md", "two")
    seen.append(store.revision)
    publish(store, "memory/b.md", "three")
    seen.append(store.revision)
    store.delete_source("memory/b.md", "memory")
    seen.append(store.revision)
    assert store.delete_if_current("memory/a.md", "memory", hash_text("two")) is True
    seen.append(store.revision)
    assert seen == sorted(seen) and len(set(seen)) == len(seen), seen


def test_has_semantic_chunks_false_for_fts_only_true_otherwise(store):
    """§11.2 case 20: hasSemanticChunks is false for fts-only chunks and true otherwise."""
    publish(store, "memory/a.md", "keyword only")
    assert store.has_semantic_chunks() is False
    publish(store, "memory/b.md", "with vector", vecs=np.array([[1.0, 0.0, 0.0]], dtype=np.float32), model="m1")
    assert store.has_semantic_chunks() is True
    assert store.counts()["has_semantic_chunks"] is True


def test_delete_if_current_checks_hash(store):
    """§11.2 case 20: a delete with the correct expectedHash returns true, a stale one does nothing."""
    publish(store, "memory/a.md", "current text")
    assert store.delete_if_current("memory/a.md", "memory", hash_text("older text")) is False
    assert store.indexed_hashes("memory") == {"memory/a.md": hash_text("current text")}
    assert store.delete_if_current("memory/a.md", "memory", hash_text("current text")) is True
    assert store.indexed_hashes("memory") == {}
    assert int(store.conn.execute("SELECT count(*) FROM memory_index_chunks").fetchone()[0]) == 0
    assert store.delete_if_current("memory/a.md", "memory", hash_text("current text")) is False


def test_publication_atomicity_failed_source_keeps_old_rows(store):
    """§11.2 case 19: the second file's insert fails -> first shows new text and vector, second keeps old rows."""
    v_old = np.array([[1.0, 0.0]], dtype=np.float32)
    publish(store, "memory/a.md", "a old", vecs=v_old, model="m")
    publish(store, "memory/b.md", "b old", vecs=v_old, model="m")
    before_b = [tuple(r) for r in store.conn.execute(
        "SELECT * FROM memory_index_chunks WHERE path = 'memory/b.md'")]
    store.conn.execute(
        "CREATE TRIGGER fail_b BEFORE INSERT ON memory_index_chunks WHEN new.path = 'memory/b.md'"
        " BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
    )
    v_new = np.array([[0.0, 1.0]], dtype=np.float32)
    assert publish(store, "memory/a.md", "a new", vecs=v_new, model="m") == "published"
    with pytest.raises(apsw.ConstraintError, match="injected failure"):
        publish(store, "memory/b.md", "b new", vecs=v_new, model="m")
    conn = store.conn
    rows = {p: (t, decode_vector(e).tolist()) for p, t, e in conn.execute(
        "SELECT path, text, embedding FROM memory_index_chunks")}
    assert rows == {"memory/a.md": ("a new", [0.0, 1.0]), "memory/b.md": ("b old", [1.0, 0.0])}
    assert [tuple(r) for r in conn.execute("SELECT * FROM memory_index_chunks WHERE path = 'memory/b.md'")] == before_b
    assert store.indexed_hashes("memory")["memory/b.md"] == hash_text("b old")
    assert fts(conn, "old") == [("memory/b.md", "b old")]
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.execute("DROP TRIGGER fail_b")
    assert publish(store, "memory/b.md", "b new", vecs=v_new, model="m") == "published"
    assert fts(conn, "new") == [("memory/a.md", "a new"), ("memory/b.md", "b new")]


def test_vectors_go_to_canonical_blob_and_vec0(store):
    if not store.vector_available:
        pytest.skip(f"sqlite-vec not loadable: {store.vector_error}")
    vecs = np.array([[1.0, 0.0, 0.0], [0.6, 0.8, 0.0]], dtype=np.float32)
    publish(store, "memory/a.md", "first", "second", vecs=vecs, model="m")
    assert store.vec_dims == 3
    rows = [(r[0], round(1 - r[1], 4)) for r in store.conn.execute(
        "SELECT c.text, v.distance FROM memory_index_chunks_vec v JOIN memory_index_chunks c ON c.id = v.id"
        " WHERE v.embedding MATCH ? AND k = 2 ORDER BY v.distance",
        (np.array([1.0, 0.0, 0.0], dtype="<f4").tobytes(),),
    )]
    assert rows == [("first", 1.0), ("second", 0.6)]
    store.delete_source("memory/a.md", "memory")
    assert int(store.conn.execute("SELECT count(*) FROM memory_index_chunks_vec").fetchone()[0]) == 0


def test_forget_session_tombstone_refuses_publication(store):
    publish(store, "sessions/s1.jsonl", "User: secret plan", source="sessions")
    assert store.forget_session("sessions/s1.jsonl") == 1
    assert store.is_forgotten("sessions/s1.jsonl") is True
    assert publish(store, "sessions/s1.jsonl", "User: secret plan", source="sessions") == "forgotten"
    assert int(store.conn.execute("SELECT count(*) FROM memory_index_chunks").fetchone()[0]) == 0
    assert store.indexed_hashes("sessions") == {}
    # memory files with the same path are not affected by a session tombstone
    assert publish(store, "sessions/s1.jsonl", "memory text") == "published"


def test_meta_round_trip(store):
    assert store.read_meta() is None
    store.write_meta({"model": "fts-only", "provider": "none", "sources": ["memory"]})
    assert store.read_meta() == {"model": "fts-only", "provider": "none", "sources": ["memory"]}
    store.set_meta_value("k", "v")
    assert store.get_meta_value("k") == "v"
    store.set_meta_value("k", None)
    assert store.get_meta_value("k") is None


def test_vec_table_lazily_created_once_dims_known(store):
    if not store.vector_available:
        pytest.skip("sqlite-vec not loadable")
    publish(store, "memory/a.md", "fts only")
    assert store.vec_dims is None
    publish(store, "memory/b.md", "vec", vecs=np.ones((1, 5), dtype=np.float32), model="m")
    assert store.vec_dims == 5


# ---------------------------------------------------------------- atomic reindex


def _build(*files: tuple[str, str]):
    def build(w: IndexWriter) -> int:
        for path, text in files:
            publish(w, path, text)
        w.write_meta({"model": "fts-only"})
        return len(files)
    return build


def test_atomic_reindex_swaps_in_new_content_and_keeps_cache(tmp_path):
    db = str(tmp_path / "main.sqlite")
    live = IndexWriter(db)
    publish(live, "memory/old.md", "ancient words")
    live.cache.put_many("p", "m", "k", {"h": np.array([1.0, 0.0])})
    live.forget_session("sessions/gone.jsonl")
    reader = apsw.Connection(db, flags=apsw.SQLITE_OPEN_READONLY)
    reader.execute("BEGIN")
    assert fts(reader, "ancient") == [("memory/old.md", "ancient words")]

    def close_live():
        live.close()

    assert atomic_reindex(db, _build(("memory/new.md", "fresh words")), before_swap=close_live) == 1
    # a reader holding the old file keeps its snapshot; a new reader sees the new file
    assert fts(reader, "ancient") == [("memory/old.md", "ancient words")]
    reader.execute("COMMIT")
    reader.close()
    w = IndexWriter(db)
    assert fts(w.conn, "fresh") == [("memory/new.md", "fresh words")]
    assert fts(w.conn, "ancient") == []
    assert list(w.cache.get_many("p", "m", "k", ["h"])) == ["h"]
    assert w.is_forgotten("sessions/gone.jsonl")
    assert w.integrity_check() == "ok"
    w.close()
    assert sorted(os.listdir(tmp_path)) == ["main.sqlite", "main.sqlite.reindex.lock"]


def test_atomic_reindex_failure_keeps_old_db_searchable(tmp_path):
    db = str(tmp_path / "main.sqlite")
    live = IndexWriter(db)
    publish(live, "memory/old.md", "ancient words")

    def failing(w: IndexWriter) -> None:
        publish(w, "memory/new.md", "fresh words")
        raise OSError("scan failed: stale NFS handle")

    with pytest.raises(OSError, match="stale NFS handle"):
        atomic_reindex(db, failing)
    assert fts(live.conn, "ancient") == [("memory/old.md", "ancient words")]
    ro = apsw.Connection(db, flags=apsw.SQLITE_OPEN_READONLY)
    assert fts(ro, "ancient") == [("memory/old.md", "ancient words")]
    assert fts(ro, "fresh") == []
    ro.close()
    live.close()
    assert [n for n in os.listdir(tmp_path) if ".tmp-" in n] == []


def test_reindex_lock_busy_while_held(tmp_path):
    db = str(tmp_path / "main.sqlite")
    entered, release = threading.Event(), threading.Event()

    def hold():
        with reindex_lock(db):
            entered.set()
            release.wait(5)

    t = threading.Thread(target=hold)
    t.start()
    assert entered.wait(5)
    try:
        with pytest.raises(IndexBusy, match=f"pid {os.getpid()}"):
            atomic_reindex(db, _build())
    finally:
        release.set()
        t.join()
    assert atomic_reindex(db, _build(("memory/a.md", "ok"))) == 1
    assert os.path.exists(lock_path(db))


def test_sweep_removes_only_old_temp_files(tmp_path):
    db = str(tmp_path / "main.sqlite")
    old, young = db + ".tmp-aaa", db + ".tmp-bbb"
    for p in (old, young):
        open(p, "w").close()
    os.utime(old, (time.time() - 700, time.time() - 700))
    assert sweep_temp_files(db) == [old]
    assert os.path.exists(young) and not os.path.exists(old)


def test_writer_reopens_after_file_swap(tmp_path):
    db = str(tmp_path / "main.sqlite")
    w = IndexWriter(db)
    publish(w, "memory/a.md", "before swap")
    atomic_reindex(db, _build(("memory/b.md", "after swap")))
    # the writer notices the new inode and writes into the live file, not the unlinked one
    publish(w, "memory/c.md", "written later")
    w.close()
    ro = apsw.Connection(db, flags=apsw.SQLITE_OPEN_READONLY)
    assert sorted(r[0] for r in ro.execute("SELECT path FROM memory_index_sources")) == ["memory/b.md", "memory/c.md"]
    ro.close()


def test_keyword_only_writer_still_maintains_an_existing_vec_table(tmp_path):
    db = str(tmp_path / "main.sqlite")
    w = IndexWriter(db)
    if not w.vector_available:
        pytest.skip("sqlite-vec not loadable")
    publish(w, "sessions/s.jsonl", "User: hi", source="sessions", vecs=np.ones((1, 3), dtype=np.float32), model="m")
    w.close()
    w = IndexWriter(db, vector_enabled=False)
    assert w.forget_session("sessions/s.jsonl") == 1
    assert int(w.conn.execute("SELECT count(*) FROM memory_index_chunks_vec").fetchone()[0]) == 0
    w.close()


def test_two_processes_syncing_the_same_index_wait_for_each_other(tmp_path):
    """A watcher's sync next to `memory-core index`: two processes publish the same 800 edited
    files at once. Each source transaction takes the write lock up front (BEGIN IMMEDIATE), so
    they wait for each other; a deferred one failed hundreds of files with "database is locked"."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    for i in range(800):
        (ws / "memory" / f"n{i:04d}.md").write_text(f"# note {i}\n\nfact {i} about topic {i % 37}\n")
    env = {**os.environ, "MEMORY_CORE_HOME": str(tmp_path / "home"), "PYTHONPATH": str(root)}
    cmd = [sys.executable, "-m", "memory_core", "index", "--workspace", str(ws), "--json"]
    assert subprocess.run(cmd, env=env, capture_output=True, timeout=120, check=False).returncode == 0
    for i in range(800):
        with open(ws / "memory" / f"n{i:04d}.md", "a", encoding="utf-8") as fh:
            fh.write("edited\n")
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        summary = json.loads(out)
        assert (summary["failed"], summary["problems"]) == (0, []), summary["problems"][:3]
    conn = apsw.Connection(str(tmp_path / "home" / "main.sqlite"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        edited = conn.execute("SELECT count(DISTINCT path) FROM memory_index_chunks WHERE text LIKE '%edited%'")
        assert edited.fetchone()[0] == 800
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()


def test_an_index_with_its_own_fts_text_copy_keeps_working_and_a_new_one_stores_text_once(tmp_path, monkeypatch):
    from memory_core.store import schema

    old_sql = schema._FTS_SQL.replace(
        ",\n    content='memory_index_chunks', content_rowid='chunk_rowid'", "").replace(
        "INSERT INTO memory_index_chunks_fts(memory_index_chunks_fts, rowid, text, id, path, source, model,\n"
        "        start_line, end_line)\n    VALUES ('delete', old.chunk_rowid, old.text, old.id, old.path, old.source,"
        " old.model, old.start_line,\n        old.end_line);",
        "DELETE FROM memory_index_chunks_fts WHERE rowid = old.chunk_rowid;")
    assert "content=" not in old_sql and "'delete'" not in old_sql
    old_path = str(tmp_path / "old.sqlite")
    with monkeypatch.context() as m:
        m.setattr(schema, "_FTS_SQL", old_sql)  # as an older release created it
        m.setattr(schema, "_IMAGES", {})  # new files' images: built from that SQL, then dropped
        w = IndexWriter(old_path)
        publish(w, "memory/a.md", "lighthouse keeper")
        w.close()
    new_path = str(tmp_path / "new.sqlite")
    for path, stores_text in ((old_path, True), (new_path, False)):
        w = IndexWriter(path)
        try:
            publish(w, "memory/a.md", "harbour pilot")
            publish(w, "memory/b.md", "lighthouse beam")
            w.delete_source("memory/b.md", "memory")
            publish(w, "memory/c.md", "lighthouse keeper")
            conn = w.connection()
            conn.execute("INSERT INTO memory_index_chunks_fts(memory_index_chunks_fts) VALUES ('integrity-check')")
            assert fts(conn, "lighthouse") == [("memory/c.md", "lighthouse keeper")]
            assert fts(conn, "harbour") == [("memory/a.md", "harbour pilot")]
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            assert ("memory_index_chunks_fts_content" in tables) is stores_text
        finally:
            w.close()
    conn = apsw.Connection(new_path)
    assert (conn.execute("PRAGMA page_size").fetchone()[0], conn.execute("PRAGMA auto_vacuum").fetchone()[0]) == (16384, 2)
    conn.close()


def test_a_keyword_only_agent_gets_small_pages_and_an_embedding_one_large(tmp_path):
    """Every table and index takes at least a page: a keyword-only index (rows of text alone) is
    made with 4 KiB pages, one whose rows carry vectors with 16 KiB; the choice is a new file's."""
    from memory_core.config import load_config
    from memory_core.core import MemoryCore

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    for k in range(5):
        (ws / "memory" / f"n{k}.md").write_text(f"# note {k}\nfalcon staging coffee roast {k}\n", encoding="utf-8")
    sizes = {}
    for provider in ("none", "local"):
        db = tmp_path / f"{provider}.sqlite"
        cfg = load_config(None, overrides={"pool": {"workers": 0}, "provider": provider, "store": {"path": str(db)}})
        with MemoryCore(str(ws), config=cfg) as core:
            assert core.index().files == 5
        conn = apsw.Connection(str(db))
        sizes[provider] = conn.execute("PRAGMA page_size").fetchone()[0]
        conn.close()
    assert sizes == {"none": 4096, "local": 16384}


def test_the_wal_is_checkpointed_by_bytes_whatever_the_page_size(tmp_path):
    old_path = str(tmp_path / "old.sqlite")
    conn = apsw.Connection(old_path)  # as an older release created it: 4 KiB pages
    conn.execute("PRAGMA page_size=4096")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    got = {}
    for name, path in (("old", old_path), ("new", str(tmp_path / "new.sqlite"))):
        w = IndexWriter(path)
        try:
            c = w.connection()
            got[name] = tuple(c.execute(f"PRAGMA {p}").fetchone()[0]
                              for p in ("page_size", "wal_autocheckpoint", "journal_size_limit"))
        finally:
            w.close()
    assert got == {"old": (4096, 1000, 4_096_000), "new": (16384, 250, 4_096_000)}


@pytest.mark.parametrize("tokenizer", ["unicode61", "trigram"])
def test_a_new_index_file_gets_its_whole_schema_in_one_commit(tmp_path, tokenizer):
    """A new file's schema (every migration and the FTS tables) is created by one write transaction,
    and is the very schema the step-by-step path (``migrate`` then ``ensure_fts``) creates; a file
    that has one already is left to those two."""
    from memory_core.store import schema

    def master(conn: apsw.Connection) -> list[tuple]:
        return [tuple(r) for r in conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name")]

    stepwise = apsw.Connection(str(tmp_path / "stepwise.sqlite"))
    schema.configure_connection(stepwise)
    schema.migrate(stepwise)
    assert schema.ensure_fts(stepwise, tokenizer) == (True, None)
    at_once = apsw.Connection(str(tmp_path / "at-once.sqlite"))
    schema.configure_connection(at_once)
    commits = []
    at_once.set_commit_hook(lambda: commits.append(1) or False)
    assert schema.create_schema(at_once, tokenizer) is True
    assert len(commits) == 1
    assert (schema.migrate(at_once), schema.ensure_fts(at_once, tokenizer)) == (len(schema.MIGRATIONS), (True, None))
    assert master(at_once) == master(stepwise)
    assert (at_once.execute("PRAGMA user_version").fetchone()[0]
            == stepwise.execute("PRAGMA user_version").fetchone()[0] == len(schema.MIGRATIONS))
    assert schema.create_schema(at_once, tokenizer) is False  # a schema already: nothing to do
    for conn in (stepwise, at_once):
        conn.close()


@pytest.mark.parametrize("tokenizer", ["unicode61", "trigram"])
def test_a_writer_creates_a_new_file_from_the_schema_image(tmp_path, tokenizer):
    """A new index file is written whole (``schema.new_file_image``: WAL mode, every table) and linked
    in, private, with no temp file left; its schema is the step-by-step one and it works as any."""
    from memory_core.store import schema

    stepwise = apsw.Connection(str(tmp_path / "stepwise.sqlite"))
    schema.configure_connection(stepwise)
    schema.migrate(stepwise)
    schema.ensure_fts(stepwise, tokenizer)
    image = schema.new_file_image(tokenizer)
    assert image[18:20] == b"\x02\x02" and schema.new_file_image(tokenizer) is image
    w = IndexWriter(str(tmp_path / "new.sqlite"), fts_tokenizer=tokenizer, vector_enabled=False)
    try:
        publish(w, "memory/a.md", "zebracorn grazes")
        conn = w.connection()
        sql = "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name"
        assert [tuple(r) for r in conn.execute(sql)] == [tuple(r) for r in stepwise.execute(sql)]
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert fts(conn, "zebracorn") == [("memory/a.md", "zebracorn grazes")]
    finally:
        w.close()
        stepwise.close()
    assert oct(os.stat(tmp_path / "new.sqlite").st_mode & 0o777) == "0o600"
    assert not list(tmp_path.glob("new.sqlite.tmp-*"))


def test_a_new_file_created_meanwhile_by_another_process_is_kept(tmp_path):
    from memory_core.store import schema
    from memory_core.store.connection import create_from_image

    path = tmp_path / "taken.sqlite"
    path.write_bytes(b"")  # another process's new, still empty database
    assert create_from_image(str(path), schema.new_file_image()) is True
    assert path.read_bytes() == b"" and not list(tmp_path.glob("taken.sqlite.tmp-*"))


def test_a_big_index_folder_is_listed_for_temp_leftovers_at_most_once_per_interval(tmp_path, monkeypatch):
    """A writer start sweeps temp leftovers of dead rebuilds; in a folder of many index files (a state
    dir of thousands of agents) that keeps changing, the folder is listed at most once per
    ``TEMP_SCAN_INTERVAL_S``, not at every start, and a leftover goes at the next start after that."""
    from memory_core.store import reindex

    monkeypatch.setattr(reindex, "TEMP_SCAN_BIG_FOLDER", 3)
    now = [1000.0]
    monkeypatch.setattr(reindex, "_clock", lambda: now[0])
    listings = []
    real_listdir = os.listdir
    monkeypatch.setattr(os, "listdir", lambda path=".": listings.append(path) or real_listdir(path))
    for i in range(5):
        (tmp_path / f"a{i}.sqlite").write_bytes(b"")
    db = str(tmp_path / "a0.sqlite")
    assert reindex.sweep_dead_temp_files(db) == []
    leftover = f"{db}.tmp-1-killed"
    Path(leftover).write_bytes(b"x")
    assert reindex.sweep_dead_temp_files(db) == []  # listed less than the interval ago
    assert reindex.sweep_dead_temp_files(str(tmp_path / "a1.sqlite")) == []  # one listing for the folder
    assert listings == [str(tmp_path)]
    now[0] += reindex.TEMP_SCAN_INTERVAL_S
    assert reindex.sweep_dead_temp_files(db) == [leftover]
    assert not os.path.exists(leftover)
