"""``WorkerPool.run_async``: the event loop reads a task's reply itself (real workers, real pipes), and
the steps drivers of ``workers/steps.py`` that run one search either way."""

from __future__ import annotations

import asyncio
import os
import signal
import threading

import pytest

from memory_core.errors import WorkerError, WorkerOverloaded, WorkerTimeout, WorkerUnavailable
from tests.helpers import wait_for
from tests.worker_tasks import TASK_MODULES
from workers.pool import WorkerPool
from workers.steps import drive, drive_async


@pytest.fixture
def pool():
    p = WorkerPool("retrieval", 1, idle_timeout_s=None, task_modules=TASK_MODULES)
    yield p
    p.close(drain=False)


def _busy_pid(pool: WorkerPool) -> int:
    assert wait_for(lambda: pool.busy_pids()), "no worker picked the task up"
    return pool.busy_pids()[0]


def test_run_async_answers_what_run_answers_and_reads_on_the_loop(pool):
    readers: list[str] = []

    async def main():
        loop = asyncio.get_running_loop()
        add_reader = loop.add_reader

        def spy(fd, callback, *args):
            readers.append(threading.current_thread().name)
            return add_reader(fd, callback, *args)

        loop.add_reader = spy
        first = await pool.run_async("ping", {"a": [1, 2.5, "x"]})  # starts the worker: the dispatcher reads
        second = await pool.run_async("ping", [3])  # an idle worker: sent at once, read by the loop
        return first, second

    assert asyncio.run(main()) == ({"a": [1, 2.5, "x"]}, [3])
    assert readers == [threading.current_thread().name]
    assert pool.pending_tasks == 0 and pool.stats["completed"] == 2


def test_run_async_raises_the_typed_task_error(pool):
    with pytest.raises(WorkerError, match="ValueError: boom"):
        asyncio.run(pool.run_async("fail", {"message": "boom"}))
    assert pool.run("ping", 1) == 1
    assert pool.pending_tasks == 0


def test_run_async_of_a_killed_worker_fails_and_the_pool_replaces_it(pool):
    pool.prewarm(1)
    assert wait_for(lambda: pool.workers() and pool.workers()[0]["state"] == "idle")

    async def main():
        task = asyncio.ensure_future(pool.run_async("sleep", {"seconds": 30}))
        victim = await asyncio.to_thread(_busy_pid, pool)
        os.kill(victim, signal.SIGKILL)
        with pytest.raises(WorkerUnavailable, match="exited .* while running task 'sleep'"):
            await asyncio.wait_for(task, 30)
        return victim

    victim = asyncio.run(main())
    assert pool.run("pid") != victim
    assert pool.pending_tasks == 0


def test_run_async_past_its_deadline_raises_worker_timeout(pool):
    pool.prewarm(1)
    assert wait_for(lambda: pool.workers() and pool.workers()[0]["state"] == "idle")
    # the task would sleep 60 s: a WorkerTimeout within the 30 s wait can only be the 0.3 s timeout
    with pytest.raises(WorkerTimeout, match="ran past its 0.3 s timeout"):
        asyncio.run(asyncio.wait_for(pool.run_async("sleep", {"seconds": 60}, timeout_s=0.3), 30))
    assert pool.run("ping", 2) == 2
    assert wait_for(lambda: pool.pending_tasks == 0)


def test_a_cancelled_caller_leaves_the_reply_to_the_dispatcher(pool):
    pool.prewarm(1)
    assert wait_for(lambda: pool.workers() and pool.workers()[0]["state"] == "idle")

    async def main():
        task = asyncio.ensure_future(pool.run_async("sleep", {"seconds": 0.5}))
        await asyncio.to_thread(_busy_pid, pool)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    # the worker finishes its task, the dispatcher reads that reply and the worker takes the next one
    assert wait_for(lambda: pool.pending_tasks == 0)
    assert pool.run("ping", 3) == 3
    assert pool.stats["completed"] == 2


def test_run_async_behind_a_busy_worker_waits_its_turn(pool):
    async def main():
        return await asyncio.gather(pool.run_async("sleep", {"seconds": 0.2}), pool.run_async("ping", "second"),
                                    pool.run_async("ping", "third"))

    assert asyncio.run(main()) == [0.2, "second", "third"]
    assert pool.pending_tasks == 0


def test_run_async_past_admission_raises_overloaded():
    p = WorkerPool("retrieval", 1, max_pending_tasks=1, idle_timeout_s=None, task_modules=TASK_MODULES)
    try:
        async def main():
            first = asyncio.ensure_future(p.run_async("sleep", {"seconds": 0.2}))
            await asyncio.sleep(0)
            with pytest.raises(WorkerOverloaded, match="capacity reached"):
                await p.run_async("ping", 1)
            return await first

        assert asyncio.run(main()) == 0.2
    finally:
        p.close(drain=False)


def _steps(released: list[str]):
    """Two tasks, then their answers; records that its finally block ran."""
    try:
        a = yield "ping", "a", None
        try:
            b = yield "fail", {"message": "second"}, None
        except WorkerError as exc:
            b = f"caught {exc.message}"
        return [a, b]
    finally:
        released.append("released")


@pytest.mark.parametrize("driver", ["thread", "loop"])
def test_both_drivers_run_the_same_steps(pool, driver):
    released: list[str] = []
    if driver == "thread":
        out = drive(_steps(released), pool)
    else:
        out = asyncio.run(drive_async(_steps(released), pool))
    assert out == ["a", "caught ValueError: second"]
    assert released == ["released"]


def test_steps_without_a_task_need_no_pool():
    def none():
        return "done"
        yield  # a generator that returns at once

    assert drive(none(), None) == "done"
    assert asyncio.run(drive_async(none(), None)) == "done"


def test_a_cancelled_drive_runs_the_steps_cleanup(pool):
    released: list[str] = []

    def slow():
        try:
            yield "sleep", {"seconds": 0.5}, None
            raise AssertionError("the steps went on after their caller was cancelled")
        finally:
            released.append("released")

    async def main():
        task = asyncio.ensure_future(drive_async(slow(), pool))
        await asyncio.to_thread(_busy_pid, pool)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert released == ["released"]
    assert wait_for(lambda: pool.pending_tasks == 0)
