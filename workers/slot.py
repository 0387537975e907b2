"""One worker as the owner sees it: its process, request pipe and reply channels, the tasks it holds.

A :class:`Slot` writes task and control frames to its worker's request pipe and reads the one
reply a channel carries (frames: :mod:`workers.frames`); :class:`Task` is a task's record from
submission to its reply. Owner side only (the worker's side is :mod:`workers.runtime`). Every
method that changes a slot or a task runs under the pool lock (:class:`workers.scheduler.Scheduler`).
"""

from __future__ import annotations

import itertools
import os
import pickle
import select
import signal
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from workers.frames import NO_REPLY, read_frame, write_frame

EXIT_FRAME = pickle.dumps(("exit",), protocol=pickle.HIGHEST_PROTOCOL)
# bytes of task frames and of control frames that may wait in a busy worker's request pipe (its
# buffer is 64 KiB: together they must never fill it, as a write under the pool lock must not block)
PIPELINE_MAX_BYTES = 32 * 1024
CONTROL_MAX_BYTES = 16 * 1024


def task_frame(task_id: int, name: str, payload: Any) -> bytes:
    """The pickled ``("task", id, name, payload)`` message (see :mod:`workers.frames`)."""
    return pickle.dumps(("task", task_id, name, payload), protocol=pickle.HIGHEST_PROTOCOL)


def control_frame(name: str, payload: Any) -> bytes:
    """The pickled ``("ctl", name, payload)`` message: no reply."""
    return pickle.dumps(("ctl", name, payload), protocol=pickle.HIGHEST_PROTOCOL)


def decode_reply(data: Any) -> tuple | BaseException:
    """A reply frame unpickled, or the exception unpickling raised (the reader raises it once its
    bookkeeping under the pool lock has begun)."""
    try:
        return pickle.loads(data)
    except Exception as exc:  # noqa: BLE001
        return exc


