"""Gateway benchmark: memory.search over a warm protocol-4 connection vs the same search in-process.

    python -m benchmarks.bench_gateway [--files 200] [--samples 300] [--seconds 5] [--clients 16] [--json OUT]
    memory-core bench gateway ...

Builds a keyword-only workspace of ``--files`` generated notes, indexes it, starts ``memory-core
serve`` as a separate process on a free loopback port, then measures, in one run:

- in-process ``MemoryCore.search`` p50/p95 (the baseline, same queries), the engine call a v2 search
  makes (one page's candidates, up to its four-page window kept for the cursor pages), gateway
  ``memory.search`` v1 and v2 p50/p95 over one warm connection, and a protocol round trip (a request
  refused by validation: frames, JSON and dispatch only), interleaved sample by sample so that all
  rows see the same machine load; the overhead is p50(gateway v1) - p50(in-process) (target <= 2 ms),
  and v2 / v1 is p50(gateway v2) / p50(gateway v1) (target <= 1.5);
- searches/s with ``--clients`` concurrent connections (each sends its next request when the
  previous answer arrives) for ``--seconds``.

Everything stays on 127.0.0.1; every loop is bounded by a count or a deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import add_json_argument, emit
from benchmarks.plot import add_plot_argument, check_plot_available, latency_distributions
from memory_core.progress import Progress

TOKEN = "bench-token"
MAX_RESULTS = 6
WORDS = ("falcon staging latency coffee postgres deploy window certificate roast editor theme cluster backup "
         "quota migration schema index vector lexical ranking decay snippet citation agent session memory "
         "gateway token socket benchmark release rollout incident alert metric budget review").split()


def build_workspace(root: Path, files: int, *, seed: int = 5) -> Path:
    rng = random.Random(seed)
    ws = root / "workspace"
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    (ws / "MEMORY.md").write_text("# Memory\n\n- The user prefers dark roast coffee.\n", encoding="utf-8")
    for i in range(files):
        lines = [f"# Note {i}"]
        for _ in range(rng.randint(6, 20)):
            lines.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))) + ".")
        (ws / "memory" / f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}-{i}.md").write_text("\n".join(lines) + "\n",
                                                                                       encoding="utf-8")
    return ws


def percentiles(times_ms: list[float]) -> dict[str, float]:
    ordered = sorted(times_ms)
    return {"p50_ms": round(statistics.median(ordered), 3),
            "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 3), "n": len(ordered)}


def start_server(config_path: Path, env: dict[str, str], *,
                 repo: Path | None = None) -> tuple[subprocess.Popen[str], str]:
    """``memory-core serve`` of ``repo`` (default: this checkout) on a free loopback port: the
    process and its URL."""
    root = repo or Path(__file__).resolve().parent.parent
    proc = subprocess.Popen([sys.executable, "-m", "memory_core", "serve", "--config", str(config_path),
                             "--port", "0"], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"listening on (ws://\S+)", line)
    if not match:
        proc.kill()
        raise RuntimeError(f"memory-core serve from {root} did not start: {line!r} {proc.communicate(timeout=10)[1]}")
    return proc, match.group(1)


async def interleaved_latency(url: str, core: Any, queries: list[str], samples: int,
                              raw: dict[str, list[float]] | None = None) -> dict[str, Any]:
    """Per sample, one in-process search (and v2's engine call), one gateway v1, one gateway v2
    and one protocol round trip (a request refused by validation): interleaving gives all rows the same
    machine load. ``raw`` (optional) receives each row's latencies in ms."""
    from memory_core.gateway.client import GatewayCallError, GatewayClient
    from memory_core.provider.runtime import result_window

    rows: dict[str, list[float]] = {"in_process": [], "in_process_v2_window": [], "gateway_v1": [],
                                    "gateway_v2": [], "round_trip": []}
    window = result_window(MAX_RESULTS)
    async with await GatewayClient.open(url, token=TOKEN) as client:
        for i in range(10):  # warm-up: engine caches and first-use imports on both sides
            q = queries[i % len(queries)]
            core.search(q, max_results=MAX_RESULTS)
            await client.call("memory.search", _params(q, None))
            await client.call("memory.search", _params(q, 2))
        progress = Progress("  latency samples", samples, unit="samples")
        for i in range(samples):
            progress(i)
            q = queries[i % len(queries)]
            t = time.perf_counter()
            core.search(q, max_results=MAX_RESULTS)
            rows["in_process"].append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            core.search(q, max_results=window, candidates_for=MAX_RESULTS)
            rows["in_process_v2_window"].append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            await client.call("memory.search", _params(q, None))
            rows["gateway_v1"].append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            await client.call("memory.search", _params(q, 2))
            rows["gateway_v2"].append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            try:
                await client.call("memory.search", {"query": ""})
            except GatewayCallError:
                pass
            rows["round_trip"].append((time.perf_counter() - t) * 1000)
        progress(samples)
        progress.finish()
    if raw is not None:
        raw.update(rows)
    return {name: percentiles(times) for name, times in rows.items()}


def _params(query: str, version: int | None) -> dict[str, Any]:
    params: dict[str, Any] = {"query": query, "maxResults": MAX_RESULTS}
    if version is not None:
        params["version"] = version
    return params


async def gateway_throughput(url: str, queries: list[str], clients: int, seconds: float) -> dict[str, float]:
    from memory_core.gateway.client import GatewayClient

    conns = [await GatewayClient.open(url, token=TOKEN) for _ in range(clients)]
    counts = [0] * clients
    deadline = time.monotonic() + seconds

    async def loop(k: int) -> None:
        i = k * 7
        while time.monotonic() < deadline:
            await conns[k].call("memory.search", _params(queries[i % len(queries)], None))
            counts[k] += 1
            i += 1

    t0 = time.monotonic()
    try:
        await asyncio.gather(*(loop(k) for k in range(clients)))
    finally:
        elapsed = time.monotonic() - t0
        for conn in conns:
            await conn.close()
    return {"clients": clients, "searches": sum(counts), "seconds": round(elapsed, 2),
            "searches_per_s": round(sum(counts) / elapsed, 1)}


def run_bench(*, files: int = 200, samples: int = 300, seconds: float = 5.0, clients: int = 16,
              workdir: str | None = None, raw: dict[str, list[float]] | None = None) -> dict[str, Any]:
    """The benchmark's results; ``raw`` (optional) receives the latency samples of each row."""
    from memory_core.config import load_config
    from memory_core.core import MemoryCore

    if workdir is None:  # a generated workspace and index of our own: removed when done
        with tempfile.TemporaryDirectory(prefix="memory-core-bench-gw-") as tmp:
            return run_bench(files=files, samples=samples, seconds=seconds, clients=clients, workdir=tmp, raw=raw)
    root = Path(workdir)
    ws = build_workspace(root, files)
    state = root / "state"
    config_path = root / "memory-core.json"
    config_path.write_text(json.dumps({"workspace": str(ws), "stateDir": str(state)}), encoding="utf-8")
    env = dict(os.environ, MEMORY_CORE_HOME=str(state), MEMORY_CORE_GATEWAY_TOKEN=TOKEN)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent) + os.pathsep + env.get("PYTHONPATH", "")
    cfg = load_config(str(config_path), env={"MEMORY_CORE_HOME": str(state)})
    rng = random.Random(9)
    queries = [" ".join(rng.sample(WORDS, 2)) for _ in range(64)]

    results: dict[str, Any] = {"files": files, "cpu_count": os.cpu_count()}
    with MemoryCore(agent_id=cfg.agent_id, config=cfg) as core:
        t = time.perf_counter()
        summary = core.index()
        results["index_s"] = round(time.perf_counter() - t, 2)
        results["chunks"] = summary.chunks
        # Same freshness setup as the server (watcher running, reconcile in the background), so the
        # baseline does not pay the inline stat-all reconcile of a watcher-less one-shot search.
        core.freshness.start()
        proc, url = start_server(config_path, env)
        try:
            results.update(asyncio.run(interleaved_latency(url, core, queries, samples, raw)))
            results["concurrent"] = asyncio.run(gateway_throughput(url, queries, clients, seconds))
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
    overhead = results["gateway_v1"]["p50_ms"] - results["in_process"]["p50_ms"]
    results["overhead_p50_ms"] = round(overhead, 3)
    results["overhead_target_ms"] = 2.0
    results["overhead_ok"] = overhead <= 2.0
    ratio = results["gateway_v2"]["p50_ms"] / results["gateway_v1"]["p50_ms"]
    results["v2_over_v1_p50"] = round(ratio, 3)
    results["v2_over_v1_target"] = 1.5
    results["v2_over_v1_ok"] = ratio <= 1.5
    return results


