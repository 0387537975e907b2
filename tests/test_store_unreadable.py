"""An index file SQLite cannot read, and a state dir that cannot be written: one clear error line
(never an apsw traceback), nothing lost, and `memory-core index --force` repairs a damaged file."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from memory_core.config import load_config
from memory_core.core import MemoryCore
from host_facades.db.sqlite_read import SCHEMA_VERSION
from memory_core.errors import IndexCorrupt, IndexUnreadable
from memory_core.search.engine import SearchEngine
from memory_core.store import schema
from tests.helpers import unprivileged_prefix
from workers.pool import WorkerPool
from workers.retriever import PooledRetriever

ROOT = Path(__file__).resolve().parent.parent
REASONS = {"random": "file is not a database", "text": "file is not a database",
           "garbled": "database disk image is malformed"}


def cli(args: list[str], home: Path, prefix: list[str] = (), timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "MEMORY_CORE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    return subprocess.run([*prefix, sys.executable, "-m", "memory_core", *args], capture_output=True, text=True,
                          env=env, cwd=str(ROOT), timeout=timeout, check=False)


def build_index(workspace: Path, db: Path) -> None:
    """A real index of ``memory/a.md`` plus enough notes to span many pages."""
    (workspace / "memory" / "a.md").write_text("# notes\nalpha bravo charlie\n", encoding="utf-8")
    for i in range(40):
        (workspace / "memory" / f"n{i:02d}.md").write_text(f"note {i} " + "filler words " * 200, encoding="utf-8")
    cfg = load_config(None, overrides={"pool": {"workers": 0}, "store": {"path": str(db)}})
    with MemoryCore(str(workspace), config=cfg) as core:
        core.index()


def corrupt(db: Path, kind: str) -> bytes:
    """Turn ``db`` into garbage, a text file, or a real index whose pages after the first are garbled."""
    rng = random.Random(kind)
    if kind == "random":
        db.write_bytes(rng.randbytes(50_000))
    elif kind == "text":
        db.write_text("these are my notes, not a database\n" * 500, encoding="utf-8")
    else:
        data = db.read_bytes()
        page = int.from_bytes(data[16:18], "big")
        db.write_bytes(data[:page] + rng.randbytes(len(data) - page))
    return db.read_bytes()


def corrupt_index(tmp_path: Path, workspace: Path, kind: str) -> tuple[Path, Path, bytes]:
    """``(home, db, bytes)``: agent main's index under ``tmp_path/home``, built, then corrupted."""
    home = tmp_path / "home"
    db = home / "main.sqlite"
    build_index(workspace, db)
    return home, db, corrupt(db, kind)


def corrupt_message(db: Path, kind: str) -> str:
    return (f"{db} is not a readable memory-core index ({REASONS[kind]}); run `memory-core index --force` to "
            "move it aside and rebuild the index")


@pytest.mark.parametrize("kind", ["random", "text", "garbled"])
def test_every_command_on_a_corrupt_index_prints_one_error_line_and_keeps_the_file(tmp_path, workspace, kind):
    home, db, bad = corrupt_index(tmp_path, workspace, kind)
    for args in (["search", "alpha"], ["search", "alpha", "--explain"], ["status"], ["status", "--deep"],
                 ["status", "--json"], ["index"], ["forget", "--session", "s1"], ["watch", "--seconds", "30"]):
        r = cli([*args, "--workspace", str(workspace)], home)
        assert (r.returncode, r.stdout, r.stderr) == (1, "", f"error: {corrupt_message(db, kind)}\n"), args
    assert db.read_bytes() == bad


