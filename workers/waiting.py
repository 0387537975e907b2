"""A caller in ``WorkerPool.run()`` waits for its task by reading the task's reply channel itself.

A round trip then wakes only that thread: no dispatcher hop, no hand-off between callers whose
tasks share a worker. A task without a worker yet parks its caller on a lock that the
:class:`~workers.scheduler.Scheduler` releases when the task is sent or finishes.
``run_async()``'s event loop reads the channel the same way (:func:`read_on_loop`), with the loop's
own poll instead of a blocked thread.
"""

from __future__ import annotations

import _thread
import asyncio
import time
from collections.abc import Callable
from typing import Any

from workers.frames import read_frame
from workers.scheduler import Scheduler
from workers.slot import Slot, Task, decode_reply


def wait_for(sched: Scheduler, task: Task) -> None:
    """Wait for ``task`` in the calling thread, reading its reply channel when it has one."""
    lock = sched.lock
    sig = None
    try:
        claim, task.claimed = task.claimed, None
        if claim is not None and _read_channel(sched, claim[0], claim[1], task):
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
                sig.acquire(timeout=_turn_timeout(task))
                sig = None
                continue
            if _read_channel(sched, slot, ch, task):
                return
    except BaseException:
        with lock:
            if task.signal is not None and task.signal is sig:
                task.signal = None
            task.waiter = False
            sched.wake()  # its reply may still be due: the dispatcher reads it now
        raise


def _turn_timeout(task: Task) -> float:
    if task.deadline is None:
        return 1.0
    return min(1.0, max(0.001, task.deadline - time.monotonic() + 0.002))


def _read_channel(sched: Scheduler, slot: Slot, ch: int, task: Task) -> bool:
    """Wait (bounded) for the reply on channel ``ch`` or the exit of ``slot``'s worker and handle
    it; the caller registered ``ch`` in ``slot.reading``, which this releases. Returns whether
    ``task`` is done."""
    data = None
    exited = False
    try:
        data, exited = slot.wait_reply(ch, task.deadline)
    finally:
        done = _settle(sched, slot, ch, task, data, exited)
    return done


def _settle(sched: Scheduler, slot: Slot, ch: int, task: Task, data: Any, exited: bool) -> bool:
    """The reader of channel ``ch`` is done: handle the reply frame ``data`` it read (None: none),
    the worker's exit, and release the channel. Returns whether ``task`` is done."""
    to_start: list[Slot] = []
    # unpickled before taking the pool lock: the other callers wait less for it
    msg = None if data is None else decode_reply(data)
    lock = sched.lock
    lock.acquire()  # not a with block: once per round trip
    try:
        slot.reading.discard(ch)
        if msg is not None and slot.state != "dead":
            if isinstance(msg, BaseException):
                raise msg  # where unpickling under the lock raised it
            sched.handle_reply_msg(slot, ch, msg)
        if exited or (slot.gone and not slot.reading):
            sched.worker_gone(slot)
        if slot.state == "dead" and not slot.reading and slot.handles:
            sched.dispose(slot)
        done = task.done
        if done and slot.owners[ch] is task:
            sched.wake()  # finished without its reply (it timed out waiting): the dispatcher reads it
        if sched.queue:
            to_start = sched.dispatch()
    finally:
        lock.release()
    if to_start:
        sched.start_in_background(to_start)
    return done


def read_on_loop(sched: Scheduler, task: Task, loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
    """Have ``loop`` read ``task``'s reply (``loop.add_reader`` on its channel) when ``submit``
    sent it at once; else the dispatcher thread reads it (the task stops being a waiter's). The
    outcome goes to the task's future either way. Returns ``release()``: for a caller that stops
    waiting (cancelled), it hands the reading over to the dispatcher (the reply may still come)."""
    claim, task.claimed = task.claimed, None
    if claim is None:
        _to_dispatcher(sched, task)
        return _nothing
    slot, ch = claim
    fd = slot.channel_fds[ch]
    reading = [True]

    def on_readable() -> None:
        loop.remove_reader(fd)
        reading[0] = False
        # the worker writes a reply in one go: a frame that began arriving is read to its end
        data = read_frame(fd)
        try:
            _settle(sched, slot, ch, task, data, data is None)
        except Exception as exc:  # noqa: BLE001 - a reply that does not unpickle: the caller's error, as in run()
            task.future.set_exception(exc)

    def release() -> None:
        if not reading[0]:
            return
        reading[0] = False
        loop.remove_reader(fd)
        with sched.lock:
            slot.reading.discard(ch)
            task.waiter = False
            sched.wake()  # its reply may still be due: the dispatcher reads it now

    loop.add_reader(fd, on_readable)
    return release


def _to_dispatcher(sched: Scheduler, task: Task) -> None:
    with sched.lock:
        task.waiter = False
        if not task.done:
            sched.wake()  # the dispatcher watches its channel once a worker has it


def _nothing() -> None:
    return None
