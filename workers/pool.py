"""The owner side of the process worker pool (spec §8.1-8.2; upstream ``WorkerTaskPool``).

A :class:`WorkerPool` runs up to ``size`` worker processes (``multiprocess``, start method
``forkserver`` by default or ``spawn``; never plain ``fork``). Each worker runs one task at a time.
It reads tasks from one request pipe and answers each on the reply channel (a pipe of its own)
the task was sent with; a worker has ``pipeline_depth`` channels, one per task it may hold. A
caller in :meth:`WorkerPool.run` reads its reply channel itself, so a round trip costs two small
pickles, two frames and the wake-up of that one thread: no dispatcher hop and no hand-off
between callers whose tasks share a worker. One dispatcher thread watches the process sentinels,
deadlines, idle workers and the channels of tasks no ``run()`` caller waits on (``submit()``).

- Admission: ``max_pending_tasks`` / ``max_pending_bytes`` (queued + running, bytes = pickled
  payload size) fail fast with :class:`~memory_core.errors.WorkerOverloaded`.
- Timeout and cancellation: a running task past its deadline, or cancelled through its future,
  ends its worker (SIGKILL); the pool starts a replacement on demand.
- A worker that dies mid-task fails that task with :class:`~memory_core.errors.WorkerUnavailable`.
- Idle workers retire after ``idle_timeout_s``; ``restart_on_error`` replaces a worker after a
  failed task; ``close()`` drains queued and running tasks, then stops the workers.

Workers never import ``memory_core``: the target is :func:`workers.runtime.worker_main`, and
:mod:`workers.launch` starts them without re-importing the owner's ``__main__``.
"""

from __future__ import annotations

import _thread
import concurrent.futures
import importlib
import itertools
import os
import pickle
import select
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from multiprocess import connection as mp_connection

from memory_core.errors import (
    WorkerError,
    WorkerOverloaded,
    WorkerTimeout,
    WorkerUnavailable,
    error_from_data,
)
from workers.frames import NO_REPLY, read_frame, write_frame
from workers.launch import get_context, start_worker
from workers.runtime import worker_main

DEFAULT_MAX_PENDING_TASKS = 1024
DEFAULT_MAX_PENDING_BYTES = 64 * 1024 * 1024
INDEXING_MAX_PENDING_BYTES = 256 * 1024 * 1024
DEFAULT_IDLE_TIMEOUT_S = 30 * 60.0
MAX_PIPELINE_DEPTH = 8
# bytes of task frames and of control frames that may wait in a busy worker's request pipe
# (its buffer is 64 KiB: together they must never fill it, see _dispatch_locked)
PIPELINE_MAX_BYTES = 32 * 1024
CONTROL_MAX_BYTES = 16 * 1024
_EXIT = pickle.dumps(("exit",), protocol=pickle.HIGHEST_PROTOCOL)

# --- pool --------------------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class _Task:
    id: int
    name: str
    data: bytes
    nbytes: int
    future: "TaskFuture | _RunResult"
    deadline: float | None
    timeout_s: float | None
    slot: "_Slot | None" = None
    channel: int | None = None  # the reply channel of ``slot`` this task holds while in flight
    done: bool = False
    # a caller thread waits in ``run()`` and reads this task's reply channel itself
    waiter: bool = False
    # the parked caller's wake-up lock (held; released by ``_signal``) while the task has no worker
    signal: Any = None
    # ``(slot, channel)`` when ``_submit`` already registered the waiter as that channel's reader
    # (``slot.reading``); captured under the lock, as ``task.slot`` may change before it reads
    claimed: Any = None


@dataclass(eq=False)
class _Slot:
    index: int
    state: str = "starting"  # starting | idle | busy | retiring | dead
    proc: Any = None
    sentinel: int | None = None
    request_fd: int | None = None  # owner -> worker frames
    channel_fds: list[int] = field(default_factory=list)  # worker -> owner reply channels
    pollers: list[Any] = field(default_factory=list)  # per channel: poll on its fd + the sentinel
    owners: list[_Task | None] = field(default_factory=list)  # the task holding each channel
    free: list[int] = field(default_factory=list)
    # tasks sent to this worker whose replies were not consumed yet, in send order; the worker
    # runs them one at a time in that order (``pipeline_depth`` > 1 sends the next ones ahead)
    inflight: deque = field(default_factory=deque)
    reading: set[int] = field(default_factory=set)  # channels a thread is reading right now
    ctl_bytes: int = 0  # control frames written while busy (they wait in the request pipe)
    gone: bool = False  # the worker exited; its death is handled once no channel is being read
    handles: tuple = ()  # the multiprocess Connection objects that own the fds above
    idle_since: float = field(default_factory=time.monotonic)
    tasks_run: int = 0

    @property
    def task(self) -> _Task | None:
        """The task the worker runs now (or last ran, while its reply waits to be read)."""
        return self.inflight[0] if self.inflight else None

    @property
    def queued(self) -> list[_Task]:
        """Tasks sent ahead behind the running one."""
        return list(self.inflight)[1:]

    def queued_bytes(self) -> int:
        """Bytes of the task frames sent ahead (they wait in the request pipe)."""
        return sum(t.nbytes for t in itertools.islice(self.inflight, 1, None))


