"""The worker process side of the pool: thread pinning, the message loop, errors as data.

Imported in worker processes (and preloaded in the forkserver), so it must import nothing from
``memory_core``. A worker has one request pipe (owner -> worker) and ``pipeline_depth`` reply
channels (worker -> owner). Every message is a frame: an 8-byte big-endian length, a channel
byte, then a pickle (standard library):

- owner -> worker ``("task", task_id, task_name, payload)`` with the channel of its reply: exactly
  one reply frame on that channel, ``(task_id, True, value)`` or
  ``(task_id, False, {"code", "message"})``;
- owner -> worker ``("ctl", name, payload)`` (channel ``NO_REPLY``): a control message (e.g. drop
  derived state), no reply;
- owner -> worker ``("exit",)`` (channel ``NO_REPLY``): leave the loop.

The owner reads a channel that holds at most one frame at a time (a channel carries the reply of
one task until it is read), so :func:`read_frame` needs no buffer; the worker's request pipe can
hold several frames (pipelined tasks, control messages) and is read through :class:`FrameReader`.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct

FRAME_HEADER = struct.Struct("!QB")
NO_REPLY = 255
_SMALL_FRAME = 1 << 16


def write_frame(fd: int, data: bytes, channel: int = 0) -> None:
    """Write one frame (blocking); small frames go out in one ``write``."""
    header = FRAME_HEADER.pack(len(data), channel)
    if len(data) <= _SMALL_FRAME:
        frame = header + data
        n = os.write(fd, frame)
        if n < len(frame):
            _write_all(fd, memoryview(frame)[n:])
    else:
        _write_all(fd, memoryview(header))
        _write_all(fd, memoryview(data))


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view):]


def read_frame(fd: int) -> memoryview | None:
    """The payload of the one frame on a reply channel; None at end of file (the worker exited)
    or when the channel was closed."""
    try:
        buf = os.read(fd, _SMALL_FRAME + FRAME_HEADER.size)
        if not buf:
            return None
        while len(buf) < FRAME_HEADER.size:
            more = os.read(fd, _SMALL_FRAME)
            if not more:
                return None
            buf += more
        total = FRAME_HEADER.size + FRAME_HEADER.unpack_from(buf)[0]
        if len(buf) == total:
            return memoryview(buf)[FRAME_HEADER.size:]
        parts = bytearray(buf)
        while len(parts) < total:
            more = os.read(fd, min(total - len(parts), 1 << 22))
            if not more:
                return None
            parts += more
        return memoryview(parts)[FRAME_HEADER.size:]
    except OSError:
        return None


class FrameReader:
    """Frames from a pipe that may hold several (the worker's request pipe)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = bytearray()

    def next(self) -> tuple[int, bytes] | None:
        """``(channel, payload)`` of the next frame; None at end of file."""
        buf = self.buf
        while len(buf) < FRAME_HEADER.size:
            if not self._fill(_SMALL_FRAME):
                return None
        size, channel = FRAME_HEADER.unpack_from(buf)
        total = FRAME_HEADER.size + size
        while len(buf) < total:
            if not self._fill(max(_SMALL_FRAME, total - len(buf))):
                return None
        data = bytes(buf[FRAME_HEADER.size:total])
        del buf[:total]
        return channel, data

    def _fill(self, n: int) -> bool:
        try:
            more = os.read(self.fd, n)
        except OSError:
            return False
        self.buf += more
        return bool(more)

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


def _error(code: str, message: str) -> tuple[bool, dict]:
    return False, {"code": code, "message": message}


def worker_main(requests, replies, pool_name: str) -> None:
    """Serve tasks from the ``requests`` pipe one at a time until EOF or ``("exit",)``; answer
    each on its reply channel (``replies``: the write ends, one per channel).

    Workers ignore SIGINT: a terminal's Ctrl-C reaches the whole process group, and it is the
    owner's to handle (it ends the pool); a worker must not die of it mid-task with a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    pin_threads()
    from workers import tasks

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
            reply = _error("failed", f"unknown worker task {name!r}; known: {sorted(tasks.TASKS)}")
        else:
            try:
                reply = True, fn(payload, ctx)
            except tasks.TaskError as exc:
                reply = _error(exc.code, str(exc))
            except Exception as exc:  # noqa: BLE001 - errors cross the boundary as data
                reply = _error("failed", f"{type(exc).__name__}: {exc}")
        try:
            data = pickle.dumps((task_id, *reply), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001
            data = pickle.dumps((task_id, *_error("failed", f"task {name!r} returned an unpicklable value: {exc}")))
        try:
            write_frame(channels[channel], data)
        except (OSError, IndexError):
            return
