"""The freshness policy, apart from any thread, clock or file: what one agent has behind (dirty paths,
a full pass, failed publishes), when its next sync, retry, reconcile or health check is due
(debounce, backoff, interval), and across agents which one a runner thread serves next.

Everything here is pure: time comes in as ``now`` (monotonic seconds), so tests drive it with a fake
clock. :class:`~memory_core.freshness.Freshness` holds one :class:`SyncPolicy` per agent under its
lock and does the I/O; :mod:`memory_core.freshness.runner` runs the due agents on a few threads.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Hashable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field

HEALTH = "health"        # check the watcher and reconcile (every health interval)
RECONCILE = "reconcile"  # a search asked for a background re-check of the sources


@dataclass
class Job:
    """One sync: ``paths`` (None = full enumeration), why, and the future its callers wait on."""

    paths: set[str] | None
    reasons: list[str]
    force: bool = False
    include_dirty: bool = False
    future: Future = field(default_factory=Future)
    known_changed: set[str] = field(default_factory=set)
    full_changed: bool = False
    started_at: float | None = None
    epoch: int = 0                     # SyncPolicy.epoch when it started (an invalidation voids its stats)

    def covers(self, paths: set[str] | None, force: bool) -> bool:
        if force and not self.force:
            return False
        if self.paths is None:
            return True
        return paths is not None and paths <= self.paths


HEALTH_CHECKS_PER_S = 20.0


class HealthPace:
    """The health checks of every started policy of a process together run at most
    :data:`HEALTH_CHECKS_PER_S` a second. A check is a reconcile (a listing, stats and a read of the
    agent's index rows) behind a watcher that already reports changes as they happen, so with
    thousands of agents open in one server each agent's interval grows instead: ``max(health_s,
    started / HEALTH_CHECKS_PER_S)`` (10,000 open agents: every 500 s, about 2% of a core)."""

    def __init__(self) -> None:
        self.started = 0
        self._lock = threading.Lock()

    def add(self, n: int) -> None:
        with self._lock:
            self.started = max(0, self.started + n)

    def interval(self, health_s: float) -> float:
        return max(health_s, self.started / HEALTH_CHECKS_PER_S)


PACE = HealthPace()


class SyncPolicy:
    """One agent's scheduling state (not thread-safe: its owner holds a lock around every call)."""

    def __init__(self, *, debounce_s: float, interval_s: float = 0.0, health_s: float = 30.0,
                 full_reconcile_s: float = 15 * 60, retry_backoff_s: tuple[float, float] = (2.0, 300.0),
                 pace: HealthPace = PACE) -> None:
        self.debounce_s = debounce_s
        self.pace = pace
        self._paced = False
        self.interval_s = interval_s
        self.health_s = health_s
        self.full_reconcile_s = full_reconcile_s
        self.retry_backoff_s = retry_backoff_s
        self.dirty_paths: set[str] = set()
        self.dirty_full = False
        self.dirty_reasons: set[str] = set()
        self.debounce_at: float | None = None
        self.retry_at: float | None = None
        self.retry_delay = retry_backoff_s[0]
        self.interval_at: float | None = None
        self.health_at: float | None = None
        self.queued: Job | None = None
        self.running: Job | None = None
        self.reconcile_due = False
        self.problems: dict[str, str] = {}   # abs path -> why its last publish failed (retried)
        self.epoch = 0
        self.last_enumeration: float | None = None
        self.closed = False

    # -- inputs --------------------------------------------------------------------------------

    def start(self, now: float) -> None:
        if self.interval_s > 0 and self.interval_at is None:
            self.interval_at = now + self.interval_s
        if not self._paced:
            self._paced = True
            self.pace.add(1)
        self.health_at = now + self.pace.interval(self.health_s)

    def close(self) -> None:
        """Nothing is planned any more (the agent was closed)."""
        self.closed = True
        if self._paced:
            self._paced = False
            self.pace.add(-1)

    def mark(self, path: str | None, reason: str) -> None:
        """``path`` (or, with None, everything) changed and is not in the index yet."""
        if path is None:
            self.dirty_full = True
        else:
            self.dirty_paths.add(path)
        self.dirty_reasons.add(reason)

    def debounce(self, now: float, *, immediate: bool = False) -> None:
        """Every change restarts the debounce; ``immediate`` makes the sync due now."""
        self.debounce_at = now + (0.0 if immediate else self.debounce_s)

    def invalidate(self) -> None:
        """The index file was replaced: verified stats are void and a full pass is needed."""
        self.epoch += 1
        self.mark(None, "index-replaced")

    def request(self, want: set[str] | None, reason: str, *, force: bool, include_dirty: bool) -> Job:
        """Queue a sync of ``want`` (None = full), merged into the queued one; joins the running
        sync instead when it covers the request and the dirty paths are not asked for."""
        running = self.running
        if running is not None and not include_dirty and running.covers(want, force):
            return running
        job = self.queued
        if job is None:
            job = self.queued = Job(paths=set() if want is not None else None, reasons=[])
        if want is None:
            job.paths = None
        elif job.paths is not None:
            job.paths |= want
        job.force = job.force or force
        job.include_dirty = job.include_dirty or include_dirty
        if reason not in job.reasons:
            job.reasons.append(reason)
        return job

    # -- what is due -----------------------------------------------------------------------------

    def due_at(self) -> float | None:
        """When the next action is due (0.0: now), or None when nothing is planned."""
        if self.closed:
            return None
        if self.queued is not None or self.reconcile_due:
            return 0.0
        times = [t for t in (self.debounce_at, self.retry_at, self.interval_at, self.health_at) if t is not None]
        return min(times) if times else None

    def next_action(self, now: float) -> Job | str | None:
        """The action due at ``now`` (a materialised :class:`Job` now running, :data:`HEALTH` or
        :data:`RECONCILE`), consuming its deadline; None when nothing is due."""
        while not self.closed:
            job: Job | None = None
            if self.queued is not None:
                job, self.queued = self.queued, None
            elif self.debounce_at is not None and now >= self.debounce_at:
                self.debounce_at = None
                if self.is_dirty():
                    job = Job(paths=set(), reasons=sorted(self.dirty_reasons) or ["watch"], include_dirty=True)
            elif self.reconcile_due:
                self.reconcile_due = False
                return RECONCILE
            elif self.retry_at is not None and now >= self.retry_at:
                self.retry_at = None
                if self.is_dirty() or self.problems:
                    job = Job(paths=set(self.problems), reasons=["retry", *sorted(self.dirty_reasons)],
                              include_dirty=True)
            elif self.interval_at is not None and now >= self.interval_at:
                self.interval_at = now + self.interval_s
                job = Job(paths=None, reasons=["interval"], include_dirty=True)
            elif self.health_at is not None and now >= self.health_at:
                self.health_at = now + self.pace.interval(self.health_s)
                return HEALTH
            else:
                return None
            if job is not None:
                self._materialize(job, now)
                self.running = job
                return job
        return None

    def _materialize(self, job: Job, now: float) -> None:
        if job.include_dirty:
            job.known_changed = set(self.dirty_paths)
            job.full_changed = self.dirty_full
            if job.paths is not None:
                job.paths |= self.dirty_paths
            if self.dirty_full:
                job.paths = None
            self.dirty_paths.clear()
            self.dirty_full = False
            self.dirty_reasons.clear()
            self.debounce_at = None
        if job.paths and (self.last_enumeration is None or now - self.last_enumeration >= self.full_reconcile_s):
            # Targeted syncs never go longer than 15 minutes without a full enumeration (which prunes).
            job.paths = None
        job.started_at = now
        job.epoch = self.epoch

    # -- outcomes ---------------------------------------------------------------------------------

    def succeeded(self, job: Job) -> bool:
        """The sync returned; True when its stats may be recorded as verified (no invalidation since)."""
        self.running = None
        if job.paths is None:
            self.last_enumeration = job.started_at
        return job.epoch == self.epoch

    def failed(self, job: Job, now: float) -> None:
        """The sync raised: what it was publishing is still behind; retry with backoff."""
        self.running = None
        self.dirty_paths |= job.known_changed
        if job.full_changed:
            self.dirty_full = True
        if job.paths is not None:
            self.dirty_paths |= job.paths
        self._back_off(now)

    def settled(self, now: float, *, failed: dict[str, str], changed_during: bool) -> None:
        """After a returned sync: files that could not be published are retried with backoff (the
        backoff resets once none is left); files that changed while being synced are synced again."""
        for p, message in failed.items():
            self.problems[p] = message
        if failed:
            self._back_off(now)
        elif not self.problems:
            self.retry_delay = self.retry_backoff_s[0]
        if changed_during:
            self.dirty_reasons.add("changed-during-sync")
            self.debounce(now)

    def _back_off(self, now: float) -> None:
        self.retry_at = now + self.retry_delay
        self.retry_delay = min(self.retry_backoff_s[1], self.retry_delay * 2)

    # -- state ------------------------------------------------------------------------------------

    def is_dirty(self) -> bool:
        return bool(self.dirty_paths) or self.dirty_full

    def is_behind(self) -> bool:
        """Dirty, or a sync is publishing changes right now."""
        r = self.running
        return self.is_dirty() or (r is not None and (bool(r.known_changed) or r.full_changed))

    def pending(self) -> set[str]:
        out = set(self.dirty_paths)
        if self.running is not None:
            out |= self.running.known_changed
        return out

    def behind_files(self) -> set[str] | None:
        """The files behind (pending or being published), or None when a full pass is (the whole
        index may be behind: a folder came or went, the index file was replaced)."""
        r = self.running
        if self.dirty_full or (r is not None and r.full_changed):
            return None
        return self.pending()

    def idle(self) -> bool:
        return self.running is None and self.queued is None and not self.is_dirty()


