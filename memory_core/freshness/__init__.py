"""Keep the index fresh while serving: dirty state, debounce, interval, bounded reconcile, one
sync at a time (spec §1.3-1.4, §6.1 steps 3 and 5; provider-runtime §3.3).

Three parts: this module's :class:`Freshness` is the scheduling (what is behind, when to sync or
reconcile); :mod:`memory_core.freshness.sessions` decides when an appended transcript is worth a
sync; :mod:`memory_core.freshness.report` words the staleness report of an answer.

:class:`Freshness` is the per-agent sync scheduler. It is fed by the watcher
(:mod:`memory_core.watcher`) and by searches (:meth:`Freshness.before_search`), and it runs syncs
through one callable, ``sync_fn(paths, reason, force)``, on its own thread, one at a time;
requests made while a sync runs join it (when it covers them) or are merged into the next one.

What makes the index "behind" is tracked explicitly: the dirty paths (memory files from watch
events, transcripts past their delta thresholds, archives at once), a "full" flag (a folder came or
went, a watcher restart, the index file replaced by another process), the paths the running sync
is publishing, and the files whose publish failed (retried with backoff until it succeeds). A file
counts as published ("verified") only when its sync succeeded for it and it did not change while
being synced. A search reports ``stale``/``warning``/``action`` while anything is behind, while the
index identity is paused, or while the last sync failed.

Cost: with a healthy watcher a search does no filesystem walk. Without one (a library
``MemoryCore``, a one-shot CLI) a search runs the reconcile (stat of every source) at most once per
``reconcile_interval_s``; the searches in between only read the index.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from memory_core.errors import IndexUnreadable, reason_of
from memory_core.freshness import report
from memory_core.freshness.sessions import SessionDeltas, is_session_path
from memory_core.sources import stat_matches
from memory_core.watcher import (
    KIND_MEMORY,
    KIND_ROOT,
    KIND_SESSION,
    KIND_TREE,
    MemoryWatcher,
    WatchEvent,
    WatchTargets,
    is_session_archive,
)

log = logging.getLogger(__name__)

FULL_RECONCILE_INTERVAL_S = 15 * 60   # SESSION_PRUNE_RECONCILE_INTERVAL_MS

__all__ = ["Freshness", "FreshnessSettings", "watch_fallback"]


def watch_fallback(core: Any) -> str | None:
    """Why the agent's changes are found by the reconcile instead of a file watch (the kernel refused
    one), or None when it is watched or not served."""
    fresh = getattr(core, "_freshness", None)
    watcher = getattr(fresh, "watcher", None)
    if watcher is None or watcher.state != "reconcile":
        return None
    return watcher.status().get("fallback") or "the file watch was refused"

# problem codes of a file whose publish failed (its previous rows kept): retried, reported as stale
RETRIED_PROBLEMS = ("publish_failed", "prepare_failed")

SyncFn = Callable[[Sequence[str] | None, str, bool], Any]
# abs path -> (mtime_ms | None, size | None) of every indexed source (memory and sessions)
IndexedFn = Callable[[], dict[str, tuple[float | None, int | None]]]
# -> (memory file abs paths, transcript abs paths) as the next sync would enumerate them
ListFn = Callable[[], tuple[list[str], list[str]]]


@dataclass(frozen=True)
class FreshnessSettings:
    """The ``sync.*`` keys (spec §10) plus memory-core's own timing knobs."""

    watch: bool = True
    watch_debounce_ms: int = 1500
    interval_minutes: float = 0.0
    on_search: bool = True
    delta_bytes: int = 100_000
    delta_messages: int = 50
    full_reconcile_s: float = FULL_RECONCILE_INTERVAL_S
    reconcile_min_interval_s: float = 1.0     # throttle of the pre-search reconcile while the watcher is healthy
    reconcile_interval_s: float = 2.0         # without a watcher: a search reconciles at most this often
    health_check_s: float = 30.0              # background watcher check + cheap reconcile
    retry_backoff_s: tuple[float, float] = (2.0, 300.0)

    @classmethod
    def from_config(cls, config: Any, **overrides: Any) -> FreshnessSettings:
        sync = config.sync
        values: dict[str, Any] = {
            "watch": bool(sync.watch),
            "watch_debounce_ms": int(sync.watch_debounce_ms),
            "interval_minutes": float(sync.interval_minutes or 0),
            "on_search": bool(sync.on_search),
            "delta_bytes": int(sync.sessions.delta_bytes),
            "delta_messages": int(sync.sessions.delta_messages),
            "reconcile_interval_s": float(sync.reconcile_interval_ms) / 1000.0,
        }
        values.update(overrides)
        return cls(**values)


