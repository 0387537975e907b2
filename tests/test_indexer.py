"""MemoryCore sync/index: change detection, pruning, problems, identity, cache reuse, atomic rebuild."""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import time
from pathlib import Path

import apsw
import numpy as np
import pytest

from memory_core.config import load_config
from memory_core.core import MemoryCore
from memory_core.embeddings import register_embedding_provider
from memory_core.errors import IndexPaused, ReferenceNotFound
from memory_core.indexer import ScanFailed, run_sync
from memory_core.sources import ScanResult, SourceProblem
from memory_core.store.writer import LAST_SYNC_KEY

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


class FakeEmbedder:
    """Deterministic hash-based embedder that records every batch it is asked for."""

    id = "fake"
    model = "fake-1"
    provider_key = "fake-key"
    dims = 8
    max_input_bytes = 8192

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed_batch(self, texts):
        self.calls.append(list(texts))
        rows = []
        for t in texts:
            d = hashlib.sha256(t.encode()).digest()
            v = np.frombuffer(d[: self.dims * 4], dtype=np.uint32).astype(np.float32) + 1.0
            rows.append(v / np.linalg.norm(v))
        return np.stack(rows).astype(np.float32)

    @property
    def embedded(self) -> list[str]:
        return [t for call in self.calls for t in call]


@pytest.fixture
def fake_provider():
    emb = FakeEmbedder()
    register_embedding_provider("fake-test", lambda cfg: emb)
    return emb


def core_for(ws: Path, **overrides) -> MemoryCore:
    return MemoryCore(str(ws), config=load_config(None, overrides=overrides))


def write(ws: Path, rel: str, text: str) -> None:
    p = ws / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")


def rows(core: MemoryCore, sql: str, *params) -> list[tuple]:
    return [tuple(r) for r in core.writer.conn.execute(sql, params)]


def fts(core: MemoryCore, word: str) -> list[str]:
    return [r[0] for r in core.writer.conn.execute(
        "SELECT path FROM memory_index_chunks_fts WHERE memory_index_chunks_fts MATCH ? ORDER BY path", (word,))]


def test_incremental_sync_detects_added_changed_removed(workspace):
    write(workspace, "MEMORY.md", "- likes green tea\n")
    write(workspace, "memory/a.md", "# A\nalpha notes\n")
    write(workspace, "memory/b.md", "# B\nbeta notes\n")
    with core_for(workspace) as core:
        s1 = core.index()
        assert (s1.full, s1.files, s1.added, s1.changed, s1.removed) == (True, 3, 3, 0, 0)
        rev = core.writer.revision
        s2 = core.sync()
        assert (s2.full, s2.added, s2.changed, s2.removed, s2.unchanged, s2.chunks_written) == (False, 0, 0, 0, 3, 0)
        assert core.writer.revision == rev  # nothing rewritten
        write(workspace, "memory/a.md", "# A\ngamma notes\n")
        (workspace / "memory" / "b.md").unlink()
        write(workspace, "memory/c.md", "delta notes\n")
        s3 = core.sync()
        assert (s3.added, s3.changed, s3.removed, s3.unchanged, s3.files) == (1, 1, 1, 1, 3)
        assert fts(core, "alpha") == [] and fts(core, "beta") == []
        assert fts(core, "notes") == ["memory/a.md", "memory/c.md"]
        assert sorted(s3.to_json()) == sorted([
            "files", "chunks", "added", "changed", "removed", "unchanged", "skipped", "forgotten", "failed",
            "chunks_written", "bytes", "seconds", "revision", "full", "reason", "provider", "model", "scan_ok",
            "problems", "error", "moved_aside", "superseded", "rebuild_reason"])


