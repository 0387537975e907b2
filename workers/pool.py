"""The worker pool's owner-side API: :class:`WorkerPool` and :func:`create_pools` (upstream
`src/plugin-sdk/process-runtime.ts`, `memory/manager-cpu-worker-runtime.ts`).

A :class:`WorkerPool` (upstream ``WorkerTaskPool``) runs up to ``size`` worker processes
(``multiprocess``, start method ``forkserver`` by default or ``spawn``; never plain ``fork``). Each
worker runs one task at a time.
It reads tasks from one request pipe and answers each on the reply channel (a pipe of its own)
the task was sent with; a worker has ``pipeline_depth`` channels, one per task it may hold.

- Admission: ``max_pending_tasks`` / ``max_pending_bytes`` (queued + running, bytes = pickled
  payload size) fail fast with :class:`~memory_core.errors.WorkerOverloaded`.
- Timeout and cancellation: a running task past its deadline, or cancelled through its future,
  ends its worker (SIGKILL); the pool starts a replacement on demand.
- A worker that dies mid-task fails that task with :class:`~memory_core.errors.WorkerUnavailable`.
- Idle workers retire after ``idle_timeout_s``; ``restart_on_error`` replaces a worker after a
  failed task; ``close()`` drains queued and running tasks, then stops the workers.

The rooms, owner side: this module (the API and :func:`create_pools`), :mod:`workers.scheduler`
(the state under the pool lock), :mod:`workers.waiting` (a ``run()`` caller reads its own reply),
:mod:`workers.dispatcher` (the thread that watches everything else), :mod:`workers.slot` (one
worker's pipes), :mod:`workers.futures`, :mod:`workers.launch` (starting a process) and
:mod:`workers.inline` (``workers = 0``). The worker side is :mod:`workers.runtime`.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from typing import Any

from workers import waiting
from workers.dispatcher import Dispatcher
from workers.futures import LoopResult, RunResult, TaskFuture
from workers.inline import InlinePool
from workers.launch import get_context, start_worker
from workers.runtime import worker_main
from workers.scheduler import Scheduler
from workers.slot import CONTROL_MAX_BYTES, Slot, Task, control_frame, task_frame

DEFAULT_MAX_PENDING_TASKS = 1024
DEFAULT_MAX_PENDING_BYTES = 64 * 1024 * 1024
INDEXING_MAX_PENDING_BYTES = 256 * 1024 * 1024
DEFAULT_IDLE_TIMEOUT_S = 30 * 60.0
MAX_PIPELINE_DEPTH = 8


class WorkerPool:
    """A bounded pool of worker processes; each runs one task at a time (upstream
    `src/plugin-sdk/process-runtime.ts`).

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
        # worker's pipe, so a worker does not idle while the owner's dispatcher waits for a core to
        # hand it the next one. Only for short, uniform tasks (retrieval): a pipelined task waits
        # behind its worker's task. Each worker has this many reply channels, one per task it holds.
        if not isinstance(pipeline_depth, int) or not 1 <= pipeline_depth <= MAX_PIPELINE_DEPTH:
            raise ValueError(f"WorkerPool pipeline_depth must be an integer in 1..{MAX_PIPELINE_DEPTH}, "
                             f"got {pipeline_depth!r}")
        self.pipeline_depth = pipeline_depth
        get_context(start_method)  # refuses 'fork' and unknown methods now, not at the first task
        self._task_ids = itertools.count(1)
        self.scheduler = Scheduler(name, size, max_pending_tasks=max_pending_tasks,
                                   max_pending_bytes=max_pending_bytes, idle_timeout_s=idle_timeout_s,
                                   restart_on_error=restart_on_error, pipeline_depth=pipeline_depth,
                                   launch=self._launch)
        self.stats = self.scheduler.stats
        self._dispatcher = Dispatcher(self.scheduler)
        self._dispatcher.start()

    def _launch(self, slot: Slot) -> tuple[Any, Any, list[Any]]:
        return start_worker(self.start_method, worker_main, name=f"memory-core-{self.name}-{slot.index}",
                            channels=self.pipeline_depth, args=(self.name, self.task_modules))

    # -- tasks -------------------------------------------------------------------------------------

    def submit(self, task_name: str, payload: Any = None, *, timeout_s: float | None = None) -> TaskFuture:
        """Queue ``task_name(payload)``; the future holds the value or a typed Worker* error."""
        future = TaskFuture(self.scheduler.cancel, self.scheduler.withdraw)
        self._submit(task_name, payload, timeout_s, future, False)
        return future

    def run(self, task_name: str, payload: Any = None, *, timeout_s: float | None = None) -> Any:
        """Submit and wait; returns the value or raises the typed error.

        The calling thread reads its task's reply channel itself (:mod:`workers.waiting`); the
        dispatcher still handles deadlines, idle retirement and deaths."""
        result = RunResult()
        task = self._submit(task_name, payload, timeout_s, result, True)
        if not result._done:  # admitted and not failed yet
            waiting.wait_for(self.scheduler, task)
        return result.result()

    async def run_async(self, task_name: str, payload: Any = None, *, timeout_s: float | None = None) -> Any:
        """:meth:`run` for an asyncio caller: the running event loop reads the task's reply itself
        (:func:`workers.waiting.read_on_loop`), no thread waits; the dispatcher still handles
        deadlines and deaths. A caller cancelled while the task runs leaves its reply to the
        dispatcher. Workers that must be started start in threads, never on the loop."""
        loop = asyncio.get_running_loop()
        result = LoopResult(loop)
        task = self._submit(task_name, payload, timeout_s, result, True, start=self.scheduler.start_in_background)
        # not done yet unless refused at admission (closed, over capacity)
        release = None if result.done() else waiting.read_on_loop(self.scheduler, task, loop)
        try:
            return await result.future
        finally:
            if release is not None:
                release()

    def _submit(self, task_name: str, payload: Any, timeout_s: float | None, future: Any, waiter: bool,
                start: Any = None) -> Task:
        tid = next(self._task_ids)
        data = task_frame(tid, task_name, payload)
        timeout = self.task_timeout_s if timeout_s is None else timeout_s
        task = Task(tid, task_name, data, len(data), future, None, timeout, waiter=waiter)
        to_start = self.scheduler.submit(task)
        if to_start and start is not None:
            start(to_start)
        else:
            for slot in to_start:
                self.scheduler.start(slot)
        return task

    def broadcast(self, control: str, payload: Any) -> int:
        """Send a control message (no reply) to every live worker; returns how many got it."""
        data = control_frame(control, payload)
        sent = 0
        with self.scheduler.lock:
            for slot in self.scheduler.slots:
                if slot.state not in ("idle", "busy") or slot.request_fd is None or slot.gone:
                    continue
                # past the budget a busy worker misses this one; its next task prunes derived state
                # itself (``keep``)
                if slot.send_control(data, CONTROL_MAX_BYTES):
                    sent += 1
        return sent

    # -- workers -----------------------------------------------------------------------------------

    def prewarm(self, workers: int | None = None) -> None:
        """Start workers now instead of on the first task."""
        for slot in self.scheduler.new_slots(min(self.size, workers or self.size)):
            self.scheduler.start(slot)

    def workers(self) -> list[dict[str, Any]]:
        """The live workers: ``{"pid", "state", "tasks_run"}`` each."""
        with self.scheduler.lock:
            return [{"pid": s.proc.pid, "state": s.state, "tasks_run": s.tasks_run}
                    for s in self.scheduler.slots if s.live]

    def worker_pids(self) -> list[int]:
        with self.scheduler.lock:
            return [s.proc.pid for s in self.scheduler.slots if s.live]

    def busy_pids(self) -> list[int]:
        with self.scheduler.lock:
            return [s.proc.pid for s in self.scheduler.slots if s.proc is not None and s.state == "busy"]

    @property
    def pending_tasks(self) -> int:
        return self.scheduler.pending_tasks

    @property
    def pending_bytes(self) -> int:
        return self.scheduler.pending_bytes

    # -- closing -----------------------------------------------------------------------------------

    def close(self, *, drain: bool = True, timeout_s: float = 30.0) -> None:
        """Refuse new tasks; finish queued and running ones (``drain``), then stop every worker."""
        slots = self.scheduler.close(drain=drain, timeout_s=timeout_s)
        if slots is None:
            return
        for slot in slots:
            if slot.proc is not None:
                slot.proc.join(timeout=2.0)
                if slot.proc.is_alive():
                    slot.proc.kill()
                    slot.proc.join(timeout=2.0)
        self._dispatcher.join(timeout=5.0)
        self.scheduler.dispose_all(slots)
        self.scheduler.wake.close()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def create_pools(
    workers: int | None = None,
    *,
    max_pending_tasks: int = DEFAULT_MAX_PENDING_TASKS,
    max_pending_bytes: int | None = None,
    task_timeout_s: float | None = None,
    idle_timeout_s: float | None = DEFAULT_IDLE_TIMEOUT_S,
) -> tuple[WorkerPool | InlinePool, WorkerPool | InlinePool]:
    """The two pools of upstream `memory/manager-cpu-worker-runtime.ts`: ``(retrieval, indexing)``;
    ``workers=0`` gives inline pools."""
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