@dataclass
class _Job:
    paths: set[str] | None            # None = full enumeration
    reasons: list[str]
    force: bool = False
    include_dirty: bool = False
    future: Future = field(default_factory=Future)
    known_changed: set[str] = field(default_factory=set)
    full_changed: bool = False
    started_at: float | None = None
    epoch: int = 0                     # Freshness._epoch when it started (an invalidation voids its stats)

    def covers(self, paths: set[str] | None, force: bool) -> bool:
        if force and not self.force:
            return False
        if self.paths is None:
            return True
        return paths is not None and paths <= self.paths


def _stat(path: str) -> tuple[float, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns / 1e6, st.st_size)


class Freshness:
    """The per-agent sync scheduler; see the module docstring. Thread-safe."""

    def __init__(
        self,
        *,
        sync_fn: SyncFn,
        indexed_fn: IndexedFn,
        list_fn: ListFn,
        targets: WatchTargets,
        settings: FreshnessSettings | None = None,
        agent_id: str = "main",
        paused_fn: Callable[[], str | None] | None = None,
        forgotten_fn: Callable[[], Iterable[str]] | None = None,
        skipped_fn: IndexedFn | None = None,
        action_command: str = "memory-core index",
        on_dirty: Callable[[bool], None] | None = None,
        abs_fn: Callable[[str], str] | None = None,
    ) -> None:
        self.settings = settings or FreshnessSettings()
        self.agent_id = agent_id
        self.targets = targets
        self._sync_fn = sync_fn
        self._indexed_fn = indexed_fn
        self._list_fn = list_fn
        self._paused_fn = paused_fn
        self._forgotten_fn = forgotten_fn
        self._skipped_fn = skipped_fn
        self._action_command = action_command
        self._on_dirty = on_dirty
        self._abs_fn = abs_fn or (lambda rel: os.path.abspath(os.path.join(targets.workspace, rel)))

        self._cond = threading.Condition(threading.RLock())
        self._dirty_paths: set[str] = set()
        self._dirty_full = False
        self._dirty_reasons: set[str] = set()
        self._debounce_deadline: float | None = None
        self._retry_deadline: float | None = None
        self._retry_delay = self.settings.retry_backoff_s[0]
        self._next_interval: float | None = None
        self._next_health: float | None = None
        self._queued: _Job | None = None
        self._running: _Job | None = None
        self._sessions = SessionDeltas(self.settings.delta_bytes, self.settings.delta_messages)
        self._verified: dict[str, tuple[float, int] | None] = {}
        self._problems: dict[str, str] = {}   # abs path -> why its last publish failed (dirty, retried)
        self._epoch = 0                       # bumped by invalidate(): verified stats before it are void
        self._forgotten: set[str] = set()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._bootstrapped = False
        self._last_reconcile = 0.0
        self._reconciled_once = False
        self._reconcile_due = False
        self._last_enumeration: float | None = None  # last full listing: a full sync or a cheap reconcile
        self._watcher_was_dead = False

        self.watcher: MemoryWatcher | None = None
        self.last_sync_at: float | None = None
        self.last_sync_reason: str | None = None
        self.last_sync_error: str | None = None
        self.last_sync_error_at: float | None = None
        self.last_sync_exception: BaseException | None = None  # what the last sync raised (None: it worked)
        self.last_full_sync_at: float | None = None       # monotonic
        self.last_full_sync_wall: float | None = None
        self.sync_count = 0
        self.last_reconcile_at: float | None = None
        self.sync_log: deque[dict] = deque(maxlen=200)

    # ------------------------------------------------------------------ construction from MemoryCore

    @classmethod
    def for_core(cls, core: Any, settings: FreshnessSettings | None = None) -> Freshness:
        """A scheduler over a :class:`memory_core.core.MemoryCore` (see :mod:`memory_core.freshness.binding`)."""
        from memory_core.freshness.binding import freshness_for_core

        return freshness_for_core(cls, core, settings)

    # ------------------------------------------------------------------ lifecycle

    def start(self, *, watch: bool | None = None, catch_up: bool = True) -> Freshness:
        """Start the scheduler thread, the watcher (``sync.watch``) and the startup catch-up."""
        self._ensure_thread()
        now = time.monotonic()
        with self._cond:
            if self.settings.interval_minutes > 0 and self._next_interval is None:
                self._next_interval = now + self.settings.interval_minutes * 60
            self._next_health = now + self.settings.health_check_s
        self._seed_session_offsets()
        want_watch = self.settings.watch if watch is None else watch
        if want_watch and self.watcher is None:
            from memory_core.watch_hub import make_watcher

            self.watcher = make_watcher(
                self.targets, self.on_watch_events, on_restart=self._on_watcher_restart, name=self.agent_id
            )
            self.watcher.start()
        if catch_up:
            # Startup catch-up: compare on-disk size/mtime with the indexed rows (spec §1.3).
            changed = self.reconcile(sessions_by_delta=False, reason="startup")
            if changed:
                self._schedule(now=True)
        with self._cond:
            self._cond.notify_all()
        return self

    def close(self, timeout: float = 30.0) -> None:
        """Stop the watcher and the scheduler; waits for a running sync to finish."""
        if self.watcher is not None:
            self.watcher.stop()
        with self._cond:
            self._closed = True
            queued, self._queued = self._queued, None
            self._cond.notify_all()
        if queued is not None and not queued.future.done():
            queued.future.cancel()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _ensure_thread(self) -> None:
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                if self._closed:
                    return
                self._thread = threading.Thread(
                    target=self._loop, name=f"memory-core-freshness-{self.agent_id}", daemon=True
                )
                self._thread.start()

    # ------------------------------------------------------------------ inputs: watcher events

    def on_watch_events(self, events: list[WatchEvent]) -> None:
        """Watcher callback: mark paths dirty and restart the debounce (every event restarts it)."""
        marked = False
        for ev in events:
            if ev.kind == KIND_MEMORY:
                marked |= self._mark(ev.path, "watch")
            elif ev.kind in (KIND_TREE, KIND_ROOT):
                marked |= self._mark(None, "watch")
            elif ev.kind == KIND_SESSION:
                marked |= self._session_event(ev.path, deleted=ev.change == "deleted")
        if marked:
            self._schedule()

    def _on_watcher_restart(self, reason: str) -> None:
        # Events may have been lost between the old and the new watch: reconcile everything.
        changed = self.reconcile(sessions_by_delta=True)
        if changed:
            self._schedule()

    def mark_dirty(self, paths: Iterable[str] | None = None, *, reason: str = "manual") -> None:
        """Mark paths (absolute) or, with None, everything dirty and schedule a debounced sync."""
        if paths is None:
            self._mark(None, reason)
        else:
            for p in paths:
                self._mark(os.path.abspath(p), reason)
        self._schedule()

    def _mark(self, path: str | None, reason: str) -> bool:
        with self._cond:
            if path is None:
                self._dirty_full = True
            else:
                self._dirty_paths.add(path)
            self._dirty_reasons.add(reason)
        return True

    def _schedule(self, *, now: bool = False) -> None:
        self._ensure_thread()
        with self._cond:
            delay = 0.0 if now else self.settings.watch_debounce_ms / 1000.0
            self._debounce_deadline = time.monotonic() + delay
            self._cond.notify_all()
        self._notify_dirty()

    def _notify_dirty(self) -> None:
        if self._on_dirty is not None:
            try:
                self._on_dirty(self.is_dirty())
            except Exception:
                log.exception("freshness on_dirty hook failed")

    # ------------------------------------------------------------------ session deltas

    def _session_event(self, path: str, *, deleted: bool) -> bool:
        """Account appended bytes/newlines of a transcript; True when it became dirty."""
        with self._cond:
            if path in self._forgotten:
                return False  # tombstoned: a sync would refuse it anyway
        if is_session_archive(path):
            return self._mark(path, "session-archive")
        st = None if deleted else _stat(path)
        with self._cond:
            already = path in self._dirty_paths
        why = self._sessions.on_change(path, st, already_dirty=already)
        if why is not None:
            return self._mark(path, why)
        if already:
            self._mark(path, "session-delta")
        return False

    def _seed_session_offsets(self) -> None:
        """Baseline offsets: a transcript's indexed size (its content up to there is in the index)."""
        if not self.targets.sessions_dir:
            return
        try:
            indexed = self._indexed_fn()
        except Exception:  # noqa: BLE001 - an unreadable index just means no baseline
            return
        self._sessions.seed(indexed, self.targets.sessions_dir.rstrip(os.sep) + os.sep)

    def _is_session_path(self, path: str) -> bool:
        return is_session_path(path, self.targets.sessions_dir, is_session_archive(path))

    def session_deltas(self) -> dict[str, dict[str, int]]:
        return self._sessions.pending()

    def forget_path(self, indexed_path: str) -> None:
        """A session was forgotten: stop tracking it (its tombstone keeps it out of the index)."""
        sd = self.targets.sessions_dir
        if not sd:
            return
        path = os.path.join(sd, os.path.basename(indexed_path))
        self._sessions.forget(path)
        with self._cond:
            self._forgotten.add(path)
            self._dirty_paths.discard(path)
            self._problems.pop(path, None)
            self._verified[path] = _stat(path)

    def invalidate(self, reason: str) -> None:
        """Everything published so far may be gone (the index file was replaced by another process):
        forget what was verified, mark everything dirty and sync (a full pass compares every file)."""
        log.warning("memory freshness (%s): %s; re-checking every file", self.agent_id, reason)
        with self._cond:
            self._epoch += 1
            self._verified = {}
            self._dirty_full = True
            self._dirty_reasons.add("index-replaced")
        self._schedule(now=True)

    # ------------------------------------------------------------------ cheap reconcile

    def reconcile(self, *, sessions_by_delta: bool = True, reason: str = "reconcile", strict: bool = False) -> list[str]:
        """Stat the indexed sources and list the watched folders; mark what the watcher missed.

        Returns the paths found changed (absolute; ``"*"`` when the listing changed shape).
        Memory files are compared by size and mtime against the indexed row, against the stat
        recorded after a sync that covered them in this process, or against the stat a sync
        skipped them under (recorded in the index), so unindexable or forgotten files do not stay
        dirty. Transcripts with ``sessions_by_delta`` go through the delta thresholds instead.
        ``strict``: an index file that cannot be read raises (:class:`IndexUnreadable`) instead.
        """
        self._last_reconcile = time.monotonic()
        self.last_reconcile_at = time.time()
        try:
            indexed = self._indexed_fn()
            memory, sessions = self._list_fn()
            forgotten = set(self._forgotten_fn()) if self._forgotten_fn else set()
            skipped = self._skipped_fn() if self._skipped_fn else {}
        except Exception as exc:  # a failed listing must never prune, only mark dirty
            if strict and isinstance(exc, IndexUnreadable):
                raise
            log.warning("memory reconcile failed: %s", exc)
            self._mark(None, "reconcile-failed")
            return ["*"]
        with self._cond:
            self._forgotten |= forgotten
            verified = dict(self._verified)
        changed: list[str] = []
        current = set(memory) | set(sessions)
        session_set = set(sessions)
        for path in sorted(current):
            st = _stat(path)
            if st is None:
                if path in indexed:
                    changed.append(path)
                continue
            if path in forgotten:
                continue
            if path in verified and verified[path] is not None and stat_matches(verified[path], st):
                continue
            row = indexed.get(path)
            if row is not None and stat_matches(row, st):
                continue
            if path in skipped and stat_matches(skipped[path], st):
                continue  # the last sync that read it skipped it as it is now: a problem, not a change
            if path in session_set and sessions_by_delta and not is_session_archive(path):
                if self._sessions.unseen(path, st[1]) and self._session_event(path, deleted=False):
                    changed.append(path)
                continue
            changed.append(path)
        for path in indexed:
            if path not in current and path not in verified or path not in current and verified.get(path) is not None:
                changed.append(path)
        for path in changed:
            self._mark(path, reason)
        with self._cond:
            # A successful listing plus stat of everything is a full enumeration: what it found
            # (including deletions) is now dirty, and targeted syncs publish and prune it.
            self._last_enumeration = self._last_reconcile
        return changed

    # ------------------------------------------------------------------ sync requests

    def request_sync(
        self, paths: Iterable[str] | None = None, *, reason: str = "manual", force: bool = False,
        include_dirty: bool = True,
    ) -> Future:
        """Queue a sync (None = full); joins the running sync when it already covers the request."""
        want = None if paths is None else {os.path.abspath(p) for p in paths}
        self._ensure_thread()
        with self._cond:
            if self._closed:
                fut: Future = Future()
                fut.set_exception(RuntimeError("memory freshness scheduler is closed"))
                return fut
            running = self._running
            if running is not None and not include_dirty and running.covers(want, force):
                return running.future
            job = self._queued
            if job is None:
                job = self._queued = _Job(paths=set() if want is not None else None, reasons=[])
            if want is None:
                job.paths = None
            elif job.paths is not None:
                job.paths |= want
            job.force = job.force or force
            job.include_dirty = job.include_dirty or include_dirty
            if reason not in job.reasons:
                job.reasons.append(reason)
            self._cond.notify_all()
            return job.future

    def sync_now(self, paths: Iterable[str] | None = None, *, reason: str = "manual", force: bool = False,
                 timeout: float | None = None) -> Any:
        """Request a sync and wait for it; returns the sync's result (raises its error)."""
        return self.request_sync(paths, reason=reason, force=force).result(timeout)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until nothing is dirty, queued or running (True) or the timeout passes (False)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._running is not None or self._queued is not None or self._is_dirty_locked():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
            return True

    # ------------------------------------------------------------------ the scheduler thread

    def _loop(self) -> None:
        while True:
            job = self._next_job()
            if job is None:
                return
            if job is _HEALTH:
                self._health_tick()
                continue
            if job is _RECONCILE:
                try:
                    if self.reconcile(sessions_by_delta=True):
                        self._schedule(now=self.settings.on_search)
                except Exception:
                    log.exception("memory reconcile failed")
                continue
            self._run_job(job)

    def _next_job(self) -> Any:
        with self._cond:
            while True:
                if self._closed:
                    return None
                now = time.monotonic()
                job: _Job | None = None
                if self._queued is not None:
                    job, self._queued = self._queued, None
                elif self._debounce_deadline is not None and now >= self._debounce_deadline:
                    self._debounce_deadline = None
                    if self._is_dirty_locked():
                        job = _Job(paths=set(), reasons=sorted(self._dirty_reasons) or ["watch"], include_dirty=True)
                elif self._reconcile_due:
                    self._reconcile_due = False
                    return _RECONCILE
                elif self._retry_deadline is not None and now >= self._retry_deadline:
                    self._retry_deadline = None
                    if self._is_dirty_locked() or self._problems:
                        job = _Job(paths=set(self._problems), reasons=["retry", *sorted(self._dirty_reasons)],
                                   include_dirty=True)
                elif self._next_interval is not None and now >= self._next_interval:
                    self._next_interval = now + self.settings.interval_minutes * 60
                    job = _Job(paths=None, reasons=["interval"], include_dirty=True)
                elif self._next_health is not None and now >= self._next_health:
                    self._next_health = now + self.settings.health_check_s
                    return _HEALTH
                if job is not None:
                    self._materialize(job, now)
                    self._running = job
                    return job
                deadlines = [d for d in (self._debounce_deadline, self._retry_deadline, self._next_interval,
                                         self._next_health) if d is not None]
                self._cond.wait(max(0.0, min(deadlines) - now) if deadlines else None)

    def _materialize(self, job: _Job, now: float) -> None:
        if job.include_dirty:
            job.known_changed = set(self._dirty_paths)
            job.full_changed = self._dirty_full
            if job.paths is not None:
                job.paths |= self._dirty_paths
            if self._dirty_full:
                job.paths = None
            self._dirty_paths.clear()
            self._dirty_full = False
            self._dirty_reasons.clear()
            self._debounce_deadline = None
        if job.paths and (
            self._last_enumeration is None or now - self._last_enumeration >= self.settings.full_reconcile_s
        ):
            # Targeted syncs never go longer than 15 minutes without a full enumeration (which prunes).
            job.paths = None
        job.started_at = now
        job.epoch = self._epoch

    def _run_job(self, job: _Job) -> None:
        reason = ",".join(job.reasons) or "sync"
        if job.paths is not None and not job.paths and not job.force:
            # Nothing left to do (another sync took the dirty paths first).
            with self._cond:
                self._running = None
                self._cond.notify_all()
            job.future.set_result(None)
            return
        if job.paths is None:
            try:
                memory, sessions = self._list_fn()
                covered = set(memory) | set(sessions)
            except Exception:  # noqa: BLE001
                covered = set()
            covered |= job.known_changed
        else:
            covered = set(job.paths)
        before = {p: _stat(p) for p in covered}
        t0 = time.monotonic()
        error: BaseException | None = None
        result: Any = None
        try:
            result = self._sync_fn(None if job.paths is None else sorted(job.paths), reason, job.force)
        except BaseException as exc:  # noqa: BLE001 - recorded and re-raised through the future
            error = exc
        took = time.monotonic() - t0
        with self._cond:
            self.sync_count += 1
            entry = {"reason": reason, "full": job.paths is None, "paths": None if job.paths is None else len(job.paths),
                     "force": job.force, "ms": round(took * 1000, 1), "ok": error is None, "at": time.time()}
            self.sync_log.append(entry)
            if error is None:
                self.last_sync_at = time.time()
                self.last_sync_reason = reason
                self.last_sync_error = None
                self.last_sync_error_at = None
                self.last_sync_exception = None
                if job.paths is None:
                    self.last_full_sync_at = job.started_at
                    self._last_enumeration = job.started_at
                    self.last_full_sync_wall = self.last_sync_at
                    if job.epoch == self._epoch:
                        self._verified = {}
                self._settle(job, before, self._failed_paths(result))
                self._bootstrapped = True
            else:
                self.last_sync_error = reason_of(error)
                self.last_sync_exception = error
                self.last_sync_error_at = time.time()
                # Whatever this sync was publishing is still behind: keep it dirty and retry later.
                self._dirty_paths |= job.known_changed
                if job.full_changed or job.paths is None:
                    self._dirty_full = self._dirty_full or job.full_changed
                if job.paths is not None:
                    self._dirty_paths |= job.paths
                self._retry_deadline = time.monotonic() + self._retry_delay
                self._retry_delay = min(self.settings.retry_backoff_s[1], self._retry_delay * 2)
                log.warning("memory sync (%s) failed: %s", reason, error)
            self._running = None
            self._cond.notify_all()
        self._notify_dirty()
        if error is None:
            job.future.set_result(result)
        else:
            job.future.set_exception(error)

    def _failed_paths(self, result: Any) -> dict[str, str]:
        """Absolute path -> message of every file a sync could not publish (its old rows were kept)."""
        out: dict[str, str] = {}
        for p in getattr(result, "problems", None) or []:
            if isinstance(p, dict) and p.get("code") in RETRIED_PROBLEMS and p.get("path"):
                out[self._abs_fn(str(p["path"]))] = str(p.get("message") or p["code"])
        return out

    def _settle(self, job: _Job, before: dict[str, tuple[float, int] | None], failed: dict[str, str]) -> None:
        """After a sync that returned (lock held): a covered file is verified only when its publish
        succeeded and it did not change while being synced, and only when no invalidation came in
        between; a failed one is retried with backoff, a changed one synced again."""
        current = job.epoch == self._epoch
        again = False
        for p, st in before.items():
            if p in failed:
                self._problems[p] = failed[p]
                self._verified.pop(p, None)
                continue
            self._problems.pop(p, None)
            if _stat(p) != st:
                self._dirty_paths.add(p)  # changed during its own sync: what was published is older
                self._dirty_reasons.add("changed-during-sync")
                self._verified.pop(p, None)
                again = True
                continue
            if current:
                self._verified[p] = st
            self._sessions.synced(p, st, is_session=self._is_session_path(p))
        for p, message in failed.items():
            self._problems.setdefault(p, message)
        if failed:
            log.warning("memory sync: %d file(s) could not be published; retrying in %.0f s",
                        len(failed), self._retry_delay)
            self._retry_deadline = time.monotonic() + self._retry_delay
            self._retry_delay = min(self.settings.retry_backoff_s[1], self._retry_delay * 2)
        elif not self._problems:
            self._retry_delay = self.settings.retry_backoff_s[0]
        if again:
            self._debounce_deadline = time.monotonic() + self.settings.watch_debounce_ms / 1000.0
            self._cond.notify_all()

    def _health_tick(self) -> None:
        try:
            self.check_watcher()
            if self.reconcile(sessions_by_delta=True):
                self._schedule()
        except Exception:
            log.exception("memory freshness health check failed")

    # ------------------------------------------------------------------ search hooks

    def watching(self) -> bool:
        """A watcher runs and is healthy: it reports changes, so no reconcile is needed to find them."""
        return self.watcher is not None and self.watcher.healthy()

    def check_watcher(self) -> bool:
        """Restart a watcher that died; True when it had to be restarted."""
        w = self.watcher
        if w is None:
            return False
        state = w.state
        if state in ("dead",):
            self._watcher_was_dead = True
            w.restart("watcher found dead")
            return True
        return False

    def before_search(self) -> dict | None:
        """Run before every search: notice a dead watcher, cheap reconcile, bootstrap an empty
        index (forced sync, waited for), start a background sync when dirty (not waited for).

        Returns the staleness of the index *as this search will see it*, or None when fresh.
        """
        restarted = self.check_watcher()
        healthy = self.watching() and not restarted
        if not healthy:
            # No watcher (or it just died): only a reconcile can tell whether this answer is stale.
            # It stats every source, so it runs at most once per reconcile_interval_s (and at once
            # for the first search and after a watcher death); the searches in between only read.
            # An unreadable index file is this search's error, not something a sync can fix.
            due = time.monotonic() - self._last_reconcile >= self.settings.reconcile_interval_s
            if restarted or not self._reconciled_once or due:
                self.reconcile(sessions_by_delta=True, strict=True)
                self._reconciled_once = True
        elif time.monotonic() - self._last_reconcile >= self.settings.reconcile_min_interval_s:
            # The watcher is up: re-check for missed events in the background, at most once per
            # interval, so searches do not pay for a listing.
            self._last_reconcile = time.monotonic()
            self._ensure_thread()
            with self._cond:
                self._reconcile_due = True
                self._cond.notify_all()
        if not self._bootstrapped:
            try:
                # A file a sync skipped shows the index was built, even when nothing could be indexed.
                indexed = self._indexed_fn() or (self._skipped_fn() if self._skipped_fn else {})
            except IndexUnreadable:
                raise
            except Exception:  # noqa: BLE001
                indexed = {}
            if not indexed:
                memory, sessions = self._safe_list()
                if memory or sessions:
                    try:
                        self.request_sync(None, reason="search", force=True).result()
                    except IndexUnreadable:
                        raise
                    except Exception as exc:  # noqa: BLE001 - recorded in last_sync_error; reported as stale
                        log.warning("bootstrap sync failed: %s", exc)
            self._bootstrapped = True
        # The answer's staleness is taken before the background sync starts: the search does not
        # wait for it, so it must say that it may not see the newest content.
        stale = self.staleness()
        if self.settings.on_search and self.is_dirty():
            self.request_sync([], reason="search")
        return stale

    def _safe_list(self) -> tuple[list[str], list[str]]:
        try:
            return self._list_fn()
        except Exception:  # noqa: BLE001
            return [], []

    # ------------------------------------------------------------------ state

    def _is_dirty_locked(self) -> bool:
        return bool(self._dirty_paths) or self._dirty_full

    def is_dirty(self) -> bool:
        with self._cond:
            return self._is_dirty_locked()

    def is_behind(self) -> bool:
        """Dirty, or a sync is publishing changes right now."""
        with self._cond:
            running = self._running
            return self._is_dirty_locked() or (
                running is not None and (bool(running.known_changed) or running.full_changed)
            )

    def pending_paths(self) -> list[str]:
        with self._cond:
            out = set(self._dirty_paths)
            if self._running is not None:
                out |= self._running.known_changed
            return sorted(out)

    def staleness(self) -> dict | None:
        """Upstream ``resolveMemorySearchStaleness``: ``{stale: True, warning, action}`` or None
        (worded by :mod:`memory_core.freshness.report`)."""
        paused = None
        if self._paused_fn is not None:
            try:
                paused = self._paused_fn()
            except Exception as exc:  # noqa: BLE001
                paused = str(exc)
        with self._cond:
            problems = dict(self._problems)
        return report.staleness(paused=paused, sync_error=self.last_sync_error, problems=problems,
                                behind=self.is_behind(), action_command=self._action_command,
                                display=self.display)

    def status(self) -> dict:
        """Fields for ``memory-core status``: dirty, last sync, error, problems, pending paths, watcher."""
        return report.status(self)

    def snapshot(self) -> dict[str, Any]:
        """What is behind, in one consistent read (worded by :func:`report.status`)."""
        pending = self.pending_paths()
        with self._cond:
            return {"dirty": self._is_dirty_locked(), "behind": self.is_behind(), "full": self._dirty_full,
                    "pending": pending, "running": self._running is not None, "queued": self._queued is not None,
                    "problems": dict(self._problems)}

    def display(self, path: str) -> str:
        """``path`` as status shows it: workspace-relative, ``sessions/<name>`` for a transcript."""
        sd = self.targets.sessions_dir
        if sd and path.startswith(sd.rstrip(os.sep) + os.sep):
            return "sessions/" + os.path.basename(path)
        rel = os.path.relpath(path, self.targets.workspace)
        return rel.replace(os.sep, "/")


_HEALTH = object()
_RECONCILE = object()
