"""The worker process side of the pool: thread pinning, the message loop, errors as data.

Imported in worker processes (and preloaded in the forkserver), so it must import nothing from
``memory_core``. Frames are described in :mod:`workers.frames`.
"""

from __future__ import annotations

import importlib
import os
import pickle
import signal

from workers.frames import FrameReader, write_frame

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


def _failed(message: str) -> tuple[bool, dict]:
    return False, {"code": "failed", "message": message, "type": "WorkerError"}


def worker_main(requests, replies, pool_name: str, task_modules: tuple[str, ...] = ()) -> None:
    """Serve tasks from the ``requests`` pipe one at a time until EOF or ``("exit",)``; answer
    each on its reply channel (``replies``: the write ends, one per channel). ``task_modules`` are
    imported first: they add tasks to ``workers.tasks`` (see :func:`workers.tasks.task`).

    Workers ignore SIGINT: a terminal's Ctrl-C reaches the whole process group, and it is the
    owner's to handle (it ends the pool); a worker must not die of it mid-task with a traceback.
    It starts with SIGINT ignored (forkserver) or blocked (spawn, workers.launch); once ignored,
    it is unblocked, and a Ctrl-C that came meanwhile is dropped."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    pin_threads()
    from workers import tasks

    for module in task_modules:
        importlib.import_module(module)
    _pin_loaded_libraries()
    ctx = tasks.WorkerContext(pool_name=pool_name)
    reader = FrameReader(requests.fileno())
    channels = [c.fileno() for c in replies]  # ``requests``/``replies`` keep the fds open
    while True:
        frame = reader.next()
        if frame is None:
            return
        channel, data = frame
        msg = pickle.loads(data)
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
            reply = _failed(f"unknown worker task {name!r}; known: {sorted(tasks.TASKS)}")
        else:
            try:
                reply = True, fn(payload, ctx)
            except Exception as exc:  # noqa: BLE001 - errors cross the boundary as data
                reply = False, tasks.failure_data(exc)
        try:
            data = pickle.dumps((task_id, *reply), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001
            data = pickle.dumps((task_id, *_failed(f"task {name!r} returned an unpicklable value: {exc}")))
        try:
            write_frame(channels[channel], data)
        except (OSError, IndexError):
            return
