"""The process worker pool: real worker processes, real pipes, real SIGKILLs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from memory_core.errors import (
    IndexCorrupt,
    ProviderUnavailable,
    WorkerError,
    WorkerOverloaded,
    WorkerTimeout,
    WorkerUnavailable,
)
from tests.helpers import wait_for
from tests.worker_tasks import TASK_MODULES
from workers.inline import InlinePool
from workers.pool import WorkerPool, create_pools

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def pool():
    p = WorkerPool("retrieval", 2, idle_timeout_s=None, task_modules=TASK_MODULES)
    yield p
    p.close(drain=False)


def test_round_trip_values_and_worker_isolation(pool):
    assert pool.run("ping", {"a": [1, 2.5, "x"]}) == {"a": [1, 2.5, "x"]}
    info = pool.run("runtime_info")
    assert info["pid"] != os.getpid()
    assert info["env"] == {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    assert info["faiss_threads"] == 1
    assert not [m for m in info["modules"] if m.startswith("memory_core")]


def test_workers_lists_live_workers_and_their_task_counts(pool):
    assert pool.workers() == []
    pool.prewarm()
    pool.run("ping", 1)
    workers = pool.workers()
    assert len(workers) == 2 and {w["pid"] for w in workers} == set(pool.worker_pids())
    assert sorted(w["tasks_run"] for w in workers) == [0, 1]
    assert all(w["state"] == "idle" for w in workers)
    assert InlinePool().workers() == []


def test_task_errors_come_back_typed(pool):
    with pytest.raises(WorkerError) as err:
        pool.run("fail", {"message": "boom"})
    assert (type(err.value), err.value.code, err.value.message) == (WorkerError, "failed", "ValueError: boom")
    with pytest.raises(WorkerError, match="unknown worker task 'nope'"):
        pool.run("nope")
    # a coded task error maps to the memory_core error with that code
    from memory_core.errors import InvalidRequest

    with pytest.raises(InvalidRequest, match="bad op"):
        pool.run("fail", {"type": "InvalidRequest", "code": "invalid_request", "message": "bad op"})
    assert pool.run("ping", 7) == 7  # the worker survived


@pytest.mark.parametrize("inline", [False, True])
def test_task_errors_cross_as_to_data_and_keep_their_type(pool, inline):
    # "unavailable" is the code of both ProviderUnavailable and WorkerUnavailable: the type named in
    # the error data decides, not a guess from the code
    runner = InlinePool(task_modules=TASK_MODULES) if inline else pool
    with pytest.raises(ProviderUnavailable) as err:
        runner.run("fail", {"type": "ProviderUnavailable", "code": "unavailable", "message": "no model"})
    assert err.value.to_data() == {"code": "unavailable", "message": "no model", "type": "ProviderUnavailable"}
    with pytest.raises(IndexCorrupt) as err:
        runner.run("fail", {"type": "IndexCorrupt", "code": "index_corrupt", "message": "bad file"})
    assert err.value.to_data() == {"code": "index_corrupt", "message": "bad file", "type": "IndexCorrupt"}


def test_killed_worker_fails_its_task_and_is_replaced(pool):
    pool.prewarm(1)
    fut = pool.submit("sleep", {"seconds": 30})
    victim = _wait_busy(pool)
    os.kill(victim, signal.SIGKILL)
    with pytest.raises(WorkerUnavailable, match="exited .* while running task 'sleep'"):
        fut.result(timeout=10)
    assert pool.run("pid") != victim
    assert victim not in pool.worker_pids()
    assert pool.pending_tasks == 0


def test_timeout_ends_the_worker(pool):
    pool.prewarm(1)
    fut = pool.submit("sleep", {"seconds": 60}, timeout_s=0.3)
    victim = _wait_busy(pool)
    # the task would sleep 60 s: a WorkerTimeout within the 30 s wait can only be the 0.3 s timeout
    with pytest.raises(WorkerTimeout, match="ran past its 0.3 s timeout"):
        fut.result(timeout=30)
    assert wait_for(lambda: victim not in pool.worker_pids()), "the timed-out worker is still in the pool"
    assert wait_for(lambda: not _alive(victim)), "the timed-out worker process is still running"
    assert pool.run("ping", 1) == 1
    assert pool.stats["timeouts"] == 1


def test_cancel_running_task_ends_its_worker(pool):
    pool.prewarm(1)
    fut = pool.submit("sleep", {"seconds": 30})
    victim = _wait_busy(pool)
    assert fut.cancel() is True
    assert fut.cancelled()
    assert wait_for(lambda: victim not in pool.worker_pids())
    assert pool.run("ping", 2) == 2
    assert pool.pending_tasks == 0


def test_admission_limits_fail_fast_with_overloaded():
    p = WorkerPool("retrieval", 1, max_pending_tasks=2, max_pending_bytes=10_000, idle_timeout_s=None,
                   task_modules=TASK_MODULES)
    try:
        a = p.submit("sleep", {"seconds": 60})
        b = p.submit("sleep", {"seconds": 0.01})
        with pytest.raises(WorkerOverloaded, match="worker task capacity reached"):
            p.run("ping", 1)
        with pytest.raises(WorkerOverloaded):
            p.submit("ping", "x" * 20_000).result(timeout=1)
        # refused while the 60 s task still runs: admission did not wait for capacity
        assert not a.done() and not b.done()
        assert a.cancel() is True  # ends that worker; b runs on its replacement
        assert b.result(30) == 0.01
        assert p.run("ping", 3) == 3
        assert p.stats["overloaded"] == 2
    finally:
        p.close()


def test_bytes_limit_counts_payload_size():
    p = WorkerPool("indexing", 1, max_pending_bytes=1000, idle_timeout_s=None, task_modules=TASK_MODULES)
    try:
        with pytest.raises(WorkerOverloaded):
            p.run("ping", "y" * 2000)
        assert p.run("ping", "y" * 100) == "y" * 100
        assert p.pending_bytes == 0
    finally:
        p.close()


def test_two_workers_run_in_parallel(pool):
    pool.prewarm()
    futs = [pool.submit("sleep", {"seconds": 2.0}) for _ in range(2)]
    # both tasks are held by a worker at the same moment: neither queued behind the other
    assert wait_for(lambda: len(pool.busy_pids()) == 2 and not any(f.done() for f in futs), 30)
    assert [f.result(30) for f in futs] == [2.0, 2.0]
    assert len(pool.worker_pids()) == 2


def test_idle_workers_retire_and_come_back():
    p = WorkerPool("retrieval", 1, idle_timeout_s=0.3, task_modules=TASK_MODULES)
    try:
        first = p.run("pid")
        wait_for(lambda: not p.worker_pids(), step=0.05)
        assert p.worker_pids() == []
        assert p.stats["retired_idle"] == 1
        assert p.run("pid") != first
    finally:
        p.close()


def test_restart_on_error_replaces_worker():
    p = WorkerPool("retrieval", 1, restart_on_error=True, idle_timeout_s=None, task_modules=TASK_MODULES)
    try:
        first = p.run("pid")
        with pytest.raises(WorkerError):
            p.run("fail", {})
        assert p.run("pid") != first
    finally:
        p.close()


def test_close_drains_then_refuses():
    p = WorkerPool("retrieval", 1, idle_timeout_s=None, task_modules=TASK_MODULES)
    futs = [p.submit("sleep", {"seconds": 0.1}) for _ in range(3)]
    p.close()
    assert [f.result(0) for f in futs] == [0.1, 0.1, 0.1]
    with pytest.raises(WorkerUnavailable, match="closed"):
        p.run("ping", 1)
    assert p.worker_pids() == []


def test_the_product_registers_no_test_tasks():
    # ping/pid/sleep/spin/fail/runtime_info and the "hold", "fts_raw" and "metadata" ops live in
    # tests.worker_tasks, the "retrieve" task and its "vector" op in benchmarks.worker_tasks
    code = "import json, workers.tasks as t; print(json.dumps(sorted(t.TASKS)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["agent_state", "index_state", "keyword", "prepare", "prepare_many", "search"]


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_task_modules_register_extra_tasks_in_every_worker(start_method):
    plain = WorkerPool("retrieval", 1, start_method=start_method, idle_timeout_s=None)
    extra = WorkerPool("retrieval", 1, start_method=start_method, idle_timeout_s=None, task_modules=TASK_MODULES)
    try:
        with pytest.raises(WorkerError, match="unknown worker task 'pid'"):
            plain.run("pid")
        assert extra.run("pid") != os.getpid()
    finally:
        plain.close()
        extra.close()


def test_fork_start_method_is_refused():
    with pytest.raises(ValueError, match="'fork' is not allowed"):
        WorkerPool("retrieval", 1, start_method="fork")


def test_spawn_start_method_works():
    p = WorkerPool("retrieval", 1, start_method="spawn", idle_timeout_s=None, task_modules=TASK_MODULES)
    try:
        info = p.run("runtime_info")
        assert info["env"]["OMP_NUM_THREADS"] == "1"
        assert not [m for m in info["modules"] if m.startswith("memory_core")]
    finally:
        p.close()


def test_inline_pool_runs_the_same_tasks_in_process():
    retrieval, indexing = create_pools(0)
    assert isinstance(retrieval, InlinePool) and isinstance(indexing, InlinePool)
    assert retrieval.run("ping", [1]) == [1]
    assert retrieval.run("pid") == os.getpid()
    from memory_core.errors import InvalidRequest

    with pytest.raises(InvalidRequest):
        retrieval.run("fail", {"type": "InvalidRequest", "code": "invalid_request"})


@pytest.mark.parametrize("module", ["workers.runtime", "workers.tasks", "workers.frames", "workers.launch",
                                    "host_facades.retrieval.vector_cache", "host_facades.db.sqlite_read", "host_facades.retrieval.vector_state",
                                    "host_facades.retrieval.fts_query", "host_facades.retrieval.fts_search", "host_facades.retrieval.keywords", "host_facades.retrieval.vector_search",
                                    "host_facades.chunking.pipeline", "host_facades.ranking.rank",
                                    "host_facades.search.run", "host_facades.search.edge", "host_facades.db.chunk_rows"])
def test_worker_modules_import_no_owner_modules(module):
    code = (
        f"import sys, importlib; importlib.import_module({module!r});"
        "bad = [m for m in ('memory_core.store.writer', 'memory_core.embeddings', 'memory_core.config')"
        " if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_worker_does_not_reimport_owner_main(tmp_path, start_method):
    # An owner whose __main__ imports owner-only modules (like the console script) must not make
    # workers import them.
    script = tmp_path / "owner.py"
    script.write_text(
        "import sys\nsys.path.insert(0, %r)\nimport memory_core.config\n"
        "from workers.pool import WorkerPool\n"
        "if __name__ == '__main__':\n"
        "    p = WorkerPool('retrieval', 1, start_method=%r, task_modules=('tests.worker_tasks',))\n"
        "    print(sorted(m for m in p.run('runtime_info')['modules'] if m.startswith('memory_core')))\n"
        "    p.close()\n" % (ROOT, start_method)
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# --- pipelining (pipeline_depth=2: a busy worker holds its next task) ---------------------------


@pytest.fixture
def piped():
    p = WorkerPool("retrieval", 1, idle_timeout_s=None, pipeline_depth=2, task_modules=TASK_MODULES)
    p.prewarm(1)
    yield p
    p.close(drain=False)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _wait_busy(p):
    """The pid of the first worker seen running a task (within 5 s)."""
    assert wait_for(p.busy_pids, step=0.01), "no worker became busy"
    return p.busy_pids()[0]


def test_pipelined_tasks_run_in_order_on_one_worker(piped):
    first = piped.submit("sleep", {"seconds": 0.3})
    _wait_busy(piped)
    rest = [piped.submit("ping", i) for i in range(5)]
    assert len(piped.scheduler.slots[0].queued) == 1 and len(piped.scheduler.queue) == 4  # one sent ahead, the rest wait
    assert first.result(timeout=10) == 0.3
    assert [f.result(timeout=10) for f in rest] == list(range(5))
    assert piped.pending_tasks == 0 and piped.stats["replaced"] == 0


def test_killed_worker_requeues_its_pipelined_task(piped):
    running = piped.submit("sleep", {"seconds": 30})
    victim = _wait_busy(piped)
    waiting = piped.submit("pid")
    assert piped.scheduler.slots[0].queued
    os.kill(victim, signal.SIGKILL)
    with pytest.raises(WorkerUnavailable):
        running.result(timeout=10)
    assert waiting.result(timeout=10) not in (victim, None)  # ran on the replacement worker
    assert piped.pending_tasks == 0


def test_cancel_of_a_pipelined_task_keeps_the_worker(piped):
    running = piped.submit("sleep", {"seconds": 0.3})
    victim = _wait_busy(piped)
    waiting = piped.submit("ping", "x")
    assert waiting.cancel() is True and waiting.cancelled()
    assert running.result(timeout=10) == 0.3
    assert piped.run("pid") == victim and piped.stats["replaced"] == 0
    assert piped.pending_tasks == 0


def test_withdraw_takes_back_only_a_task_no_worker_holds(piped):
    running = piped.submit("sleep", {"seconds": 0.3})
    victim = _wait_busy(piped)
    sent = piped.submit("ping", "sent")  # sent ahead into the busy worker's pipe
    queued = piped.submit("ping", "queued")  # the pipe is full: it waits in the pool's queue
    assert piped.scheduler.slots[0].queued and len(piped.scheduler.queue) == 1
    assert queued.withdraw() is True and queued.cancelled()
    assert running.withdraw() is False and sent.withdraw() is False  # a worker has them: they run
    assert (running.result(timeout=10), sent.result(timeout=10)) == (0.3, "sent")
    assert queued.withdraw() is False
    assert piped.run("pid") == victim and piped.stats["replaced"] == 0
    assert piped.pending_tasks == 0


def test_cancel_of_the_running_task_requeues_the_pipelined_one(piped):
    running = piped.submit("sleep", {"seconds": 30})
    victim = _wait_busy(piped)
    waiting = piped.submit("pid")
    assert running.cancel() is True
    assert waiting.result(timeout=10) != victim


def test_pipelined_task_times_out_while_waiting(piped):
    running = piped.submit("sleep", {"seconds": 0.6})
    _wait_busy(piped)
    waiting = piped.submit("ping", 1, timeout_s=0.1)
    with pytest.raises(WorkerTimeout, match="waited past its 0.1 s timeout"):
        waiting.result(timeout=10)
    assert running.result(timeout=10) == 0.6
    assert piped.run("ping", 2) == 2 and piped.stats["replaced"] == 0


# --- reply channels: each caller in run() reads the channel its task was sent with -------------


def _settled(p):
    """The pool's single slot once idle: every reply channel free, nothing in flight."""
    def idle() -> bool:
        with p.scheduler.lock:
            slot = p.scheduler.slots[0]
            return not slot.inflight and len(slot.free) == p.pipeline_depth and not slot.reading

    slot = p.scheduler.slots[0]
    assert wait_for(idle, step=0.01), f"slot did not settle: inflight={list(slot.inflight)} free={slot.free}"
    return slot


