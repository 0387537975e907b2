"""Worker tasks and retrieval ops that only tests use; never imported by the product.

A test pool registers them with ``WorkerPool(..., task_modules=TASK_MODULES)`` (``InlinePool``
takes the same argument): every worker imports this module at start, under forkserver and spawn
alike (the workers' ``sys.path`` is the owner's, which holds the repository root). Imported in
worker processes, so it imports nothing from ``memory_core``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from benchmarks.worker_tasks import OPS, ping  # noqa: F401 - registers "ping" and "retrieve" (its ops: OPS)
from host_facades.db.chunk_rows import read_chunks
from workers.tasks import TaskError, WorkerContext, task

TASK_MODULES = ("tests.worker_tasks",)


@task("pid")
def pid(payload: Any, ctx: WorkerContext) -> int:
    return os.getpid()


@task("sleep")
def sleep(payload: dict, ctx: WorkerContext) -> float:
    time.sleep(float(payload.get("seconds", 0)))
    return float(payload.get("seconds", 0))


@task("spin")
def spin(payload: dict, ctx: WorkerContext) -> int:
    """Pure-Python CPU work (sum of squares below ``n``): a stand-in for chunk preparation cost."""
    n = int(payload.get("n", 100_000))
    return sum(i * i for i in range(n))


@task("fail")
def fail(payload: dict, ctx: WorkerContext) -> None:
    """Raise a :class:`TaskError` of ``payload["type"]``/``["code"]``, or a ValueError without a type."""
    message = str(payload.get("message", "requested failure"))
    if payload.get("type"):
        raise TaskError(str(payload["type"]), str(payload.get("code", "failed")), message)
    raise ValueError(message)


@task("runtime_info")
def runtime_info(payload: Any, ctx: WorkerContext) -> dict:
    """What a worker has loaded and how its threads are pinned (checked by the isolation tests)."""
    info: dict[str, Any] = {
        "pid": os.getpid(),
        "modules": sorted(m for m in sys.modules if m.startswith(("memory_core", "workers", "host_facades"))),
        "env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")},
        "derived_keys": [list(k) for k in ctx.cache.keys()],
        "derived_kinds": ctx.cache.kinds(),
        "tasks_run": ctx.tasks_run,
    }
    if "faiss" in sys.modules:
        info["faiss_threads"] = int(sys.modules["faiss"].omp_get_max_threads())
    return info


def _op_hold(conn, op: dict, ctx: WorkerContext, env: dict) -> None:
    """Inside the retrieve task's read transaction: write the worker's pid to ``op["signal"]``,
    then wait (bounded by ``op["timeout_s"]``) until the file ``op["release"]`` exists."""
    tmp = f"{op['signal']}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(tmp, op["signal"])  # atomic: a watcher never sees an empty signal file
    deadline = time.monotonic() + float(op.get("timeout_s", 10))
    while not os.path.exists(op["release"]) and time.monotonic() < deadline:
        time.sleep(0.005)


OPS["hold"] = _op_hold


def _op_fts_raw(conn, op: dict, ctx: WorkerContext, env: dict) -> list[tuple[str, float]]:
    """Plain FTS5 MATCH ordered by bm25 rank: the raw baseline, no query building or boosts."""
    rows = conn.execute(
        "SELECT c.id, bm25(memory_index_chunks_fts) AS rank FROM memory_index_chunks_fts"
        " JOIN memory_index_chunks c ON c.chunk_rowid = memory_index_chunks_fts.rowid"
        " WHERE memory_index_chunks_fts MATCH ? ORDER BY rank LIMIT ?",
        (op["query"], int(op.get("limit", 10))),
    ).fetchall()
    return [(r[0], float(r[1])) for r in rows]


def _op_metadata(conn, op: dict, ctx: WorkerContext, env: dict) -> dict[str, dict]:
    """The chunk metadata of ``op["ids"]`` in the task's snapshot (``host_facades.db.chunk_rows.read_chunks``)."""
    return read_chunks(conn, list(op["ids"]))


OPS["fts_raw"] = _op_fts_raw
OPS["metadata"] = _op_metadata


def sigint_state_at_start(requests: Any, replies: list) -> None:
    """A worker target (for :func:`workers.launch.start_worker`) that reports, as its first act,
    how its process treats SIGINT: ``"ignored"``, ``"blocked"`` or ``"caught"`` (read from
    ``/proc/self/status``, before any code of ours could change it)."""
    with open("/proc/self/status", encoding="ascii") as fh:
        masks = {k: int(v, 16) for k, _, v in (line.partition(":\t") for line in fh) if k in ("SigBlk", "SigIgn")}
    bit = 1 << (2 - 1)  # SIGINT is signal 2
    state = "ignored" if masks["SigIgn"] & bit else "blocked" if masks["SigBlk"] & bit else "caught"
    os.write(replies[0].fileno(), state.encode())


@task("hold_until")
def hold_until(payload: dict, ctx: WorkerContext) -> bool:
    """Keep the worker busy until the file ``payload["release"]`` exists (bounded by
    ``payload["timeout_s"]``, default 60); True when it was released."""
    deadline = time.monotonic() + float(payload.get("timeout_s", 60))
    while not os.path.exists(payload["release"]):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True
