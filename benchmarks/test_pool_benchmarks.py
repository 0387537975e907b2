"""pytest-benchmark timings of the worker pool against in-process work, on a 10k-chunk database.

Not part of the test suite (``testpaths = ["tests"]``); run them on purpose:

    python -m pytest benchmarks/test_pool_benchmarks.py --benchmark-group-by=group

Each group puts a pooled operation next to its in-process baseline, timed in the same run: a
task round trip (``ping``) next to a plain function call, and a keyword / hybrid search through a
1-worker pool next to the same search in-process. The difference is the pool's overhead per
query; ``memory-core bench throughput`` measures the same at 100k chunks plus the QPS scaling.
"""

from __future__ import annotations

import os

import pytest

from benchmarks.bench_throughput import build_db, workload

pytest.importorskip("pytest_benchmark")

CHUNKS = 10_000
DIMS = 384


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("pool-bench") / "bench.sqlite")
    return build_db(path, CHUNKS, DIMS)


@pytest.fixture(scope="module")
def pool():
    from benchmarks.worker_tasks import TASK_MODULES
    from workers.pool import WorkerPool
    from workers.shared import RETRIEVAL_PIPELINE_DEPTH

    p = WorkerPool("retrieval", 1, idle_timeout_s=None, pipeline_depth=RETRIEVAL_PIPELINE_DEPTH,
                   task_modules=TASK_MODULES)
    p.prewarm()
    yield p
    p.close()


@pytest.fixture(scope="module")
def engines(db, pool):
    from memory_core.search.engine import SearchEngine
    from workers.retriever import PooledRetriever

    _, _, kinds = workload(DIMS)
    retriever = PooledRetriever(db, pool)
    made = {}
    for name, (config, call) in kinds.items():
        made[name] = (call, SearchEngine(config, db, None), SearchEngine(config, db, None, retriever=retriever))
    yield made
    for _, inproc, pooled in made.values():
        inproc.close()
        pooled.close()


def _loop(call):
    """A callable that runs ``call`` on the next query index each time (queries rotate)."""
    state = {"i": 0}

    def step():
        state["i"] += 1
        return call(state["i"])

    return step


@pytest.mark.benchmark(group="round trip")
def test_pool_ping_round_trip(benchmark, pool):
    assert benchmark(pool.run, "ping", 1) == 1


@pytest.mark.benchmark(group="round trip")
def test_in_process_call_baseline(benchmark):
    assert benchmark(os.getpid) > 0


@pytest.mark.parametrize("kind", ["keyword", "hybrid"])
@pytest.mark.parametrize("where", ["in_process", "pool_1_worker"])
def test_search(benchmark, engines, kind, where):
    call, inproc, pooled = engines[kind]
    engine = inproc if where == "in_process" else pooled
    benchmark.group = f"{kind} search, {CHUNKS} chunks"
    assert call(engine, 0) == call(inproc, 0)  # the pooled search answers like the in-process one
    hits = benchmark(_loop(lambda i: call(engine, i)))
    assert isinstance(hits, list)
