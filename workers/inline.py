"""``pool.workers = 0``: the pool interface over the same task functions, run in the owner process."""

from __future__ import annotations

import concurrent.futures
import importlib
from typing import Any

from memory_core.errors import WorkerError, error_from_data


class InlinePool:
    """The same task functions as a :class:`~workers.pool.WorkerPool`'s workers, run synchronously."""

    def __init__(self, name: str = "inline", *, task_modules: tuple[str, ...] = ()) -> None:
        from workers import tasks

        for module in task_modules:
            importlib.import_module(module)

        self.name = name
        self.size = 0
        self._tasks = tasks
        self.context = tasks.WorkerContext(pool_name=name)

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