@pytest.mark.parametrize("tree", ["memory_index_chunks", "idx_memory_index_chunks_hash"])
def test_opening_the_writer_reads_every_table_and_index(tmp_path, workspace, tree):
    """Header and schema intact, one table's or index's root page damaged: the writer's open fails
    with the one error, before any sync reads that page."""
    db = tmp_path / "index.sqlite"
    build_index(workspace, db)
    conn = apsw.Connection(str(db))
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name = ?", (tree,)).fetchone()[0]
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    data = bytearray(db.read_bytes())
    data[(root - 1) * page_size:root * page_size] = random.Random(tree).randbytes(page_size)
    db.write_bytes(bytes(data))
    cfg = load_config(None, overrides={"pool": {"workers": 0}, "store": {"path": str(db)}})
    with MemoryCore(str(workspace), config=cfg) as core, pytest.raises(IndexCorrupt) as err:
        _ = core.writer
    assert err.value.message == corrupt_message(db, "garbled")
    assert db.read_bytes() == bytes(data)


@pytest.mark.parametrize("kind", ["random", "text", "garbled"])
def test_index_force_moves_the_corrupt_file_aside_and_rebuilds(tmp_path, workspace, kind):
    home, db, bad = corrupt_index(tmp_path, workspace, kind)
    (home / "main.sqlite-wal").write_bytes(b"stale wal")
    (home / "main.sqlite-shm").write_bytes(b"stale shm")
    r = cli(["index", "--force", "--workspace", str(workspace)], home)
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    m = re.fullmatch(r"The index file was not a readable database: moved it aside to (\S+) \(with its -wal/-shm, "
                     r"if any\) and rebuilt from scratch", first)
    assert m, first
    aside = Path(m.group(1))
    assert re.fullmatch(re.escape(str(db)) + r"\.corrupt-\d{8}T\d{6}Z", str(aside))
    assert aside.read_bytes() == bad
    assert Path(f"{aside}-wal").read_bytes() == b"stale wal"
    assert Path(f"{aside}-shm").exists()  # SQLite's shared-memory index: moved too (its bytes are no content)
    r = cli(["search", "alpha", "--workspace", str(workspace), "--json"], home)
    assert r.returncode == 0, r.stderr
    assert [h["path"] for h in json.loads(r.stdout)["results"]] == ["memory/a.md"]
    r = cli(["index", "--workspace", str(workspace), "--json"], home)  # the next run is a plain incremental one
    assert (r.returncode, json.loads(r.stdout)["movedAside"], json.loads(r.stdout)["unchanged"]) == (0, None, 41)


def test_api_raises_index_corrupt_and_index_force_repairs(tmp_path, workspace):
    db = tmp_path / "index.sqlite"
    build_index(workspace, db)
    corrupt(db, "garbled")
    cfg = load_config(None, overrides={"pool": {"workers": 0}, "store": {"path": str(db)}})
    with MemoryCore(str(workspace), config=cfg) as core:
        for call in (lambda: core.search("alpha"), core.status, lambda: core.status(deep=True), core.sync,
                     core.index, core.identity_state, lambda: core.forget_session("s1")):
            with pytest.raises(IndexCorrupt) as err:
                call()
            assert (err.value.code, err.value.message) == ("index_corrupt", corrupt_message(db, "garbled"))
        with pytest.raises(IndexCorrupt):
            SearchEngine(cfg, str(db)).search("alpha")
        summary = core.index(force=True)
        assert summary.moved_aside is not None and summary.moved_aside.startswith(f"{db}.corrupt-")
        assert [h.path for h in core.search("alpha")] == ["memory/a.md"]
        assert core.status()["files"] == 41


@pytest.mark.parametrize("kind", ["random", "garbled"])
def test_pooled_search_on_a_corrupt_index_is_the_typed_error_and_keeps_its_worker(tmp_path, workspace, kind):
    db = tmp_path / "index.sqlite"
    build_index(workspace, db)
    corrupt(db, kind)
    cfg = load_config(None, overrides={"store": {"path": str(db)}})
    pool = WorkerPool("retrieval", 1)
    try:
        pool.prewarm()
        pids = pool.worker_pids()
        retriever = PooledRetriever(str(db), pool)
        engine = SearchEngine(cfg, str(db), retriever=retriever)
        for _ in range(3):
            with pytest.raises(IndexCorrupt) as err:
                engine.search("alpha")
            assert err.value.message == corrupt_message(db, kind)
        with pytest.raises(IndexCorrupt):
            retriever.index_state()
        assert pool.worker_pids() == pids and (pool.stats["died"], pool.stats["replaced"]) == (0, 0)
    finally:
        pool.close()


