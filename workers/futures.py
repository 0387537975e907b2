"""The outcome of a pool task: :class:`TaskFuture` for ``submit()``, :class:`RunResult` for ``run()``."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any


class TaskFuture(concurrent.futures.Future):
    """A task's future; ``cancel()`` also works on a running task (its worker is ended)."""

    def __init__(self, cancel_task: Callable[[Any], bool],
                 withdraw_task: Callable[[Any], bool] | None = None) -> None:
        super().__init__()
        self._cancel_task = cancel_task
        self._withdraw_task = withdraw_task
        self._task: Any = None

    def cancel(self) -> bool:
        if self.done():
            return False
        task = self._task
        if task is None:
            return super().cancel()
        return self._cancel_task(task)

    def withdraw(self) -> bool:
        """Cancel the task only while no worker has picked it up (never ends a worker): True when
        it was taken back, False when it is done or a worker holds it."""
        task = self._task
        if self.done() or task is None or self._withdraw_task is None:
            return False
        return self._withdraw_task(task)

    def set_cancelled(self) -> None:
        """Mark the future cancelled (the pool already took the task back)."""
        concurrent.futures.Future.cancel(self)


class RunResult:
    """The outcome slot of a ``run()`` task: a future's set/get without its condition variable
    (the waiting caller reads it after seeing ``task.done`` under the pool lock)."""

    # class-level defaults instead of an ``__init__``: one is made per round trip
    _task: Any = None
    _value: Any = None
    _exc: BaseException | None = None
    _done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, value: Any) -> None:
        self._value = value
        self._done = True

    def set_exception(self, exc: BaseException) -> None:
        self._exc = exc
        self._done = True

    def set_cancelled(self) -> None:
        self.set_exception(concurrent.futures.CancelledError())

    def result(self) -> Any:
        if self._exc is not None:
            raise self._exc
        return self._value
