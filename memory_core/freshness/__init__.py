"""Keep the index fresh while serving: dirty state, debounce, interval, bounded reconcile, one
sync at a time (upstream `memory/manager-sync-ops.ts`, `memory/manager.ts`; `src/plugins/memory-runtime.ts`).

Three parts: this module's :class:`Freshness` is the scheduling (what is behind, when to sync or
reconcile); :mod:`memory_core.freshness.sessions` decides when an appended transcript is worth a
sync; :mod:`memory_core.freshness.report` words the staleness report of an answer.

:class:`Freshness` is the per-agent sync scheduler. It is fed by the watcher
(:mod:`memory_core.watcher`) and by searches (:meth:`Freshness.before_search`), and it runs syncs
through one callable, ``sync_fn(paths, reason, force)``, one at a time, on the process's few shared
freshness threads (:mod:`memory_core.freshness.runner`), never a thread of its own; requests made
while a sync runs join it (when it covers them) or are merged into the next one. The scheduling
decisions (dirty state, debounce, retries, intervals) are the pure :mod:`memory_core.freshness.policy`.

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
from typing import Any

from memory_core.errors import IndexUnreadable, reason_of
from memory_core.freshness import report
from memory_core.freshness.policy import HEALTH, RECONCILE, Job, SyncPolicy
from memory_core.freshness.reconcile import changed_sources, stat
from memory_core.freshness.runner import Runner
from memory_core.freshness.search_side import SearchSide
from memory_core.freshness.sessions import SessionDeltas, TranscriptTracking, is_session_path
from memory_core.freshness.settings import FreshnessSettings
from memory_core.watcher import KIND_MEMORY, KIND_ROOT, KIND_SESSION, KIND_TREE, WatchEvent, WatchTargets, is_session_archive

log = logging.getLogger(__name__)

__all__ = ["Freshness", "FreshnessSettings", "watch_fallback"]

# problem codes of a file whose publish failed (its previous rows kept): retried, reported as stale
RETRIED_PROBLEMS = ("publish_failed", "prepare_failed")

SyncFn = Callable[[Sequence[str] | None, str, bool], Any]
# abs path -> (mtime_ms | None, size | None) of every indexed source (memory and sessions)
IndexedFn = Callable[[], dict[str, tuple[float | None, int | None]]]
# -> (memory file abs paths, transcript abs paths) as the next sync would enumerate them
ListFn = Callable[[], tuple[list[str], list[str]]]


def watch_fallback(core: Any) -> str | None:
    """Why the agent's changes are found by the reconcile instead of a file watch (the kernel refused
    one), or None when it is watched or not served."""
    fresh = getattr(core, "_freshness", None)
    watcher = getattr(fresh, "watcher", None)
    if watcher is None or watcher.state != "reconcile":
        return None
    return watcher.status().get("fallback") or "the file watch was refused"


class Freshness(TranscriptTracking, SearchSide):
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
        runner: Runner | None = None,
        index_state_fn: Callable[[], tuple[dict, Iterable[str], dict]] | None = None,
    ) -> None:
        self.settings = s = settings or FreshnessSettings()
        self.agent_id = agent_id
        self.targets = targets
        self._sync_fn = sync_fn
        self._indexed_fn = indexed_fn
        self._list_fn = list_fn
        self._paused_fn = paused_fn
        self._forgotten_fn = forgotten_fn
        self._skipped_fn = skipped_fn
        self._index_state_fn = index_state_fn  # indexed, forgotten and skipped in one read (optional)
        self._action_command = action_command
        self._on_dirty = on_dirty
        self._abs_fn = abs_fn or (lambda rel: os.path.abspath(os.path.join(targets.workspace, rel)))
        self._runner = runner or Runner.shared()

        self._cond = threading.Condition(threading.RLock())
        self._policy = SyncPolicy(debounce_s=s.watch_debounce_ms / 1000.0, interval_s=s.interval_minutes * 60,
                                  health_s=s.health_check_s, full_reconcile_s=s.full_reconcile_s,
                                  retry_backoff_s=s.retry_backoff_s)
        self._sessions = SessionDeltas(s.delta_bytes, s.delta_messages)
        self._verified: dict[str, tuple[float, int] | None] = {}
        self._forgotten: set[str] = set()
        self._bootstrapped = False
        self._last_reconcile = 0.0
        self._reconciled_once = False

        self.watcher: Any = None
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
        """Plan the interval and health checks, subscribe the watcher (``sync.watch``) and run the
        startup catch-up."""
        with self._cond:
            self._policy.start(time.monotonic())
        self._seed_session_offsets()
        want_watch = self.settings.watch if watch is None else watch
        if want_watch and self.watcher is None:
            from memory_core.watch_hub import make_watcher

            self.watcher = make_watcher(
                self.targets, self.on_watch_events, on_restart=self._on_watcher_restart, name=self.agent_id
            )
            self.watcher.start()
        if catch_up:
            # Startup catch-up: compare on-disk size/mtime with the indexed rows (upstream
            # `memory/manager-sync-ops.ts`).
            if self.reconcile(sessions_by_delta=False, reason="startup"):
                self._schedule(now=True)
        self._wake()
        return self

    def close(self, timeout: float = 30.0) -> None:
        """Stop the watcher and the scheduling; waits for a running sync to finish."""
        if self.watcher is not None:
            self.watcher.stop()
        with self._cond:
            self._policy.close()
            queued, self._policy.queued = self._policy.queued, None
            self._cond.notify_all()
        self._runner.forget(self)
        if queued is not None and not queued.future.done():
            queued.future.cancel()
        if not self._runner.serving(self):
            deadline = time.monotonic() + timeout
            with self._cond:
                while self._policy.running is not None and time.monotonic() < deadline:
                    self._cond.wait(0.1)

    def due_at(self) -> float | None:
        """When this agent's next action is due (the runner's question)."""
        with self._cond:
            return self._policy.due_at()

    def _wake(self) -> None:
        """Deadlines moved: tell the waiters and the runner (never with the lock held while calling it)."""
        with self._cond:
            due = self._policy.due_at()
            self._cond.notify_all()
        self._runner.wake(self, due)

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
        if self.reconcile(sessions_by_delta=True):
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
            self._policy.mark(path, reason)
        return True

    def _schedule(self, *, now: bool = False) -> None:
        with self._cond:
            self._policy.debounce(time.monotonic(), immediate=now)
        self._wake()
        self._notify_dirty()

    def _notify_dirty(self) -> None:
        if self._on_dirty is not None:
            try:
                self._on_dirty(self.is_dirty())
            except Exception:
                log.exception("freshness on_dirty hook failed")

    def invalidate(self, reason: str) -> None:
        """Everything published so far may be gone (the index file was replaced by another process):
        forget what was verified, mark everything dirty and sync (a full pass compares every file)."""
        log.warning("memory freshness (%s): %s; re-checking every file", self.agent_id, reason)
        with self._cond:
            self._policy.invalidate()
            self._verified = {}
        self._schedule(now=True)

    # ------------------------------------------------------------------ cheap reconcile

    def reconcile(self, *, sessions_by_delta: bool = True, reason: str = "reconcile", strict: bool = False) -> list[str]:
        """Stat the indexed sources and list the watched folders; mark what the watcher missed.

        Returns the paths found changed (absolute; ``"*"`` when the listing failed); see
        :func:`memory_core.freshness.reconcile.changed_sources` for what counts as changed.
        ``strict``: an index file that cannot be read raises (:class:`IndexUnreadable`) instead.
        """
        self._last_reconcile = time.monotonic()
        self.last_reconcile_at = time.time()
        try:
            if self._index_state_fn is not None:
                indexed, forgotten_rows, skipped = self._index_state_fn()
                forgotten = set(forgotten_rows)
            else:
                indexed = self._indexed_fn()
                forgotten = set(self._forgotten_fn()) if self._forgotten_fn else set()
                skipped = self._skipped_fn() if self._skipped_fn else {}
            memory, sessions = self._list_fn()
        except Exception as exc:  # a failed listing must never prune, only mark dirty
            if strict and isinstance(exc, IndexUnreadable):
                raise
            log.warning("memory reconcile failed: %s", exc)
            self._mark(None, "reconcile-failed")
            return ["*"]
        if indexed or skipped:
            self._bootstrapped = True  # the index was built: the first search need not read it again to know
        with self._cond:
            self._forgotten |= forgotten
            verified = dict(self._verified)

        def session_grew(path: str, size: int) -> bool:
            if not sessions_by_delta or is_session_archive(path):
                return True
            return self._sessions.unseen(path, size) and self._session_event(path, deleted=False)

        changed = changed_sources(indexed=indexed, memory=memory, sessions=sessions, forgotten=forgotten,
                                  skipped=skipped, verified=verified, session_grew=session_grew)
        with self._cond:
            for path in changed:
                self._policy.mark(path, reason)
            # A successful listing plus stat of everything is a full enumeration: what it found
            # (including deletions) is now dirty, and targeted syncs publish and prune it.
            self._policy.last_enumeration = self._last_reconcile
        return changed

    # ------------------------------------------------------------------ sync requests

    def request_sync(
        self, paths: Iterable[str] | None = None, *, reason: str = "manual", force: bool = False,
        include_dirty: bool = True,
    ) -> Future:
        """Queue a sync (None = full); joins the running sync when it already covers the request."""
        want = None if paths is None else {os.path.abspath(p) for p in paths}
        with self._cond:
            if self._policy.closed:
                fut: Future = Future()
                fut.set_exception(RuntimeError("memory freshness scheduler is closed"))
                return fut
            job = self._policy.request(want, reason, force=force, include_dirty=include_dirty)
        self._wake()
        return job.future

    def sync_now(self, paths: Iterable[str] | None = None, *, reason: str = "manual", force: bool = False,
                 timeout: float | None = None) -> Any:
        """Request a sync and wait for it; returns the sync's result (raises its error)."""
        return self.request_sync(paths, reason=reason, force=force).result(timeout)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until nothing is dirty, queued or running (True) or the timeout passes (False)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._policy.idle():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
            return True

    # ------------------------------------------------------------------ one step (a runner thread)

    def step(self) -> None:
        """Run the action due now, if any: one sync, a background reconcile or a health check."""
        with self._cond:
            action = self._policy.next_action(time.monotonic())
        if action is None:
            return
        if action == HEALTH:
            self._health_tick()
        elif action == RECONCILE:
            try:
                if self.reconcile(sessions_by_delta=True):
                    self._schedule(now=self.settings.on_search)
            except Exception:
                log.exception("memory reconcile failed")
        else:
            assert isinstance(action, Job)
            self._run_job(action)

    def _run_job(self, job: Job) -> None:
        reason = ",".join(job.reasons) or "sync"
        if job.paths is not None and not job.paths and not job.force:
            with self._cond:  # nothing left to do (another sync took the dirty paths first)
                self._policy.running = None
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
        before = {p: stat(p) for p in covered}
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
            self.sync_log.append({"reason": reason, "full": job.paths is None,
                                  "paths": None if job.paths is None else len(job.paths), "force": job.force,
                                  "ms": round(took * 1000, 1), "ok": error is None, "at": time.time()})
            if error is None:
                self._succeeded(job, reason, before, result)
            else:
                self.last_sync_error = reason_of(error)
                self.last_sync_exception = error
                self.last_sync_error_at = time.time()
                self._policy.failed(job, time.monotonic())
                log.warning("memory sync (%s) failed: %s", reason, error)
            self._cond.notify_all()
        self._wake()
        self._notify_dirty()
        if error is None:
            job.future.set_result(result)
        else:
            job.future.set_exception(error)

    def _succeeded(self, job: Job, reason: str, before: dict[str, tuple[float, int] | None], result: Any) -> None:
        """After a sync that returned (lock held): a covered file is verified only when its publish
        succeeded, it did not change while being synced, and no invalidation came in between; a
        failed one is retried with backoff, a changed one synced again."""
        self.last_sync_at = time.time()
        self.last_sync_reason = reason
        self.last_sync_error = self.last_sync_error_at = self.last_sync_exception = None
        current = self._policy.succeeded(job)
        if job.paths is None:
            self.last_full_sync_at = job.started_at
            self.last_full_sync_wall = self.last_sync_at
            if current:
                self._verified = {}
        failed = self._failed_paths(result)
        problems = self._policy.problems
        again = False
        for p, st in before.items():
            if p in failed:
                self._verified.pop(p, None)
                continue
            problems.pop(p, None)
            if stat(p) != st:
                self._policy.dirty_paths.add(p)  # changed during its own sync: what was published is older
                self._verified.pop(p, None)
                again = True
                continue
            if current:
                self._verified[p] = st
            self._sessions.synced(p, st, is_session=is_session_path(p, self.targets.sessions_dir,
                                                                    is_session_archive(p)))
        if failed:
            log.warning("memory sync: %d file(s) could not be published; retrying in %.0f s",
                        len(failed), self._policy.retry_delay)
        self._policy.settled(time.monotonic(), failed=failed, changed_during=again)
        self._bootstrapped = True

    def _failed_paths(self, result: Any) -> dict[str, str]:
        """Absolute path -> message of every file a sync could not publish (its old rows were kept)."""
        out: dict[str, str] = {}
        for p in getattr(result, "problems", None) or []:
            if isinstance(p, dict) and p.get("code") in RETRIED_PROBLEMS and p.get("path"):
                out[self._abs_fn(str(p["path"]))] = str(p.get("message") or p["code"])
        return out

    def _health_tick(self) -> None:
        try:
            w = self.watcher
            if w is not None and w.state == "reconcile":
                # the kernel refused this agent's watch: try again (closed agents may have freed
                # watches, or the limit was raised); a refusal again is not logged again
                w.restart("retrying a refused watch")
            self.check_watcher()
            if self.reconcile(sessions_by_delta=True):
                self._schedule()
        except Exception:
            log.exception("memory freshness health check failed")