def test_concurrent_callers_sharing_a_worker_each_get_their_own_reply(piped):
    import threading

    big = b"x" * 300_000  # replies larger than a pipe buffer arrive in several reads
    errors: list[str] = []

    def caller(k: int) -> None:
        for i in range(150):
            payload = (k, i, big) if i % 25 == 0 else (k, i)
            got = piped.run("ping", payload)
            if got != payload:
                errors.append(f"caller {k} call {i} got {str(got)[:60]}")

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    _settled(piped)
    assert piped.pending_tasks == 0 and piped.stats["replaced"] == 0


def test_run_caller_timed_out_behind_a_running_task_leaves_no_stray_reply(piped):
    import threading

    first = threading.Thread(target=lambda: piped.run("sleep", {"seconds": 0.5}))
    first.start()
    _wait_busy(piped)
    with pytest.raises(WorkerTimeout, match="waited past"):
        piped.run("ping", "late", timeout_s=0.1)
    first.join(10)
    # the late task still ran; its reply was read and dropped, its channel is free again
    assert [piped.run("ping", i) for i in range(5)] == list(range(5))
    _settled(piped)
    assert piped.stats["replaced"] == 0


def test_run_callers_on_a_killed_worker_fail_or_move_to_the_replacement(piped):
    import threading

    out: dict[str, object] = {}

    def call(name, task, payload):
        try:
            out[name] = piped.run(task, payload)
        except Exception as exc:  # noqa: BLE001
            out[name] = exc

    running = threading.Thread(target=call, args=("running", "sleep", {"seconds": 30}))
    running.start()
    victim = _wait_busy(piped)
    waiting = threading.Thread(target=call, args=("waiting", "pid", None))
    waiting.start()
    wait_for(lambda: len(piped.scheduler.slots[0].inflight) >= 2, step=0.01)
    os.kill(victim, signal.SIGKILL)
    running.join(10)
    waiting.join(10)
    assert isinstance(out["running"], WorkerUnavailable)
    assert isinstance(out["waiting"], int) and out["waiting"] != victim  # ran on the replacement
    assert piped.pending_tasks == 0


