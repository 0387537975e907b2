"""The pool's dispatcher thread: it watches worker exits, deadlines, idle workers and the reply
channels no ``run()`` caller reads (``submit()`` tasks), and hands queued tasks out after each."""

from __future__ import annotations

import threading
import time

from multiprocess import connection as mp_connection

from memory_core.errors import WorkerTimeout
from workers.frames import read_frame
from workers.scheduler import Scheduler
from workers.slot import Slot, readable


class Dispatcher:
    """One thread per pool; it ends once the pool is closed and every worker is gone."""

    def __init__(self, sched: Scheduler) -> None:
        self._sched = sched
        self._thread = threading.Thread(target=self._loop, name=f"worker-pool-{sched.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout=timeout)

    def _watch(self) -> tuple[dict[int, tuple[Slot, int | None]], float, float] | None:
        """``(fds to watch -> (slot, channel or None for its sentinel), wake-up time, now)``, or
        None when the thread is done (lock held)."""
        sched = self._sched
        if sched.closed and not any(s.proc is not None and s.state != "dead" for s in sched.slots):
            return None
        watched: dict[int, tuple[Slot, int | None]] = {}
        now = time.monotonic()
        wake_at = float("inf")
        idle_s = sched.idle_timeout_s
        for slot in sched.slots:
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
            if slot.state == "busy" and idle_s:
                # it may go idle without the dispatcher seeing the reply; look again by then
                wake_at = min(wake_at, now + idle_s)
            if slot.state == "idle" and idle_s:
                wake_at = min(wake_at, slot.idle_since + idle_s)
        for task in sched.queue:
            if task.deadline is not None:
                wake_at = min(wake_at, task.deadline)
        if sched.closed:
            wake_at = min(wake_at, now + 0.05)
        sched.wake.at = wake_at
        return watched, wake_at, now

    def _loop(self) -> None:
        sched = self._sched
        while True:
            with sched.lock:
                watch = self._watch()
            if watch is None:
                return
            watched, wake_at, now = watch
            timeout = None if wake_at == float("inf") else max(0.0, wake_at - now)
            ready = mp_connection.wait([*watched, sched.wake.fd], timeout)
            with sched.lock:
                if sched.wake.fd in ready:
                    sched.wake.drain()
                # replies before deaths: a worker may reply and then exit
                for fd in ready:
                    slot, ch = watched.get(fd, (None, None))
                    if (slot is not None and ch is not None and slot.state != "dead" and ch not in slot.reading
                            and slot.owners[ch] is not None and readable(fd)):
                        data = read_frame(fd)
                        if data is None:
                            sched.worker_gone(slot)
                        else:
                            sched.handle_reply(slot, ch, data)
                for fd in ready:
                    slot, ch = watched.get(fd, (None, None))
                    if slot is not None and ch is None:
                        sched.worker_gone(slot)
                self._expire(time.monotonic())
                to_start = sched.dispatch()
            sched.start_in_background(to_start)

    def _expire(self, now: float) -> None:
        """Fail the tasks past their deadline (ending the worker of a running one) and retire the
        workers idle for ``idle_timeout_s`` (lock held)."""
        sched = self._sched
        for slot in list(sched.slots):
            task = slot.task
            if (task is not None and not task.done and task.deadline is not None and now >= task.deadline
                    and slot.state != "dead" and not readable(slot.channel_fds[task.channel])):
                sched.stats["timeouts"] += 1
                sched.finish(task, exc=WorkerTimeout(
                    f"task {task.name!r} ran past its {task.timeout_s:g} s timeout in pool {sched.name!r}; "
                    "its worker was ended"))
                sched.requeue_unstarted(slot)
                slot.kill()
            elif (slot.state == "idle" and sched.idle_timeout_s and not sched.closing
                  and now - slot.idle_since >= sched.idle_timeout_s):
                sched.stats["retired_idle"] += 1
                sched.retire(slot)
        for slot in sched.slots:
            for task in slot.queued:
                if not task.done and task.deadline is not None and now >= task.deadline:
                    sched.stats["timeouts"] += 1
                    sched.finish(task, exc=WorkerTimeout(
                        f"task {task.name!r} waited past its {task.timeout_s:g} s timeout in pool {sched.name!r}"))
        for task in list(sched.queue):
            if task.deadline is not None and now >= task.deadline:
                sched.queue.remove(task)
                sched.stats["timeouts"] += 1
                sched.finish(task, exc=WorkerTimeout(
                    f"task {task.name!r} waited past its {task.timeout_s:g} s timeout in pool {sched.name!r}"))
