"""Which candidate index a vector state should search from how many rows: the flat float32 scan
(``IndexFlatIP``) against int8 candidates with exact float32 rescoring (``Int8Candidates``).

    python -m benchmarks.vector_candidates [--dims 384,1536] [--rows 1000,2000,4000,6000,8000,13559]
                                           [--queries 300] [--json FILE]

Both kinds answer the same exact top-k (the test suite checks it: ``tests/test_vector_unified.py``);
they differ in what a search reads: ``rows x dims x 4`` bytes for the flat scan, a quarter of that
plus the rescored rows for int8. Each size is timed in blocks (one kind, one condition, every
query), twice in opposite orders:

- hot: searches back to back, the matrix in the CPU caches;
- cold: 96 MB of other memory written before each search, as a server's caches are after the other
  work it and its neighbours did since its last search.

One thread (as in a worker: ``workers.runtime`` pins BLAS and OpenMP to one), top 48 distinct rows
(a hybrid search's 24 candidates, doubled for chunks that also hold passage vectors). The vectors
are clustered (a centre per 16 rows, plus noise), normalised like a model's output; the production
threshold is ``host_facades.retrieval.vector_state.FP16_MIN_ROWS``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

if __name__ == "__main__":  # one BLAS/OpenMP thread, as in a worker (before numpy loads BLAS)
    from workers.runtime import pin_threads

    pin_threads()

import numpy as np  # noqa: E402 - after the thread pins

from benchmarks import add_json_argument, emit, progress_log  # noqa: E402
from host_facades.retrieval.vector_state import FP16_MIN_ROWS, VectorState, build_index, load_faiss  # noqa: E402

TOP = 48
JUNK_BYTES = 96 << 20


def clustered(rows: int, dims: int, rng: np.random.Generator) -> np.ndarray:
    """``rows`` unit vectors around ``rows / 16`` random centres."""
    centres = rng.standard_normal((max(1, rows // 16), dims)).astype(np.float32)
    m = centres[rng.integers(0, len(centres), rows)] + 0.6 * rng.standard_normal((rows, dims)).astype(np.float32)
    return np.ascontiguousarray(m / np.linalg.norm(m, axis=1, keepdims=True), dtype=np.float32)


def measure(rows: int, dims: int, queries: int, *, seed: int = 0) -> dict[str, Any]:
    """Median ms per search for flat and int8, hot and cold, and whether their answers were equal."""
    rng = np.random.default_rng(seed)
    matrix = clustered(rows, dims, rng)
    ids = [f"c{i}" for i in range(rows)]
    sources = np.array(["memory"] * rows, dtype=object)
    states = {}
    for kind in ("flat", "int8"):
        index, kept = build_index(matrix.copy(), kind=kind)
        states[kind] = VectorState(("bench", 0, "m"), ids, sources, kept, index)
    qs = [matrix[i] + 0.3 * rng.standard_normal(dims).astype(np.float32) for i in rng.integers(0, rows, queries)]
    same = all(states["flat"].search(q, TOP) == states["int8"].search(q, TOP) for q in qs[:50])
    junk = np.ones(JUNK_BYTES // 4, dtype=np.float32)
    times: dict[str, list[float]] = {f"{c} {k}": [] for c in ("hot", "cold") for k in states}
    for round_ in range(2):  # blocks of one kind and one condition, in both orders
        for cold in (False, True):
            for kind in (("flat", "int8") if round_ == 0 else ("int8", "flat")):
                state, row = states[kind], times[f"{'cold' if cold else 'hot'} {kind}"]
                state.search(qs[-1], TOP)  # a hot block starts with the matrix in the caches
                for q in qs:
                    if cold:
                        junk += 1.0
                    t = time.perf_counter()
                    state.search(q, TOP)
                    row.append((time.perf_counter() - t) * 1000)
    out: dict[str, Any] = {"rows": rows, "dims": dims, "matrixMB": round(rows * dims * 4 / 1e6, 1),
                           "sameAnswers": same}
    out.update({row: round(statistics.median(v), 3) for row, v in times.items()})
    out["int8/flat hot"] = round(out["hot int8"] / out["hot flat"], 2)
    out["int8/flat cold"] = round(out["cold int8"] / out["cold flat"], 2)
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
    log(f"{'rows':>6} {'dims':>5} {'MB':>6} {'hot flat':>9} {'hot int8':>9} {'cold flat':>10} {'cold int8':>10}"
          f" {'int8/flat hot':>14} {'cold':>6}  same")
    for dims in (int(d) for d in args.dims.split(",")):
        for rows in (int(r) for r in args.rows.split(",")):
            r = measure(rows, dims, args.queries)
            results.append(r)
            log(f"{rows:>6} {dims:>5} {r['matrixMB']:>6} {r['hot flat']:>9} {r['hot int8']:>9} {r['cold flat']:>10}"
                f" {r['cold int8']:>10} {r['int8/flat hot']:>14} {r['int8/flat cold']:>6}  {r['sameAnswers']}")
    log(f"(ms per search, medians; int8 candidates from FP16_MIN_ROWS = {FP16_MIN_ROWS} rows)")
    emit(args, {"fp16_min_rows": FP16_MIN_ROWS, "top": TOP, "rows": results}, None)  # the table went out row by row
    return 0 if all(r["sameAnswers"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
