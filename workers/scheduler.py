"""The pool's state under its one lock: admission, the queue, hand-out to workers, replies, deaths.

:class:`Scheduler` holds the queued tasks and the :class:`~workers.slot.Slot` of each worker, and
makes the state changes of tasks and slots (owner side). Three kinds of threads drive it: the
callers (``submit`` and, in ``run()``, reading their own reply: :mod:`workers.waiting`), the
dispatcher thread (:mod:`workers.dispatcher`: deadlines, idle workers, deaths) and the threads
that start workers.
"""

from __future__ import annotations

import itertools
import os
import pickle
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from memory_core.errors import WorkerOverloaded, WorkerUnavailable, error_from_data
from workers.slot import PIPELINE_MAX_BYTES, Slot, Task

# launch(slot) -> (process, request pipe write end, reply read ends)
Launch = Callable[[Slot], tuple[Any, Any, list[Any]]]


class Wakeup:
    """The dispatcher's wake-up pipe, and ``at``: when it wakes by itself next."""

    def __init__(self) -> None:
        self.fd, self._w = os.pipe()
        os.set_blocking(self._w, False)
        self.at = float("inf")

    def __call__(self) -> None:
        try:
            os.write(self._w, b"x")
        except (BlockingIOError, OSError):
            pass

    def drain(self) -> None:
        try:
            os.read(self.fd, 4096)
        except OSError:
            pass

    def close(self) -> None:
        for fd in (self.fd, self._w):
            try:
                os.close(fd)
            except OSError:
                pass


