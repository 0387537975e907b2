"""Throughput benchmark: keyword, vector and hybrid search through the worker pool (1 and 2
workers) against the same search in-process and against raw faiss / raw FTS5, in one run.

    python -m benchmarks.bench_throughput [--chunks 100000] [--dims 384] [--seconds 4] [--db PATH]
    memory-core bench throughput            (when memory_core.bench registers it)

The database is written straight into the schema: ``--chunks`` random L2-normalised vectors of
``--dims`` dimensions plus 30 random words of text each. Reports p50/p95 latency (one client)
and QPS (2 clients per worker), and the ratios the issue targets: pool overhead per query
(p50 pooled - p50 in-process, target <= 1 ms), QPS(2 workers) / QPS(1 worker) (target >= 1.7) and
pooled vector p50 / raw single-thread faiss p50 (target <= 1.3).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import apsw  # noqa: E402
import numpy as np  # noqa: E402

MODEL = "bench-model"


def build_db(path: str, chunks: int, dims: int, *, seed: int = 7) -> str:
    """Write ``chunks`` rows (text + vector) straight into a fresh memory-core database."""
    from host_facades.vectors import encode_vector
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


def latency(fn: Callable[[int], Any], n: int) -> dict[str, float]:
    """p50/p95 in ms over ``n`` sequential calls (after 5 warm-up calls)."""
    for i in range(5):
        fn(i)
    times = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    return {"p50_ms": round(statistics.median(times), 3), "p95_ms": round(times[int(0.95 * (len(times) - 1))], 3)}


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


def run(*, chunks: int = 100_000, dims: int = 384, seconds: float = 4.0, samples: int = 200,
        db: str | None = None, limit: int = 6) -> dict[str, Any]:
    import faiss

    from host_facades.engine_knn import open_readonly
    from memory_core.config import MemoryCoreConfig
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
    rng = np.random.default_rng(11)
    qvecs = rng.standard_normal((512, dims)).astype(np.float32)
    qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
    words = [f"w{i:04d}" for i in rng.integers(0, 5000, size=1024)]
    kw = [f"{words[2 * i]} {words[2 * i + 1]}" for i in range(512)]
    cfg = MemoryCoreConfig()
    cfg = cfg.model_copy(update={"query": cfg.query.model_copy(update={"min_score": 0.0})})
    results: dict[str, Any] = {"chunks": chunks, "dims": dims, "cpu_count": os.cpu_count()}

    # --- raw baselines (in-process, single thread) ---
    conn = open_readonly(db, load_vec=False)
    raw_sql = ("SELECT c.id, bm25(memory_index_chunks_fts) AS r FROM memory_index_chunks_fts JOIN memory_index_chunks c"
               " ON c.chunk_rowid = memory_index_chunks_fts.rowid WHERE memory_index_chunks_fts MATCH ? ORDER BY r LIMIT ?")
    results["raw_fts5"] = latency(lambda i: conn.execute(raw_sql, (kw[i % 512].replace(" ", " OR "), limit * 4)).fetchall(), samples)
    blobs = conn.execute("SELECT embedding FROM memory_index_chunks ORDER BY chunk_rowid").fetchall()
    matrix = np.frombuffer(b"".join(b[0] for b in blobs), dtype="<f4").reshape(len(blobs), dims).copy()
    del blobs
    index = faiss.IndexFlatIP(dims)
    index.add(matrix)
    results["raw_faiss"] = latency(lambda i: index.search(qvecs[i % 512].reshape(1, -1), limit * 4), samples)
    del index, matrix
    conn.close()

    def searches(engine: SearchEngine) -> dict[str, Callable[[int], Any]]:
        return {
            "keyword": lambda i: engine.search(kw[i % 512], lexical_only=True),
            "vector": lambda i: vector_only(engine, i),
            "hybrid": lambda i: engine.search(kw[i % 512], query_vector=qvecs[i % 512]),
        }

    vcfg = cfg.model_copy(update={"query": cfg.query.model_copy(
        update={"hybrid": cfg.query.hybrid.model_copy(update={"enabled": False})})})

    def vector_only(engine: SearchEngine, i: int) -> Any:
        engine.config = vcfg
        try:
            return engine.search(kw[i % 512], query_vector=qvecs[i % 512])
        finally:
            engine.config = cfg

    # --- in-process SearchEngine ---
    inproc = SearchEngine(cfg, db, None)
    results["in_process"] = {name: latency(fn, samples) for name, fn in searches(inproc).items()}
    results["in_process"]["keyword"]["qps_1_client"] = qps(searches(inproc)["keyword"], 1, seconds)
    inproc.close()

    # --- through the pool: 1 and 2 workers ---
    for workers in (1, 2):
        pool = WorkerPool("retrieval", workers, idle_timeout_s=None)
        pool.prewarm()
        retriever = PooledRetriever(db, pool)
        engines = [SearchEngine(cfg, db, None, retriever=retriever) for _ in range(2 * workers)]
        fns = searches(engines[0])
        row: dict[str, Any] = {}
        for name, fn in fns.items():
            row[name] = latency(fn, samples)
            per_client = [searches(e)[name] for e in engines]
            row[name]["qps"] = qps(lambda i, _f=per_client: _f[(i // 100_000) % len(_f)](i), 2 * workers, seconds)
        # the bare pooled vector retrieval (no ranking/metadata) vs raw faiss
        op = lambda i: retriever.retrieve([{"op": "vector", "qvec": qvecs[i % 512].tobytes(), "model": MODEL,  # noqa: E731
                                            "limit": limit * 4}], metadata=None)
        row["vector_retrieve_only"] = latency(op, samples)
        row["ping"] = latency(lambda i: pool.run("ping", i), samples)
        results[f"pool_{workers}"] = row
        for e in engines:
            e.close()
        pool.close()

    p1, p2, ip = results["pool_1"], results["pool_2"], results["in_process"]
    results["ratios"] = {
        "pool_overhead_ms_p50": {k: round(p1[k]["p50_ms"] - ip[k]["p50_ms"], 3) for k in ("keyword", "vector", "hybrid")},
        "ping_round_trip_ms_p50": p1["ping"]["p50_ms"],
        "qps_2_workers_over_1": {k: round(p2[k]["qps"] / p1[k]["qps"], 2) for k in ("keyword", "vector", "hybrid")},
        "pooled_vector_retrieve_over_raw_faiss_p50": round(p1["vector_retrieve_only"]["p50_ms"] / results["raw_faiss"]["p50_ms"], 2),
        "pooled_vector_search_over_raw_faiss_p50": round(p1["vector"]["p50_ms"] / results["raw_faiss"]["p50_ms"], 2),
        "pooled_keyword_over_raw_fts5_p50": round(p1["keyword"]["p50_ms"] / results["raw_fts5"]["p50_ms"], 2),
    }
    if tmp is not None:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return results


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chunks", type=int, default=100_000)
    p.add_argument("--dims", type=int, default=384)
    p.add_argument("--seconds", type=float, default=4.0, help="duration of each QPS measurement")
    p.add_argument("--samples", type=int, default=200, help="sequential queries per latency measurement")
    p.add_argument("--db", default=None, help="reuse (or create) this benchmark database")


def run_from_args(args: argparse.Namespace) -> int:
    out = run(chunks=args.chunks, dims=args.dims, seconds=args.seconds, samples=args.samples, db=args.db)
    sys.stdout.write(json.dumps(out, indent=2) + "\n")
    return 0


# How memory_core.bench (H2) can register it: name, description, add_arguments, run_from_args.
BENCHMARK = {"name": "throughput", "help": "QPS and p50/p95 through the worker pool vs in-process vs raw",
             "add_arguments": add_arguments, "run": run_from_args}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_throughput", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return run_from_args(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