def test_the_readme_example_uses_the_example_agent(tmp_path, monkeypatch):
    """README's Python example: the config's agentId ("example") decides the index file, so trying
    it leaves the "main" agent's index alone; an explicit agent_id still wins."""
    monkeypatch.setenv("MEMORY_CORE_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(EXAMPLES.parent)
    with MemoryCore("examples/workspace", config_path="examples/memory-core.toml") as core:
        assert (core.agent_id, core.db_path) == ("example", str(tmp_path / "home" / "example.sqlite"))
    with MemoryCore("examples/workspace", config_path="examples/memory-core.toml", agent_id="ops") as core:
        assert core.agent_id == "ops"


def test_example_workspace_indexes_sessions_and_annotations(tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(EXAMPLES / "workspace", ws)
    core = MemoryCore(str(ws), config=load_config(EXAMPLES / "memory-core.toml"))
    with core:
        s = core.index()
        assert (s.files, s.problems, s.failed) == (19, [], 0)
        st = core.status()
        assert st["files_by_source"] == {"memory": 17, "sessions": 2}
        assert rows(core, "SELECT path, start_line, end_line FROM memory_index_chunks WHERE source = 'sessions'"
                    " ORDER BY path") == [
            ("sessions/0a6c2f0e-4a8e-4f55-9d43-5f6c1b7d2e11.jsonl", 3, 13),
            ("sessions/7f3d9b42-1c5e-4b6a-8e2f-3a9c4d5e6f70.jsonl", 3, 8),
        ]
        text = rows(core, "SELECT text FROM memory_index_chunks WHERE source = 'sessions' ORDER BY path")[0][0]
        assert "HEARTBEAT" not in text and "System:" not in text and "periodic tasks" not in text
        assert rows(core, "SELECT r.importance, r.triggers FROM memory_index_chunk_recall_metadata r JOIN"
                    " memory_index_chunks c ON c.id = r.chunk_id WHERE c.text LIKE '%allergic to peanuts%'") == [
            (10, '["lunch", "food", "catering"]')]


def test_publication_failure_keeps_old_rows_and_next_sync_publishes(workspace):
    """§11.2 case 19 through sync: the second file's insert fails, the first is published."""
    write(workspace, "memory/a.md", "apple old\n")
    write(workspace, "memory/b.md", "banana old\n")
    with core_for(workspace) as core:
        core.index()
        core.writer.conn.execute(
            "CREATE TRIGGER fail_b BEFORE INSERT ON memory_index_chunks WHEN new.path = 'memory/b.md'"
            " BEGIN SELECT RAISE(ABORT, 'injected'); END")
        write(workspace, "memory/a.md", "apple new\n")
        write(workspace, "memory/b.md", "banana new\n")
        s = core.sync()
        assert (s.changed, s.failed) == (2, 1)
        assert s.problems[0]["path"] == "memory/b.md" and s.problems[0]["code"] == "publish_failed"
        assert rows(core, "SELECT path, text FROM memory_index_chunks ORDER BY path") == [
            ("memory/a.md", "apple new\n"), ("memory/b.md", "banana old\n")]
        assert rows(core, "PRAGMA integrity_check") == [("ok",)]
        assert '"publish_failed"' in core.writer.get_meta_value(LAST_SYNC_KEY)
        core.writer.conn.execute("DROP TRIGGER fail_b")
        s2 = core.sync()
        assert (s2.changed, s2.failed) == (1, 0)
        assert fts(core, "new") == ["memory/a.md", "memory/b.md"]


def test_identical_text_embedded_once_and_forced_reindex_uses_cache(workspace, fake_provider):
    """§11.2 case 19: two files with identical text reuse one vector; --force calls the provider again never."""
    write(workspace, "memory/one.md", "the shared sentence about rockets\n")
    write(workspace, "memory/two.md", "the shared sentence about rockets\n")
    with core_for(workspace, provider="fake-test") as core:
        s = core.index()
        assert s.model == "fake-1" and s.chunks == 2
        assert fake_provider.embedded == ["the shared sentence about rockets\n"]
        vecs = rows(core, "SELECT embedding FROM memory_index_chunks")
        assert len(vecs) == 2 and vecs[0] == vecs[1] and len(vecs[0][0]) == 8 * 4
        s2 = core.index(force=True)
        assert s2.full and s2.chunks == 2
        assert len(fake_provider.calls) == 1
        meta = core.writer.read_meta()
        assert (meta["provider"], meta["model"], meta["vectorDims"]) == ("fake", "fake-1", 8)
        assert core.status()["vector"]["dims"] == 8


LONG_NOTE = "the deploy train leaves on friday\nthe dentist moved to tuesday\nbuy oat milk and coffee\n"


def test_index_embeds_passages_of_chunks_of_three_lines_or_more_and_reuses_them(workspace, fake_provider):
    write(workspace, "memory/long.md", LONG_NOTE)
    write(workspace, "memory/two.md", "the deploy train leaves on friday\nthe dentist moved to tuesday\n")
    write(workspace, "memory/short.md", "one line about rockets\n")
    with core_for(workspace, provider="fake-test") as core:
        core.index()
        assert sorted(fake_provider.embedded) == sorted([
            "buy oat milk and coffee", "one line about rockets\n",
            "the deploy train leaves on friday\nthe dentist moved to tuesday\n", LONG_NOTE,
            "the dentist moved to tuesday", "the deploy train leaves on friday"])
        # one byte per dimension (8 dims) and a scale (schema migration 4), keyed by chunk rowid (5)
        assert rows(core, "SELECT c.path, p.seq, length(p.embedding), p.scale > 0 FROM memory_index_passage_vectors p"
                          " JOIN memory_index_chunks c ON c.chunk_rowid = p.chunk_rowid ORDER BY p.seq") == [
            ("memory/long.md", 0, 8, 1), ("memory/long.md", 1, 8, 1), ("memory/long.md", 2, 8, 1)]
        # every chunk vector is kept once, in its chunk row: the cache table holds none of them
        assert rows(core, "SELECT count(*) FROM memory_embedding_cache") == [(0,)]
        calls = len(fake_provider.calls)
        assert calls == 1  # chunks and passages in one call: the provider sees full batches
        core.index(force=True)
        assert len(fake_provider.calls) == calls  # chunks from the cache, passages from the live index
        assert rows(core, "SELECT count(*) FROM memory_index_passage_vectors") == [(3,)]


def test_chunk_vectors_are_stored_once_and_edited_away_text_stays_reusable(workspace, fake_provider):
    write(workspace, "memory/a.md", "harbour pilots board at dawn\n")
    write(workspace, "memory/b.md", "the ferry timetable changed\n")
    with core_for(workspace, provider="fake-test") as core:
        core.index()
        # the default vector backend searches the chunk vectors: no sqlite-vec copy, no cache copy
        assert rows(core, "SELECT count(*) FROM sqlite_master WHERE name = 'memory_index_chunks_vec'") == [(0,)]
        assert rows(core, "SELECT count(*) FROM memory_embedding_cache") == [(0,)]
        assert core.status()["vector"]["dims"] == 8
        write(workspace, "memory/a.md", "harbour pilots board at noon\n")
        core.index()
        assert fake_provider.embedded[-1:] == ["harbour pilots board at noon\n"]
        # the replaced text's vector left the index and is in the cache table now, so a revert reuses it
        assert rows(core, "SELECT count(*) FROM memory_embedding_cache") == [(1,)]
        calls = len(fake_provider.calls)
        write(workspace, "memory/a.md", "harbour pilots board at dawn\n")
        core.index()
        assert len(fake_provider.calls) == calls
        assert rows(core, "SELECT count(*) FROM memory_embedding_cache") == [(1,)]  # now the "noon" one
        (workspace / "memory" / "b.md").unlink()
        core.index(force=True)  # a rebuild keeps what it leaves out reusable, as the old cache did
        assert len(fake_provider.calls) == calls
        assert rows(core, "SELECT count(*) FROM memory_embedding_cache") == [(2,)]
        write(workspace, "memory/b.md", "the ferry timetable changed\n")
        core.index()
        assert len(fake_provider.calls) == calls
        assert rows(core, "SELECT count(*) FROM memory_embedding_cache") == [(1,)]


def test_the_sqlite_vec_backend_gets_its_table_filled_from_the_chunk_vectors(workspace, fake_provider):
    write(workspace, "memory/a.md", "harbour pilots board at dawn\n")
    with core_for(workspace, provider="fake-test") as core:
        core.index()
    with core_for(workspace, provider="fake-test", store={"vector": {"backend": "sqlite-vec"}}) as core:
        core.index()
        if not core.writer.vector_available:
            pytest.skip(f"sqlite-vec not loadable: {core.writer.vector_error}")
        assert rows(core, "SELECT count(*) FROM memory_index_chunks_vec") == [(1,)]
        hits = core.search("harbour pilots", query_vector=fake_provider.embed_batch(
            ["harbour pilots board at dawn\n"])[0])
        assert hits[0].path == "memory/a.md" and hits[0].vector_score > 0.99


def test_identity_mismatch_pauses_sync_and_cli_index_rebuilds(workspace):
    write(workspace, "memory/a.md", "identity check text\n")
    with core_for(workspace) as core:
        core.index()
        assert core.check_identity() == {"state": "ok", "mismatch": []}
    with core_for(workspace, chunking={"tokens": 200}) as core:
        paused = ("the index was built with other settings than the configuration's (index: chunking.tokens 400; "
                  "configuration: chunking.tokens 200); set `chunking.tokens = 400` in the config to search it "
                  "as built, or run `memory-core index` to rebuild it with the configuration")
        assert core.identity_state() == {"state": "mismatch", "mismatch": ["chunkTokens"],
                                         "message": f"memory search paused: {paused}"}
        with pytest.raises(IndexPaused) as err:
            core.check_identity()
        assert err.value.message == f"memory search paused: {paused}"
        with pytest.raises(IndexPaused) as err:
            core.sync()
        assert err.value.message == f"memory index paused: {paused}"
        s = core.index()
        assert (s.full, s.rebuild_reason) == (True, "settings changed (chunking.tokens 400 -> 200)")
        assert core.check_identity()["state"] == "ok"


def test_semantic_index_is_not_downgraded_without_force(workspace, fake_provider):
    """§7.4: a semantic index is never silently rebuilt as keyword-only."""
    write(workspace, "memory/a.md", "vectors matter\n")
    with core_for(workspace, provider="fake-test") as core:
        core.index()
    with core_for(workspace) as core:
        with pytest.raises(IndexPaused, match="refusing to rebuild the semantic index"):
            core.index()
        assert rows(core, "SELECT model FROM memory_index_chunks") == [("fake-1",)]
        s = core.index(force=True)
        assert s.model == "fts-only"
        assert rows(core, "SELECT model FROM memory_index_chunks") == [("fts-only",)]


def test_failed_scan_skips_pruning(workspace, tmp_path):
    write(workspace, "memory/a.md", "kept text\n")
    with core_for(workspace) as core:
        core.index()
        failed = ScanResult(ok=False, entries=[], problems=[
            SourceProblem("memory", "enumeration_failed", "cannot list memory/ (stale NFS handle)")])
        s = run_sync(core.writer, core.config, core.workspace, None, scan_result=failed)
        assert (s.scan_ok, s.removed) == (False, 0)
        assert fts(core, "kept") == ["memory/a.md"]
        with pytest.raises(ScanFailed, match="stale NFS handle"):
            run_sync(core.writer, core.config, core.workspace, None, full=True, scan_result=failed)


def test_failed_scan_aborts_full_reindex_and_keeps_old_index(workspace, tmp_path):
    """A real enumeration failure: sessionsDir is a regular file, so listing it fails."""
    write(workspace, "memory/a.md", "survivor text\n")
    with core_for(workspace) as core:
        core.index()
    bogus = tmp_path / "not-a-dir"
    bogus.write_text("x")
    with core_for(workspace, sources=["memory", "sessions"], experimental={"sessionMemory": True},
                  sessionsDir=str(bogus)) as core:
        with pytest.raises(ScanFailed, match="previous index was kept"):
            core.index()
        assert fts(core, "survivor") == ["memory/a.md"]
        assert "full reindex failed" in core.status()["last_sync"]["error"]
    assert [n for n in os.listdir(os.path.dirname(core.db_path)) if ".tmp-" in n] == []


def test_concurrent_sync_callers_join_the_running_one(workspace):
    for i in range(5):
        write(workspace, f"memory/n{i}.md", f"note {i}\n")
    with core_for(workspace) as core:
        core.index()
        write(workspace, "memory/n0.md", "note changed\n")
        started = threading.Event()

        def slow_progress(done, total, path):
            started.set()
            time.sleep(0.3)

        results = {}
        t = threading.Thread(target=lambda: results.setdefault("a", core.sync(progress=slow_progress)))
        t.start()
        assert started.wait(5)
        results["b"] = core.sync()
        t.join()
        assert results["a"] is results["b"]
        assert results["a"].changed == 1


def test_status_reports_facts_without_secrets(workspace):
    write(workspace, "memory/a.md", "status text\n")
    with MemoryCore(str(workspace), config=load_config(None, overrides={"remote": {"apiKey": "sk-secret-123"}})) as core:
        before = core.status()
        assert (before["db_exists"], before["files"], before["identity"]["state"]) == (False, 0, "empty")
        core.index()
        st = core.status(deep=True)
        assert (st["files"], st["chunks"], st["chunks_by_source"]) == (1, 1, {"memory": 1})
        assert (st["provider"], st["model"], st["fts"]["available"], st["fts"]["tokenizer"]) == (
            "none", "fts-only", True, "unicode61")
        assert (st["integrity"], st["fts"]["in_step"], st["dirty"]) == ("ok", True, False)
        assert st["last_sync"]["error"] is None and st["revision"] > 0
        assert "sk-secret-123" not in repr(st)


def test_full_reindex_keeps_forgotten_sessions_forgotten(tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(EXAMPLES / "workspace", ws)
    cfg = load_config(EXAMPLES / "memory-core.toml")
    with MemoryCore(str(ws), config=cfg) as core:
        core.index()
        assert core.forget_session("0a6c2f0e-4a8e-4f55-9d43-5f6c1b7d2e11") == 1
        s = core.index(force=True)
        assert s.forgotten == 1
        assert core.status()["files_by_source"] == {"memory": 17, "sessions": 1}
    ro = apsw.Connection(core.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    assert [r[0] for r in ro.execute("SELECT path FROM memory_index_forgotten")] == [
        "sessions/0a6c2f0e-4a8e-4f55-9d43-5f6c1b7d2e11.jsonl"]
    ro.close()


def test_a_forgotten_session_is_counted_as_forgotten_not_added(tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(EXAMPLES / "workspace", ws)
    with MemoryCore(str(ws), config=load_config(EXAMPLES / "memory-core.toml")) as core:
        core.index()
        assert core.forget_session("0a6c2f0e-4a8e-4f55-9d43-5f6c1b7d2e11") == 1
        for force in (False, False, True):
            s = core.index(force=force)
            assert (s.full, s.added, s.changed, s.unchanged, s.forgotten, s.files) == (force, 0, 0, 18, 1, 18)


def test_forgetting_a_session_that_matches_nothing_needs_force(tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(EXAMPLES / "workspace", ws)
    with MemoryCore(str(ws), config=load_config(EXAMPLES / "memory-core.toml")) as core:
        core.index()
        with pytest.raises(ReferenceNotFound, match=r"^no session sessions/typo\.jsonl: nothing is indexed"):
            core.forget_session("typo")
        assert core.writer.forgotten_paths() == []
        (ws / "sessions" / "later.jsonl").write_text("")           # on disk, not indexed yet: allowed
        assert (core.forget_session("later"), core.forget_session("typo", force=True)) == (0, 0)
        assert core.forget_session("typo") == 0                    # already tombstoned: idempotent
        assert [p for _, p, _ in core.writer.forgotten_paths()] == ["sessions/later.jsonl", "sessions/typo.jsonl"]


def test_targeted_sync_reports_a_file_that_turned_binary_and_keeps_its_rows(workspace, state_home):
    (workspace / "memory" / "a.md").write_text("hello world\n")
    with MemoryCore(str(workspace)) as core:
        core.index()
        (workspace / "memory" / "a.md").write_bytes(b"\x00\x01binary")
        summary = core.sync(paths=["memory/a.md"]).to_json()
        assert [(p["path"], p["code"]) for p in summary["problems"]] == [("memory/a.md", "binary")]
        assert (summary["skipped"], summary["changed"], summary["removed"]) == (1, 0, 0)
        assert [h.path for h in core.search("hello", min_score=0)] == ["memory/a.md"]


def test_touched_file_with_same_content_gets_its_new_stat_and_stops_looking_changed(workspace):
    # A re-clone or `touch` changes a file's mtime, not its content: the sync publishes nothing,
    # but it must record the new stat, or every freshness reconcile (the one-shot CLI search runs
    # one) finds the file "changed" again and each search warns that the index is dirty.
    write(workspace, "MEMORY.md", "- likes green tea\n")
    write(workspace, "memory/a.md", "# A\nalpha notes\n")
    with core_for(workspace) as core:
        core.index()
        chunks_before = rows(core, "SELECT id, hash FROM memory_index_chunks ORDER BY id")
        later = time.time() + 3600
        os.utime(workspace / "memory" / "a.md", (later, later))
        assert core.freshness.reconcile() == [str(workspace / "memory" / "a.md")]
        summary = core.sync()
        assert (summary.changed, summary.unchanged, summary.chunks_written) == (0, 2, 0)
        (mtime,) = rows(core, "SELECT mtime FROM memory_index_sources WHERE path = 'memory/a.md'")[0]
        assert abs(mtime - later * 1000) < 1.0
        assert rows(core, "SELECT id, hash FROM memory_index_chunks ORDER BY id") == chunks_before
        assert core.freshness.reconcile() == []
