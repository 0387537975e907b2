"""Which candidate index a vector state should search from how many rows: the flat float32 scan
(``IndexFlatIP``) against int8 candidates with exact float32 rescoring (``Int8Candidates``), and
int8 candidates whose rows are read back from SQLite (``vector_compact.CompactState``).

    python -m benchmarks.vector_candidates [--dims 384,1536] [--rows 1000,2000,4000,6000,8000,13559]
                                           [--queries 300] [--json FILE]

The kinds answer the same exact top-k (the test suite checks it: ``tests/test_vector_unified.py``,
``tests/test_compact_vectors.py``; so does every run here); they differ in what a search reads and
what a worker holds: ``rows x dims x 4`` bytes for the flat scan, a quarter of that plus the
rescored rows for int8, which compact reads from a real SQLite file (written here, chunk rows of
the same vectors) instead of keeping the float32 matrix. Each size is timed in blocks (one kind,
one condition, every query), twice in opposite orders:

- hot: searches back to back, the matrix in the CPU caches;
- cold: 96 MB of other memory written before each search, as a server's caches are after the other
  work it and its neighbours did since its last search.

One thread (as in a worker: ``workers.runtime`` pins BLAS and OpenMP to one), top 48 distinct rows
(a hybrid search's 24 candidates, doubled for chunks that also hold passage vectors). The vectors
are clustered (a centre per 16 rows, plus noise), normalised like a model's output; the production
thresholds are ``host_facades.retrieval.vector_state.FP16_MIN_ROWS`` (int8 candidates) and
``host_facades.retrieval.vector_compact.COMPACT_MIN_ROWS`` (compact).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any

if __name__ == "__main__":  # one BLAS/OpenMP thread, as in a worker (before numpy loads BLAS)
    from workers.runtime import pin_threads

    pin_threads()

import numpy as np  # noqa: E402 - after the thread pins

from benchmarks import add_json_argument, emit, progress_log  # noqa: E402
from host_facades.retrieval.vector_compact import COMPACT_MIN_ROWS, compact_state  # noqa: E402
from host_facades.retrieval.vector_state import (  # noqa: E402
    FP16_MIN_ROWS,
    VectorState,
    build_index,
    load_faiss,
    read_rows,
    rows_matrix,
)

TOP = 48
JUNK_BYTES = 96 << 20


def clustered(rows: int, dims: int, rng: np.random.Generator) -> np.ndarray:
    """``rows`` unit vectors around ``rows / 16`` random centres."""
    centres = rng.standard_normal((max(1, rows // 16), dims)).astype(np.float32)
    m = centres[rng.integers(0, len(centres), rows)] + 0.6 * rng.standard_normal((rows, dims)).astype(np.float32)
    return np.ascontiguousarray(m / np.linalg.norm(m, axis=1, keepdims=True), dtype=np.float32)


def write_db(path: str, matrix: np.ndarray) -> None:
    """A memory-core index of one chunk per row of ``matrix`` (ids ``c<i>``, text one word)."""
    import apsw

    from host_facades.db.vectors import encode_vector
    from memory_core.store import schema

    conn = apsw.Connection(path)
    schema.configure_connection(conn)
    schema.migrate(conn)
    with conn:
        conn.execute("INSERT INTO memory_index_sources(path, source, hash, mtime, size) VALUES ('memory/a.md','memory','h',0,0)")
        conn.executemany("INSERT INTO memory_index_chunks(id, path, source, start_line, end_line, hash, model, text,"
                         " embedding, updated_at) VALUES (?, 'memory/a.md', 'memory', 1, 1, ?, 'm', 'w', ?, 0)",
                         ((f"c{i}", f"h{i}", encode_vector(v)) for i, v in enumerate(matrix)))
    conn.close()


def measure(rows: int, dims: int, queries: int, *, seed: int = 0) -> dict[str, Any]:
    """Median ms per search for flat, int8 and compact, hot and cold, and whether their answers were equal."""
    from host_facades.db.sqlite_read import open_readonly, read_snapshot

    rng = np.random.default_rng(seed)
    matrix = clustered(rows, dims, rng)
    ids = [f"c{i}" for i in range(rows)]
    sources = np.array(["memory"] * rows, dtype=object)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.sqlite")
        write_db(path, matrix)
        conn = open_readonly(path, load_vec=False)
        with read_snapshot(conn):
            stored = read_rows(conn, ("bench", 0, "m"))
            states: dict[str, Any] = {}
            for kind in ("flat", "int8"):  # the rows as a search reads them (normalised once more)
                index, kept = build_index(rows_matrix(stored), kind=kind)
                states[kind] = VectorState(("bench", 0, "m"), ids, sources, kept, index)
            states["compact"] = compact_state(("bench", 0, "m"), stored)
            out = _time(states, conn, matrix, queries, rng)
        conn.close()
    out = {"rows": rows, "dims": dims, "matrixMB": round(rows * dims * 4 / 1e6, 1), **out}
    for kind in ("int8", "compact"):
        for cond in ("hot", "cold"):
            out[f"{kind}/flat {cond}"] = round(out[f"{cond} {kind}"] / out[f"{cond} flat"], 2)
    return out


def _time(states: dict[str, Any], conn: Any, matrix: np.ndarray, queries: int,
          rng: np.random.Generator) -> dict[str, Any]:
    rows, dims = matrix.shape
    qs = [matrix[i] + 0.3 * rng.standard_normal(dims).astype(np.float32) for i in rng.integers(0, rows, queries)]
    same = all(states["flat"].search(q, TOP) == states["int8"].search(q, TOP)
               == states["compact"].search(q, TOP, conn=conn) for q in qs[:50])
    junk = np.ones(JUNK_BYTES // 4, dtype=np.float32)
    times: dict[str, list[float]] = {f"{c} {k}": [] for c in ("hot", "cold") for k in states}
    for round_ in range(2):  # blocks of one kind and one condition, in both orders
        for cold in (False, True):
            for kind in (list(states) if round_ == 0 else list(states)[::-1]):
                state, row = states[kind], times[f"{'cold' if cold else 'hot'} {kind}"]
                state.search(qs[-1], TOP, conn=conn)  # a hot block starts with the matrix in the caches
                for q in qs:
                    if cold:
                        junk += 1.0
                    t = time.perf_counter()
                    state.search(q, TOP, conn=conn)
                    row.append((time.perf_counter() - t) * 1000)
    out: dict[str, Any] = {"sameAnswers": same}
    out.update({row: round(statistics.median(v), 3) for row, v in times.items()})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.vector_candidates", description=__doc__.split("\n")[0])
    ap.add_argument("--dims", default="384,1536")
    ap.add_argument("--rows", default="1000,2000,4000,6000,8000,13559")
    ap.add_argument("--queries", type=int, default=300)
    add_json_argument(ap)
    args = ap.parse_args(argv)
    log = progress_log(args)
    faiss = load_faiss()
    if faiss is None:
        raise SystemExit("error: faiss is not installed; pip install faiss-cpu")
    faiss.omp_set_num_threads(1)
    results = []
    kinds = ("flat", "int8", "compact")
    log(f"{'rows':>6} {'dims':>5} {'MB':>6} " + " ".join(f"{c + ' ' + k:>12}" for c in ("hot", "cold") for k in kinds)
        + f" {'int8/flat':>10} {'compact/flat':>13}  same")
    for dims in (int(d) for d in args.dims.split(",")):
        for rows in (int(r) for r in args.rows.split(",")):
            r = measure(rows, dims, args.queries)
            results.append(r)
            log(f"{rows:>6} {dims:>5} {r['matrixMB']:>6} " + " ".join(f"{r[c + ' ' + k]:>12}" for c in ("hot", "cold")
                                                                        for k in kinds)
                + f" {r['int8/flat hot']:>5}/{r['int8/flat cold']:<4} {r['compact/flat hot']:>7}/{r['compact/flat cold']:<5}"
                + f"  {r['sameAnswers']}")
    log(f"(ms per search, medians; ratios hot/cold; int8 candidates from FP16_MIN_ROWS = {FP16_MIN_ROWS} rows,"
        f" compact from COMPACT_MIN_ROWS = {COMPACT_MIN_ROWS})")
    emit(args, {"fp16_min_rows": FP16_MIN_ROWS, "compact_min_rows": COMPACT_MIN_ROWS, "top": TOP, "rows": results},
         None)  # the table went out row by row
    return 0 if all(r["sameAnswers"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
