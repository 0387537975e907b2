"""Throughput: keyword/vector/hybrid search through the worker pool (1, 2 workers) vs in-process vs raw faiss/FTS5.

Keyword, vector and hybrid search through the worker pool (1 and 2 workers) against the same
search in-process and against raw faiss / raw FTS5, in one run. ``raw_faiss`` is plain
single-threaded ``IndexFlatIP`` (the baseline); ``raw_faiss_fp16_info`` (an fp16 scalar
quantizer alone, no rescoring) is for information. The pools are configured like MemoryCore's
shared retrieval pool (``pipeline_depth``, workers/shared.py).

    python -m benchmarks.bench_throughput [--chunks 100000] [--dims 384] [--seconds 4] [--db PATH]
    memory-core bench throughput            (registered in memory_core/cli/bench.py)

The database is written straight into the schema: ``--chunks`` random L2-normalised vectors of
``--dims`` dimensions plus 30 random words of text each. Reports p50/p95 latency (one client)
and QPS (2 clients per worker), and the ratios with targets: pool overhead per query
(p50 pooled - p50 in-process, target <= 1 ms), QPS(2 workers) / QPS(1 worker) (target >= 1.7) and
pooled vector p50 / raw single-thread faiss p50 (target <= 1.3). Next to the 2-over-1 worker
ratio it measures the machine's own ceiling for each search: the workers' own search code, on the
same database, in 1 vs 2 independent processes at once (:class:`Ceiling`), in the
same rounds as the pool's (the pool's share of that ceiling, target >= 0.9, is the median of the
rounds' shares); a vector scan that is memory-bandwidth bound cannot scale further through any pool.
Last, :func:`owner_floor` measures the owner's CPU per round trip of the pool alone (no search)
under the same full load, with workers that spin in registers and with workers that read as many
bytes as the vector matrix: the part of the owner's cost per search that is the round trip itself.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from benchmarks import add_json_argument, emit
from benchmarks.plot import add_plot_argument, check_plot_available, grouped_bars
from memory_core.progress import Progress

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import apsw  # noqa: E402
import numpy as np  # noqa: E402

MODEL = "bench-model"


def build_db(path: str, chunks: int, dims: int, *, seed: int = 7) -> str:
    """Write ``chunks`` rows (text + vector) straight into a fresh memory-core database."""
    from host_facades.db.vectors import encode_vector
    from memory_core.store import schema

    rng = np.random.default_rng(seed)
    vocab = [f"w{i:04d}" for i in range(5000)]
    conn = apsw.Connection(path)
    schema.configure_connection(conn)
    schema.migrate(conn)
    schema.ensure_fts(conn)
    per_file = 50
    with conn:
        for f in range(0, chunks, per_file):
            fpath = f"memory/f{f // per_file:05d}.md"
            conn.execute("INSERT INTO memory_index_sources(path, source, hash, mtime, size) VALUES (?,?,?,?,?)",
                         (fpath, "memory", f"h{f}", 1.7e12, 1000))
            n = min(per_file, chunks - f)
            vecs = rng.standard_normal((n, dims)).astype(np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            words = rng.integers(0, len(vocab), size=(n, 30))
            rows = [(f"c{f + i}", fpath, "memory", i + 1, i + 1, f"h{f + i}", MODEL, " ".join(vocab[w] for w in words[i]),
                     encode_vector(vecs[i])) for i in range(n)]
            conn.executemany(
                "INSERT INTO memory_index_chunks(id, path, source, start_line, end_line, hash, model, text, embedding,"
                " updated_at) VALUES (?,?,?,?,?,?,?,?,?,0)", rows)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


def qps(fn: Callable[[int], Any], clients: int, seconds: float) -> float:
    """Queries per second with ``clients`` threads calling ``fn`` for ``seconds``."""
    stop = time.monotonic() + seconds
    counts = [0] * clients
    errors: list[BaseException] = []

    def loop(k: int) -> None:
        i = k * 100_000
        try:
            while time.monotonic() < stop:
                fn(i)
                i += 1
                counts[k] += 1
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(k,)) for k in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return round(sum(counts) / (time.monotonic() - t0), 1)


class CpuMeter:
    """CPU time per query of the owner (this process, every thread) and of ``pool``'s workers
    over the ``with`` blocks: where the 2 cores go. With 2 busy workers the owner's share comes
    out of theirs, so QPS(2) / QPS(1) is at most about 2 W / (W + O) for worker time W and owner
    time O per query. Linux (/proc); elsewhere the figures are None."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.queries = 0.0
        self.owner_s = 0.0
        self.workers_s = 0.0
        self._start: tuple[float, float] | None = None

    def _now(self) -> tuple[float, float]:
        t = os.times()
        workers = 0.0
        for pid in self.pool.worker_pids():
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                workers += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            except (OSError, ValueError, IndexError):
                pass
        return t.user + t.system, workers

    def __enter__(self) -> CpuMeter:
        self._start = self._now()
        return self

    def __exit__(self, *exc: Any) -> None:
        owner, workers = self._now()
        assert self._start is not None
        self.owner_s += owner - self._start[0]
        self.workers_s += workers - self._start[1]

    def per_query_us(self) -> dict[str, float | None]:
        if not self.queries or not os.path.isdir("/proc"):
            return {"owner": None, "workers": None}
        return {"owner": round(self.owner_s / self.queries * 1e6, 1),
                "workers": round(self.workers_s / self.queries * 1e6, 1)}


