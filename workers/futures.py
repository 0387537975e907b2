"""The outcome of a pool task: :class:`TaskFuture` for ``submit()``, :class:`RunResult` for ``run()``,
:class:`LoopResult` for ``run_async()``."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
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


class LoopResult(RunResult):
    """The outcome slot of a ``run_async()`` task: a :class:`RunResult` that also completes
    :attr:`future`, an asyncio future of ``loop``; set from the loop's thread (its reply reader)
    directly, from another thread (the dispatcher: deadlines, deaths) through
    ``call_soon_threadsafe``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()
        self._thread = threading.get_ident()

    def set_result(self, value: Any) -> None:
        super().set_result(value)
        self._publish()

    def set_exception(self, exc: BaseException) -> None:
        super().set_exception(exc)
        self._publish()

    def _publish(self) -> None:
        if threading.get_ident() == self._thread:
            self._resolve()
            return
        try:
            self.loop.call_soon_threadsafe(self._resolve)
        except RuntimeError:  # the loop is closed: nobody awaits the future any more
            pass

    def _resolve(self) -> None:
        future = self.future
        if future.done():  # cancelled by its caller, or already resolved
            return
        if self._exc is not None:
            future.set_exception(self._exc)
        else:
            future.set_result(self._value)
