"""The open agents of a server: at most ``gateway.maxOpenAgents`` index owners at a time, least
recently used closed first; and of those, at most ``gateway.maxOpenIndexes`` holding SQLite
connections in the server's process (:class:`HeldConnections`).

An open agent (a ``MemoryCore`` with its freshness subscription) holds its file watch, its
scheduling state and, once it synced or read its index itself, SQLite connections (its writer, its
read-only identity reader: the fds); a closed one costs only its config entry. An open agent
without connections costs about 20 KB and no fd, so a server keeps thousands open (searches of an
open agent skip the open: its catch-up and watch), and the connections of the least recently used
are closed past ``gateway.maxOpenIndexes`` (reopened at that agent's next sync or identity read).
The next request for a closed agent opens it again (its startup catch-up then finds what changed
meanwhile, and the search syncs it first).

An agent is never closed under a request: one used within the last ``grace_s`` seconds or with a
sync queued or running is skipped, and an evicted agent leaves the map at once (new requests open
a fresh owner) but is closed a second later on a background thread, so a request still holding it
finishes first. Closes that fall behind (a close can wait on the disk: a writer's checkpoint) are
helped by the threads that evict: past :data:`CLOSING_BACKLOG` queued, the evicting thread closes
the due ones itself, so open agents stay bounded by the cap plus about a second of evictions.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_MAX_OPEN_AGENTS = 10_000
DEFAULT_MAX_OPEN_INDEXES = 256
DEFAULT_GRACE_S = 2.0
FDS_PER_OPEN_INDEX = 8     # an agent's SQLite files in the server (index, -wal, -shm; writer and reader)
FDS_RESERVED = 256         # sockets, worker pipes, the process's own files
CLOSING_BACKLOG = 64       # evicted agents queued for the closer before evicting threads close them too
CLOSE_DELAY_S = 1.0        # an evicted agent is closed this long after it left the map


def raise_fd_limit() -> tuple[int, int]:
    """Raise this process's soft open-files limit to its hard limit (a server of many agents needs
    more than the usual 1,024); returns (soft, hard) as they are now (-1: unlimited or unknown)."""
    try:
        import resource
    except ImportError:  # not POSIX
        return (-1, -1)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = 65536 if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return (soft, hard)


def fd_bounded_cap(cap: int, soft_limit: int | None = None) -> int:
    """``cap`` lowered so that agents holding connections cannot exhaust the open-files limit
    (``soft_limit``, by default this process's)."""
    if soft_limit is None:
        try:
            import resource
        except ImportError:
            return cap
        soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft_limit == resource.RLIM_INFINITY:
            return cap
    if soft_limit < 0:
        return cap
    return max(1, min(cap, (soft_limit - FDS_RESERVED) // FDS_PER_OPEN_INDEX))


class HeldConnections:
    """The index owners of this process that hold SQLite connections, at most ``cap``: an owner
    that opens or uses one :meth:`touch` es itself; past the cap the least recently used ones that
    nothing holds right now (no sync running, no read in progress: ``release_connections()``
    answers False) close theirs, and reopen them when next needed."""

    def __init__(self, cap: int = DEFAULT_MAX_OPEN_INDEXES) -> None:
        self.cap = max(1, int(cap))
        self._owners: OrderedDict[int, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.released = 0  # connections closed for the cap (stats)

    def touch(self, owner: Any) -> None:
        key = id(owner)
        victims: list[Any] = []
        with self._lock:
            self._owners[key] = owner
            self._owners.move_to_end(key)
            while len(self._owners) > self.cap and len(victims) < 8:
                _key, victim = self._owners.popitem(last=False)
                if victim is owner:  # cap 1: the toucher is the only one
                    self._owners[key] = owner
                    break
                victims.append(victim)
        busy = []
        for victim in victims:  # outside the lock: closing a writer checkpoints its log (file I/O)
            if victim.release_connections():
                self.released += 1
            else:
                busy.append(victim)
        if busy:  # in use right now: the most recently used, in effect
            with self._lock:
                for victim in busy:
                    self._owners.setdefault(id(victim), victim)

    def forget(self, owner: Any) -> None:
        with self._lock:
            if self._owners.get(id(owner)) is owner:
                del self._owners[id(owner)]

    def __len__(self) -> int:
        return len(self._owners)


HELD = HeldConnections()  # the process's (a server sets its cap from gateway.maxOpenIndexes)


class OpenAgents:
    """A mapping agent id -> open core with an LRU cap (the provider runtime's ``_cores``)."""

    def __init__(self, cap: int = DEFAULT_MAX_OPEN_AGENTS, *, grace_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 close: Callable[[Any], None] | None = None) -> None:
        self.cap = max(1, int(cap))
        self.grace_s = DEFAULT_GRACE_S if grace_s is None else grace_s
        self._clock = clock
        self._close = close or _close_later
        self._cores: OrderedDict[str, Any] = OrderedDict()
        self._used: dict[str, float] = {}
        self._lock = threading.RLock()
        self.evicted = 0

    # -- the mapping the runtime reads -------------------------------------------------------------

    def get(self, agent_id: str, default: Any = None) -> Any:
        victims: list[Any] = []
        with self._lock:
            core = self._cores.get(agent_id)
            if core is not None:
                self._cores.move_to_end(agent_id)
                self._used[agent_id] = self._clock()
                victims = self._evict()  # agents skipped before (busy, or used within the grace) may be closable now
        self._close_all(victims)
        return core if core is not None else default

    def __setitem__(self, agent_id: str, core: Any) -> None:
        with self._lock:
            self._cores[agent_id] = core
            self._cores.move_to_end(agent_id)
            self._used[agent_id] = self._clock()
            victims = self._evict()
        self._close_all(victims)

    def pop(self, agent_id: str, default: Any = None) -> Any:
        with self._lock:
            self._used.pop(agent_id, None)
            return self._cores.pop(agent_id, default)

    def items(self) -> list[tuple[str, Any]]:
        with self._lock:
            return list(self._cores.items())

    def values(self) -> list[Any]:
        with self._lock:
            return list(self._cores.values())

    def clear(self) -> None:
        with self._lock:
            self._cores.clear()
            self._used.clear()

    def __len__(self) -> int:
        return len(self._cores)

    def __eq__(self, other: object) -> bool:  # compares as the plain dict it replaces
        if isinstance(other, OpenAgents):
            other = dict(other.items())
        return isinstance(other, dict) and dict(self.items()) == other

    __hash__ = None  # type: ignore[assignment]

    def __contains__(self, agent_id: object) -> bool:
        return agent_id in self._cores

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._cores))

    # -- eviction --------------------------------------------------------------------------------

    def _evict(self) -> list[Any]:
        """Take least recently used agents out until the cap holds (skipping the busy ones); returns
        them, for the caller to close once it no longer holds the lock (a close may help the closer)."""
        over = len(self._cores) - self.cap
        if over <= 0:
            return []
        now = self._clock()
        victims = []
        for agent_id, core in self._cores.items():
            if len(victims) >= over:
                break
            if now - self._used.get(agent_id, 0.0) < self.grace_s:
                break  # least recently used first: every agent after this one was used within the grace too
            if _busy(core):
                continue
            victims.append(agent_id)
        out = []
        for agent_id in victims:
            out.append(self._cores.pop(agent_id))
            self._used.pop(agent_id, None)
            self.evicted += 1
        return out

    def _close_all(self, cores: list[Any]) -> None:
        for core in cores:
            self._close(core)

    def stats(self) -> dict[str, int]:
        return {"open": len(self._cores), "cap": self.cap, "evicted": self.evicted}


def _busy(core: Any) -> bool:
    """A sync of the agent is queued or running (closing it now would wait for that sync)."""
    fresh = getattr(core, "_freshness", None)
    if fresh is None:
        return False
    try:
        snap = fresh.snapshot()
    except Exception:  # noqa: BLE001 - a core that cannot say is treated as busy
        return True
    return bool(snap["running"] or snap["queued"])


_closing: list[tuple[float, Any]] = []
_closing_cond = threading.Condition()
_closer: threading.Thread | None = None


def _close_later(core: Any) -> None:
    """Close ``core`` on the one background closer thread (after any request holding it is done).
    With more than :data:`CLOSING_BACKLOG` queued, this thread first closes the queue's due ones."""
    global _closer
    cond, queue = _closing_cond, _closing
    with cond:
        queue.append((time.monotonic() + CLOSE_DELAY_S, core))
        if _closer is None or not _closer.is_alive():
            _closer = threading.Thread(target=_close_loop, args=(cond, queue),
                                       name="memory-core-agent-closer", daemon=True)
            _closer.start()
        # only a closer with nothing queued needs waking: one with a queue already wakes at its head's
        # time, which is before this core's (a wake per eviction cost a thread switch per opened agent)
        if len(queue) == 1:
            cond.notify()
        behind = len(queue) > CLOSING_BACKLOG
    while behind:
        with cond:
            if len(queue) <= CLOSING_BACKLOG or queue[0][0] > time.monotonic():
                return
            _at, due = queue.pop(0)
        _close_one(due)


def _close_one(core: Any) -> None:
    try:
        core.close()
    except Exception:  # noqa: BLE001 - a failed close never stops the closer (or the request helping it)
        log.exception("memory-core: closing an idle agent failed")


def _close_loop(cond: threading.Condition, queue: list[tuple[float, Any]]) -> None:
    """The closer: serves the queue and condition it was started with (never re-reads the module's,
    which a test may swap while this thread waits)."""
    while True:
        with cond:
            while not queue:
                cond.wait()
            at, core = queue[0]
            left = at - time.monotonic()
            if left > 0:
                cond.wait(left)
                continue
            queue.pop(0)
        _close_one(core)