class DueQueue:
    """Which agent a runner thread serves next: the one due earliest (ties in arrival order), never
    one that another thread is serving. Entries are refreshed lazily: an agent's due time is asked
    again when it comes up, so ``push`` may be called as often as its deadlines move."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Hashable]] = []
        self._seq = itertools.count()
        self._queued_at: dict[Hashable, float] = {}
        self.busy: set[Hashable] = set()
        self._again: dict[Hashable, float] = {}   # pushed while busy: the earliest such due time

    def push(self, key: Hashable, due: float | None) -> None:
        if due is None:
            return
        if key in self.busy:
            self._again[key] = min(due, self._again.get(key, due))
            return
        if key in self._queued_at and self._queued_at[key] <= due:
            return  # an entry at least as early is queued; it is re-checked when it comes up
        self._queued_at[key] = due
        heapq.heappush(self._heap, (due, next(self._seq), key))

    def head(self) -> float | None:
        """The earliest due time queued (an entry superseded since may be it: never later than the
        real earliest), None when nothing is queued."""
        return self._heap[0][0] if self._heap else None

    def take(self, now: float) -> tuple[Hashable | None, float | None]:
        """(an agent due at ``now``, now busy; or None and when to look again, None = when pushed).

        An agent whose deadline moved later since it was pushed comes up early: serving it finds
        nothing due and :meth:`release` queues it at its real time (the owner never holds both locks)."""
        while self._heap:
            due, _seq, key = self._heap[0]
            if due > now:
                return None, due
            heapq.heappop(self._heap)
            if self._queued_at.get(key) != due or key in self.busy:
                continue  # superseded by an earlier entry, or served right now
            del self._queued_at[key]
            self.busy.add(key)
            return key, None
        return None, None

    def release(self, key: Hashable, due: float | None) -> None:
        """``key`` is served; queue it again at its new due time (or an earlier one pushed meanwhile)."""
        self.busy.discard(key)
        again = self._again.pop(key, None)
        if again is not None:
            due = again if due is None else min(due, again)
        self.push(key, due)

    def drop(self, keys: Iterable[Hashable]) -> None:
        for key in keys:
            self._queued_at.pop(key, None)
            self._again.pop(key, None)
        if len(self._heap) > 2 * len(self._queued_at) + 64:
            # mostly superseded or dropped entries (closed agents, kept alive by them until their due
            # time): keep the live ones only
            self._heap = [e for e in self._heap if self._queued_at.get(e[2]) == e[0]]
            heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._queued_at)