def test_broadcasts_to_a_busy_worker_never_block_the_pool():
    # Control frames to a busy worker wait in its request pipe until its task ends; past a
    # budget they are skipped, so the pool lock is never held by a write on a full pipe.
    p = WorkerPool("retrieval", 1, idle_timeout_s=None, task_modules=TASK_MODULES)
    try:
        running = p.submit("sleep", {"seconds": 60})
        _wait_busy(p)
        sent: list[int] = []
        # 3000 frames of ~100 B would fill the 64 KiB pipe, which the busy worker reads only after
        # its 60 s task: broadcasts that returned within 30 s did not wait on that pipe
        sender = threading.Thread(target=lambda: sent.extend(
            p.broadcast("retain", {"db_id": "x", "keep": list(range(20))}) for _ in range(3000)))
        sender.start()
        sender.join(30)
        assert not sender.is_alive() and not running.done()
        assert 0 < sum(sent) < 3000
        assert running.cancel() is True  # ends that worker; the ping runs on its replacement
        assert p.run("ping", 7) == 7
        assert p.broadcast("retain", {"db_id": "x", "keep": []}) == 1  # an idle worker: sent
    finally:
        p.close(drain=False)


def test_a_task_the_pool_builds_has_every_field_of_task():
    import dataclasses

    from workers.futures import RunResult
    from workers.slot import Task

    p = WorkerPool("retrieval", 1, idle_timeout_s=None)
    p.close()
    result = RunResult()
    task = p._submit("ping", 1, 2.5, result, True)  # refused by the closed pool, built all the same
    expected = Task(task.id, "ping", task.data, len(task.data), result, None, 2.5, waiter=True)
    assert [getattr(task, f.name) for f in dataclasses.fields(Task)] == [
        getattr(expected, f.name) for f in dataclasses.fields(Task)]
    assert isinstance(result._exc, WorkerUnavailable)


def test_a_finished_task_lets_go_of_its_future(pool):
    # else each round trip left a cycle (future <-> task) for the cyclic GC
    futures = [pool.submit("ping", i) for i in range(3)]
    assert [f.result(timeout=10) for f in futures] == [0, 1, 2]
    assert wait_for(lambda: all(f._task is None for f in futures), step=0.01)
