"""Owner-side search-generation leases and pagination-cursor pins (upstream
`memory/manager-search.worker.ts`).

A *generation* is one value of ``memory_index_state.revision`` of one database file (identity
``dev:inode``). A search acquires a :class:`Lease` before it sends work to the pool, binds it to
the revision its worker reports, and releases it in ``finally`` - also when the worker died or
timed out. A search that ran whole in one task binds and releases in one step (``settle``);
``bind`` serves holders that keep reading after the reply (e.g. a search split over tasks). Workers keep derived per-generation state (vector matrix / faiss index) only for the
current generation plus the leased ones: when the last lease on a generation ends, the
``on_last_release`` callback (normally ``pool.broadcast("retain", ...)``) tells them to drop it.

Consistency choice: a search sends *all* its retrieval and its metadata read to one worker as
one ``search`` task (workers/tasks.py), which runs them inside one SQLite read transaction (WAL snapshot), so
every part of one search sees the same generation by construction. When a caller does split a
search over several tasks, :func:`run_consistent` checks that every part reports the same
revision and retries the whole search (bounded) when they disagree.

:class:`CursorPins` keeps a paginated result set valid for ``ttl_s`` seconds (default 60) while
holding a lease on its generation; afterwards ``get`` raises :class:`CursorExpired`.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from memory_core.errors import CursorExpired, MemoryCoreError

DEFAULT_CURSOR_TTL_S = 60.0
_UNBOUND = (None, None)
MAX_GENERATION_RETRIES = 3


class GenerationMismatch(MemoryCoreError):
    """The parts of one search read different index generations even after retrying; search again."""

    code = "generation_mismatch"


class Lease:
    """One search's hold on one generation; ``release()`` is idempotent."""

    __slots__ = ("_registry", "db_id", "revision", "_released")

    def __init__(self, registry: "GenerationLeases", db_id: str | None, revision: int | None) -> None:
        self._registry = registry
        self.db_id = db_id
        self.revision = revision
        self._released = False

    def bind(self, db_id: str | None, revision: int) -> "Lease":
        """Attach the lease to the generation the worker actually read."""
        self._registry._rebind(self, db_id, int(revision))
        return self

    def release(self) -> None:
        if not self._released:  # only ever goes False -> True; re-checked under the lock
            self._registry._release(self)

    def settle(self, db_id: str | None, revision: int, *, notify: bool = True) -> None:
        """``bind`` then ``release`` in one step: the holder read this generation and is done.

        ``notify=False``: the holder knows that generation is current (never dropped), so its
        last release needs no ``on_last_release`` call."""
        self._registry._settle(self, db_id, int(revision), notify)

    @property
    def released(self) -> bool:
        return self._released

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


class GenerationLeases:
    """Counts of live leases per (db identity, revision); thread-safe."""

    def __init__(self, on_last_release: Callable[[str, int, set[int]], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str | None, int | None], int] = {}
        self.on_last_release = on_last_release

    def acquire(self, db_id: str | None = None, revision: int | None = None) -> Lease:
        """A lease, possibly unbound (revision unknown until the worker reports it)."""
        lease = Lease(self, db_id, revision)
        with self._lock:
            key = (db_id, revision)
            self._counts[key] = self._counts.get(key, 0) + 1
        return lease

    def acquire_unbound(self, leased_of: str | None) -> tuple[Lease, list[int]]:
        """An unbound lease plus the sorted revisions of ``leased_of`` that live leases hold,
        read under the same lock (what a worker must keep while the new lease is open)."""
        lease = Lease(self, None, None)
        lock = self._lock  # not a with block: every pooled search takes one, on the owner
        lock.acquire()
        try:
            counts = self._counts
            counts[_UNBOUND] = counts.get(_UNBOUND, 0) + 1
            # only unbound leases live (the steady state without cursors): nothing more to keep
            keep = sorted(self._leased_locked(leased_of)) if leased_of is not None and len(counts) > 1 else []
        finally:
            lock.release()
        return lease, keep

    def _rebind(self, lease: Lease, db_id: str | None, revision: int) -> None:
        fire = None
        with self._lock:
            if lease._released:
                return
            old = (lease.db_id, lease.revision)
            if old == (db_id, revision):
                return
            fire = self._decrement(old)
            lease.db_id, lease.revision = db_id, revision
            self._counts[(db_id, revision)] = self._counts.get((db_id, revision), 0) + 1
        self._notify(fire)

    def _release(self, lease: Lease) -> None:
        with self._lock:
            if lease._released:
                return
            lease._released = True
            fire = self._decrement((lease.db_id, lease.revision))
        self._notify(fire)

    def _settle(self, lease: Lease, db_id: str | None, revision: int, notify: bool = True) -> None:
        lock = self._lock
        lock.acquire()  # not a with block: once per pooled search
        try:
            if lease._released:
                return
            lease._released = True
            key = (lease.db_id, lease.revision)
            fire = self._decrement(key)
            if (notify and fire is None and db_id is not None and key != (db_id, revision)
                    and (db_id, revision) not in self._counts):
                fire = db_id, revision, self._leased_locked(db_id)  # as a bind + the last release
            lease.db_id, lease.revision = db_id, revision
        finally:
            lock.release()
        if fire is not None:
            self._notify(fire)

    def _decrement(self, key: tuple[str | None, int | None]) -> tuple[str, int, set[int]] | None:
        n = self._counts.get(key, 0) - 1
        if n > 0:
            self._counts[key] = n
            return None
        self._counts.pop(key, None)
        db_id, revision = key
        if db_id is None or revision is None:
            return None
        return db_id, revision, self._leased_locked(db_id)

    def _notify(self, fire: tuple[str, int, set[int]] | None) -> None:
        if fire is not None and self.on_last_release is not None:
            self.on_last_release(*fire)

    def _leased_locked(self, db_id: str) -> set[int]:
        return {rev for (d, rev), n in self._counts.items() if d == db_id and rev is not None and n > 0}

    def leased_revisions(self, db_id: str) -> set[int]:
        """Revisions of ``db_id`` that at least one live lease holds."""
        with self._lock:
            return self._leased_locked(db_id)

    def count(self, db_id: str | None = None, revision: int | None = None) -> int:
        """Live leases, optionally restricted to one database and/or one revision."""
        with self._lock:
            return sum(n for (d, r), n in self._counts.items()
                       if (db_id is None or d == db_id) and (revision is None or r == revision))

    def snapshot(self) -> dict[tuple[str | None, int | None], int]:
        with self._lock:
            return dict(self._counts)