def warm_up(fn: Callable[[int], Any], pool: Any, clients: int, *, max_s: float = 60.0) -> None:
    """Run ``fn`` from ``clients`` threads until every worker of ``pool`` ran it at least once (a
    worker builds its derived vector state on its first search of a generation), then 0.5 s more."""
    start = {w["pid"]: w["tasks_run"] for w in pool.workers()}
    end = time.monotonic() + max_s
    while time.monotonic() < end:
        qps(fn, clients, 0.5)
        now = pool.workers()
        if len(now) >= pool.size and all(w["tasks_run"] > start.get(w["pid"], 0) for w in now):
            break
    qps(fn, clients, 0.5)


def scaling(load: dict[int, Callable[[int], Any]], pools: dict[int, Any], round_s: float, rounds: int,
            meters: dict[int, CpuMeter] | None = None, ceiling: Ceiling | None = None) -> dict[str, float]:
    """Queries per second of ``load[n]`` (2 clients per worker) through ``pools[n]``, 1 vs 2
    workers in alternating rounds of ``round_s``; medians and their ratio. Every worker is warmed
    first (its derived vector state, its pages): a steady state, as in a long-running service.
    ``meters[n]`` (optional) adds up the CPU time and queries of the rounds. With ``ceiling``, each
    round also measures the machine's own 1 vs 2 process scaling right after the pool's, and
    ``share_of_ceiling`` is the median of the rounds' (pool ratio / ceiling ratio): both ratios of
    one round see the same load from the rest of the machine."""
    for n, fn in load.items():
        warm_up(fn, pools[n], 2 * n)
    q: dict[int, list[float]] = {n: [] for n in load}
    solo: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(rounds):
        for n, fn in load.items():
            meter = meters[n] if meters else None
            with meter if meter is not None else contextlib.nullcontext():
                rate = qps(fn, 2 * n, round_s)
            if meter is not None:
                meter.queries += rate * round_s
            q[n].append(rate)
        if ceiling is not None:
            for n in (1, 2):
                solo[n].append(ceiling.run(n, round_s))
    out = {f"pool_{n}": statistics.median(v) for n, v in q.items()}
    out["ratio_2_over_1"] = round(statistics.median(q[2]) / statistics.median(q[1]), 2)
    if ceiling is not None:
        out["independent_1"] = round(statistics.median(solo[1]), 1)
        out["independent_2"] = round(statistics.median(solo[2]), 1)
        out["independent_ratio_2_over_1"] = round(out["independent_2"] / out["independent_1"], 2)
        out["share_of_ceiling"] = round(statistics.median(
            (q[2][r] / q[1][r]) / (solo[2][r] / solo[1][r]) for r in range(rounds)), 2)
    return out


