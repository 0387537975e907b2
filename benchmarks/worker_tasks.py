"""The benchmarks' worker task: ``ping``, a pool round trip that does nothing else.

Registered in a pool with ``WorkerPool(..., task_modules=("benchmarks.worker_tasks",))``; imported
in worker processes, so it imports nothing from ``memory_core``.
"""

from __future__ import annotations

from typing import Any

from workers.tasks import WorkerContext, task

TASK_MODULES = ("benchmarks.worker_tasks",)


@task("ping")
def ping(payload: Any, ctx: WorkerContext) -> Any:
    """Return ``payload`` unchanged."""
    return payload
