"""Starting a worker process: the ``multiprocess`` context of the pool and its pipes.

A worker is started with ``forkserver`` (default) or ``spawn``, never plain ``fork`` (threads and
faiss may already run in the owner), through the public ``multiprocess`` API (``get_context``,
``Process``, ``Pipe``), and does not re-import the owner's ``__main__`` (e.g. the ``memory-core``
console script, which imports the CLI, the config loader and the writer).

The worker unpickles its process object, so it imports this module too: it must import nothing
from ``memory_core``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import multiprocess
from multiprocess import spawn

START_METHODS = ("forkserver", "spawn")
# What the forkserver imports once, so each worker it forks starts with them loaded; the first
# makes every worker start with Ctrl-C ignored (see that module).
FORKSERVER_PRELOAD = ["workers.forkserver_signals", "workers.runtime", "workers.launch", "numpy", "workers.tasks"]

_context_lock = threading.Lock()
_contexts: dict[str, Any] = {}


def get_context(start_method: str) -> Any:
    """The (shared) ``multiprocess`` context of ``start_method``; ValueError for any other method."""
    if start_method == "fork":
        raise ValueError("start_method 'fork' is not allowed (threads and faiss may already run); "
                         "use 'forkserver' or 'spawn'")
    if start_method not in START_METHODS:
        raise ValueError(f"unknown start_method {start_method!r}; use 'forkserver' or 'spawn'")
    with _context_lock:
        ctx = _contexts.get(start_method)
        if ctx is None:
            ctx = multiprocess.get_context(start_method)
            if start_method == "forkserver":
                ctx.set_forkserver_preload(FORKSERVER_PRELOAD)
            _contexts[start_method] = ctx
        return ctx


_prep_lock = threading.Lock()


@contextlib.contextmanager
def _without_main() -> Iterator[None]:
    # multiprocess (like multiprocessing) has no public option to keep a child from re-running the
    # owner's __main__: both its forkserver and spawn launchers put it into the preparation data
    # that spawn.get_preparation_data returns, so that one function is wrapped, for the starting
    # thread only, while one of ours starts.
    with _prep_lock:
        original = spawn.get_preparation_data
        starter = threading.get_ident()

        def prepare(name: str) -> dict:
            data = original(name)
            if threading.get_ident() == starter:
                data.pop("init_main_from_path", None)
                data.pop("init_main_from_name", None)
            return data

        spawn.get_preparation_data = prepare
        try:
            yield
        finally:
            spawn.get_preparation_data = original


# The folder this process imports ``workers`` (and ``host_facades`` beside it) from.
CODE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@contextlib.contextmanager
def _code_root_on_path() -> Iterator[None]:
    # A worker must run the code its owner runs. The forkserver does not take the owner's sys.path
    # (multiprocess, like the standard library of Python 3.11, passes it but ignores it): it imports ``workers`` from
    # its own path, the owner's working folder and then site-packages, so an owner that put a checkout
    # on sys.path (or runs from another folder) got the workers of an older installed copy, silently.
    # The forkserver starts with this process's environment: CODE_ROOT goes first on its PYTHONPATH
    # while a worker starts (the caller holds _prep_lock: one start at a time).
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [CODE_ROOT, previous]))
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = previous


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    # A spawned worker inherits this thread's signal mask through fork and exec: SIGINT stays
    # blocked in it until worker_main has set it to ignored, so a Ctrl-C while it starts up is
    # dropped instead of raising KeyboardInterrupt in its interpreter's startup. (A forkserver
    # worker starts with SIGINT ignored: workers.forkserver_signals.)
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def start_worker(start_method: str, target: Callable[..., None], *, name: str, channels: int,
                 args: tuple = ()) -> tuple[Any, Any, list[Any]]:
    """Start ``target(requests, replies, *args)`` in a new daemon worker process with one request
    pipe and ``channels`` reply pipes; returns ``(process, request write end, reply read ends)``
    (the child's ends are closed here)."""
    ctx = get_context(start_method)  # validates the method and sets the forkserver's preload list once
    req_r, req_w = ctx.Pipe(duplex=False)
    replies = [ctx.Pipe(duplex=False) for _ in range(channels)]
    proc = ctx.Process(target=target, args=(req_r, [w for _, w in replies], *args), name=name, daemon=True)
    try:
        with _without_main(), _code_root_on_path(), _sigint_blocked():
            proc.start()
    except BaseException:
        for handle in (req_r, req_w, *(h for pair in replies for h in pair)):
            handle.close()
        raise
    req_r.close()
    for _, w in replies:
        w.close()
    return proc, req_w, [r for r, _ in replies]
