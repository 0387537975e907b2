"""A search written once, driven two ways: in a thread that waits on the pool, or on an event loop.

A *steps* generator is owner-side work that needs pool tasks: it yields ``(task name, payload,
timeout_s)`` for each task, receives the task's value (or has its error thrown in at the ``yield``)
and returns its own result. :func:`drive` runs it with ``pool.run`` (the calling thread waits);
:func:`drive_async` with ``pool.run_async`` (the event loop reads the reply itself: no thread hop).
A generator that needs no task returns at once, on either driver.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, TypeVar

T = TypeVar("T")
Step = tuple[str, Any, "float | None"]
Steps = Generator[Step, Any, T]


def drive(steps: Steps[T], pool: Any) -> T:
    """Run ``steps`` to its result, each task through ``pool.run`` in this thread."""
    try:
        step = next(steps)
        while True:
            task, payload, timeout_s = step
            try:
                value = pool.run(task, payload, timeout_s=timeout_s)
            except BaseException as exc:  # noqa: BLE001 - the steps decide (their finally blocks run)
                step = steps.throw(exc)
            else:
                step = steps.send(value)
    except StopIteration as done:
        return done.value


async def drive_async(steps: Steps[T], pool: Any) -> T:
    """Run ``steps`` to its result on the running event loop, each task through
    ``pool.run_async``; a cancelled caller has its ``CancelledError`` thrown into the steps."""
    try:
        step = next(steps)
        while True:
            task, payload, timeout_s = step
            try:
                value = await pool.run_async(task, payload, timeout_s=timeout_s)
            except BaseException as exc:  # noqa: BLE001 - CancelledError included: the steps release their leases
                step = steps.throw(exc)
            else:
                step = steps.send(value)
    except StopIteration as done:
        return done.value