def owner_floor(pool: Any, mb: int, seconds: float, *, task_cpu_s: float = 0.001) -> dict[str, float | None]:
    """The pool's own round trip under a full load, no search: 2 clients per worker of ``pool``
    run the ``stream`` task (benchmarks.worker_tasks), ``task_cpu_s`` of CPU each, first spinning
    in registers, then reading ``mb`` MiB (the vector matrix's size) in turn; the owner's CPU per
    round trip in both. Its difference is what the workers' memory traffic costs the owner (the
    caches a search evicts on a core are the owner's too); the round trip itself is a floor under
    every pooled search that no change to the search code removes."""
    out: dict[str, float | None] = {}
    for name, size in (("registers", 0), ("memory", mb)):
        payload = {"cpu_s": task_cpu_s, "mb": size}
        fn = lambda i, p=payload: pool.run("stream", p)  # noqa: E731
        warm_up(fn, pool, 2 * pool.size)
        meter = CpuMeter(pool)
        with meter:
            rate = qps(fn, 2 * pool.size, seconds)
        meter.queries = rate * seconds
        out[f"owner_us_{name}"] = meter.per_query_us()["owner"]
    out["memory_mb"] = mb
    return out


def paired_latency(variants: dict[str, Callable[[int], Any]], n: int) -> dict[str, dict[str, float]]:
    """p50/p95 per variant, measured round-robin on the same query index so that load from other
    processes on the machine hits every variant alike; ``delta_p50_ms`` is relative to the first."""
    for i in range(3):
        for fn in variants.values():
            fn(i)
    times: dict[str, list[float]] = {k: [] for k in variants}
    for i in range(n):
        for name, fn in variants.items():
            t = time.perf_counter()
            fn(i)
            times[name].append((time.perf_counter() - t) * 1000)
    base = next(iter(variants))
    out = {}
    for name, ts in times.items():
        diffs = sorted(x - y for x, y in zip(ts, times[base]))
        ts = sorted(ts)
        out[name] = {"p50_ms": round(statistics.median(ts), 3), "p95_ms": round(ts[int(0.95 * (len(ts) - 1))], 3),
                     "delta_p50_ms": round(statistics.median(diffs), 3)}
    return out


def workload(dims: int) -> tuple[list[str], np.ndarray, dict[str, tuple[Any, Callable[[Any, int], Any]]]]:
    """The benchmark's queries and its three searches: ``(keywords, query vectors, kinds)`` where
    ``kinds[name] = (config, call(engine, i))``."""
    from memory_core.config import MemoryCoreConfig

    rng = np.random.default_rng(11)
    qvecs = rng.standard_normal((512, dims)).astype(np.float32)
    qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
    words = [f"w{i:04d}" for i in rng.integers(0, 5000, size=1024)]
    kw = [f"{words[2 * i]} {words[2 * i + 1]}" for i in range(512)]
    cfg = MemoryCoreConfig()
    cfg = cfg.model_copy(update={"query": cfg.query.model_copy(update={"min_score": 0.0})})
    vcfg = cfg.model_copy(update={"query": cfg.query.model_copy(
        update={"hybrid": cfg.query.hybrid.model_copy(update={"enabled": False})})})
    kinds = {
        "keyword": (cfg, lambda e, i: e.search(kw[i % 512], lexical_only=True)),
        "vector": (vcfg, lambda e, i: e.search(kw[i % 512], query_vector=qvecs[i % 512])),
        "hybrid": (cfg, lambda e, i: e.search(kw[i % 512], query_vector=qvecs[i % 512])),
    }
    return kw, qvecs, kinds


def solo_main(argv: list[str]) -> int:
    """A child of :func:`independent_qps`: the search ``KIND`` on ``DB`` in a loop, run by the
    workers' own task code in this process (``InlinePool``, as ``pool.workers = 0``), so it builds
    the same vector state the pool's workers build: the pool's work without the pool.

    Prints ``ready`` once warm, then answers each ``run SECONDS`` line on stdin with the queries
    per second of a loop of that length; ``exit`` (or end of input) ends it."""
    from memory_core.search.engine import SearchEngine
    from workers.inline import InlinePool
    from workers.retriever import PooledRetriever

    db, dims, kind = argv[0], int(argv[1]), argv[2]
    _, _, kinds = workload(dims)
    config, call = kinds[kind]
    engine = SearchEngine(config, db, None, retriever=PooledRetriever(db, InlinePool()))
    for i in range(20):  # builds the derived vector state, warms the page cache
        call(engine, i)
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] != "run":
            break
        print(json.dumps({"qps": qps(lambda i: call(engine, i), 1, float(cmd[1]))}), flush=True)
    engine.close()
    return 0


