"""A caller in ``WorkerPool.run()`` waits for its task by reading the task's reply channel itself.

A round trip then wakes only that thread: no dispatcher hop, no hand-off between callers whose
tasks share a worker. A task without a worker yet parks its caller on a lock that the
:class:`~workers.scheduler.Scheduler` releases when the task is sent or finishes.
"""

from __future__ import annotations

import _thread
import time

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