class Scheduler:
    """Tasks and workers of one pool. Methods run with :attr:`lock` held unless they say otherwise."""

    def __init__(self, name: str, size: int, *, max_pending_tasks: int, max_pending_bytes: int,
                 idle_timeout_s: float | None, restart_on_error: bool, pipeline_depth: int,
                 launch: Launch) -> None:
        self.name = name
        self.size = size
        self.max_pending_tasks = max_pending_tasks
        self.max_pending_bytes = max_pending_bytes
        self.idle_timeout_s = idle_timeout_s
        self.restart_on_error = restart_on_error
        self.pipeline_depth = pipeline_depth
        self._launch = launch
        self.lock = threading.RLock()
        self._drained = threading.Condition(self.lock)
        self.queue: deque[Task] = deque()
        self.slots: list[Slot] = []
        self._slot_ids = itertools.count(1)
        self.pending_tasks = 0
        self.pending_bytes = 0
        self.closing = False
        self.closed = False
        self.wake = Wakeup()
        self.stats = {"started": 0, "replaced": 0, "retired_idle": 0, "timeouts": 0, "cancelled": 0,
                      "died": 0, "overloaded": 0, "completed": 0}

    # -- admission and hand-out --------------------------------------------------------------------

    def submit(self, task: Task) -> list[Slot]:
        """Admit ``task`` (or fail its future: closed, over capacity) and hand it out; returns new
        slots the caller must start (unlocked, :meth:`start`). Takes the lock."""
        lock = self.lock
        lock.acquire()  # not a with block: once per task, on the owner
        try:
            if self.closing:
                task.future.set_exception(WorkerUnavailable(f"worker pool {self.name!r} is closed"))
                return []
            if (self.pending_tasks >= self.max_pending_tasks
                    or self.pending_bytes + task.nbytes > self.max_pending_bytes):
                self.stats["overloaded"] += 1
                task.future.set_exception(WorkerOverloaded(
                    f"worker task capacity reached in pool {self.name!r} ({self.pending_tasks} tasks, "
                    f"{self.pending_bytes} bytes pending; limits {self.max_pending_tasks} tasks, "
                    f"{self.max_pending_bytes} bytes); retry later"))
                return []
            task.deadline = time.monotonic() + task.timeout_s if task.timeout_s else None
            if not task.waiter:
                task.future._task = task  # for its cancel(); a run() caller's result needs none
            self.pending_tasks += 1
            self.pending_bytes += task.nbytes
            self.queue.append(task)
            to_start = self.dispatch()
            slot = task.slot
            if task.waiter and slot is not None and not slot.gone and task.channel not in slot.reading:
                # sent at once: the caller reads its channel from here, without a second lock round
                slot.reading.add(task.channel)
                task.claimed = (slot, task.channel)
            if task.deadline is not None and task.deadline < self.wake.at:
                self.wake()
        finally:
            lock.release()
        return to_start

    def new_slots(self, want: int) -> list[Slot]:
        """Up to ``want`` workers in all: the new slots to start (unlocked). Takes the lock."""
        to_start = []
        with self.lock:
            while len(self.slots) < want and not self.closing:
                slot = Slot(next(self._slot_ids))
                self.slots.append(slot)
                to_start.append(slot)
        return to_start

    def dispatch(self) -> list[Slot]:
        """Hand queued tasks to idle workers (then, with ``pipeline_depth`` > 1, to busy ones with
        a free reply channel); returns new slots the caller must start (unlocked)."""
        to_start: list[Slot] = []
        if self.closed:
            return to_start
        while self.queue:
            slot = None
            for s in self.slots:
                if s.state == "idle" and not s.gone:
                    slot = s
                    break
            if slot is None:
                starting = sum(1 for s in self.slots if s.state == "starting")
                if starting < len(self.queue) and len(self.slots) < self.size and not self.closing:
                    slot = Slot(next(self._slot_ids))
                    self.slots.append(slot)
                    to_start.append(slot)
                    continue
                if self.pipeline_depth > 1:
                    # a task sent ahead waits in the request pipe until its worker is free, so the
                    # frames ahead must fit the pipe's buffer: a write to a busy worker must never
                    # block while the pool lock is held (the callers that would read that worker's
                    # replies need the lock to start reading: a deadlock)
                    nbytes = self.queue[0].nbytes
                    for s in self.slots:
                        if (s.state == "busy" and s.free and not s.gone
                                and (slot is None or len(s.inflight) < len(slot.inflight))
                                and nbytes + s.queued_bytes() <= PIPELINE_MAX_BYTES):
                            slot = s
                if slot is None:
                    break
            task = self.queue.popleft()
            if not slot.send(task):
                self.queue.appendleft(task)  # the worker is going; its death is handled by the dispatcher
                self.wake()
                break
            if not task.waiter:
                self.wake()  # nobody reads this reply in run(): the dispatcher must watch the channel
            elif task.signal is not None:
                task.signal_waiter()
        return to_start

    # -- workers starting, retiring, dying ---------------------------------------------------------

    def start(self, slot: Slot) -> None:
        """Start a worker process for ``slot`` (called without the lock; may take tens of ms)."""
        try:
            proc, request, replies = self._launch(slot)
        except Exception as exc:  # noqa: BLE001
            with self.lock:
                if slot in self.slots:
                    self.slots.remove(slot)
                if self.queue and not any(s.state in ("idle", "starting", "busy") for s in self.slots):
                    task = self.queue.popleft()
                    self.finish(task, exc=WorkerUnavailable(f"could not start a worker for pool {self.name!r}: {exc}"))
            return
        with self.lock:
            self.stats["started"] += 1
            slot.attach(proc, request, replies)
            if self.closed or slot.state == "retiring":
                proc.kill()
                return
            slot.state = "idle"
            slot.idle_since = time.monotonic()
            to_start = self.dispatch()
            self.wake()  # the dispatcher must watch the new sentinel
        for extra in to_start:
            self.start(extra)

    def start_in_background(self, slots: list[Slot]) -> None:
        """:meth:`start` each of ``slots`` in a thread of its own (the caller holds no lock)."""
        for slot in slots:
            threading.Thread(target=self.start, args=(slot,), daemon=True).start()

    def retire(self, slot: Slot) -> None:
        slot.state = "retiring"
        if not slot.send_exit():
            slot.kill()

    def dispose(self, slot: Slot) -> None:
        """Forget a dead slot and close its pipes, unless a thread still reads one (it closes them)."""
        if slot in self.slots:
            self.slots.remove(slot)
        if not slot.reading:
            slot.close_handles()

    def worker_gone(self, slot: Slot) -> None:
        """``slot``'s worker exited. Once no thread reads its channels: handle the replies it sent
        before exiting, in order, then its death."""
        if slot.state == "dead":
            return
        slot.gone = True
        if slot.reading:
            return  # each reader sees the exit too and calls again when it is done
        for ch, data in slot.sent_replies():
            self.handle_reply(slot, ch, data)
        self._on_death(slot)

    def _on_death(self, slot: Slot) -> None:
        self.requeue_unstarted(slot)
        task = slot.task
        code = slot.proc.exitcode if slot.proc is not None else None
        slot.inflight.clear()
        if task is not None and not task.done:
            self.stats["died"] += 1
            self.finish(task, exc=WorkerUnavailable(
                f"worker process of pool {self.name!r} exited (code {code}) while running task "
                f"{task.name!r}; the pool replaces it, retry the request"))
        if slot.state != "retiring" or (task is not None and not task.done):
            self.stats["replaced"] += 1
        slot.state = "dead"
        if slot.proc is not None:
            slot.proc.join(timeout=1.0)
        self.dispose(slot)

    def requeue_unstarted(self, slot: Slot) -> None:
        """Tasks sent to ``slot`` behind its running task never started: back to the queue front
        (in order); cancelled ones are dropped."""
        for task in slot.unsend_queued():
            if not task.done:
                self.queue.appendleft(task)

    # -- outcomes ----------------------------------------------------------------------------------

    def handle_reply(self, slot: Slot, ch: int, data: Any) -> None:
        """A reply frame read from channel ``ch`` of ``slot``."""
        self.handle_reply_msg(slot, ch, pickle.loads(data))

    def handle_reply_msg(self, slot: Slot, ch: int, msg: tuple) -> None:
        """An unpickled reply ``(id, True, value) | (id, False, error data)``."""
        task_id, ok, value = msg
        task = slot.take_reply(ch, task_id)
        if task is None:
            return  # the reply of a task that left this worker (requeued or its worker ended)
        if ok:
            self.finish(task, value=value)
        else:
            self.finish(task, exc=error_from_data(value))
        if not ok and self.restart_on_error and slot.state != "retiring":
            self.retire(slot)
            return
        if slot.state == "busy" and not slot.inflight:
            slot.state = "idle"
            slot.ctl_bytes = 0  # an idle worker reads its pipe: what waited there is read now
            slot.idle_since = now = time.monotonic()
            if self.idle_timeout_s and now + self.idle_timeout_s < self.wake.at:
                self.wake()

    def finish(self, task: Task, *, value: Any = None, exc: BaseException | None = None,
               cancelled: bool = False) -> None:
        """Mark ``task`` done, release its admission budget and set its outcome: ``value``, ``exc``
        or (``cancelled``) its future cancelled."""
        if task.done:
            return
        task.done = True
        task.data = b""
        self.pending_tasks -= 1
        self.pending_bytes -= task.nbytes
        if self.pending_tasks == 0 and self.closing:  # close() waits for the drain
            self._drained.notify_all()
        if task.signal is not None:
            task.signal_waiter()
        fut = task.future
        if cancelled:
            fut.set_cancelled()
        elif not fut.done():
            if exc is not None:
                fut.set_exception(exc)
            else:
                self.stats["completed"] += 1
                fut.set_result(value)
        # the future and its task refer to each other: a cycle only the cyclic GC would free, and
        # its collections, paid by the owner, came every few round trips
        fut._task = None

    def cancel(self, task: Task) -> bool:
        """Cancel ``task``: dropped from the queue, or its worker ended when it runs. Takes the lock."""
        with self.lock:
            if task.done:
                return False
            self.stats["cancelled"] += 1
            if task in self.queue:
                self.queue.remove(task)
                self.finish(task, cancelled=True)
                return True
            slot = task.slot
            self.finish(task, cancelled=True)
            if slot is None or slot.task is not task:
                return True  # not started: it runs later and its reply is dropped
            self.requeue_unstarted(slot)
            slot.kill()
            self.wake()
            return True

    def withdraw(self, task: Task) -> bool:
        """Take ``task`` back if no worker has it yet (still queued): its future is cancelled and
        True returned; False once a worker holds it (it runs and answers). Takes the lock."""
        with self.lock:
            if task.done or task.slot is not None or task not in self.queue:
                return False
            self.queue.remove(task)
            self.stats["cancelled"] += 1
            self.finish(task, cancelled=True)
            return True

    # -- closing -----------------------------------------------------------------------------------

    def close(self, *, drain: bool, timeout_s: float) -> list[Slot] | None:
        """Refuse new tasks; wait for the pending ones (``drain``, up to ``timeout_s``); fail the
        rest and tell every worker to stop. Returns the slots to join, None when already closed.
        Takes the lock."""
        with self.lock:
            if self.closed:
                return None
            self.closing = True
            if drain:
                end = time.monotonic() + timeout_s
                while self.pending_tasks and time.monotonic() < end:
                    self._drained.wait(timeout=max(0.0, end - time.monotonic()))
            queued = list(self.queue)
            self.queue.clear()
            for task in queued:
                self.finish(task, exc=WorkerUnavailable(f"worker pool {self.name!r} closed before the task ran"))
            running = [t for s in self.slots for t in s.inflight]
            for task in running:
                self.finish(task, exc=WorkerUnavailable(f"worker pool {self.name!r} closed while the task ran"))
            slots = list(self.slots)
            for slot in slots:
                if slot.state == "idle" and slot.request_fd is not None:
                    slot.send_exit()
                elif slot.state == "busy":
                    slot.kill()  # its task was failed above: nothing waits for the rest of it
                slot.state = "retiring"
            self.closed = True
            self.wake()
        return slots

    def dispose_all(self, slots: list[Slot]) -> None:
        """After close: every slot dead and its pipes closed. Takes the lock."""
        with self.lock:
            for slot in slots:
                slot.state = "dead"
                self.dispose(slot)
            self.slots.clear()