def test_pooled_core_search_on_a_corrupt_index_is_the_typed_error(tmp_path, workspace):
    db = tmp_path / "index.sqlite"
    build_index(workspace, db)
    corrupt(db, "random")
    cfg = load_config(None, overrides={"pool": {"workers": 1}, "store": {"path": str(db)}})
    with MemoryCore(str(workspace), config=cfg) as core, pytest.raises(IndexCorrupt):
        core.search("alpha")


# --- a state dir that cannot be written -----------------------------------------------------------


@pytest.fixture
def read_only(tmp_path):
    """``(prefix, make)``: ``make(dir)`` makes a folder read-only (mode 0555, restored afterwards);
    commands run under ``prefix`` really cannot write there (as root: setpriv drops the DAC override)."""
    prefix = unprivileged_prefix()
    made: list[Path] = []

    def make(path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o555)
        made.append(path)

    yield prefix, make
    for path in made:
        path.chmod(0o755)


def not_writable(home: Path) -> str:
    return (f"state dir {home} is not writable (permission denied), so the index main.sqlite cannot be created "
            "or updated there; make it writable, or set MEMORY_CORE_HOME or stateDir (or store.path) to a "
            "writable folder")


def test_read_only_state_dir_searches_and_reports_but_refuses_to_index(tmp_path, workspace, read_only):
    prefix, make_read_only = read_only
    home = tmp_path / "home"
    build_index(workspace, home / "main.sqlite")
    make_read_only(home)
    before = sorted(os.listdir(home))
    ws = ["--workspace", str(workspace)]
    r = cli(["search", "alpha", "--json", *ws], home, prefix)
    assert (r.returncode, r.stderr) == (0, "")
    assert [h["path"] for h in json.loads(r.stdout)["results"]] == ["memory/a.md"]
    r = cli(["status", "--json", *ws], home, prefix)
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)[0]
    assert (st["files"], st["chunks"], st["stateDirProblem"]) == (41, 81, "permission denied")
    for args in (["index"], ["index", "--force"], ["watch", "--seconds", "600"]):
        # watch stops at once, it does not retry: were it watching for its 600 s, cli() would time out
        r = cli([*args, *ws], home, prefix)
        assert (r.returncode, r.stdout, r.stderr) == (2, "", f"error: {not_writable(home)}\n"), args
    assert sorted(os.listdir(home)) == before


def test_empty_read_only_state_dir_says_to_index_and_index_says_why_not(tmp_path, workspace, read_only):
    prefix, make_read_only = read_only
    (workspace / "memory" / "a.md").write_text("alpha\n", encoding="utf-8")
    home = tmp_path / "home"
    make_read_only(home)
    ws = ["--workspace", str(workspace)]
    r = cli(["search", "alpha", *ws], home, prefix)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == f"error: nothing is indexed yet (run `memory-core index`), but the {not_writable(home)}\n"
    r = cli(["index", *ws], home, prefix)
    assert (r.returncode, r.stderr) == (2, f"error: {not_writable(home)}\n")
    r = cli(["status", *ws], home, prefix)
    assert r.returncode == 0 and "(not indexed yet: run `memory-core index`)" in r.stdout
    assert os.listdir(home) == []


