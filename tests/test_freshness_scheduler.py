"""The freshness scheduler and watcher against a small real index (a dict kept in step with real
files by ``sync_fn``), with real watchfiles threads on tmp_path. MemoryCore-level acceptance tests
are in tests/test_freshness_core.py."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from memory_core.freshness import Freshness, FreshnessSettings
from memory_core.freshness import sessions as freshness_sessions
from memory_core.freshness.sessions import count_newlines
from memory_core.watcher import (
    KIND_MEMORY,
    KIND_ROOT,
    KIND_SESSION,
    KIND_TREE,
    MemoryWatcher,
    WatchTargets,
    classify_event,
)
from tests.helpers import wait_for

IGNORED = {".git", "node_modules", ".pnpm-store", ".venv", "venv", ".tox", "__pycache__"}


class DictIndex:
    """A minimal index: abs path -> (mtime_ms, size, text), synced from the real files."""

    def __init__(self, workspace: Path, sessions_dir: Path | None = None, delay: float = 0.0) -> None:
        self.ws = workspace
        self.sessions_dir = sessions_dir
        self.rows: dict[str, tuple[float, int, str]] = {}
        self.calls: list[tuple[tuple[str, ...] | None, str, bool]] = []
        self.delay = delay
        self.fail: Exception | None = None
        self.lock = threading.Lock()

    def list_files(self) -> tuple[list[str], list[str]]:
        mem = [str(self.ws / n) for n in ("MEMORY.md", "USER.md") if (self.ws / n).is_file()]
        for root, dirs, files in os.walk(self.ws / "memory"):
            dirs[:] = [d for d in dirs if d not in IGNORED]
            mem += [os.path.join(root, f) for f in files if f.endswith(".md")]
        ses = []
        if self.sessions_dir and self.sessions_dir.is_dir():
            ses = [str(p) for p in self.sessions_dir.iterdir() if ".jsonl" in p.name]
        return sorted(mem), sorted(ses)

    def indexed(self) -> dict[str, tuple[float | None, int | None]]:
        with self.lock:
            return {p: (m, s) for p, (m, s, _) in self.rows.items()}

    def sync(self, paths, reason, force):
        self.calls.append((None if paths is None else tuple(paths), reason, force))
        if self.delay:
            time.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        mem, ses = self.list_files()
        todo = set(mem) | set(ses) if paths is None else set(paths)
        with self.lock:
            if paths is None:
                for p in list(self.rows):
                    if p not in todo:
                        del self.rows[p]
            for p in todo:
                try:
                    st = os.stat(p)
                    text = Path(p).read_text()
                except FileNotFoundError:
                    self.rows.pop(p, None)
                    continue
                self.rows[p] = (st.st_mtime_ns / 1e6, st.st_size, text)
        return {"reason": reason}

    def search(self, word: str) -> list[str]:
        with self.lock:
            return sorted(os.path.relpath(p, self.ws) for p, (_, _, t) in self.rows.items() if word in t)


def make(tmp_path: Path, *, debounce_ms=200, sessions=False, watch=True, delay=0.0, **kw):
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    sdir = tmp_path / "sessions" if sessions else None
    if sdir:
        sdir.mkdir(exist_ok=True)
    idx = DictIndex(ws, sdir, delay=delay)
    settings = FreshnessSettings(watch=watch, watch_debounce_ms=debounce_ms, **kw)
    fr = Freshness(
        sync_fn=idx.sync, indexed_fn=idx.indexed, list_fn=idx.list_files,
        targets=WatchTargets.build(str(ws), (), str(sdir) if sdir else None), settings=settings,
    )
    return ws, idx, fr


@pytest.fixture
def closer():
    items = []
    yield items.append
    for fr in items:
        fr.close()


# ---------------------------------------------------------------- classification (pure)


def test_classify_event_ignore_list_and_kinds(tmp_path):
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    t = WatchTargets.build(str(ws), (), str(tmp_path / "sessions"))
    m = str(ws / "memory")
    s = str(tmp_path / "sessions")
    got = {
        p: (e.kind if (e := classify_event(t, "added", p)) else None)
        for p in [
            f"{m}/a.md", f"{m}/deep/b.md", f"{m}/node_modules/x.md", f"{m}/.git/HEAD", f"{m}/.venv/y.md",
            f"{m}/notes.txt", str(ws / "MEMORY.md"), str(ws / "USER.md"), str(ws / "README.md"), m,
            f"{s}/abc.jsonl", f"{s}/abc.jsonl.reset.2026-01-01T00-00-00Z", f"{s}/abc.json", f"{s}/sub/x.jsonl",
        ]
    }
    assert got == {
        f"{m}/a.md": KIND_MEMORY, f"{m}/deep/b.md": KIND_MEMORY, f"{m}/node_modules/x.md": None,
        f"{m}/.git/HEAD": None, f"{m}/.venv/y.md": None, f"{m}/notes.txt": None,
        str(ws / "MEMORY.md"): KIND_MEMORY, str(ws / "USER.md"): KIND_MEMORY, str(ws / "README.md"): None,
        m: KIND_ROOT, f"{s}/abc.jsonl": KIND_SESSION, f"{s}/abc.jsonl.reset.2026-01-01T00-00-00Z": KIND_SESSION,
        f"{s}/abc.json": None, f"{s}/sub/x.jsonl": None,
    }
    # a deleted folder (no suffix) inside memory/ means: only a full sync is exact
    assert classify_event(t, "deleted", f"{m}/old").kind == KIND_TREE


def test_count_newlines_reads_only_the_appended_range(tmp_path, monkeypatch):
    monkeypatch.setattr(freshness_sessions, "_READ_BLOCK", 4)  # 2 newlines per block
    p = tmp_path / "t.jsonl"
    p.write_bytes(b"a\n" * 10 + b"b\n" * 3)
    assert count_newlines(str(p), 20, 26) == 3
    assert count_newlines(str(p), 21, 25) == 2  # b"\nb\nb": both ends of the range hold
    assert count_newlines(str(p), 0, 26) == 13
    # stops after the block that reaches 5: three blocks, 6 newlines, not all 13
    assert count_newlines(str(p), 0, 26, stop_at=5) == 6


# ---------------------------------------------------------------- watcher


def test_watcher_reports_memory_events_and_ignores_the_rest(tmp_path):
    ws = tmp_path / "ws"
    (ws / "memory" / "node_modules").mkdir(parents=True)
    seen: list = []
    w = MemoryWatcher(WatchTargets.build(str(ws)), seen.extend)
    w.start()
    try:
        (ws / "memory" / "a.md").write_text("alpha")
        (ws / "memory" / "node_modules" / "x.md").write_text("no")
        (ws / "memory" / "notes.txt").write_text("no")
        (ws / "MEMORY.md").write_text("root")
        assert wait_for(lambda: {e.path for e in seen} >= {str(ws / "memory" / "a.md"), str(ws / "MEMORY.md")})
        time.sleep(0.3)
        assert {e.path for e in seen} == {str(ws / "memory" / "a.md"), str(ws / "MEMORY.md")}
        assert w.status()["state"] == "running"
    finally:
        w.stop()
    assert w.state == "stopped"


def test_watcher_restarts_after_an_error_and_keeps_delivering(tmp_path):
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    seen: list = []
    restarts: list = []

    def on_events(events):
        if not restarts and not seen:
            seen.append("boom")
            raise OSError(28, "No space left on device (inotify watch limit)")
        seen.extend(e.path for e in events)

    w = MemoryWatcher(WatchTargets.build(str(ws)), on_events, on_restart=restarts.append, backoff_s=(0.05, 1.0))
    w.start()
    try:
        (ws / "memory" / "a.md").write_text("1")
        assert wait_for(lambda: restarts == ["error"])
        st = w.status()
        assert st["errors"] == 1 and "No space left" in st["lastError"] and st["restarts"] == 1
        assert wait_for(lambda: w.state == "running")
        time.sleep(0.2)
        (ws / "memory" / "b.md").write_text("2")
        assert wait_for(lambda: str(ws / "memory" / "b.md") in seen)
    finally:
        w.stop()


def test_watcher_follows_a_memory_folder_created_later(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    seen: list = []
    w = MemoryWatcher(WatchTargets.build(str(ws)), seen.extend)
    w.start()
    try:
        (ws / "memory").mkdir()
        assert wait_for(lambda: any(e.kind == KIND_ROOT for e in seen))
        assert wait_for(lambda: str(ws / "memory") in w.status()["roots"])
        time.sleep(0.2)
        (ws / "memory" / "late.md").write_text("x")
        assert wait_for(lambda: any(e.path == str(ws / "memory" / "late.md") for e in seen))
    finally:
        w.stop()


# ---------------------------------------------------------------- scheduler


def test_edit_create_delete_rename_reach_the_index_through_the_watcher(tmp_path, closer):
    ws, idx, fr = make(tmp_path, debounce_ms=200)
    (ws / "memory" / "a.md").write_text("alpha")
    closer(fr.start())
    assert wait_for(lambda: idx.search("alpha") == ["memory/a.md"], 30)  # startup catch-up
    steps = [
        (lambda: (ws / "memory" / "a.md").write_text("bravo"), "bravo", ["memory/a.md"]),
        (lambda: (ws / "memory" / "b.md").write_text("charlie"), "charlie", ["memory/b.md"]),
        (lambda: (ws / "memory" / "b.md").rename(ws / "memory" / "c.md"), "charlie", ["memory/c.md"]),
        (lambda: (ws / "memory" / "c.md").unlink(), "charlie", []),
    ]
    for act, word, expected in steps:
        act()
        assert wait_for(lambda word=word, expected=expected: idx.search(word) == expected, 30), word
    assert all(call[0] is not None for call in idx.calls[1:]), idx.calls  # targeted, not full


def test_a_burst_of_1000_edits_causes_a_few_syncs(tmp_path, closer):
    ws, idx, fr = make(tmp_path, debounce_ms=200)
    closer(fr.start())
    assert fr.wait_idle(30)
    before = len(idx.calls)
    f = ws / "memory" / "burst.md"
    t0 = time.monotonic()
    for i in range(1000):  # paced over about 2 s
        f.write_text(f"edit {i}")
        time.sleep(max(0.0, t0 + (i + 1) * 0.002 - time.monotonic()))
    assert wait_for(lambda: idx.search("edit 999") == ["memory/burst.md"], 30)
    assert fr.wait_idle(30)
    assert 1 <= len(idx.calls) - before <= 3, idx.calls[before:]


def test_transcript_appends_follow_the_delta_thresholds(tmp_path, closer):
    _ws, idx, fr = make(tmp_path, debounce_ms=100, sessions=True, delta_messages=50, delta_bytes=100_000)
    t = idx.sessions_dir / "s1.jsonl"
    line = json.dumps({"type": "message", "message": {"role": "user", "content": "hello"}}) + "\n"
    t.write_text(line)
    closer(fr.start())
    assert wait_for(lambda: str(t) in idx.indexed(), 30)  # startup catch-up indexes the new transcript
    fr.wait_idle(30)
    n0 = len(idx.calls)

    with t.open("a") as fh:
        for _ in range(10):
            fh.write(line)
            fh.flush()
    time.sleep(0.8)
    assert len(idx.calls) == n0
    assert fr.session_deltas()[str(t)]["pendingMessages"] == 10
    assert fr.is_dirty() is False and fr.staleness() is None

    with t.open("a") as fh:
        for _ in range(50):
            fh.write(line)
            fh.flush()
    assert wait_for(lambda: len(idx.calls) > n0, 30)
    assert idx.calls[n0][0] == (str(t),)
    fr.wait_idle(30)
    assert idx.indexed()[str(t)][1] == 61 * len(line)
    assert fr.session_deltas() == {}


def test_archives_and_byte_threshold_sync_at_once(tmp_path, closer):
    _ws, idx, fr = make(tmp_path, debounce_ms=100, sessions=True, delta_bytes=1000)
    closer(fr.start())
    fr.wait_idle(30)
    arch = idx.sessions_dir / "old.jsonl.reset.2026-01-01T00-00-00.000Z"
    arch.write_text('{"type":"message"}\n')
    assert wait_for(lambda: str(arch) in idx.indexed(), 30)
    big = idx.sessions_dir / "big.jsonl"
    big.write_text("x" * 1500)  # no newline at all: the byte threshold alone
    assert wait_for(lambda: str(big) in idx.indexed(), 30)


def test_killed_watcher_is_noticed_before_the_next_search(tmp_path, closer):
    ws, idx, fr = make(tmp_path, debounce_ms=200, reconcile_min_interval_s=60)
    (ws / "memory" / "a.md").write_text("old words")
    closer(fr.start())
    fr.wait_idle(30)
    assert fr.before_search() is None
    fr.watcher.kill()
    assert fr.status()["watcher"]["state"] == "dead"
    (ws / "memory" / "a.md").write_text("new words, longer")
    time.sleep(0.5)
    assert idx.search("new") == []  # nobody saw it
    stale = fr.before_search()
    assert stale == {"stale": True, "warning": "Memory index is dirty. Search results may be incomplete.",
                     "action": "Run: memory-core index"}
    assert fr.status()["watcher"]["state"] == "running"
    assert fr.wait_idle(30)
    assert idx.search("new") == ["memory/a.md"]
    assert fr.before_search() is None
    # and the restarted watcher works
    (ws / "memory" / "b.md").write_text("fresh")
    assert wait_for(lambda: idx.search("fresh") == ["memory/b.md"], 30)


def test_search_on_an_empty_index_forces_a_waited_sync(tmp_path, closer):
    ws, idx, fr = make(tmp_path, watch=False)
    (ws / "MEMORY.md").write_text("root fact")
    closer(fr)
    assert fr.before_search() is None
    assert idx.calls == [(None, "search", True)]
    assert idx.search("root") == ["MEMORY.md"]


def test_concurrent_requests_join_the_running_sync(tmp_path, closer):
    _ws, idx, fr = make(tmp_path, watch=False, delay=0.3)
    closer(fr)
    first = fr.request_sync(None, reason="a", include_dirty=False)
    time.sleep(0.1)
    joined = [fr.request_sync(None, reason="b", include_dirty=False) for _ in range(5)]
    assert all(j is first for j in joined)
    other = [fr.request_sync(["x"], reason="c") for _ in range(3)]
    assert len({id(o) for o in other}) == 1 and other[0] is not first
    first.result(3)
    other[0].result(3)
    assert [c[1] for c in idx.calls] == ["a", "c"]


def test_a_failed_sync_is_reported_and_retried(tmp_path, closer):
    ws, idx, fr = make(tmp_path, debounce_ms=100, retry_backoff_s=(0.3, 1.0))
    closer(fr.start())
    fr.wait_idle(30)
    idx.fail = OSError("disk I/O error")
    (ws / "memory" / "a.md").write_text("alpha")
    assert wait_for(lambda: fr.status()["lastSyncError"] == "disk I/O error", 30)
    assert fr.staleness() == {
        "stale": True, "warning": "Memory index is stale: disk I/O error. Search results may be incomplete.",
        "action": "Run: memory-core index",
    }
    assert fr.status()["pendingPaths"] == ["memory/a.md"]
    idx.fail = None
    assert wait_for(lambda: idx.search("alpha") == ["memory/a.md"], 30)
    assert fr.staleness() is None and fr.status()["dirty"] is False


def test_reconcile_finds_what_no_watcher_saw(tmp_path, closer):
    ws, _idx, fr = make(tmp_path, watch=False)
    (ws / "memory" / "a.md").write_text("one")
    (ws / "memory" / "b.md").write_text("two")
    closer(fr)
    fr.sync_now(None, reason="init")
    assert fr.reconcile() == []
    (ws / "memory" / "a.md").write_text("one changed")
    (ws / "memory" / "b.md").unlink()
    (ws / "memory" / "c.md").write_text("three")
    assert sorted(os.path.basename(p) for p in fr.reconcile()) == ["a.md", "b.md", "c.md"]
    assert fr.status()["pendingPaths"] == ["memory/a.md", "memory/b.md", "memory/c.md"]


def test_interval_runs_full_syncs(tmp_path, closer):
    _ws, idx, fr = make(tmp_path, watch=False, interval_minutes=0.25 / 60)
    closer(fr.start())
    assert wait_for(lambda: len([c for c in idx.calls if c[1] == "interval"]) >= 2, 30)
    assert all(c[0] is None for c in idx.calls if c[1] == "interval")


def test_targeted_syncs_become_full_after_the_reconcile_interval(tmp_path, closer):
    ws, idx, fr = make(tmp_path, debounce_ms=50, full_reconcile_s=0.6)
    closer(fr.start())
    fr.sync_now(None, reason="init")
    (ws / "memory" / "a.md").write_text("one")
    assert wait_for(lambda: idx.search("one") == ["memory/a.md"], 30)
    assert idx.calls[-1][0] == (str(ws / "memory" / "a.md"),)
    time.sleep(0.7)
    (ws / "memory" / "a.md").write_text("two")
    assert wait_for(lambda: idx.search("two") == ["memory/a.md"], 30)
    assert idx.calls[-1][0] is None  # 15-minute rule (shortened here): a full enumeration that also prunes


def test_extra_paths_are_watched(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    notes = tmp_path / "notes"
    (notes / "sub").mkdir(parents=True)
    single = tmp_path / "single.md"
    single.write_text("x")
    seen: list = []
    w = MemoryWatcher(WatchTargets.build(str(ws), [str(notes), {"path": str(single)}]), seen.extend)
    w.start()
    try:
        (notes / "sub" / "n.md").write_text("n")
        single.write_text("changed")
        (tmp_path / "other.md").write_text("not watched")
        assert wait_for(lambda: {e.path for e in seen} >= {str(notes / "sub" / "n.md"), str(single)})
        time.sleep(0.2)
        assert {e.path for e in seen} == {str(notes / "sub" / "n.md"), str(single)}
    finally:
        w.stop()


def test_a_search_does_not_wait_for_the_dirty_sync(tmp_path, closer):
    ws, idx, fr = make(tmp_path, watch=False)
    (ws / "memory" / "a.md").write_text("alpha")
    closer(fr)
    fr.sync_now(None, reason="init")
    idx.delay = 3.0  # the next sync takes 3 s
    (ws / "memory" / "a.md").write_text("alpha beta")
    stale = fr.before_search()
    # answered while the 3 s sync it requested is still queued or running
    assert fr.status()["syncRunning"] or fr.status()["syncQueued"]
    assert stale["stale"] is True and idx.search("beta") == []
    assert fr.wait_idle(30) and idx.search("beta") == ["memory/a.md"]
    assert fr.before_search() is None


def test_with_a_healthy_watcher_the_search_reconcile_runs_in_the_background(tmp_path, closer):
    ws, idx, fr = make(tmp_path, debounce_ms=50, reconcile_min_interval_s=0.0)
    (ws / "memory" / "a.md").write_text("alpha")
    closer(fr.start())
    assert fr.wait_idle(30)
    listing = idx.list_files
    listed_by: list[str] = []  # the thread of each folder listing

    def recording_listing():
        listed_by.append(threading.current_thread().name)
        return listing()

    idx.list_files = recording_listing
    fr._list_fn = recording_listing
    me = threading.current_thread().name
    before = fr.status()["lastReconcileAt"]
    assert fr.before_search() is None
    assert me not in listed_by  # the search did not list the folders itself
    assert wait_for(lambda: fr.status()["lastReconcileAt"] != before, 30)
    assert listed_by  # the background reconcile did
    fr.watcher.kill()
    fr.before_search()
    assert me in listed_by  # no healthy watcher: the reconcile runs before answering, in the caller
