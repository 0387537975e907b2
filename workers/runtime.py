"""The worker process side of the pool: thread pinning, the message loop, errors as data.

Imported in worker processes (and preloaded in the forkserver), so it must import nothing from
``memory_core``. Protocol, pickled with the standard library over one duplex Pipe per worker:

- owner -> worker ``("task", task_id, task_name, payload)``: exactly one reply
  ``(task_id, {"ok": True, "value": ...})`` or ``(task_id, {"ok": False, "error": {"code", "message"}})``;
- owner -> worker ``("ctl", name, payload)``: a control message (e.g. drop derived state), no reply;
- owner -> worker ``("exit",)``: leave the loop.
"""

from __future__ import annotations

import os
import pickle

PINNED_THREAD_VARS = (
    "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def pin_threads() -> None:
    """One BLAS/OpenMP thread per worker; must run before numpy/faiss are first imported."""
    for var in PINNED_THREAD_VARS:
        os.environ[var] = "1"


# Pin at import time: this module is the first thing the forkserver preloads, before numpy/faiss.
pin_threads()


def _pin_loaded_libraries() -> None:
    try:
        import faiss

        faiss.omp_set_num_threads(1)
    except Exception:  # noqa: BLE001 - faiss is optional for a worker
        pass
    try:
        from threadpoolctl import threadpool_limits  # optional; not a dependency

        threadpool_limits(1)
    except Exception:  # noqa: BLE001
        pass


def _process_classes():
    """Process classes the pool instantiates; defined here (a worker-safe module) because the
    process object is pickled by reference into the worker. Their Popen lives in workers.pool
    and is only ever imported in the owner."""
    from multiprocess.context import ForkServerProcess, SpawnProcess

    class ForkServerWorkerProcess(ForkServerProcess):
        @staticmethod
        def _Popen(process_obj):
            from workers.pool import IsolatedForkServerPopen

            return IsolatedForkServerPopen(process_obj)

    class SpawnWorkerProcess(SpawnProcess):
        @staticmethod
        def _Popen(process_obj):
            from workers.pool import IsolatedSpawnPopen

            return IsolatedSpawnPopen(process_obj)

    ForkServerWorkerProcess.__qualname__ = ForkServerWorkerProcess.__name__
    SpawnWorkerProcess.__qualname__ = SpawnWorkerProcess.__name__
    return ForkServerWorkerProcess, SpawnWorkerProcess


ForkServerWorkerProcess, SpawnWorkerProcess = _process_classes()


def _error(code: str, message: str) -> dict:
    return {"ok": False, "error": {"code": code, "message": message}}


def worker_main(conn, pool_name: str) -> None:
    """Serve tasks from ``conn`` one at a time until EOF or ``("exit",)``."""
    pin_threads()
    from workers import tasks

    _pin_loaded_libraries()
    ctx = tasks.WorkerContext(pool_name=pool_name)
    while True:
        try:
            msg = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        kind = msg[0]
        if kind == "exit":
            return
        if kind == "ctl":
            handler = tasks.CONTROLS.get(msg[1])
            if handler is not None:
                try:
                    handler(msg[2], ctx)
                except Exception:  # noqa: BLE001 - a control message never kills a worker
                    pass
            continue
        _, task_id, name, payload = msg
        fn = tasks.TASKS.get(name)
        if fn is None:
            reply = _error("failed", f"unknown worker task {name!r}; known: {sorted(tasks.TASKS)}")
        else:
            try:
                reply = {"ok": True, "value": fn(payload, ctx)}
            except tasks.TaskError as exc:
                reply = _error(exc.code, str(exc))
            except Exception as exc:  # noqa: BLE001 - errors cross the boundary as data
                reply = _error("failed", f"{type(exc).__name__}: {exc}")
        try:
            data = pickle.dumps((task_id, reply), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001
            data = pickle.dumps((task_id, _error("failed", f"task {name!r} returned an unpicklable value: {exc}")))
        try:
            conn.send_bytes(data)
        except (EOFError, OSError):
            return
