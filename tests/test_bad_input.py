"""Bad input gets a clear error or problem, and loses nothing else."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memory_core.config import load_config
from memory_core.core import MemoryCore
from memory_core.errors import ConfigError, WorkspaceError
from tests.helpers import unprivileged_prefix

ROOT = Path(__file__).resolve().parent.parent


def write(ws: Path, rel: str, data: str | bytes) -> None:
    p = ws / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        p.write_bytes(data)
    else:
        p.write_text(data, encoding="utf-8")


def texts(core: MemoryCore) -> dict[str, str]:
    return {p: t for p, t in core.writer.conn.execute(
        "SELECT path, group_concat(text, '|') FROM memory_index_chunks GROUP BY path")}


def index(ws: Path) -> tuple[MemoryCore, object]:
    core = MemoryCore(str(ws), config=load_config(None))
    return core, core.index()


def test_invalid_utf8_is_a_problem_and_other_files_are_indexed(workspace):
    write(workspace, "memory/good.md", "good note\n")
    write(workspace, "memory/latin1.md", "caf\xe9 au lait\n".encode("latin-1"))
    core, s = index(workspace)
    with core:
        assert [(p["path"], p["code"]) for p in s.problems] == [("memory/latin1.md", "invalid_utf8")]
        assert "UTF-8" in s.problems[0]["message"] or "utf-8" in s.problems[0]["message"].lower()
        assert (s.skipped, s.failed) == (1, 0)
        assert texts(core) == {"memory/good.md": "good note\n"}
        assert core.status()["last_sync"]["problems"][0]["code"] == "invalid_utf8"


def test_binary_md_is_a_problem(workspace):
    write(workspace, "memory/good.md", "good note\n")
    write(workspace, "memory/image.md", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00")
    core, s = index(workspace)
    with core:
        assert [(p["path"], p["code"]) for p in s.problems] == [("memory/image.md", "binary")]
        assert list(texts(core)) == ["memory/good.md"]


def test_file_that_turns_bad_keeps_its_previous_rows(workspace):
    write(workspace, "memory/a.md", "first version\n")
    write(workspace, "memory/b.md", "other file\n")
    core, _ = index(workspace)
    with core:
        write(workspace, "memory/a.md", b"broken \xff\xfe bytes")
        s = core.sync()
        assert [(p["path"], p["code"]) for p in s.problems] == [("memory/a.md", "invalid_utf8")]
        assert s.removed == 0
        assert texts(core) == {"memory/a.md": "first version\n", "memory/b.md": "other file\n"}


def test_50mb_single_line_is_indexed_in_bounded_chunks(workspace):
    words = ["rocket", "telemetry", "launch", "orbit", "fuel", "valve", "sensor", "apogee", "stage", "burn"]
    idx = np.random.default_rng(7).integers(0, len(words), 50 * 1024 * 1024 // 5)
    line = " ".join(words[i] for i in idx)[: 50 * 1024 * 1024]  # varied text: no two chunks are identical
    write(workspace, "memory/huge.md", line)
    write(workspace, "memory/small.md", "small file survives\n")
    core, s = index(workspace)
    with core:
        assert (s.files, s.problems, s.failed) == (2, [], 0)
        conn = core.writer.conn
        n, longest, lines = conn.execute(
            "SELECT count(*), max(length(text)), group_concat(DISTINCT start_line || '-' || end_line)"
            " FROM memory_index_chunks WHERE path = 'memory/huge.md'").fetchone()
        assert n >= 50 * 1024 * 1024 // 1600 and longest <= 1600 and lines == "1-1"
        assert [r[0] for r in conn.execute(
            "SELECT path FROM memory_index_chunks_fts WHERE memory_index_chunks_fts MATCH 'survives'")] == [
            "memory/small.md"]


def test_malformed_jsonl_lines_are_skipped_and_counted(workspace):
    good = {"type": "message", "message": {"role": "user", "content": "what is the launch date?"}}
    reply = {"type": "message", "message": {"role": "assistant", "content": [{"type": "text", "text": "November 17."}]}}
    write(workspace, "sessions/s1.jsonl", "\n".join([
        json.dumps(good), "{not json", json.dumps(reply), '{"type": "message", "message": ']) + "\n")
    cfg = load_config(None, overrides={"sources": ["memory", "sessions"], "experimental": {"sessionMemory": True},
                                       "sessionsDir": "sessions"})
    with MemoryCore(str(workspace), config=cfg) as core:
        s = core.index()
        assert [(p["path"], p["code"]) for p in s.problems] == [("sessions/s1.jsonl", "malformed_jsonl")]
        assert "2 malformed" in s.problems[0]["message"]
        assert s.skipped == 0  # the transcript itself is indexed
        assert [tuple(r) for r in core.writer.conn.execute(
            "SELECT start_line, end_line, text FROM memory_index_chunks WHERE source = 'sessions'")] == [
            (1, 3, "User: what is the launch date?\nAssistant: November 17.")]


def test_nonexistent_workspace_is_a_clear_error(tmp_path):
    with pytest.raises(WorkspaceError, match=r"does not exist.*--workspace"):
        MemoryCore(str(tmp_path / "nope"), config=load_config(None))


def test_config_with_wrong_type_names_the_key(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[chunking]\ntokens = "many"\n')
    with pytest.raises(ConfigError, match=r"chunking\.tokens: must be an integer"):
        load_config(str(cfg))


def _cli(args: list[str], home: Path, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "MEMORY_CORE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "memory_core", *args], capture_output=True, text=True,
                          env=env, cwd=str(ROOT), timeout=120, **kw)


def test_cli_bad_config_and_workspace_exit_2_with_one_line(tmp_path, workspace):
    bad = tmp_path / "bad.toml"
    bad.write_text('[chunking]\ntokens = "many"\n')
    r = _cli(["index", "--workspace", str(workspace), "--config", str(bad)], tmp_path / "home")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: invalid configuration: chunking.tokens")
    r = _cli(["status", "--workspace", str(tmp_path / "missing")], tmp_path / "home")
    assert r.returncode == 2 and r.stderr.startswith("error: workspace ") and r.stderr.count("\n") == 1


def test_unreadable_file_is_a_problem_and_keeps_its_rows(tmp_path, workspace):
    """chmod 000 makes a file unreadable, but root ignores permissions: as root the CLI runs under
    ``setpriv`` with CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH dropped, so the kernel really refuses the read."""
    prefix = unprivileged_prefix()
    write(workspace, "memory/secret.md", "secret but indexed before\n")
    write(workspace, "memory/open.md", "open note\n")
    home = tmp_path / "home"
    assert _cli(["index", "--workspace", str(workspace)], home).returncode == 0
    (workspace / "memory" / "secret.md").chmod(0)
    write(workspace, "memory/new.md", "new note\n")
    env = {**os.environ, "MEMORY_CORE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([*prefix, sys.executable, "-m", "memory_core", "index", "--workspace", str(workspace),
                        "--json"], capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=120)
    (workspace / "memory" / "secret.md").chmod(0o644)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert [(p["path"], p["code"]) for p in s["problems"]] == [("memory/secret.md", "unreadable")]
    assert "Permission denied" in s["problems"][0]["message"]
    assert (s["added"], s["removed"], s["files"]) == (1, 0, 3)
    with MemoryCore(str(workspace), config=load_config(None)) as core:
        assert texts(core) == {"memory/new.md": "new note\n", "memory/open.md": "open note\n",
                               "memory/secret.md": "secret but indexed before\n"}


def test_forced_rebuild_keeps_rows_of_a_file_it_cannot_read(workspace):
    write(workspace, "memory/a.md", "first version\n")
    write(workspace, "memory/b.md", "other file\n")
    core, _ = index(workspace)
    with core:
        write(workspace, "memory/a.md", b"broken \xff\xfe bytes")
        s = core.index(force=True)
        assert [(p["path"], p["code"]) for p in s.problems] == [("memory/a.md", "invalid_utf8")]
        assert (s.files, s.chunks, s.removed) == (2, 2, 0)
        assert texts(core) == {"memory/a.md": "first version\n", "memory/b.md": "other file\n"}
        assert core.writer.indexed_hashes("memory")["memory/a.md"] == ""  # re-indexed once readable
        write(workspace, "memory/a.md", "first version\n")
        s2 = core.sync()
        assert (s2.changed, s2.problems) == (1, [])
        assert core.writer.indexed_hashes("memory")["memory/a.md"] != ""


def test_a_skipped_file_is_dirty_only_when_it_changed_since_the_sync_skipped_it(workspace):
    # Every MemoryCore here stands for a new CLI process: nothing but the index carries over.
    write(workspace, "MEMORY.md", "hello world\n")
    write(workspace, "memory/bin.md", b"\xff\x00")
    quiet = load_config(None, overrides={"sync": {"onSearch": False}})  # searches start no sync

    def staleness() -> dict | None:
        with MemoryCore(str(workspace), config=quiet) as core:
            return core.before_search()

    dirty = {"stale": True, "warning": "Memory index is dirty. Search results may be incomplete.",
             "action": "Run: memory-core index --agent main"}
    core, s = index(workspace)
    core.close()
    assert ([p["path"] for p in s.problems], staleness()) == (["memory/bin.md"], None)
    write(workspace, "memory/bin.md", b"\xff\x00 still binary, changed")
    assert (staleness(), staleness()) == (dirty, dirty)
    core, _ = index(workspace)
    core.close()
    assert staleness() is None
    write(workspace, "memory/bin.md", "now it is Markdown\n")
    assert staleness() == dirty


def test_a_file_that_turned_bad_and_kept_its_rows_is_not_dirty_after_the_sync(workspace):
    write(workspace, "memory/a.md", "first version\n")
    core, _ = index(workspace)
    with core:
        write(workspace, "memory/a.md", b"broken \xff\xfe bytes, longer than before")
        assert core.freshness.reconcile() == [str(workspace / "memory" / "a.md")]
        assert [p["code"] for p in core.sync().problems] == ["invalid_utf8"]
    with MemoryCore(str(workspace), config=load_config(None)) as core:
        assert core.freshness.reconcile() == []
        assert texts(core) == {"memory/a.md": "first version\n"}


@pytest.mark.parametrize("backend", ["auto", "sqlite-vec"])
def test_forced_rebuild_keeps_the_vectors_of_a_file_it_cannot_read(workspace, backend):
    from memory_core.embeddings import register_embedding_provider
    from tests.search_fixtures import FakeEmbedder

    emb = FakeEmbedder(dims=16)
    register_embedding_provider("fake-bad-input", lambda cfg: emb)
    config = load_config(None, overrides={"provider": "fake-bad-input", "query": {"min_score": 0.0},
                                          "store": {"vector": {"backend": backend}}})
    write(workspace, "memory/a.md", "lighthouse keeper rotas\n")
    write(workspace, "memory/b.md", "other file\n")
    with MemoryCore(str(workspace), config=config, embedding_provider=emb) as core:
        core.index()
        write(workspace, "memory/a.md", b"broken \xff\xfe bytes")
        s = core.index(force=True)
        assert [(p["path"], p["code"]) for p in s.problems] == [("memory/a.md", "invalid_utf8")]
        conn = core.writer.conn
        widths = dict(conn.execute("SELECT path, length(embedding) FROM memory_index_chunks"))
        assert widths == {"memory/a.md": 16 * 4, "memory/b.md": 16 * 4}
        if backend == "sqlite-vec":  # the vec0 table carries the kept file's row too
            assert core.writer.vector_available, core.writer.vector_error
            assert conn.execute("SELECT count(*) FROM memory_index_chunks_vec").fetchone()[0] == 2
        hits = core.search("lighthouse keeper", query_vector=emb.vector("lighthouse keeper rotas"))
        assert hits[0].path == "memory/a.md" and hits[0].vector_score > 0.99