def table(r: dict[str, Any]) -> str:
    lines = [(f"gateway benchmark: {r['files']} files, {r['chunks']} chunks, {r['cpu_count']} CPUs "
              f"(indexed in {r['index_s']} s)"),
             f"{'path':<22}{'p50 ms':>10}{'p95 ms':>10}{'n':>7}"]
    for key, label in (("in_process", "in-process search"), ("in_process_v2_window", "v2 engine call"),
                       ("gateway_v1", "gateway v1"), ("gateway_v2", "gateway v2"),
                       ("round_trip", "protocol round trip")):
        row = r[key]
        lines.append(f"{label:<22}{row['p50_ms']:>10.3f}{row['p95_ms']:>10.3f}{row['n']:>7}")
    verdict = "ok" if r["overhead_ok"] else "over target"
    lines.append(f"overhead p50 (gateway v1 - in-process): {r['overhead_p50_ms']:.3f} ms (target <= 2 ms: {verdict})")
    verdict = "ok" if r["v2_over_v1_ok"] else "over target"
    lines.append(f"gateway v2 / v1 p50: {r['v2_over_v1_p50']:.2f}x (target <= 1.5x: {verdict})")
    c = r["concurrent"]
    lines.append(f"{c['clients']} concurrent connections: {c['searches_per_s']} searches/s "
                 f"({c['searches']} in {c['seconds']} s)")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--files", type=int, default=200, help="generated notes in the workspace (default 200)")
    parser.add_argument("--samples", type=int, default=300, help="sequential searches per latency row")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of the concurrent run")
    parser.add_argument("--clients", type=int, default=16, help="concurrent connections (default 16)")
    parser.add_argument("--workdir", default=None, help="folder for the workspace and index (default: a temp dir)")
    add_json_argument(parser)
    add_plot_argument(parser)


def run(args: argparse.Namespace) -> int:
    for name, low in (("files", 1), ("samples", 1), ("clients", 1)):
        if getattr(args, name) < low:
            print(f"error: --{name} must be >= {low}", file=sys.stderr)
            return 2
    if not 0 < args.seconds <= 600:
        print("error: --seconds must be in (0, 600]", file=sys.stderr)
        return 2
    check_plot_available(args.plot)
    raw: dict[str, list[float]] = {}
    results = run_bench(files=args.files, samples=args.samples, seconds=args.seconds, clients=args.clients,
                        workdir=args.workdir, raw=raw)
    emit(args, results, lambda: table(results))
    if args.plot:
        latency_distributions({f"memory.search, {results['chunks']} chunks": raw}, args.plot,
                              title=f"memory-core bench gateway ({args.samples} interleaved samples per row)")
        print(f"chart written to {args.plot}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_gateway", description=(__doc__ or "").splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
