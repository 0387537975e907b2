"""An index run killed at a random point leaves a database that opens, passes integrity_check and
still answers with the content of the previous completed run (per file: old or new, never half)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import apsw
import pytest

ROOT = Path(__file__).resolve().parent.parent
N_FILES = 3000
WORDS = ["orbit", "valve", "sensor", "apogee", "stage", "burn", "gimbal", "payload", "fairing", "telemetry"]


def make_workspace(ws: Path, marker: str, rng: random.Random) -> None:
    for i in range(N_FILES):
        p = ws / "memory" / f"d{i % 30:02d}" / f"note-{i:05d}.md"
        p.parent.mkdir(parents=True, exist_ok=True)
        body = " ".join(rng.choice(WORDS) for _ in range(120))
        p.write_text(f"# note {i}\n\n{marker} file{i:05d} {body}\n", encoding="utf-8")


def cli(args: list[str], home: Path) -> subprocess.Popen:
    env = {**os.environ, "MEMORY_CORE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "memory_core", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=str(ROOT))


def check_db(db: Path) -> dict[str, int]:
    """integrity_check (SQLite and FTS5) and per-file consistency; returns marker -> file count."""
    conn = apsw.Connection(str(db))  # read-write open: replays or discards the WAL like any next run
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.execute("INSERT INTO memory_index_chunks_fts(memory_index_chunks_fts) VALUES ('integrity-check')")
        counts = {}
        for marker in ("oldmarker", "newmarker"):
            counts[marker] = int(conn.execute(
                "SELECT count(DISTINCT path) FROM memory_index_chunks_fts WHERE memory_index_chunks_fts MATCH ?",
                (marker,)).fetchone()[0])
        files = int(conn.execute("SELECT count(*) FROM memory_index_sources").fetchone()[0])
        chunks = int(conn.execute("SELECT count(*) FROM memory_index_chunks").fetchone()[0])
        # every file is wholly old or wholly new: a note is one chunk whose text is the whole file, so
        # its chunk hash equals the content hash on its source row
        mixed = conn.execute(
            "SELECT count(*) FROM memory_index_chunks c JOIN memory_index_sources s"
            " ON s.path = c.path AND s.source = c.source WHERE c.hash != s.hash").fetchone()[0]
        assert mixed == 0
        assert files == N_FILES and chunks == N_FILES
        assert counts["oldmarker"] + counts["newmarker"] == N_FILES
        return counts
    finally:
        conn.close()


def last_sync(db: Path) -> str | None:
    """The last completed sync's record (memory_core.indexer.record_last_sync), read-only."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        row = conn.execute("SELECT value FROM memory_index_meta WHERE key = 'memory_index_last_sync_v1'").fetchone()
        return None if row is None else row[0]
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["incremental", "force"])
def test_index_killed_at_random_point_keeps_previous_content(tmp_path, mode):
    rng = random.Random(20261130 + (mode == "force"))
    ws, home = tmp_path / "ws", tmp_path / "home"
    make_workspace(ws, "oldmarker", rng)
    t0 = time.monotonic()
    first = cli(["index", "--workspace", str(ws), "--json"], home)
    out, err = first.communicate(timeout=300)
    duration = time.monotonic() - t0
    assert first.returncode == 0, err
    assert json.loads(out)["files"] == N_FILES
    db = home / "main.sqlite"
    assert check_db(db) == {"oldmarker": N_FILES, "newmarker": 0}

    make_workspace(ws, "newmarker", rng)
    inode, synced = os.stat(db).st_ino, last_sync(db)
    args = ["index", "--workspace", str(ws)] + (["--force"] if mode == "force" else [])
    victim = cli(args, home)
    time.sleep(rng.uniform(0.35, 0.9) * duration)
    killed = victim.poll() is None
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=60)

    # a process still alive may be past its work (printing, closing): what it finished is on disk
    swapped = os.stat(db).st_ino != inode  # a full rebuild is renamed over the index in one step
    finished = swapped or last_sync(db) != synced
    counts = check_db(db)
    print(mode, killed, swapped, finished, counts)
    if mode == "force":
        # the rebuild goes to a temp file: all old until the rename, all new after it
        assert counts == ({"oldmarker": 0, "newmarker": N_FILES} if swapped else {"oldmarker": N_FILES, "newmarker": 0})
    if killed and not finished:
        assert counts["oldmarker"] > 0, "the run was killed mid-way, so some files must still be old"

    # the killed run's lock and temp files do not block the next run, which completes the work
    again = cli(["index", "--workspace", str(ws), "--json"], home)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert check_db(db) == {"oldmarker": 0, "newmarker": N_FILES}
