"""The process-wide watcher (memory_core/watch_hub.py): one inotify instance for every agent, events
routed to the agent whose files they touch, and a bounded reconcile, said once, where the kernel
refuses a watch. Real inotify on tmp_path; the refusals come from a libc wrapper that fails the way
the kernel does at its limits (EMFILE, ENOSPC)."""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import sys
from pathlib import Path

import pytest

from memory_core.freshness import Freshness, FreshnessSettings
from memory_core.watch_hub import AgentWatch, WatchHub, _libc
from memory_core.watcher import KIND_MEMORY, WatchTargets
from tests.helpers import wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux only")


def inotify_fds() -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
        except OSError:
            pass
    return n


class LimitedLibc:
    """The real libc with the kernel's limits made small: no instance at all, or ``watches`` watches."""

    def __init__(self, *, instances: bool = True, watches: int = 10**9) -> None:
        self.real = _libc()
        self.instances = instances
        self.left = watches

    def inotify_init1(self, flags: int) -> int:
        if not self.instances:
            ctypes.set_errno(errno.EMFILE)
            return -1
        return self.real.inotify_init1(flags)

    def inotify_add_watch(self, fd: int, path: bytes, mask: int) -> int:
        if self.left <= 0:
            ctypes.set_errno(errno.ENOSPC)
            return -1
        self.left -= 1
        return self.real.inotify_add_watch(fd, path, mask)

    def inotify_rm_watch(self, fd: int, wd: int) -> int:
        self.left += 1
        return self.real.inotify_rm_watch(fd, wd)


@pytest.fixture
def hub(monkeypatch):
    """A fresh process hub (the one ``Freshness`` picks up), closed after the test."""
    made = []

    def install(lib=None) -> WatchHub:
        h = WatchHub()
        if lib is not None:
            h._lib = lib
        monkeypatch.setattr(WatchHub, "_instance", h)
        made.append(h)
        return h

    yield install
    for h in made:
        h.close()


def workspaces(tmp_path: Path, n: int) -> list[Path]:
    out = []
    for i in range(n):
        ws = tmp_path / f"ws{i}"
        (ws / "memory" / "deep").mkdir(parents=True)
        out.append(ws)
    return out


def test_many_agents_share_one_inotify_instance_and_get_only_their_events(tmp_path, hub):
    h = hub()
    before = inotify_fds()
    seen: dict[int, list] = {}
    watches = []
    for i, ws in enumerate(workspaces(tmp_path, 40)):
        seen[i] = []
        w = AgentWatch(h, WatchTargets.build(str(ws)), seen[i].extend, name=f"a{i}")
        w.start()
        watches.append(w)
    assert inotify_fds() - before == 1
    assert len(h.thread_idents()) == 1
    (tmp_path / "ws7" / "memory" / "deep" / "x.md").write_text("seven")
    (tmp_path / "ws3" / "MEMORY.md").write_text("three")
    assert wait_for(lambda: seen[7] and seen[3], 10)
    assert {(e.kind, os.path.relpath(e.path, tmp_path)) for e in seen[7]} == {(KIND_MEMORY, "ws7/memory/deep/x.md")}
    assert {(e.kind, os.path.relpath(e.path, tmp_path)) for e in seen[3]} == {(KIND_MEMORY, "ws3/MEMORY.md")}
    assert all(not seen[i] for i in seen if i not in (3, 7))
    assert all(w.state == "running" for w in watches)


def test_a_folder_made_after_the_start_is_watched(tmp_path, hub):
    h = hub()
    (ws,) = workspaces(tmp_path, 1)
    seen: list = []
    w = AgentWatch(h, WatchTargets.build(str(ws)), seen.extend)
    w.start()
    (ws / "memory" / "new").mkdir()
    assert wait_for(lambda: str(ws / "memory" / "new") in w.dirs, 10)
    (ws / "memory" / "new" / "n.md").write_text("fresh")
    assert wait_for(lambda: any(e.path.endswith("new/n.md") for e in seen), 10)


def test_unsubscribing_the_last_agent_removes_its_watches(tmp_path, hub):
    h = hub()
    a, b = workspaces(tmp_path, 2)
    wa = AgentWatch(h, WatchTargets.build(str(a)), lambda _e: None)
    wb = AgentWatch(h, WatchTargets.build(str(b)), lambda _e: None)
    wa.start()
    wb.start()
    n = h.watch_count()
    wa.stop()
    assert h.watch_count() == n - len(wa.wanted_dirs()[1]) - 2  # its flat folders, memory/ and memory/deep
    assert wa.state == "stopped" and wb.state == "running"


