"""Ctrl-C during `memory-core index`: the owner handles it (workers ignore SIGINT, no worker
tracebacks), the previous index stays searchable, and the recorded reason says it was interrupted."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memory_core.config import load_config
from memory_core.core import MemoryCore
from memory_core.errors import IndexCorrupt, reason_of
from tests.helpers import wait_for
from tests.worker_tasks import TASK_MODULES, sigint_state_at_start
from workers.launch import start_worker
from workers.pool import WorkerPool

ROOT = Path(__file__).resolve().parent.parent
WORDS = ["orbit", "valve", "sensor", "apogee", "stage", "burn", "gimbal", "payload", "fairing", "telemetry"]


@pytest.mark.parametrize(("exc", "reason"), [
    (RuntimeError(), "RuntimeError"),
    (KeyboardInterrupt(), "interrupted (KeyboardInterrupt)"),
    (ValueError("bad value"), "bad value"),
    (IndexCorrupt("the message"), "the message"),
])
def test_reason_of_is_never_empty(exc, reason):
    assert reason_of(exc) == reason


@pytest.mark.parametrize(("force", "exc", "recorded"), [
    (False, RuntimeError(), "RuntimeError"),
    (False, KeyboardInterrupt(), "interrupted (KeyboardInterrupt)"),
    (True, KeyboardInterrupt(), "full reindex failed: interrupted (KeyboardInterrupt)"),
])
def test_a_failed_run_records_a_reason_even_when_the_error_has_none(workspace, monkeypatch, force, exc, recorded):
    (workspace / "memory" / "a.md").write_text("alpha\n", encoding="utf-8")
    with MemoryCore(str(workspace), config=load_config(None, overrides={"pool": {"workers": 0}})) as core:
        core.index()
        (workspace / "memory" / "b.md").write_text("bravo\n", encoding="utf-8")

        def fail(*args, **kwargs):
            raise exc

        monkeypatch.setattr("memory_core.index_owner.run_sync", fail)
        with pytest.raises(type(exc)):
            core.index(force=force)
        assert core.status()["last_sync"]["error"] == recorded
        monkeypatch.undo()
        assert [h.path for h in core.search("alpha")] == ["memory/a.md"]


def test_a_pool_worker_ignores_sigint():
    pool = WorkerPool("indexing", 1, task_modules=TASK_MODULES)
    try:
        pid = pool.run("pid", timeout_s=30)  # started on demand, as the indexer's pool starts them
        os.kill(pid, signal.SIGINT)
        time.sleep(0.3)
        assert pool.run("pid", timeout_s=30) == pid
        assert pool.worker_pids() == [pid] and pool.stats["died"] == 0
    finally:
        pool.close()


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_a_worker_starts_with_sigint_ignored_or_blocked(start_method):
    """No moment of a worker's life catches Ctrl-C: a SIGINT that reaches a worker still starting
    (before worker_main ignores it) must not raise KeyboardInterrupt there and print a traceback."""
    proc, requests, [reply] = start_worker(start_method, sigint_state_at_start, name="sigint-probe", channels=1)
    try:
        assert os.read(reply.fileno(), 16).decode() in ("ignored", "blocked")
    finally:
        proc.join(timeout=30)
        requests.close()
        reply.close()


def _group_workers(pgid: int) -> int:
    """Processes of process group ``pgid`` started by the multiprocess forkserver (it and its workers)."""
    n = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and b"forkserver" in cmdline:
            n += 1
    return n


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds the pool's workers through /proc")
def test_ctrl_c_during_index_ends_cleanly_and_records_the_interrupt(tmp_path):
    ws, home = tmp_path / "ws", tmp_path / "home"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "old.md").write_text("previous content marker\n", encoding="utf-8")
    env = {**os.environ, "MEMORY_CORE_HOME": str(home), "PYTHONPATH": str(ROOT), "MEMORY_CORE_POOL__WORKERS": "2"}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "memory_core", *args, "--workspace", str(ws)],
                              capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=120, check=False)

    assert cli("index").returncode == 0
    rng = random.Random(7)
    for i in range(2500):  # enough chunking that the pool is still busy when Ctrl-C comes
        p = ws / "memory" / f"d{i % 25:02d}" / f"n{i:04d}.md"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(" ".join(rng.choice(WORDS) for _ in range(2000)) + "\n", encoding="utf-8")

    # a terminal's Ctrl-C: SIGINT to the whole foreground process group (owner, forkserver, workers);
    # the indexing pool is used whatever the file count (a cold one waits for far more files).
    # SIGINT handled as in a terminal even when the test itself runs as a background job (a shell
    # without job control starts those with SIGINT ignored, and children inherit that)
    forced_pool = ("import signal, sys, workers.shared as s; "
                   "signal.signal(signal.SIGINT, signal.default_int_handler); s.COLD_POOL_MIN_ENTRIES = 0; "
                   "from memory_core.cli import main; sys.exit(main(sys.argv[1:]))")
    proc = subprocess.Popen([sys.executable, "-c", forced_pool, "index", "--force", "--workspace", str(ws)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(ROOT),
                            start_new_session=True)
    try:
        assert wait_for(lambda: _group_workers(proc.pid) >= 3 or proc.poll() is not None, timeout=60)
        assert proc.poll() is None, "the index run ended before its workers could be interrupted"
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert (proc.returncode, out, err) == (130, "", "error: interrupted\n")

    r = cli("status", "--json")
    assert r.returncode == 0, r.stderr
    [st] = json.loads(r.stdout)
    assert (st["files"], st["lastSync"]["error"]) == (1, "full reindex failed: interrupted (KeyboardInterrupt)")
    r = cli("search", "marker", "--json")
    assert [h["path"] for h in json.loads(r.stdout)["results"]] == ["memory/old.md"]
    assert [p.name for p in home.iterdir() if ".tmp-" in p.name] == []
