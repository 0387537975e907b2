"""File watcher for the memory sources and the transcripts folder (upstream `memory/manager-sync-ops.ts`),
built on watchfiles.

Two kinds of watch run in daemon threads: a recursive one over ``memory/``, extra-path folders and
the transcripts folder, and a flat one over the folders that hold the single files (``MEMORY.md``,
``USER.md``, extra files) and the parents of the recursive roots, so a root that appears or vanishes
is noticed. Events pass :func:`classify_event` (the ignore list, ``.md`` only, transcripts only in
the transcripts folder) and are handed to ``on_events`` as :class:`WatchEvent` batches.

A watch that raises is restarted after a back-off; its error and restart count are kept for
``status``. The watcher never syncs anything itself: the scheduler (:mod:`memory_core.freshness`)
owns the debounce and the syncs.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import watchfiles

log = logging.getLogger(__name__)

IGNORED_SEGMENTS = frozenset({".git", "node_modules", ".pnpm-store", ".venv", "venv", ".tox", "__pycache__"})
ROOT_MEMORY_FILES = ("MEMORY.md", "memory.md", "USER.md")
_ARCHIVE_RE = re.compile(r"\.jsonl\.(reset|deleted)\.")

# Event kinds handed to the scheduler.
KIND_MEMORY = "memory"      # a memory .md file was added, changed or deleted
KIND_SESSION = "sessions"   # a transcript (*.jsonl or an archive) was added, changed or deleted
KIND_TREE = "tree"          # a folder inside a watched root changed: only a full sync is exact
KIND_ROOT = "root"          # a watched root (memory/, an extra folder, the transcripts folder) came or went


def is_session_archive(path: str) -> bool:
    """Usage-counted archives ``*.jsonl.reset.<iso>`` / ``*.jsonl.deleted.<iso>`` are synced at once."""
    return bool(_ARCHIVE_RE.search(os.path.basename(path)))


def is_transcript_name(name: str) -> bool:
    return name.endswith(".jsonl") or bool(_ARCHIVE_RE.search(name))


@dataclass(frozen=True)
class WatchEvent:
    kind: str          # KIND_*
    change: str        # "added" | "modified" | "deleted"
    path: str          # absolute


@dataclass(frozen=True)
class WatchTargets:
    """What to watch; built from the workspace, ``extraPaths`` and the transcripts folder."""

    workspace: str
    memory_dirs: tuple[str, ...] = ()      # recursive .md roots: <workspace>/memory and extra folders
    memory_files: tuple[str, ...] = ()     # single files: MEMORY.md, memory.md, USER.md, extra .md files
    sessions_dir: str | None = None

    @classmethod
    def build(cls, workspace: str, extra_paths: Iterable[str | dict] = (), sessions_dir: str | None = None) -> WatchTargets:
        ws = os.path.abspath(workspace)
        dirs = [os.path.join(ws, "memory")]
        files = [os.path.join(ws, name) for name in ROOT_MEMORY_FILES]
        for entry in extra_paths or ():
            raw = entry.get("path") if isinstance(entry, dict) else entry
            if not raw:
                continue
            p = os.path.abspath(os.path.join(ws, os.path.expanduser(str(raw))))
            if os.path.isdir(p) or (not p.endswith(".md") and not os.path.exists(p)):
                dirs.append(p)
            else:
                files.append(p)
        return cls(
            workspace=ws,
            memory_dirs=tuple(dict.fromkeys(dirs)),
            memory_files=tuple(dict.fromkeys(files)),
            sessions_dir=os.path.abspath(sessions_dir) if sessions_dir else None,
        )

    def recursive_roots(self) -> list[str]:
        roots = [d for d in self.memory_dirs if os.path.isdir(d) and not os.path.islink(d)]
        if self.sessions_dir and os.path.isdir(self.sessions_dir):
            roots.append(self.sessions_dir)
        return _drop_nested(roots)

    def flat_roots(self) -> list[str]:
        """Folders watched without recursion: parents of single files and of every root."""
        wanted = [os.path.dirname(f) for f in self.memory_files]
        wanted += [os.path.dirname(d) for d in self.memory_dirs]
        if self.sessions_dir:
            wanted.append(os.path.dirname(self.sessions_dir))
        wanted.append(self.workspace)
        return [d for d in dict.fromkeys(wanted) if os.path.isdir(d)]

    def all_roots(self) -> set[str]:
        roots = set(self.memory_dirs)
        if self.sessions_dir:
            roots.add(self.sessions_dir)
        return roots


def _drop_nested(paths: Sequence[str]) -> list[str]:
    out: list[str] = []
    for p in sorted(set(paths), key=len):
        if not any(p == q or p.startswith(q.rstrip(os.sep) + os.sep) for q in out):
            out.append(p)
    return out


def _within(path: str, root: str) -> str | None:
    """The path relative to root, or None when it is outside."""
    prefix = root.rstrip(os.sep) + os.sep
    if path.startswith(prefix):
        return path[len(prefix):]
    return None


def classify_event(targets: WatchTargets, change: str, path: str) -> WatchEvent | None:
    """Map one raw filesystem change to a :class:`WatchEvent`, or None when it is ignored."""
    if path in targets.all_roots():
        return WatchEvent(KIND_ROOT, change, path)
    if path in targets.memory_files:
        return WatchEvent(KIND_MEMORY, change, path)
    if targets.sessions_dir:
        rel = _within(path, targets.sessions_dir)
        if rel is not None:
            if os.sep in rel or not is_transcript_name(rel):
                return None
            return WatchEvent(KIND_SESSION, change, path)
    for root in targets.memory_dirs:
        rel = _within(path, root)
        if rel is None:
            continue
        parts = rel.split(os.sep)
        if any(part in IGNORED_SEGMENTS for part in parts):
            return None
        if path.endswith(".md"):
            return WatchEvent(KIND_MEMORY, change, path)
        if change == "deleted":
            # A vanished folder (unlinkDir) gives one event for the folder, none for its files.
            return WatchEvent(KIND_TREE, change, path) if "." not in parts[-1] else None
        if os.path.isdir(path) and not os.path.islink(path):
            return WatchEvent(KIND_TREE, change, path)
        return None
    return None


_CHANGE_NAMES = {watchfiles.Change.added: "added", watchfiles.Change.modified: "modified", watchfiles.Change.deleted: "deleted"}


@dataclass
class _Group:
    name: str
    roots: list[str]
    recursive: bool
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None


class MemoryWatcher:
    """watchfiles threads over the memory sources; ``on_events(list[WatchEvent])`` gets each batch.

    ``on_restart()`` is called after every (re)start so the caller can reconcile what a gap may
    have missed. ``state`` is one of ``stopped``, ``running``, ``restarting``, ``dead``.
    """

    def __init__(
        self,
        targets: WatchTargets,
        on_events: Callable[[list[WatchEvent]], None],
        *,
        on_restart: Callable[[str], None] | None = None,
        step_ms: int = 50,
        batch_ms: int = 100,
        rust_timeout_ms: int = 5000,
        backoff_s: tuple[float, float] = (0.2, 30.0),
        force_polling: bool | None = None,
        name: str = "main",
    ) -> None:
        self.targets = targets
        self._on_events = on_events
        self._on_restart = on_restart
        self._step_ms = step_ms
        self._batch_ms = batch_ms
        self._rust_timeout_ms = rust_timeout_ms
        self._backoff = backoff_s
        self._force_polling = force_polling
        self._name = name
        self._lock = threading.RLock()
        self._groups: list[_Group] = []
        self._state = "stopped"
        self._wanted = False
        self.restarts = 0
        self.errors = 0
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self.last_event_at: float | None = None
        self.started_at: float | None = None
        self.events_seen = 0
        self._ready = threading.Event()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, *, wait: bool = True, timeout: float = 5.0) -> None:
        """Start watching; with ``wait`` return once the OS watches are registered."""
        with self._lock:
            self._wanted = True
            self._start_groups()
        if wait:
            self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 5.0) -> bool:
        """Wait until every watch thread registered its OS watches (watchfiles has no callback for
        that, so this waits for the threads to enter the watch loop plus one step)."""
        ok = self._ready.wait(timeout)
        time.sleep(max(0.05, self._step_ms / 1000 * 2))
        return ok

    def stop(self, timeout: float = 5.0) -> None:
        with self._lock:
            self._wanted = False
            groups = list(self._groups)
            self._groups = []
            self._state = "stopped"
        for g in groups:
            g.stop.set()
        me = threading.current_thread()
        for g in groups:
            if g.thread is not None and g.thread is not me:
                g.thread.join(timeout)

    def restart(self, reason: str = "restart") -> None:
        """Stop the current watch threads and start new ones over freshly computed roots."""
        with self._lock:
            if not self._wanted:
                return
            old = list(self._groups)
            for g in old:
                g.stop.set()
            self.restarts += 1
            log.info("memory watcher restart (%s)", reason)
            self._start_groups()
        if self._on_restart is not None:
            self._on_restart(reason)

    def kill(self) -> None:
        """Simulate a crash: end the watch threads without telling anyone and without restart.

        Only for tests and the freshness benchmark; :meth:`healthy` turns False once the threads end.
        """
        with self._lock:
            groups = list(self._groups)
        for g in groups:
            g.stop.set()
        for g in groups:
            if g.thread is not None and g.thread is not threading.current_thread():
                g.thread.join(5)

    def _start_groups(self) -> None:
        self._ready.clear()
        groups = []
        rec = self.targets.recursive_roots()
        if rec:
            groups.append(_Group("recursive", rec, True))
        flat = self.targets.flat_roots()
        if flat:
            groups.append(_Group("flat", flat, False))
        self._groups = groups
        self._state = "running"
        self.started_at = time.time()
        self._pending_ready = len(groups)
        if not groups:
            self._ready.set()
        for g in groups:
            g.thread = threading.Thread(
                target=self._run_group, args=(g,), name=f"memory-core-watch-{self._name}-{g.name}", daemon=True
            )
            g.thread.start()

    # -- state ---------------------------------------------------------------------------------

    @property
    def state(self) -> str:
        with self._lock:
            if not self._wanted:
                return "stopped"
            if self._state == "running" and not self._threads_alive():
                return "dead"
            return self._state

    def healthy(self) -> bool:
        return self.state == "running"

    def _threads_alive(self) -> bool:
        return all(g.thread is not None and g.thread.is_alive() for g in self._groups)

    def thread_idents(self) -> list[int]:
        with self._lock:
            return [g.thread.native_id for g in self._groups if g.thread is not None and g.thread.native_id]

    def status(self) -> dict:
        with self._lock:
            return {
                "state": self.state,
                "roots": sorted({r for g in self._groups for r in g.roots}),
                "restarts": self.restarts,
                "errors": self.errors,
                "lastError": self.last_error,
                "lastErrorAt": self.last_error_at,
                "lastEventAt": self.last_event_at,
                "startedAt": self.started_at,
                "events": self.events_seen,
            }

    # -- the watch loop --------------------------------------------------------------------------

    def _filter(self, change: watchfiles.Change, path: str) -> bool:
        return classify_event(self.targets, _CHANGE_NAMES[change], path) is not None

    def _run_group(self, group: _Group) -> None:
        delay = self._backoff[0]
        first = True
        while not group.stop.is_set():
            try:
                if first:
                    first = False
                    with self._lock:
                        self._pending_ready -= 1
                        if self._pending_ready <= 0:
                            self._ready.set()
                for changes in watchfiles.watch(
                    *group.roots,
                    watch_filter=self._filter,
                    debounce=self._batch_ms,
                    step=self._step_ms,
                    stop_event=group.stop,
                    rust_timeout=self._rust_timeout_ms,
                    recursive=group.recursive,
                    raise_interrupt=False,
                    force_polling=self._force_polling,
                    ignore_permission_denied=True,
                ):
                    delay = self._backoff[0]
                    self._deliver(group, changes)
                if not group.stop.is_set():
                    raise RuntimeError("watch ended unexpectedly")
            except Exception as exc:  # noqa: BLE001 - a watcher error must never end the watch for good
                if group.stop.is_set():
                    break
                with self._lock:
                    self.errors += 1
                    self.last_error = f"{type(exc).__name__}: {exc}"
                    self.last_error_at = time.time()
                    self._state = "restarting"
                log.warning("memory watcher (%s) failed: %s; restarting in %.1fs", group.name, exc, delay)
                if group.stop.wait(delay):
                    break
                delay = min(self._backoff[1], delay * 2)
                # Roots may have changed (e.g. a watched folder vanished): recompute them.
                with self._lock:
                    group.roots = (self.targets.recursive_roots() if group.recursive else self.targets.flat_roots())
                    self.restarts += 1
                    if self._state == "restarting":
                        self._state = "running"
                if self._on_restart is not None:
                    try:
                        self._on_restart("error")
                    except Exception:
                        log.exception("memory watcher on_restart hook failed")
                if not group.roots:
                    break

    def _deliver(self, group: _Group, changes: set[tuple[watchfiles.Change, str]]) -> None:
        events = []
        root_changed = False
        for change, path in changes:
            ev = classify_event(self.targets, _CHANGE_NAMES[change], path)
            if ev is None:
                continue
            events.append(ev)
            if ev.kind == KIND_ROOT:
                root_changed = True
        if not events:
            return
        with self._lock:
            self.last_event_at = time.time()
            self.events_seen += len(events)
        events.sort(key=lambda e: e.path)
        # Errors in the consumer propagate: the loop records them and restarts the watch.
        self._on_events(events)
        if root_changed:
            # A root came or went: the recursive watch must be rebuilt over the new set of roots.
            threading.Thread(target=self.restart, args=("root changed",), daemon=True).start()