class TaskFuture(concurrent.futures.Future):
    """A task's future; ``cancel()`` also works on a running task (its worker is ended)."""

    def __init__(self, pool: "WorkerPool") -> None:
        super().__init__()
        self._pool = pool
        self._task: _Task | None = None

    def cancel(self) -> bool:
        if self.done():
            return False
        task = self._task
        if task is None:
            return super().cancel()
        return self._pool._cancel(task)


class _RunResult:
    """The outcome slot of a ``run()`` task: a future's set/get without its condition variable
    (the waiting caller reads it after seeing ``task.done`` under the pool lock)."""

    __slots__ = ("_task", "_value", "_exc", "_done")

    def __init__(self) -> None:
        self._task: _Task | None = None
        self._value: Any = None
        self._exc: BaseException | None = None
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, value: Any) -> None:
        self._value = value
        self._done = True

    def set_exception(self, exc: BaseException) -> None:
        self._exc = exc
        self._done = True

    def result(self) -> Any:
        if self._exc is not None:
            raise self._exc
        return self._value


class WorkerPool:
    """A bounded pool of worker processes; each runs one task at a time (spec §8.1).

    ``task_modules``: modules every worker imports at start, which add tasks with
    :func:`workers.tasks.task` (tests pass ``tests.worker_tasks``; the product needs none)."""

    def __init__(
        self,
        name: str = "retrieval",
        size: int | None = None,
        *,
        max_pending_tasks: int = DEFAULT_MAX_PENDING_TASKS,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
        task_timeout_s: float | None = None,
        idle_timeout_s: float | None = DEFAULT_IDLE_TIMEOUT_S,
        restart_on_error: bool = False,
        start_method: str = "forkserver",
        pipeline_depth: int = 1,
        task_modules: tuple[str, ...] = (),
    ) -> None:
        size = os.cpu_count() or 1 if size is None else size
        for key, value in (("size", size), ("max_pending_tasks", max_pending_tasks),
                           ("max_pending_bytes", max_pending_bytes)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"WorkerPool {key} must be a positive integer, got {value!r}")
        self.name = name
        self.size = size
        self.max_pending_tasks = max_pending_tasks
        self.max_pending_bytes = max_pending_bytes
        self.task_timeout_s = task_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.restart_on_error = restart_on_error
        self.start_method = start_method
        # modules each worker imports at start to register extra tasks (tests' diagnostics)
        self.task_modules = tuple(task_modules)
        # Tasks a busy worker may hold: 1 = one at a time; 2 = the next task already waits in the
        # worker's pipe, so a worker never idles while the owner's dispatcher thread gets CPU to
        # hand it the next one (on 2 cores shared with the owner that gap cost ~25% of the worker).
        # Only for short, uniform tasks (retrieval): a pipelined task waits behind its worker's task.
        # Each worker has this many reply channels, one per task it holds.
        if not isinstance(pipeline_depth, int) or not 1 <= pipeline_depth <= MAX_PIPELINE_DEPTH:
            raise ValueError(f"WorkerPool pipeline_depth must be an integer in 1..{MAX_PIPELINE_DEPTH}, "
                             f"got {pipeline_depth!r}")
        self.pipeline_depth = pipeline_depth
        get_context(start_method)  # refuses 'fork' and unknown methods now, not at the first task
        self._lock = threading.RLock()
        self._idle_cv = threading.Condition(self._lock)
        self._queue: deque[_Task] = deque()
        self._slots: list[_Slot] = []
        self._slot_ids = itertools.count(1)
        self._task_ids = itertools.count(1)
        self._pending_tasks = 0
        self._pending_bytes = 0
        self._closing = False
        self._closed = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._wake_at = float("inf")
        self.stats = {"started": 0, "replaced": 0, "retired_idle": 0, "timeouts": 0, "cancelled": 0,
                      "died": 0, "overloaded": 0, "completed": 0}
        self._dispatcher = threading.Thread(target=self._dispatch_loop, name=f"worker-pool-{name}", daemon=True)
        self._dispatcher.start()

    # -- public API ------------------------------------------------------------------------------

    def submit(self, task_name: str, payload: Any = None, *, timeout_s: float | None = None) -> TaskFuture:
        """Queue ``task_name(payload)``; the future holds the value or a typed Worker* error."""
        return self._submit(task_name, payload, timeout_s, False)

    def _submit(self, task_name: str, payload: Any, timeout_s: float | None, waiter: bool) -> Any:
        future = _RunResult() if waiter else TaskFuture(self)
        tid = next(self._task_ids)
        data = pickle.dumps(("task", tid, task_name, payload), protocol=pickle.HIGHEST_PROTOCOL)
        timeout = self.task_timeout_s if timeout_s is None else timeout_s
        to_start: list[_Slot] = []
        with self._lock:
            if self._closing:
                future.set_exception(WorkerUnavailable(f"worker pool {self.name!r} is closed"))
                return future
            if self._pending_tasks >= self.max_pending_tasks or self._pending_bytes + len(data) > self.max_pending_bytes:
                self.stats["overloaded"] += 1
                future.set_exception(WorkerOverloaded(
                    f"worker task capacity reached in pool {self.name!r} ({self._pending_tasks} tasks, "
                    f"{self._pending_bytes} bytes pending; limits {self.max_pending_tasks} tasks, "
                    f"{self.max_pending_bytes} bytes); retry later"))
                return future
            deadline = time.monotonic() + timeout if timeout else None
            task = _Task(tid, task_name, data, len(data), future, deadline, timeout, waiter=waiter)
            future._task = task
            self._pending_tasks += 1
            self._pending_bytes += len(data)
            self._queue.append(task)
            to_start = self._dispatch_locked()
            if waiter and task.slot is not None and not task.slot.gone and task.channel not in task.slot.reading:
                # sent at once: the caller reads its channel from here, without a second lock round
                task.slot.reading.add(task.channel)
                task.claimed = (task.slot, task.channel)
            if deadline is not None and deadline < self._wake_at:
                self._wake()
        for slot in to_start:
            self._start_slot(slot)
        return future

    def run(self, task_name: str, payload: Any = None, *, timeout_s: float | None = None) -> Any:
        """Submit and wait; returns the value or raises the typed error.

        The calling thread reads its task's reply channel itself, so a round trip wakes only
        that thread: no dispatcher hop, no hand-off between callers. The dispatcher still
        handles deadlines, idle retirement and deaths."""
        future = self._submit(task_name, payload, timeout_s, True)
        task = future._task
        if task is not None:
            self._wait_direct(task)
        return future.result()

    def broadcast(self, control: str, payload: Any) -> int:
        """Send a control message (no reply) to every live worker; returns how many got it."""
        data = pickle.dumps(("ctl", control, payload), protocol=pickle.HIGHEST_PROTOCOL)
        sent = 0
        with self._lock:
            for slot in self._slots:
                if slot.state not in ("idle", "busy") or slot.request_fd is None or slot.gone:
                    continue
                if slot.state == "busy":
                    # a busy worker reads them after its task: they wait in the pipe, and a write
                    # under the pool lock must not block (see _dispatch_locked). Past the budget it
                    # misses this one; its next task prunes derived state itself (``keep``).
                    if slot.ctl_bytes + len(data) > CONTROL_MAX_BYTES:
                        continue
                    slot.ctl_bytes += len(data)
                try:
                    write_frame(slot.request_fd, data, NO_REPLY)
                    sent += 1
                except OSError:
                    pass
        return sent

    def prewarm(self, workers: int | None = None) -> None:
        """Start workers now instead of on the first task."""
        to_start = []
        with self._lock:
            want = min(self.size, workers or self.size)
            while len(self._slots) < want and not self._closing:
                slot = _Slot(next(self._slot_ids))
                self._slots.append(slot)
                to_start.append(slot)
        for slot in to_start:
            self._start_slot(slot)

    def workers(self) -> list[dict[str, Any]]:
        """The live workers: ``{"pid", "state", "tasks_run"}`` each."""
        with self._lock:
            return [{"pid": s.proc.pid, "state": s.state, "tasks_run": s.tasks_run} for s in self._slots
                    if s.proc is not None and s.state in ("idle", "busy")]

    def worker_pids(self) -> list[int]:
        with self._lock:
            return [s.proc.pid for s in self._slots if s.proc is not None and s.state in ("idle", "busy")]

    def busy_pids(self) -> list[int]:
        with self._lock:
            return [s.proc.pid for s in self._slots if s.proc is not None and s.state == "busy"]

    @property
    def pending_tasks(self) -> int:
        return self._pending_tasks

    @property
    def pending_bytes(self) -> int:
        return self._pending_bytes

    def close(self, *, drain: bool = True, timeout_s: float = 30.0) -> None:
        """Refuse new tasks; finish queued and running ones (``drain``), then stop every worker."""
        with self._lock:
            if self._closed:
                return
            self._closing = True
            if drain:
                end = time.monotonic() + timeout_s
                while self._pending_tasks and time.monotonic() < end:
                    self._idle_cv.wait(timeout=max(0.0, end - time.monotonic()))
            queued = list(self._queue)
            self._queue.clear()
            for task in queued:
                self._finish(task, exc=WorkerUnavailable(f"worker pool {self.name!r} closed before the task ran"))
            running = [t for s in self._slots for t in s.inflight]
            for task in running:
                self._finish(task, exc=WorkerUnavailable(f"worker pool {self.name!r} closed while the task ran"))
            slots = list(self._slots)
            for slot in slots:
                if slot.state == "idle" and slot.request_fd is not None:
                    self._send_exit(slot)
                elif slot.state == "busy":
                    self._kill(slot)  # its task was failed above: nothing waits for the rest of it
                slot.state = "retiring"
            self._closed = True
            self._wake()
        for slot in slots:
            if slot.proc is not None:
                slot.proc.join(timeout=2.0)
                if slot.proc.is_alive():
                    slot.proc.kill()
                    slot.proc.join(timeout=2.0)
        self._dispatcher.join(timeout=5.0)
        with self._lock:
            for slot in slots:
                slot.state = "dead"
                self._dispose(slot)
            self._slots.clear()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- internals (callers hold self._lock unless noted) ------------------------------------------

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass

    def _dispatch_locked(self) -> list[_Slot]:
        """Hand queued tasks to idle workers (then, with ``pipeline_depth`` > 1, to busy ones with
        a free reply channel); returns new slots the caller must start (unlocked)."""
        to_start: list[_Slot] = []
        if self._closed:
            return to_start
        while self._queue:
            slot = None
            for s in self._slots:
                if s.state == "idle" and not s.gone:
                    slot = s
                    break
            if slot is None:
                starting = sum(1 for s in self._slots if s.state == "starting")
                if starting < len(self._queue) and len(self._slots) < self.size and not self._closing:
                    slot = _Slot(next(self._slot_ids))
                    self._slots.append(slot)
                    to_start.append(slot)
                    continue
                if self.pipeline_depth > 1:
                    # a task sent ahead waits in the request pipe until its worker is free, so the
                    # frames ahead must fit the pipe's buffer: a write to a busy worker must never
                    # block while the pool lock is held (the callers that would read that worker's
                    # replies need the lock to start reading: a deadlock)
                    nbytes = self._queue[0].nbytes
                    for s in self._slots:
                        if (s.state == "busy" and s.free and not s.gone
                                and (slot is None or len(s.inflight) < len(slot.inflight))
                                and nbytes + s.queued_bytes() <= PIPELINE_MAX_BYTES):
                            slot = s
                if slot is None:
                    break
            task = self._queue.popleft()
            if not self._send_task(slot, task):
                self._queue.appendleft(task)  # the worker is going; its death is handled by the loop
                break
        return to_start

    def _send_task(self, slot: _Slot, task: _Task) -> bool:
        """Write ``task`` to ``slot``'s worker on a free reply channel (lock held)."""
        ch = slot.free.pop()
        try:
            write_frame(slot.request_fd, task.data, ch)
        except OSError:
            slot.free.append(ch)
            slot.state = "retiring"
            self._wake()
            return False
        slot.owners[ch] = task
        slot.inflight.append(task)
        slot.state = "busy"
        task.slot = slot
        task.channel = ch
        if not task.waiter:
            self._wake()  # nobody reads this reply in run(): the dispatcher must watch the channel
        elif task.signal is not None:
            self._signal(task)
        return True

    def _start_slot(self, slot: _Slot) -> None:
        """Start a worker process for ``slot`` (called without the lock; may take tens of ms)."""
        try:
            proc, req_w, reply_rs = start_worker(
                self.start_method, worker_main, name=f"memory-core-{self.name}-{slot.index}",
                channels=self.pipeline_depth, args=(self.name, self.task_modules))
        except Exception as exc:  # noqa: BLE001
            with self._lock:
                if slot in self._slots:
                    self._slots.remove(slot)
                if self._queue and not any(s.state in ("idle", "starting", "busy") for s in self._slots):
                    task = self._queue.popleft()
                    self._finish(task, exc=WorkerUnavailable(f"could not start a worker for pool {self.name!r}: {exc}"))
            return
        with self._lock:
            self.stats["started"] += 1
            slot.proc = proc
            slot.sentinel = proc.sentinel
            slot.handles = (req_w, *reply_rs)
            slot.request_fd = req_w.fileno()
            slot.channel_fds = [r.fileno() for r in reply_rs]
            for fd in slot.channel_fds:
                poller = select.poll()
                poller.register(fd, select.POLLIN)
                poller.register(proc.sentinel, select.POLLIN)
                slot.pollers.append(poller)
            slot.owners = [None] * len(reply_rs)
            slot.free = list(range(len(reply_rs) - 1, -1, -1))
            if self._closed or slot.state == "retiring":
                proc.kill()
                return
            slot.state = "idle"
            slot.idle_since = time.monotonic()
            to_start = self._dispatch_locked()
            self._wake()  # the dispatcher must watch the new sentinel
        for extra in to_start:
            self._start_slot(extra)

    def _retire_task(self, task: _Task) -> None:
        """Mark ``task`` done and release its admission budget (called with the pool lock held)."""
        task.done = True
        task.data = b""
        self._pending_tasks -= 1
        self._pending_bytes -= task.nbytes
        if self._pending_tasks == 0 and self._closing:  # close() waits for the drain
            self._idle_cv.notify_all()
        if task.signal is not None:
            self._signal(task)

    def _finish(self, task: _Task, *, value: Any = None, exc: BaseException | None = None) -> None:
        if task.done:
            return
        self._retire_task(task)
        fut = task.future
        if fut.done():
            return
        if exc is not None:
            fut.set_exception(exc)
        else:
            self.stats["completed"] += 1
            fut.set_result(value)

    def _kill(self, slot: _Slot) -> None:
        slot.state = "retiring"
        if slot.proc is not None and slot.proc.pid:
            try:
                os.kill(slot.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, OSError):
                pass

    def _send_exit(self, slot: _Slot) -> bool:
        try:
            write_frame(slot.request_fd, _EXIT, NO_REPLY)
            return True
        except OSError:
            return False

    def _dispose(self, slot: _Slot) -> None:
        """Forget a dead slot and close its pipes, unless a thread still reads one (it closes them)."""
        if slot in self._slots:
            self._slots.remove(slot)
        if slot.reading:
            return
        handles, slot.handles = slot.handles, ()
        slot.request_fd = None
        for handle in handles:
            try:
                handle.close()
            except OSError:
                pass

    def _requeue_unstarted(self, slot: _Slot) -> None:
        """Tasks sent to ``slot`` behind its running task never started: back to the queue front
        (in order); cancelled ones are dropped. The running task stays in ``inflight``."""
        while len(slot.inflight) > 1:
            task = slot.inflight.pop()
            slot.owners[task.channel] = None
            task.slot = None
            task.channel = None
            if not task.done:
                self._queue.appendleft(task)

    def _cancel(self, task: _Task) -> bool:
        with self._lock:
            if task.done:
                return False
            self.stats["cancelled"] += 1
            if task in self._queue:
                self._queue.remove(task)
                self._finish_cancelled(task)
                return True
            slot = task.slot
            self._finish_cancelled(task)
            if slot is None or slot.task is not task:
                return True  # not started: it runs later and its reply is dropped
            self._requeue_unstarted(slot)
            self._kill(slot)
            self._wake()
            return True

    def _finish_cancelled(self, task: _Task) -> None:
        self._retire_task(task)
        if isinstance(task.future, TaskFuture):
            concurrent.futures.Future.cancel(task.future)
        else:
            task.future.set_exception(concurrent.futures.CancelledError())

    def _handle_reply(self, slot: _Slot, ch: int, data: Any) -> None:
        """A reply frame read from channel ``ch`` of ``slot`` (lock held)."""
        self._handle_reply_msg(slot, ch, pickle.loads(data))

    def _handle_reply_msg(self, slot: _Slot, ch: int, msg: tuple) -> None:
        """An unpickled reply ``(id, True, value) | (id, False, error data)`` (lock held)."""
        task_id, ok, value = msg
        task = slot.owners[ch]
        if task is None or task.id != task_id:
            return  # the reply of a task that left this worker (requeued or its worker ended)
        slot.owners[ch] = None
        slot.free.append(ch)
        if slot.inflight[0] is task:
            slot.inflight.popleft()
        else:
            slot.inflight.remove(task)
        slot.tasks_run += 1
        if ok:
            self._finish(task, value=value)
        else:
            self._finish(task, exc=error_from_data(value))
        if not ok and self.restart_on_error and slot.state != "retiring":
            self._retire(slot)
            return
        if slot.state == "busy" and not slot.inflight:
            slot.state = "idle"
            slot.ctl_bytes = 0  # an idle worker reads its pipe: what waited there is read now
            slot.idle_since = now = time.monotonic()
            if self.idle_timeout_s and now + self.idle_timeout_s < self._wake_at:
                self._wake()

    def _retire(self, slot: _Slot) -> None:
        slot.state = "retiring"
        if not self._send_exit(slot):
            self._kill(slot)

    def _worker_gone(self, slot: _Slot) -> None:
        """``slot``'s worker exited (lock held). Once no thread reads its channels: handle the
        replies it sent before exiting, in order, then its death."""
        if slot.state == "dead":
            return
        slot.gone = True
        if slot.reading:
            return  # each reader sees the exit too and calls again when it is done
        for task in list(slot.inflight):
            ch = task.channel
            if ch is None or not _readable(slot.channel_fds[ch]):
                break  # replies come in order: this task and the ones behind it got none
            data = read_frame(slot.channel_fds[ch])
            if data is None:
                break
            self._handle_reply(slot, ch, data)
        self._on_death(slot)

    def _on_death(self, slot: _Slot) -> None:
        self._requeue_unstarted(slot)
        task = slot.task
        code = slot.proc.exitcode if slot.proc is not None else None
        slot.inflight.clear()
        if task is not None and not task.done:
            self.stats["died"] += 1
            self._finish(task, exc=WorkerUnavailable(
                f"worker process of pool {self.name!r} exited (code {code}) while running task "
                f"{task.name!r}; the pool replaces it, retry the request"))
        if slot.state != "retiring" or (task is not None and not task.done):
            self.stats["replaced"] += 1
        slot.state = "dead"
        if slot.proc is not None:
            slot.proc.join(timeout=1.0)
        self._dispose(slot)

    def _dispatch_loop(self) -> None:
        while True:
            with self._lock:
                if self._closed and not any(s.proc is not None and s.state != "dead" for s in self._slots):
                    return
                watched: dict[int, tuple[_Slot, int | None]] = {}
                now = time.monotonic()
                wake_at = float("inf")
                for slot in self._slots:
                    if slot.state == "dead":
                        continue
                    if slot.sentinel is not None and not slot.gone:
                        watched[slot.sentinel] = (slot, None)
                    for task in slot.inflight:
                        # replies a caller in run() reads itself are not watched here
                        if (not task.waiter or task.done) and task.channel not in slot.reading:
                            watched[slot.channel_fds[task.channel]] = (slot, task.channel)
                        if task.deadline is not None and not task.done:
                            wake_at = min(wake_at, task.deadline)
                    if slot.state == "busy" and self.idle_timeout_s:
                        # it may go idle without the dispatcher seeing the reply; look again by then
                        wake_at = min(wake_at, now + self.idle_timeout_s)
                    if slot.state == "idle" and self.idle_timeout_s:
                        wake_at = min(wake_at, slot.idle_since + self.idle_timeout_s)
                for task in self._queue:
                    if task.deadline is not None:
                        wake_at = min(wake_at, task.deadline)
                if self._closed:
                    wake_at = min(wake_at, now + 0.05)
                self._wake_at = wake_at
            timeout = None if wake_at == float("inf") else max(0.0, wake_at - now)
            ready = mp_connection.wait([*watched, self._wake_r], timeout)
            to_start: list[_Slot] = []
            with self._lock:
                if self._wake_r in ready:
                    try:
                        os.read(self._wake_r, 4096)
                    except OSError:
                        pass
                # replies before deaths: a worker may reply and then exit
                for fd in ready:
                    slot, ch = watched.get(fd, (None, None))
                    if (slot is not None and ch is not None and slot.state != "dead" and ch not in slot.reading
                            and slot.owners[ch] is not None and _readable(fd)):
                        data = read_frame(fd)
                        if data is None:
                            self._worker_gone(slot)
                        else:
                            self._handle_reply(slot, ch, data)
                for fd in ready:
                    slot, ch = watched.get(fd, (None, None))
                    if slot is not None and ch is None:
                        self._worker_gone(slot)
                self._expire_locked(time.monotonic())
                to_start = self._dispatch_locked()
            for slot in to_start:
                threading.Thread(target=self._start_slot, args=(slot,), daemon=True).start()

    # -- a caller in run() reads its own reply channel -------------------------------------------

    @staticmethod
    def _signal(task: _Task) -> None:
        sig = task.signal
        task.signal = None
        try:
            sig.release()
        except RuntimeError:
            pass

    def _wait_direct(self, task: _Task) -> None:
        """Wait for ``task`` in the calling thread, reading its reply channel when it has one."""
        lock = self._lock
        sig = None
        try:
            claim, task.claimed = task.claimed, None
            if claim is not None and self._read_channel(claim[0], claim[1], task):
                return
            while True:
                with lock:
                    if task.done:
                        return
                    slot, ch = task.slot, task.channel
                    if slot is None or ch is None or slot.gone or ch in slot.reading:
                        # parked: woken when the task gets a worker or finishes
                        sig = _thread.allocate_lock()
                        sig.acquire()
                        task.signal = sig
                        slot = None
                    else:
                        slot.reading.add(ch)
                if slot is None:
                    sig.acquire(timeout=self._turn_timeout(task))
                    sig = None
                    continue
                if self._read_channel(slot, ch, task):
                    return
        except BaseException:
            with lock:
                if task.signal is not None and task.signal is sig:
                    task.signal = None
                task.waiter = False
                self._wake()  # its reply may still be due: the dispatcher reads it now
            raise

    @staticmethod
    def _turn_timeout(task: _Task) -> float:
        if task.deadline is None:
            return 1.0
        return min(1.0, max(0.001, task.deadline - time.monotonic() + 0.002))

    def _read_channel(self, slot: _Slot, ch: int, task: _Task) -> bool:
        """Wait (bounded) for the reply on channel ``ch`` or the exit of ``slot``'s worker and
        handle it; the caller registered ``ch`` in ``slot.reading``, which this releases.
        Returns whether ``task`` is done."""
        data = None
        exited = False
        try:
            fd = slot.channel_fds[ch]
            if task.deadline is None:
                # no deadline to watch: block in read; the worker's exit closes the channel (EOF)
                data = read_frame(fd)
                exited = data is None
            else:
                ms = min(1000, max(1, int((task.deadline - time.monotonic()) * 1000) + 2))
                events = slot.pollers[ch].poll(ms)
                if any(e_fd == fd for e_fd, _ in events):
                    data = read_frame(fd)
                    exited = data is None
                elif events:
                    exited = True
        finally:
            to_start: list[_Slot] = []
            # unpickled before taking the pool lock: the other callers wait less for it
            msg = None if data is None else _unpickled(data)
            with self._lock:
                slot.reading.discard(ch)
                if msg is not None and slot.state != "dead":
                    if isinstance(msg, BaseException):
                        raise msg  # where unpickling under the lock raised it
                    self._handle_reply_msg(slot, ch, msg)
                if exited or (slot.gone and not slot.reading):
                    self._worker_gone(slot)
                if slot.state == "dead" and not slot.reading and slot.handles:
                    self._dispose(slot)
                done = task.done
                if done and slot.owners[ch] is task:
                    self._wake()  # finished without its reply (it timed out waiting): the dispatcher reads it
                if self._queue:
                    to_start = self._dispatch_locked()
            for extra in to_start:
                threading.Thread(target=self._start_slot, args=(extra,), daemon=True).start()
        return done

    def _expire_locked(self, now: float) -> None:
        for slot in list(self._slots):
            task = slot.task
            if (task is not None and not task.done and task.deadline is not None and now >= task.deadline
                    and slot.state != "dead" and not _readable(slot.channel_fds[task.channel])):
                self.stats["timeouts"] += 1
                self._finish(task, exc=WorkerTimeout(
                    f"task {task.name!r} ran past its {task.timeout_s:g} s timeout in pool {self.name!r}; "
                    "its worker was ended"))
                self._requeue_unstarted(slot)
                self._kill(slot)
            elif (slot.state == "idle" and self.idle_timeout_s and not self._closing
                  and now - slot.idle_since >= self.idle_timeout_s):
                self.stats["retired_idle"] += 1
                self._retire(slot)
        for slot in self._slots:
            for task in slot.queued:
                if not task.done and task.deadline is not None and now >= task.deadline:
                    self.stats["timeouts"] += 1
                    self._finish(task, exc=WorkerTimeout(
                        f"task {task.name!r} waited past its {task.timeout_s:g} s timeout in pool {self.name!r}"))
        for task in list(self._queue):
            if task.deadline is not None and now >= task.deadline:
                self._queue.remove(task)
                self.stats["timeouts"] += 1
                self._finish(task, exc=WorkerTimeout(
                    f"task {task.name!r} waited past its {task.timeout_s:g} s timeout in pool {self.name!r}"))


