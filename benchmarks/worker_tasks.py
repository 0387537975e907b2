"""The benchmarks' worker tasks: ``ping``, a pool round trip that does nothing else, and ``stream``,
one that keeps its worker busy like a search does, without a search.

Registered in a pool with ``WorkerPool(..., task_modules=("benchmarks.worker_tasks",))``; imported
in worker processes, so it imports nothing from ``memory_core``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from workers.tasks import WorkerContext, task

TASK_MODULES = ("benchmarks.worker_tasks",)
_STREAM_SLICE = 1 << 18  # float32 values summed per step: 1 MiB
_streams: dict[int, list] = {}  # MiB -> [array, next offset], per worker process


@task("ping")
def ping(payload: Any, ctx: WorkerContext) -> Any:
    """Return ``payload`` unchanged."""
    return payload


@task("stream")
def stream(payload: dict, ctx: WorkerContext) -> int:
    """Run for ``payload["cpu_s"]`` seconds of CPU time, reading ``payload["mb"]`` MiB of memory in
    turn (a search's memory traffic: the caches it evicts are the owner's, too); ``mb`` 0 spins in
    registers. Returns how many steps it ran."""
    mb = int(payload["mb"])
    end = time.thread_time() + float(payload["cpu_s"])
    steps = 0
    if mb <= 0:
        while time.thread_time() < end:
            steps += 1
        return steps
    state = _streams.get(mb)
    if state is None:
        state = _streams[mb] = [np.ones(mb * _STREAM_SLICE, dtype=np.float32), 0]
    data, pos = state
    while time.thread_time() < end:
        data[pos:pos + _STREAM_SLICE].sum()
        pos = (pos + _STREAM_SLICE) % len(data)
        steps += 1
    state[1] = pos
    return steps