def readable(fd: int) -> bool:
    """Whether ``fd`` has data (or EOF) to read now."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


@dataclass(eq=False, slots=True)
class Task:
    id: int
    name: str
    data: bytes
    nbytes: int
    future: Any  # TaskFuture | RunResult (workers.futures)
    deadline: float | None
    timeout_s: float | None
    slot: "Slot | None" = None
    channel: int | None = None  # the reply channel of ``slot`` this task holds while in flight
    done: bool = False
    # a caller thread waits in ``run()`` and reads this task's reply channel itself
    waiter: bool = False
    # the parked caller's wake-up lock (held; released by ``signal_waiter``) while the task has no worker
    signal: Any = None
    # ``(slot, channel)`` when ``submit`` already registered the waiter as that channel's reader
    # (``slot.reading``); captured under the lock, as ``task.slot`` may change before it reads
    claimed: Any = None

    def signal_waiter(self) -> None:
        """Wake the caller parked on this task (it got a worker or finished)."""
        sig = self.signal
        self.signal = None
        try:
            sig.release()
        except RuntimeError:
            pass


@dataclass(eq=False)
class Slot:
    index: int
    state: str = "starting"  # starting | idle | busy | retiring | dead
    proc: Any = None
    sentinel: int | None = None
    request_fd: int | None = None  # owner -> worker frames
    channel_fds: list[int] = field(default_factory=list)  # worker -> owner reply channels
    pollers: list[Any] = field(default_factory=list)  # per channel: poll on its fd + the sentinel
    owners: list[Task | None] = field(default_factory=list)  # the task holding each channel
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
    def task(self) -> Task | None:
        """The task the worker runs now (or last ran, while its reply waits to be read)."""
        return self.inflight[0] if self.inflight else None

    @property
    def queued(self) -> list[Task]:
        """Tasks sent ahead behind the running one."""
        return list(self.inflight)[1:]

    def queued_bytes(self) -> int:
        """Bytes of the task frames sent ahead (they wait in the request pipe)."""
        return sum(t.nbytes for t in itertools.islice(self.inflight, 1, None))

    @property
    def live(self) -> bool:
        """The worker runs and takes tasks (idle or busy)."""
        return self.proc is not None and self.state in ("idle", "busy")

    def attach(self, proc: Any, request: Any, replies: list[Any]) -> None:
        """Take the started worker ``proc`` with its request pipe's write end and reply read ends."""
        self.proc = proc
        self.sentinel = proc.sentinel
        self.handles = (request, *replies)
        self.request_fd = request.fileno()
        self.channel_fds = [r.fileno() for r in replies]
        for fd in self.channel_fds:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            poller.register(proc.sentinel, select.POLLIN)
            self.pollers.append(poller)
        self.owners = [None] * len(replies)
        self.free = list(range(len(replies) - 1, -1, -1))

    def send(self, task: Task) -> bool:
        """Write ``task`` on a free reply channel; False when the worker is going (write failed)."""
        ch = self.free.pop()
        try:
            write_frame(self.request_fd, task.data, ch)
        except OSError:
            self.free.append(ch)
            self.state = "retiring"
            return False
        self.owners[ch] = task
        self.inflight.append(task)
        self.state = "busy"
        task.slot = self
        task.channel = ch
        return True

    def send_control(self, data: bytes, budget: int) -> bool:
        """Write a control frame. A busy worker reads it after its task, so it waits in the pipe,
        and a write under the pool lock must not block: past ``budget`` bytes waiting, it is skipped."""
        if self.state == "busy":
            if self.ctl_bytes + len(data) > budget:
                return False
            self.ctl_bytes += len(data)
        try:
            write_frame(self.request_fd, data, NO_REPLY)
            return True
        except OSError:
            return False

    def send_exit(self) -> bool:
        try:
            write_frame(self.request_fd, EXIT_FRAME, NO_REPLY)
            return True
        except OSError:
            return False

    def kill(self) -> None:
        self.state = "retiring"
        if self.proc is not None and self.proc.pid:
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, OSError):
                pass

    def take_reply(self, ch: int, task_id: int) -> Task | None:
        """The task whose reply ``task_id`` came on channel ``ch``, its channel freed; None for the
        reply of a task that left this worker (requeued, or its worker ended)."""
        task = self.owners[ch]
        if task is None or task.id != task_id:
            return None
        self.owners[ch] = None
        self.free.append(ch)
        if self.inflight[0] is task:
            self.inflight.popleft()
        else:
            self.inflight.remove(task)
        self.tasks_run += 1
        return task

    def unsend_queued(self) -> list[Task]:
        """Take back the tasks sent behind the running one (they never started), last first; the
        running task stays in ``inflight``."""
        out = []
        while len(self.inflight) > 1:
            task = self.inflight.pop()
            self.owners[task.channel] = None
            task.slot = None
            task.channel = None
            out.append(task)
        return out

    def sent_replies(self) -> list[tuple[int, Any]]:
        """``(channel, frame)`` of the replies waiting in the channels of the in-flight tasks, in
        order, up to the first task without one (the worker answers in order)."""
        out = []
        for task in self.inflight:
            ch = task.channel
            if ch is None or not readable(self.channel_fds[ch]):
                break
            data = read_frame(self.channel_fds[ch])
            if data is None:
                break
            out.append((ch, data))
        return out

    def wait_reply(self, ch: int, deadline: float | None) -> tuple[Any, bool]:
        """Wait (at most 1 s, or up to ``deadline``) for the reply on channel ``ch`` or the worker's
        exit; returns ``(frame or None, exited)``. Called without the lock by the channel's reader."""
        fd = self.channel_fds[ch]
        if deadline is None:
            # no deadline to watch: block in read; the worker's exit closes the channel (EOF)
            data = read_frame(fd)
            return data, data is None
        ms = min(1000, max(1, int((deadline - time.monotonic()) * 1000) + 2))
        events = self.pollers[ch].poll(ms)
        if any(e_fd == fd for e_fd, _ in events):
            data = read_frame(fd)
            return data, data is None
        return None, bool(events)

    def close_handles(self) -> None:
        """Close the pipes (once no thread reads one)."""
        handles, self.handles = self.handles, ()
        self.request_fd = None
        for handle in handles:
            try:
                handle.close()
            except OSError:
                pass