def _unpickled(data: Any) -> tuple | BaseException:
    """The reply frame ``data`` unpickled, or the exception unpickling raised (the reader
    raises it once its bookkeeping under the pool lock has begun)."""
    try:
        return pickle.loads(data)
    except Exception as exc:  # noqa: BLE001
        return exc


def _readable(fd: int) -> bool:
    """Whether ``fd`` has data (or EOF) to read now."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


class InlinePool:
    """``pool.workers = 0``: the same task functions, run synchronously in the owner process."""

    def __init__(self, name: str = "inline", *, task_modules: tuple[str, ...] = ()) -> None:
        from workers import tasks

        for module in task_modules:
            importlib.import_module(module)

        self.name = name
        self.size = 0
        self._tasks = tasks
        self.context = tasks.WorkerContext(pool_name=name)
        self._lock = threading.Lock()

    def submit(self, task_name: str, payload: Any = None, *, timeout_s: float | None = None) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        try:
            fut.set_result(self.run(task_name, payload))
        except Exception as exc:  # noqa: BLE001
            fut.set_exception(exc)
        return fut

    def run(self, task_name: str, payload: Any = None, *, timeout_s: float | None = None) -> Any:
        fn = self._tasks.TASKS.get(task_name)
        if fn is None:
            raise WorkerError(f"unknown worker task {task_name!r}")
        try:
            return fn(payload, self.context)
        except self._tasks.TaskError as exc:
            raise error_from_data(exc.to_data()) from exc

    def broadcast(self, control: str, payload: Any) -> int:
        handler = self._tasks.CONTROLS.get(control)
        if handler is not None:
            handler(payload, self.context)
        return 1

    def workers(self) -> list[dict[str, Any]]:
        return []

    def worker_pids(self) -> list[int]:
        return []

    def close(self, **_: Any) -> None:
        self.context.cache.drop_database(None)


def create_pools(
    workers: int | None = None,
    *,
    max_pending_tasks: int = DEFAULT_MAX_PENDING_TASKS,
    max_pending_bytes: int | None = None,
    task_timeout_s: float | None = None,
    idle_timeout_s: float | None = DEFAULT_IDLE_TIMEOUT_S,
) -> "tuple[WorkerPool | InlinePool, WorkerPool | InlinePool]":
    """The two pools of spec §8.2: ``(retrieval, indexing)``; ``workers=0`` gives inline pools."""
    n = os.cpu_count() or 1 if workers is None else workers
    if n == 0:
        return InlinePool("retrieval"), InlinePool("indexing")
    retrieval = WorkerPool("retrieval", n, max_pending_tasks=max_pending_tasks,
                           max_pending_bytes=max_pending_bytes or DEFAULT_MAX_PENDING_BYTES,
                           task_timeout_s=task_timeout_s, idle_timeout_s=idle_timeout_s)
    indexing = WorkerPool("indexing", n, max_pending_tasks=max_pending_tasks,
                          max_pending_bytes=max_pending_bytes or INDEXING_MAX_PENDING_BYTES,
                          task_timeout_s=task_timeout_s, idle_timeout_s=idle_timeout_s)
    return retrieval, indexing
