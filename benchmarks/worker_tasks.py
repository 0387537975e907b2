"""The benchmarks' worker tasks: ``ping``, a pool round trip that does nothing else, ``stream``,
one that keeps its worker busy like a search does, without a search, and ``retrieve``, retrieval
ops (the vector top-k, and the tests' ops of tests/worker_tasks.py) and a metadata read on one
snapshot without the ranking around them, run on a leased generation by :func:`retrieve`.

Registered in a pool with ``WorkerPool(..., task_modules=("benchmarks.worker_tasks",))``; imported
in worker processes, so it imports nothing from ``memory_core``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from host_facades.db.chunk_rows import read_chunks
from host_facades.db.vectors import decode_vector
from host_facades.retrieval.vector_state import model_key
from workers.tasks import TaskError, WorkerContext, on_snapshot, task

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


# --- the retrieve task: retrieval ops without the search around them ----------------------------
# What the generation-lease tests (tests/test_generations.py) and the throughput bench's
# retrieve-only variant run instead of a whole search: several ops and a metadata read on ONE read
# snapshot, through a pool on a leased generation (:func:`retrieve`). The product has only the
# ``search`` task (workers/tasks.py).

OPS: dict[str, Callable[[Any, dict, WorkerContext, dict], Any]] = {}


def _op_vector(conn, op: dict, ctx: WorkerContext, env: dict) -> list[tuple[str, float]]:
    """Cosine top-k over the generation's vectors of one model (faiss/numpy on derived state)."""
    qvec = op["qvec"]
    q = decode_vector(qvec) if isinstance(qvec, (bytes, bytearray)) else np.asarray(qvec, dtype=np.float32)
    backend = op.get("backend", "auto")
    if backend not in ("auto", "faiss", "numpy", "sqlite-vec"):
        raise TaskError("InvalidRequest", "invalid_request",
                        f"unknown vector backend {backend!r}; use auto, faiss, numpy or sqlite-vec")
    from host_facades.retrieval import vector_search

    sources = op.get("sources")
    # the one dispatcher in-process searches use, on this worker's cached state: identical results
    return vector_search.knn_search(
        conn, q, limit=int(op["limit"]), model=op.get("model"), sources=list(sources) if sources else None,
        backend=backend, vector_state=lambda c, model: ctx.cache.get_or_build(c, (env["db_id"], env["revision"],
                                                                                 model_key(model))),
        pairs=not op.get("rows"))


OPS["vector"] = _op_vector


def _hit_ids(result: Any) -> list[str]:
    ids: list[str] = []
    if isinstance(result, dict):
        result = result.get("hits") or result.get("rows") or ()
    for hit in result or ():
        if isinstance(hit, dict):
            if "id" in hit:
                ids.append(hit["id"])
        elif isinstance(hit, (tuple, list)) and hit:
            ids.append(hit[0])
        elif hasattr(hit, "id"):
            ids.append(hit.id)
    return ids


@task("retrieve")
def retrieve_task(payload: dict, ctx: WorkerContext) -> dict:
    """Run several retrieval ops and the metadata read in ONE read transaction (one generation).

    payload: ``db_path``; ``ops`` (list of ``{"op": "vector", ...}``, :data:`OPS`);
    ``metadata``: ``"hits"`` (read metadata of every hit id), a list of ids, or absent;
    ``keep``: revisions the owner still leases (derived state of other old revisions is dropped).
    Returns ``{"revision", "db_id", "results": [...per op...], "metadata": {id: row}}``.
    """
    ops = payload.get("ops", [])

    def reads(conn, db_id: str, revision: int) -> dict:
        results, metadata = _run_ops(conn, ctx, payload, ops, db_id, revision)
        return {"revision": revision, "db_id": db_id, "results": results, "metadata": metadata}

    done = on_snapshot(ctx, payload["db_path"], payload.get("keep", ()), reads)
    if done is None:
        return {"revision": 0, "db_id": None, "missing": True, "results": [[] for _ in ops], "metadata": {}}
    return done


def _run_ops(conn, ctx: WorkerContext, payload: dict, ops: list, db_id: str, revision: int):
    """All reads of one retrieval task, inside the caller's read transaction."""
    env = {"db_id": db_id, "revision": revision, "db_path": payload["db_path"]}
    results = []
    for op in ops:
        fn = OPS.get(op.get("op", ""))
        if fn is None:
            raise TaskError("InvalidRequest", "invalid_request",
                            f"unknown retrieval op {op.get('op')!r}; known: {sorted(OPS)}")
        results.append(fn(conn, op, ctx, env))
    meta_spec = payload.get("metadata")
    metadata: dict[str, dict] = {}
    if meta_spec == "hits":
        ids = [i for r in results for i in _hit_ids(r)]
        metadata = read_chunks(conn, ids)
    elif meta_spec:
        metadata = read_chunks(conn, list(meta_spec))
    return results, metadata


def retrieve(retriever: Any, ops: list[dict], *, metadata: Any = "hits", timeout_s: float | None = None) -> dict:
    """Run ``ops`` as one ``retrieve`` task through ``retriever`` (a
    :class:`workers.retriever.PooledRetriever` whose pool registered this module) on one leased
    generation; returns the task's result dict."""
    return retriever.run_leased("retrieve", {"ops": ops, "metadata": metadata}, timeout_s=timeout_s)