def fresh_for(ws: Path, **kw) -> tuple[Freshness, dict]:
    rows: dict[str, tuple[float, int]] = {}

    def listing():
        return sorted(str(p) for p in (ws / "memory").rglob("*.md")), []

    def sync(paths, reason, force):
        for p in (listing()[0] if paths is None else paths):
            st = os.stat(p)
            rows[p] = (st.st_mtime_ns / 1e6, st.st_size)

    settings = FreshnessSettings(watch_debounce_ms=50, reconcile_interval_s=0.0, **kw)
    fr = Freshness(sync_fn=sync, indexed_fn=lambda: dict(rows), list_fn=listing,
                   targets=WatchTargets.build(str(ws)), settings=settings, agent_id=ws.name)
    return fr, rows


def test_no_inotify_instance_left_falls_back_to_the_reconcile_said_once(tmp_path, hub, caplog):
    hub(LimitedLibc(instances=False))
    caplog.set_level(logging.WARNING, logger="memory_core.watch_hub")
    opened = []
    try:
        for ws in workspaces(tmp_path, 5):
            (ws / "memory" / "a.md").write_text("old")
            fr, _rows = fresh_for(ws)
            opened.append(fr.start())
        for fr in opened:
            assert fr.wait_idle(30)
        st = opened[0].status()["watcher"]
        assert st["state"] == "reconcile" and "max_user_instances" in st["fallback"]
        assert [r.getMessage() for r in caplog.records if "inotify" in r.getMessage()] == [
            f"memory watcher: {st['fallback']}"]
        # behind without a watcher: the search's own reconcile finds the change and says stale
        (tmp_path / "ws2" / "memory" / "a.md").write_text("new and longer")
        stale = opened[2].before_search()
        assert stale is not None and stale["stale"] is True
        assert opened[2].wait_idle(30) and opened[2].before_search() is None
    finally:
        for fr in opened:
            fr.close()


def test_agents_past_the_watch_limit_are_reconciled_the_others_watched(tmp_path, hub):
    hub(LimitedLibc(watches=7))  # a workspace needs 3: ws and memory/ and memory/deep
    opened, indexes = [], []
    try:
        for ws in workspaces(tmp_path, 4):
            (ws / "memory" / "a.md").write_text("old")
            fr, rows = fresh_for(ws)
            opened.append(fr.start())
            indexes.append(rows)
        states = [fr.status()["watcher"]["state"] for fr in opened]
        assert states[:2] == ["running", "running"] and set(states[2:]) == {"reconcile"}
        assert "max_user_watches" in opened[3].status()["watcher"]["fallback"]
        for fr in opened:
            assert fr.wait_idle(30)
        (tmp_path / "ws0" / "memory" / "w.md").write_text("watched")
        assert wait_for(lambda: str(tmp_path / "ws0" / "memory" / "w.md") in indexes[0], 10)  # by its watch
        (tmp_path / "ws3" / "memory" / "r.md").write_text("reconciled")
        assert opened[3].before_search()["stale"] is True
        opened.pop(0).close()  # frees its three watches
        opened[2]._health_tick()  # ws3's health check retries its refused watch
        assert opened[2].status()["watcher"]["state"] == "running"
        assert opened[2].status()["watcher"]["fallback"] is None
    finally:
        for fr in opened:
            fr.close()


def test_thirty_agents_run_on_the_shared_threads_and_each_sees_its_own_edit(tmp_path, hub):
    import threading

    hub()
    before = {t.ident for t in threading.enumerate()}
    opened, indexes = [], []
    try:
        for ws in workspaces(tmp_path, 30):
            (ws / "memory" / "a.md").write_text("old")
            fr, rows = fresh_for(ws)
            opened.append(fr.start())
            indexes.append(rows)
        for i in range(30):
            (tmp_path / f"ws{i}" / "memory" / f"e{i}.md").write_text(f"edit {i}")
        assert wait_for(lambda: all(str(tmp_path / f"ws{i}" / "memory" / f"e{i}.md") in indexes[i]
                                    for i in range(30)), 30)
        new = [t.name for t in threading.enumerate() if t.ident not in before]
        runner = opened[0]._runner
        assert len(new) <= 1 + runner.size, new  # the hub's reader and the runner's threads, whatever the agents
        assert all(n == "memory-core-watch" or n.startswith("memory-core-freshness-") for n in new)
        assert all(set(rows) == {str(tmp_path / f"ws{i}" / "memory" / n) for n in ("a.md", f"e{i}.md")}
                   for i, rows in enumerate(indexes))
    finally:
        for fr in opened:
            fr.close()
