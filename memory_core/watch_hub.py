"""One file watcher per process for every agent's memory sources (Linux inotify, through ctypes).

A serve with thousands of agents cannot give each agent its own watcher: Linux allows 128 inotify
instances per user by default, and each costs a thread. :class:`WatchHub` holds **one** inotify
instance and **one** reader thread for the whole process; each agent subscribes its
:class:`~memory_core.watcher.WatchTargets` and gets an :class:`AgentWatch`, which has the
interface of :class:`~memory_core.watcher.MemoryWatcher` (``start``/``stop``/``restart``/``kill``,
``state``, ``healthy``, ``status``). A raw event is routed by the watched folder to the agents that
watch it, classified per agent (:func:`~memory_core.watcher.classify_event`) and handed over in
batches.

When the kernel refuses (no inotify instance left: EMFILE; no watch left: ENOSPC; or not Linux)
the agents concerned are not watched: their state is ``reconcile``, so the scheduler finds their
changes by the bounded reconcile (a stat of every source at most once per interval) and searches
answer ``stale`` while they are behind. The refusal is said once: one log warning per process and
the ``watcher.fallback`` field of ``status``, never a line per retry.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import select
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from memory_core.watcher import IGNORED_SEGMENTS, KIND_ROOT, WatchEvent, WatchTargets, classify_event

log = logging.getLogger(__name__)

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF = 0x400, 0x800
IN_Q_OVERFLOW, IN_IGNORED, IN_ISDIR = 0x4000, 0x8000, 0x40000000
IN_ONLYDIR, IN_EXCL_UNLINK = 0x01000000, 0x04000000
IN_NONBLOCK, IN_CLOEXEC = os.O_NONBLOCK, 0o2000000
WATCH_MASK = (IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
              | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK)
_HEADER = struct.Struct("iIII")


def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.inotify_init1, lib.inotify_add_watch, lib.inotify_rm_watch  # noqa: B018 - present?
    except (OSError, AttributeError):
        return None
    lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    lib.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    return lib


def _change(mask: int) -> str:
    if mask & (IN_DELETE | IN_MOVED_FROM | IN_DELETE_SELF | IN_MOVE_SELF):
        return "deleted"
    if mask & (IN_CREATE | IN_MOVED_TO):
        return "added"
    return "modified"


class AgentWatch:
    """One agent's subscription to the process's :class:`WatchHub` (a ``MemoryWatcher`` look-alike).

    ``state``: ``stopped``, ``running``, ``reconcile`` (the kernel refused a watch: changes are found
    by the reconcile) or ``dead`` (killed, or the hub's thread ended).
    """

    def __init__(self, hub: WatchHub, targets: WatchTargets, on_events: Callable[[list[WatchEvent]], None],
                 on_restart: Callable[[str], None] | None = None, name: str = "main") -> None:
        self.hub = hub
        self.targets = targets
        self.name = name
        self._on_events = on_events
        self._on_restart = on_restart
        self.dirs: set[str] = set()          # folders this agent needs watched (kept by the hub)
        self.refused: str | None = None      # why a watch was refused (None: every folder watched)
        self._state = "stopped"
        self.restarts = 0
        self.errors = 0
        self.events_seen = 0
        self.last_event_at: float | None = None
        self.started_at: float | None = None

    def start(self, *, wait: bool = True, timeout: float = 5.0) -> None:
        """Register the agent's folders (synchronously: watched when this returns)."""
        self.hub.subscribe(self)
        self._state = "running"
        self.started_at = time.time()

    def wait_ready(self, timeout: float = 5.0) -> bool:
        return True

    def stop(self, timeout: float = 5.0) -> None:
        self._state = "stopped"
        self.hub.unsubscribe(self)

    def restart(self, reason: str = "restart") -> None:
        """Register the folders again (recomputed: roots may have come or gone), then reconcile."""
        if self._state == "stopped":
            return
        self.hub.unsubscribe(self)
        self.restarts += 1
        self.start()
        if self._on_restart is not None:
            self._on_restart(reason)

    def kill(self) -> None:
        """Simulate a crash (tests, benchmarks): stop routing events without telling anyone."""
        self.hub.unsubscribe(self)
        self._state = "dead"

    @property
    def state(self) -> str:
        if self._state == "running":
            if self.refused is not None:
                return "reconcile"
            if not self.hub.alive():
                return "dead"
        return self._state

    def healthy(self) -> bool:
        return self.state == "running"

    def thread_idents(self) -> list[int]:
        return self.hub.thread_idents()

    def status(self) -> dict[str, Any]:
        return {"state": self.state, "roots": sorted(self.dirs)[:20], "restarts": self.restarts,
                "errors": self.errors, "lastError": self.refused, "lastErrorAt": None,
                "lastEventAt": self.last_event_at, "startedAt": self.started_at, "events": self.events_seen,
                "shared": True, "fallback": self.refused}

    def deliver(self, events: list[WatchEvent]) -> None:
        self.events_seen += len(events)
        self.last_event_at = time.time()
        events.sort(key=lambda e: e.path)
        try:
            self._on_events(events)
        except Exception:  # noqa: BLE001 - one agent's consumer never stops the process's watcher
            self.errors += 1
            log.exception("memory watcher (%s): event handler failed", self.name)
        if any(e.kind == KIND_ROOT for e in events):
            # a root came or went: watch the new set of folders (and reconcile what the gap missed)
            threading.Thread(target=self.restart, args=("root changed",), daemon=True,
                             name="memory-core-watch-refresh").start()

    def wanted_dirs(self) -> tuple[list[str], list[str]]:
        """(folders watched with their subfolders, folders watched alone)."""
        return self.targets.recursive_roots(), self.targets.flat_roots()


class WatchHub:
    """One inotify instance and one reader thread routing events to the agents (see the module doc)."""

    _instance: WatchHub | None = None
    _instance_lock = threading.Lock()

    @classmethod
    def shared(cls) -> WatchHub:
        with cls._instance_lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def __init__(self, batch_ms: int = 50) -> None:
        self._lib = _libc()
        self._lock = threading.RLock()
        self._fd: int | None = None
        self._thread: threading.Thread | None = None
        self._wd_dir: dict[int, str] = {}
        self._dir_wd: dict[str, int] = {}
        self._dir_subs: dict[str, set[AgentWatch]] = {}
        self._recursive: dict[str, set[AgentWatch]] = {}   # folder -> agents that watch its new subfolders
        self._subs: set[AgentWatch] = set()
        self._batch_s = batch_ms / 1000
        self._closed = False
        self.fallback: str | None = None    # the one refusal, said once (None: everything watched)

    # -- subscriptions ---------------------------------------------------------------------

    def subscribe(self, sub: AgentWatch) -> None:
        recursive, flat = sub.wanted_dirs()
        with self._lock:
            self._subs.add(sub)
            sub.refused = None
            if not self._ensure_fd():
                sub.refused = self.fallback
                return
            for root in recursive:
                for folder in _walk_dirs(root):
                    self._add(sub, folder, recursive=True)
            for folder in flat:
                self._add(sub, folder, recursive=False)
            self._ensure_thread()

    def unsubscribe(self, sub: AgentWatch) -> None:
        with self._lock:
            self._subs.discard(sub)
            for folder in list(sub.dirs):
                self._drop(sub, folder)
            sub.dirs.clear()

    def _add(self, sub: AgentWatch, folder: str, *, recursive: bool) -> None:
        if recursive:
            self._recursive.setdefault(folder, set()).add(sub)
        if folder in sub.dirs:
            return
        wd = self._dir_wd.get(folder)
        if wd is None:
            assert self._fd is not None and self._lib is not None
            wd = self._lib.inotify_add_watch(self._fd, os.fsencode(folder), WATCH_MASK)
            if wd < 0:
                err = ctypes.get_errno()
                if err in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
                    return  # gone or unreadable: the reconcile and the parent's events cover it
                self._refuse(sub, err, f"cannot watch {folder}")
                return
            self._wd_dir[wd] = folder
            self._dir_wd[folder] = wd
        self._dir_subs.setdefault(folder, set()).add(sub)
        sub.dirs.add(folder)

    def _drop(self, sub: AgentWatch, folder: str) -> None:
        for table in (self._dir_subs, self._recursive):
            subs = table.get(folder)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del table[folder]
        if folder not in self._dir_subs:
            wd = self._dir_wd.pop(folder, None)
            if wd is not None:
                self._wd_dir.pop(wd, None)
                if self._fd is not None and self._lib is not None:
                    self._lib.inotify_rm_watch(self._fd, wd)

    def _refuse(self, sub: AgentWatch, err: int, what: str) -> None:
        if err == errno.ENOSPC:
            why = ("the inotify watch limit is reached (fs.inotify.max_user_watches); agents past it are "
                   "kept fresh by a reconcile every sync.reconcileIntervalMs instead")
        else:
            why = f"{what}: {os.strerror(err)}; changes are found by a reconcile instead"
        sub.refused = why
        if self.fallback is None:
            self.fallback = why
            log.warning("memory watcher: %s", why)  # once per process, not per agent or retry

    def _ensure_fd(self) -> bool:
        if self._fd is not None:
            return True
        if self._lib is None:
            if self.fallback is None:
                self.fallback = "no inotify on this platform; changes are found by a reconcile instead"
            return False
        fd = self._lib.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            if self.fallback is None:
                self.fallback = (f"no inotify instance available ({os.strerror(err)}; fs.inotify.max_user_instances "
                                 "is reached); changes are found by a reconcile instead")
                log.warning("memory watcher: %s", self.fallback)
            return False
        self._fd = fd
        return True

    def watch_count(self) -> int:
        with self._lock:
            return len(self._dir_wd)

    def close(self) -> None:
        """End the reader thread and release the inotify instance (tests; a process's hub lives on)."""
        with self._lock:
            self._closed = True
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(5)
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self._wd_dir.clear()
            self._dir_wd.clear()
            self._dir_subs.clear()
            self._recursive.clear()

    # -- the reader thread -----------------------------------------------------------------

    def _ensure_thread(self) -> None:
        if not self._closed and (self._thread is None or not self._thread.is_alive()):
            self._thread = threading.Thread(target=self._run, name="memory-core-watch", daemon=True)
            self._thread.start()

    def alive(self) -> bool:
        t = self._thread
        return t is not None and t.is_alive()

    def thread_idents(self) -> list[int]:
        t = self._thread
        return [t.native_id] if t is not None and t.native_id else []

    def _run(self) -> None:
        fd = self._fd
        assert fd is not None
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while not self._closed:
            if not poller.poll(200):
                continue
            time.sleep(self._batch_s)  # let a burst of writes arrive as one batch
            batches: dict[AgentWatch, list[WatchEvent]] = {}
            overflow = False
            while True:
                try:
                    data = os.read(fd, 256 * 1024)
                except BlockingIOError:
                    break
                overflow |= self._route(data, batches)
            for sub, events in batches.items():
                sub.deliver(events)
            if overflow:  # events were lost: every agent re-checks its files (off this thread)
                with self._lock:
                    subs = list(self._subs)
                threading.Thread(target=lambda: [s.restart("event queue overflow") for s in subs],
                                 name="memory-core-watch-overflow", daemon=True).start()

    def _route(self, data: bytes, batches: dict[AgentWatch, list[WatchEvent]]) -> bool:
        overflow = False
        pos = 0
        while pos + _HEADER.size <= len(data):
            wd, mask, _cookie, length = _HEADER.unpack_from(data, pos)
            name = data[pos + _HEADER.size: pos + _HEADER.size + length].rstrip(b"\0")
            pos += _HEADER.size + length
            if mask & IN_Q_OVERFLOW:
                overflow = True
                continue
            with self._lock:
                folder = self._wd_dir.get(wd)
                if folder is None:
                    continue
                if mask & IN_IGNORED:
                    self._forget_folder(folder)
                    continue
                path = os.path.join(folder, os.fsdecode(name)) if name else folder
                subs = list(self._dir_subs.get(folder, ()))
                if mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO) and name:
                    for sub in self._recursive.get(folder, ()):
                        if os.path.basename(path) not in IGNORED_SEGMENTS:
                            for sub_folder in _walk_dirs(path):
                                self._add(sub, sub_folder, recursive=True)
            if not name:
                continue  # the folder's own deletion arrives from its parent too
            change = _change(mask)
            for sub in subs:
                ev = classify_event(sub.targets, change, path)
                if ev is not None:
                    batches.setdefault(sub, []).append(ev)
        return overflow

    def _forget_folder(self, folder: str) -> None:
        wd = self._dir_wd.pop(folder, None)
        if wd is not None:
            self._wd_dir.pop(wd, None)
        for sub in self._dir_subs.pop(folder, set()):
            sub.dirs.discard(folder)
        self._recursive.pop(folder, None)


def _walk_dirs(root: str) -> list[str]:
    """``root`` and its subfolders (not the ignored ones, not through symlinks)."""
    out = [root]
    for parent, dirs, _files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in IGNORED_SEGMENTS]
        out.extend(os.path.join(parent, d) for d in dirs)
    return out


def make_watcher(targets: WatchTargets, on_events: Callable[[list[WatchEvent]], None], *,
                 on_restart: Callable[[str], None] | None = None, name: str = "main") -> Any:
    """The agent's watcher: a subscription to the process's one :class:`WatchHub` (Linux), or its
    own :class:`~memory_core.watcher.MemoryWatcher` (watchfiles) elsewhere or with
    ``MEMORY_CORE_WATCHER=watchfiles``."""
    hub = WatchHub.shared()
    if hub._lib is None or os.environ.get("MEMORY_CORE_WATCHER") == "watchfiles":
        from memory_core.watcher import MemoryWatcher

        return MemoryWatcher(targets, on_events, on_restart=on_restart, name=name)
    return AgentWatch(hub, targets, on_events, on_restart=on_restart, name=name)
