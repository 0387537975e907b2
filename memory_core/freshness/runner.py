"""The threads that run every agent's freshness work: a small fixed set per process, not one per agent.

An agent (a :class:`~memory_core.freshness.Freshness`) tells the runner when its next action is due
(:meth:`Runner.wake`); a free thread takes the agent due earliest (:class:`~memory_core.freshness.
policy.DueQueue`), calls its ``step()`` (one sync, reconcile or health check) and queues it again at
its next due time. One agent is never served by two threads at once, so its syncs stay one at a time.
The runner never holds its lock while it calls an agent, and agents call it without holding theirs.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from memory_core.freshness.policy import DueQueue

log = logging.getLogger(__name__)

DEFAULT_THREADS = 3


def default_threads() -> int:
    """``MEMORY_CORE_FRESHNESS_THREADS`` or :data:`DEFAULT_THREADS` (syncs of different agents at once)."""
    raw = os.environ.get("MEMORY_CORE_FRESHNESS_THREADS", "")
    return max(1, int(raw)) if raw.isdigit() else DEFAULT_THREADS


class Runner:
    """A fixed set of daemon threads serving due agents (see the module docstring)."""

    _shared: Runner | None = None
    _shared_lock = threading.Lock()

    @classmethod
    def shared(cls) -> Runner:
        """The process's runner, its threads started on first use."""
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls(default_threads())
            return cls._shared

    def __init__(self, threads: int = DEFAULT_THREADS) -> None:
        self.size = threads
        self._cond = threading.Condition()
        self._queue = DueQueue()
        self._threads: list[threading.Thread] = []
        self._serving: dict[int, Any] = {}   # thread ident -> the agent it serves right now

    def wake(self, agent: Any, due: float | None) -> None:
        """``agent``'s next action is due at ``due`` (monotonic; None: nothing planned)."""
        if due is None:
            return
        with self._cond:
            head = self._queue.head()
            self._queue.push(agent, due)
            self._start_threads()
            if head is None or due < head:
                # a waiting thread waits until the earliest due time queued before: one due no sooner
                # (an agent opened now, its first health check 30 s away) is found when it wakes
                self._cond.notify()

    def forget(self, agent: Any) -> None:
        with self._cond:
            self._queue.drop([agent])

    def serving(self, agent: Any) -> bool:
        """Whether the calling thread is the one serving ``agent`` (a close from inside its step)."""
        return self._serving.get(threading.get_ident()) is agent

    def thread_idents(self) -> list[int]:
        return [t.native_id for t in self._threads if t.native_id]

    def _start_threads(self) -> None:
        self._threads = [t for t in self._threads if t.is_alive()]
        while len(self._threads) < self.size:
            t = threading.Thread(target=self._work, name=f"memory-core-freshness-{len(self._threads)}", daemon=True)
            self._threads.append(t)
            t.start()

    def _work(self) -> None:
        me = threading.get_ident()
        while True:
            with self._cond:
                while True:
                    agent, next_at = self._queue.take(time.monotonic())
                    if agent is not None:
                        break
                    self._cond.wait(None if next_at is None else max(0.0, next_at - time.monotonic()))
                self._serving[me] = agent
            try:
                agent.step()
            except Exception:  # noqa: BLE001 - one agent's failure never ends a shared thread
                log.exception("memory freshness step failed")
            finally:
                due = agent.due_at()
                with self._cond:
                    self._serving.pop(me, None)
                    self._queue.release(agent, due)
                    self._cond.notify()