class Ceiling:
    """Two children that run the search ``kind`` on ``db`` with the workers' own task code
    (:func:`solo_main`: no pool, no owner); :meth:`run` gives the queries per second of 1 or 2 of
    them at once: the scaling this machine allows for that search (shared caches, memory
    bandwidth). A context manager; the children are idle between runs."""

    def __init__(self, db: str, dims: int, kind: str) -> None:
        import subprocess

        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        cmd = [sys.executable, "-c", "import sys; from benchmarks.bench_throughput import solo_main; "
                                     "sys.exit(solo_main(sys.argv[1:]))", db, str(dims), kind]
        self.kind = kind
        self.procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
                      for _ in range(2)]

    def __enter__(self) -> Ceiling:
        for p in self.procs:
            if p.stdout.readline().strip() != "ready":
                self.close()
                raise RuntimeError(f"benchmark child for {self.kind!r} failed to start (exit code {p.wait()})")
        return self

    def run(self, n: int, seconds: float) -> float:
        for p in self.procs[:n]:
            p.stdin.write(f"run {seconds}\n")
            p.stdin.flush()
        return sum(json.loads(p.stdout.readline())["qps"] for p in self.procs[:n])

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        import subprocess

        for p in self.procs:
            try:
                p.stdin.write("exit\n")
                p.stdin.close()
            except OSError:
                pass
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def measure(*, chunks: int = 100_000, dims: int = 384, seconds: float = 8.0, samples: int = 200,
        db: str | None = None, limit: int = 6, rounds: int = 5) -> dict[str, Any]:
    import faiss

    from benchmarks.worker_tasks import TASK_MODULES, retrieve
    from host_facades.db.sqlite_read import open_readonly
    from memory_core.search.engine import SearchEngine
    from workers.pool import WorkerPool
    from workers.retriever import PooledRetriever

    faiss.omp_set_num_threads(1)
    tmp = None
    if db is None:
        tmp = tempfile.mkdtemp(prefix="memory-core-bench-")
        db = os.path.join(tmp, "bench.sqlite")
    if not os.path.exists(db):
        t = time.perf_counter()
        build_db(db, chunks, dims)
        print(f"built {chunks} x {dims} database in {time.perf_counter() - t:.1f} s: {db}", file=sys.stderr)
    kw, qvecs, kinds = workload(dims)
    results: dict[str, Any] = {"chunks": chunks, "dims": dims, "cpu_count": os.cpu_count(),
                               "loadavg": os.getloadavg()}

    # raw baselines, in-process and single-threaded
    conn = open_readonly(db, load_vec=False)
    raw_sql = ("SELECT c.id, bm25(memory_index_chunks_fts) AS r FROM memory_index_chunks_fts JOIN memory_index_chunks c"
               " ON c.chunk_rowid = memory_index_chunks_fts.rowid WHERE memory_index_chunks_fts MATCH ? ORDER BY r LIMIT ?")
    blobs = conn.execute("SELECT embedding FROM memory_index_chunks ORDER BY chunk_rowid").fetchall()
    matrix = np.frombuffer(b"".join(b[0] for b in blobs), dtype="<f4").reshape(len(blobs), dims).copy()
    del blobs
    index = faiss.IndexFlatIP(dims)
    index.add(matrix)
    # for information only (the baseline is the plain IndexFlatIP above): the fp16 scalar
    # quantizer alone, without the exact rescoring memory-core adds (host_facades/retrieval/vector_state.py)
    index_fp16 = faiss.IndexScalarQuantizer(dims, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
    index_fp16.train(matrix[:1])
    index_fp16.add(matrix)
    del matrix

    from workers.shared import RETRIEVAL_PIPELINE_DEPTH

    # configured like MemoryCore's shared retrieval pool (workers/shared.py)
    pools = {n: WorkerPool("retrieval", n, idle_timeout_s=None, pipeline_depth=RETRIEVAL_PIPELINE_DEPTH,
                          task_modules=TASK_MODULES) for n in (1, 2)}
    for pool in pools.values():
        pool.prewarm()
    retrievers = {n: PooledRetriever(db, pools[n]) for n in pools}

    def engines(config: Any, n: int | None) -> SearchEngine:
        return SearchEngine(config, db, None, retriever=None if n is None else retrievers[n])

    def retrieve_only(i: int, n: int) -> Any:
        """The vector retrieval op alone through the pool of ``n`` workers (no ranking)."""
        return retrieve(retrievers[n], [{"op": "vector", "qvec": qvecs[i % 512].tobytes(), "model": MODEL,
                                         "limit": limit * 4}], metadata=None)

    mismatches = 0
    steps = Progress("throughput", 4 * len(kinds), unit="steps")  # per kind: latency, QPS, ceiling, close
    for name, (config, call) in kinds.items():
        inproc, p1, p2 = engines(config, None), engines(config, 1), engines(config, 2)
        for i in range(20):  # same hits in-process and pooled
            mismatches += call(inproc, i) != call(p1, i) or call(inproc, i) != call(p2, i)
        variants: dict[str, Callable[[int], Any]] = {
            "in_process": lambda i, e=inproc, c=call: c(e, i),
            "pool_1": lambda i, e=p1, c=call: c(e, i),
            "pool_2": lambda i, e=p2, c=call: c(e, i),
        }
        if name == "keyword":
            variants["raw_fts5"] = lambda i: conn.execute(raw_sql, (kw[i % 512].replace(" ", " OR "), limit * 4)).fetchall()
        if name == "vector":
            variants["raw_faiss"] = lambda i: index.search(qvecs[i % 512].reshape(1, -1), limit * 4)
            variants["raw_faiss_fp16_info"] = lambda i: index_fp16.search(qvecs[i % 512].reshape(1, -1), limit * 4)
            variants["pool_1_retrieve_only"] = lambda i: retrieve_only(i, 1)
        results[name] = paired_latency(variants, samples)
        steps.advance(item=name)
        # QPS: 2 clients per worker (each its own engine), 1 vs 2 workers
        clients = {n: [engines(config, n) for _ in range(2 * n)] for n in (1, 2)}
        load = {n: (lambda i, es=clients[n], c=call: c(es[(i // 100_000) % len(es)], i)) for n in (1, 2)}
        cpu = {n: CpuMeter(pools[n]) for n in (1, 2)}
        # the machine's own ceiling for this search (1 vs 2 independent processes, no pool),
        # measured in the same rounds as the pool
        with Ceiling(db, dims, name) as ceiling:
            steps.advance(item=name)
            results[name]["qps"] = scaling(load, pools, seconds / rounds, rounds, cpu, ceiling)
        results[name]["cpu_us_per_query"] = {f"pool_{n}": cpu[n].per_query_us() for n in (1, 2)}
        steps.advance(item=name)
        if name == "vector":  # the pool alone, without the owner's ranking work; this op keys its
            # derived state by model, so the warm-up has each worker build that one too
            results[name]["qps_retrieve_only"] = scaling(
                {n: (lambda i, n=n: retrieve_only(i, n)) for n in (1, 2)}, pools, seconds / rounds, rounds)
        for e in (inproc, p1, p2, *clients[1], *clients[2]):
            e.close()
        steps.advance(item=name)
    steps.finish()
    results["ping"] = paired_latency({"pool_1": lambda i: pools[1].run("ping", i)}, samples)["pool_1"]
    results["owner_floor"] = owner_floor(pools[2], max(1, chunks * dims * 4 >> 20), min(4.0, seconds / 2))
    results["pooled_equals_in_process"] = mismatches == 0
    v = results["vector"]
    results["targets"] = {
        "pool_overhead_ms_p50 (<= 1)": {k: results[k]["pool_1"]["delta_p50_ms"] for k in kinds},
        "qps_2_workers_over_1 (>= 1.7)": {**{k: results[k]["qps"]["ratio_2_over_1"] for k in kinds},
                                          "vector_retrieve_only": results["vector"]["qps_retrieve_only"]["ratio_2_over_1"]},
        "machine_ceiling_2_independent_processes_over_1": {
            k: results[k]["qps"]["independent_ratio_2_over_1"] for k in kinds},
        # how much of the scaling this machine allowed in the same run the pool kept (1.0 = all)
        "pool_scaling_share_of_machine_ceiling (>= 0.9)": {k: results[k]["qps"]["share_of_ceiling"] for k in kinds},
        "pooled_vector_over_raw_faiss_p50 (<= 1.3)": {
            "retrieve_only": round(v["pool_1_retrieve_only"]["p50_ms"] / v["raw_faiss"]["p50_ms"], 2),
            "full_search": round(v["pool_1"]["p50_ms"] / v["raw_faiss"]["p50_ms"], 2)},
        "pooled_keyword_over_raw_fts5_p50": round(results["keyword"]["pool_1"]["p50_ms"]
                                                  / results["keyword"]["raw_fts5"]["p50_ms"], 2),
    }
    results["loadavg_end"] = os.getloadavg()
    for pool in pools.values():
        pool.close()
    conn.close()
    if tmp is not None:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return results


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chunks", type=int, default=100_000)
    p.add_argument("--dims", type=int, default=384)
    p.add_argument("--seconds", type=float, default=8.0, help="duration of each QPS measurement (split into --rounds)")
    p.add_argument("--rounds", type=int, default=5,
                   help="alternating 1-worker / 2-worker rounds per QPS measurement; medians are reported")
    p.add_argument("--samples", type=int, default=200, help="sequential queries per latency measurement")
    p.add_argument("--db", default=None, help="reuse (or create) this benchmark database")
    add_json_argument(p)
    add_plot_argument(p)


def format_table(out: dict[str, Any]) -> str:
    lines = [f"throughput: {out['chunks']} chunks x {out['dims']} dims, {out['cpu_count']} CPUs, "
             f"load {out['loadavg'][0]:.1f} -> {out['loadavg_end'][0]:.1f}, pooled == in-process: "
             f"{out['pooled_equals_in_process']}",
             f"{'search':<8} {'variant':<22} {'p50 ms':>8} {'p95 ms':>8} {'delta p50':>10}"]
    for kind in ("keyword", "vector", "hybrid"):
        for variant, row in out[kind].items():
            if variant.startswith(("qps", "cpu")):
                continue
            lines.append(f"{kind:<8} {variant:<22} {row['p50_ms']:>8.2f} {row['p95_ms']:>8.2f} {row['delta_p50_ms']:>10.2f}")
        q = out[kind]["qps"]
        lines.append(f"{kind:<8} {'QPS 1 / 2 workers':<22} {q['pool_1']:>8.1f} {q['pool_2']:>8.1f} {q['ratio_2_over_1']:>9.2f}x")
        lines.append(f"{kind:<8} {'QPS 1 / 2 processes*':<22} {q['independent_1']:>8.1f} {q['independent_2']:>8.1f} "
                     f"{q['independent_ratio_2_over_1']:>9.2f}x")
        c = out[kind].get("cpu_us_per_query") or {}
        if c.get("pool_2", {}).get("owner") is not None:
            lines.append(f"{kind:<8} {'CPU us/query 1 / 2 w.':<22} "
                         + "   ".join(f"owner {c[p]['owner']:.0f} workers {c[p]['workers']:.0f}" for p in ("pool_1", "pool_2")))
    lines.append(f"pool ping round trip p50 {out['ping']['p50_ms']:.3f} ms")
    f = out.get("owner_floor") or {}
    if f.get("owner_us_registers") is not None:
        lines.append(f"pool round trip, no search, 2 workers busy 1 ms a task: owner CPU us/query "
                     f"{f['owner_us_registers']:.0f} (workers spin in registers) / {f['owner_us_memory']:.0f} "
                     f"(workers read {f['memory_mb']} MiB in turn)")
    lines.append("* the workers' search code in 1 vs 2 independent processes (no pool, no owner): the machine's ceiling")
    for target, value in out["targets"].items():
        lines.append(f"target {target}: {value}")
    return "\n".join(lines)


def plot(out: dict[str, Any], path: str) -> str:
    """Queries per second per worker count for each search, next to the machine's ceiling (processes)."""
    groups = {kind: {"pool, 1 worker": out[kind]["qps"]["pool_1"], "pool, 2 workers": out[kind]["qps"]["pool_2"],
                     "ceiling, 1 process": out[kind]["qps"]["independent_1"],
                     "ceiling, 2 processes": out[kind]["qps"]["independent_2"]}
              for kind in ("keyword", "vector", "hybrid")}
    return grouped_bars(groups, path, ylabel="queries per second (2 clients per worker)",
                        title=f"memory-core bench throughput: {out['chunks']} chunks x {out['dims']} dims, "
                              f"{out['cpu_count']} CPUs", value_format="{:.0f}")


def run(args: argparse.Namespace) -> int:
    """Entry point of ``memory-core bench throughput`` (memory_core/cli/bench.py registry)."""
    check_plot_available(args.plot)
    out = measure(chunks=args.chunks, dims=args.dims, seconds=args.seconds, samples=args.samples, db=args.db,
                  rounds=args.rounds)
    emit(args, out, lambda: format_table(out))
    if args.plot:
        plot(out, args.plot)
        print(f"chart written to {args.plot}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_throughput", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