def test_read_only_state_dir_with_changes_in_the_wal_says_why_it_cannot_be_read(tmp_path, workspace, read_only):
    prefix, make_read_only = read_only
    built = tmp_path / "built" / "main.sqlite"
    build_index(workspace, built)
    home = tmp_path / "home"
    home.mkdir()
    conn = apsw.Connection(str(built))  # a writer that has not checkpointed: its changes wait in the -wal
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("INSERT INTO memory_index_meta(key, value) VALUES ('pending', 'x')")
    shutil.copy(built, home / "main.sqlite")
    shutil.copy(f"{built}-wal", home / "main.sqlite-wal")  # copied without its -shm
    conn.close()
    make_read_only(home)
    db = home / "main.sqlite"
    for args in (["status"], ["search", "alpha"]):
        r = cli([*args, "--workspace", str(workspace)], home, prefix)
        assert (r.returncode, r.stdout) == (1, ""), args
        assert r.stderr == (
            f"error: cannot read the index {db}: its write-ahead log {db}-wal holds changes that need {db}-shm, "
            f"which cannot be created because {home} is not writable; make {home} writable and run "
            "`memory-core index` once (it folds the log into the index), or copy the index with its -wal to a "
            "writable folder and set MEMORY_CORE_HOME or stateDir there\n"), args


# --- an index written by a newer memory-core ------------------------------------------------------


def newer_message(db: Path, version: int) -> str:
    return (f"the index {db} was written by a newer memory-core (index schema {version}; this one reads up to "
            f"{len(schema.MIGRATIONS)}); upgrade memory-core, or run `memory-core index --force` to rebuild the "
            "index for this version")


def test_the_schema_readers_know_is_the_newest_migration():
    assert SCHEMA_VERSION == len(schema.MIGRATIONS)


def make_newer(db: Path) -> bytes:
    """Mark ``db`` as written by a future memory-core (one migration more than this one knows)."""
    conn = apsw.Connection(str(db))
    conn.execute(f"PRAGMA user_version={len(schema.MIGRATIONS) + 1}")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return db.read_bytes()


def test_an_index_of_a_newer_memory_core_is_one_clear_error_and_untouched(tmp_path, workspace):
    home = tmp_path / "home"
    db = home / "main.sqlite"
    build_index(workspace, db)
    newer = make_newer(db)
    message = newer_message(db, len(schema.MIGRATIONS) + 1)
    for args in (["search", "alpha"], ["status"], ["status", "--json"], ["index"]):
        r = cli([*args, "--workspace", str(workspace)], home)
        assert (r.returncode, r.stdout, r.stderr) == (1, "", f"error: {message}\n"), args
    assert db.read_bytes() == newer
    r = cli(["index", "--force", "--workspace", str(workspace)], home)  # the fix the message names
    assert r.returncode == 0, r.stderr
    m = re.match(r"The index file was written by a newer memory-core: moved it aside to (\S+) \(with its -wal/-shm, "
                 r"if any\) and rebuilt from scratch\n", r.stdout)
    assert m and m.group(1).startswith(f"{db}.newer-"), r.stdout
    assert Path(m.group(1)).read_bytes() == newer  # kept for the newer memory-core
    r = cli(["search", "alpha", "--workspace", str(workspace), "--json"], home)
    assert r.returncode == 0 and "memory/a.md" in r.stdout, r.stderr


def test_a_pooled_search_of_a_newer_index_is_the_typed_error_and_keeps_its_worker(tmp_path, workspace):
    db = tmp_path / "index.sqlite"
    build_index(workspace, db)
    make_newer(db)
    cfg = load_config(None, overrides={"store": {"path": str(db)}})
    pool = WorkerPool("retrieval", 1)
    try:
        pool.prewarm()
        pids = pool.worker_pids()
        engine = SearchEngine(cfg, str(db), retriever=PooledRetriever(str(db), pool))
        for _ in range(2):
            with pytest.raises(IndexUnreadable) as err:
                engine.search("alpha")
            assert err.value.message == newer_message(db, len(schema.MIGRATIONS) + 1)
        assert pool.worker_pids() == pids and (pool.stats["died"], pool.stats["replaced"]) == (0, 0)
    finally:
        pool.close()
    with pytest.raises(IndexUnreadable):  # the writer never migrates (or writes) a newer file
        schema.migrate(apsw.Connection(str(db)))
    assert apsw.Connection(str(db)).execute("PRAGMA user_version").fetchone()[0] == len(schema.MIGRATIONS) + 1