def run_consistent(
    parts: Callable[[], Sequence[dict]],
    *,
    retries: int = MAX_GENERATION_RETRIES,
) -> list[dict]:
    """Run a search split over several tasks until every part reports the same ``revision``.

    ``parts()`` runs all parts once and returns their results (each with ``revision`` and
    ``db_id``). Raises :class:`GenerationMismatch` after ``retries`` extra attempts.
    """
    seen: list[tuple] = []
    for _ in range(retries + 1):
        results = list(parts())
        gens = {(r.get("db_id"), r.get("revision")) for r in results}
        if len(gens) <= 1:
            return results
        seen.append(tuple(sorted(map(str, gens))))
    raise GenerationMismatch(
        f"search parts kept reading different index generations {seen[-1]} during {retries + 1} attempts "
        "(the index is being republished very fast); retry the search")


@dataclass
class _Pin:
    lease: Lease
    expires_at: float
    state: Any


class CursorPins:
    """Pagination cursors that pin a generation (and its result state) for ``ttl_s`` seconds."""

    def __init__(self, leases: GenerationLeases, *, ttl_s: float = DEFAULT_CURSOR_TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.leases = leases
        self.ttl_s = float(ttl_s)
        self._clock = clock
        self._lock = threading.Lock()
        self._pins: dict[str, _Pin] = {}

    def pin(self, db_id: str | None, revision: int, state: Any = None) -> str:
        """Pin ``(db_id, revision)`` with ``state`` (e.g. the full ranked result list); returns a token."""
        self.sweep()
        token = secrets.token_urlsafe(12)
        lease = self.leases.acquire(db_id, revision)
        with self._lock:
            self._pins[token] = _Pin(lease, self._clock() + self.ttl_s, state)
        return token

    def get(self, token: str) -> tuple[str | None, int, Any]:
        """``(db_id, revision, state)`` of a live cursor; :class:`CursorExpired` once its TTL passed."""
        self.sweep()
        with self._lock:
            pin = self._pins.get(token)
        if pin is not None and pin.expires_at <= self._clock():
            self.release(token)  # expired behind a live pin (the clock stepped back)
            pin = None
        if pin is None:
            raise CursorExpired(
                f"pagination cursor expired (cursors pin their index generation for {self.ttl_s:g} s) "
                "or is unknown; run the search again without a cursor")
        return pin.lease.db_id, int(pin.lease.revision or 0), pin.state

    def release(self, token: str) -> bool:
        with self._lock:
            pin = self._pins.pop(token, None)
        if pin is None:
            return False
        pin.lease.release()
        return True

    def sweep(self) -> int:
        """Release every expired pin; returns how many were released."""
        now = self._clock()
        with self._lock:
            # pins are kept in expiry order (one TTL, a monotonic clock): stop at the first live one,
            # so a search that pins does not walk every live cursor
            expired = []
            for token, pin in self._pins.items():
                if pin.expires_at > now:
                    break
                expired.append(token)
            pins = [self._pins.pop(t) for t in expired]
        for pin in pins:
            pin.lease.release()
        return len(pins)

    def close(self) -> None:
        with self._lock:
            pins = list(self._pins.values())
            self._pins.clear()
        for pin in pins:
            pin.lease.release()

    def __len__(self) -> int:
        with self._lock:
            return len(self._pins)
