"""A/B of keyword ``memory.search`` through ``memory-core serve``: this checkout against another one.

    python -m benchmarks.ab_gateway --baseline /work/main [--workload long|short] [--docs 1000] [--queries 200]

One generated keyword-only workspace (the long workload of ``bench latency``: documents of 10-15
lines, 10-20 word queries; or the short one: ``bench gateway``'s notes, 1-3 word queries), indexed
once per checkout into its own state dir; two servers, one started from each checkout; per sample,
interleaved so every row sees the same machine load: the in-process FTS5 OR anchor, one v1 search on
each server (the order of the two servers alternates sample by sample). Prints p50/p95 per row and
each server's p50 over the anchor's, and the CPU time each server and its workers spent per search
(/proc; the machine's load inflates it far less than wall time). Each query text is used once per row.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_gateway import start_server

TOKEN = "bench-token"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu_s(root_pid: int) -> float:
    """CPU seconds (user + system) of ``root_pid`` and every live descendant (its worker pool),
    from /proc: a per-search cost the machine's load does not inflate as it does wall time."""
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    total, todo = 0.0, [root_pid]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo.extend(children.get(pid, ()))
    return total


def _start(repo: Path, config: Path) -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ, MEMORY_CORE_GATEWAY_TOKEN=TOKEN, PYTHONPATH=str(repo))
    env.pop("MEMORY_CORE_HOME", None)
    return start_server(config, env, repo=repo)


def _index(repo: Path, config: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(repo))
    subprocess.run([sys.executable, "-m", "memory_core", "index", "--config", str(config)], cwd=repo, env=env,
                   check=True, stdout=subprocess.DEVNULL)


def _workload(root: Path, kind: str, docs: int, n: int) -> tuple[Path, list[str], list[str], list[str]]:
    """``(workspace, document texts, names, queries)``."""
    if kind == "long":
        from benchmarks.latency_long import build_workspace

        ws, texts, queries = build_workspace(root, docs, n)
        return ws, texts, [f"note-{d:05d}.md" for d in range(docs)], queries
    from benchmarks.bench_gateway import WORDS, build_workspace as short_workspace

    ws = short_workspace(root, docs)
    names = sorted(p.name for p in (ws / "memory").glob("*.md"))
    texts = [(ws / "memory" / name).read_text(encoding="utf-8") for name in names]
    rng = random.Random(7)
    queries = [" ".join(rng.sample(WORDS, rng.randint(1, 3))) for _ in range(n)]
    return ws, texts, names, queries


async def _samples(urls: dict[str, str], pids: dict[str, int], anchors: Any, queries: list[str], warm: list[str],
                   max_results: int, candidates: int) -> tuple[dict[str, list[float]], dict[str, float]]:
    from memory_core.gateway.client import GatewayClient

    rows: dict[str, list[float]] = {"anchor FTS5 OR": [], **{name: [] for name in urls}}
    clients = {name: await GatewayClient.open(url, token=TOKEN) for name, url in urls.items()}
    params = {"maxResults": max_results}
    names = list(urls)
    try:
        for q in warm:
            for name in names:
                await clients[name].call("memory.search", {"query": q, **params})
        cpu0 = {name: tree_cpu_s(pid) for name, pid in pids.items()}
        for i, q in enumerate(queries):
            t = time.perf_counter()
            anchors.fts(q, candidates)
            rows["anchor FTS5 OR"].append((time.perf_counter() - t) * 1000)
            for name in (names if i % 2 == 0 else names[::-1]):
                t = time.perf_counter()
                await clients[name].call("memory.search", {"query": q, **params})
                rows[name].append((time.perf_counter() - t) * 1000)
        cpu = {name: (tree_cpu_s(pid) - cpu0[name]) * 1000 / len(queries) for name, pid in pids.items()}
    finally:
        for client in clients.values():
            await client.close()
    return rows, cpu


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ab_gateway", description=__doc__.splitlines()[0])
    p.add_argument("--baseline", required=True, help="the other checkout (e.g. /work/main), run read-only")
    p.add_argument("--workload", choices=("long", "short"), default="long")
    p.add_argument("--docs", type=int, default=1000)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--max-results", type=int, default=6)
    p.add_argument("--json", default=None, help="also write the raw samples here")
    args = p.parse_args(argv)
    here = Path(__file__).resolve().parent.parent
    repos = {"baseline": Path(args.baseline).resolve(), "branch": here}
    from benchmarks.latency_long import Anchors
    from memory_core.search.engine import candidate_count

    root = Path(tempfile.mkdtemp(prefix="mc-ab-gateway-"))
    procs = []
    try:
        n_warm = 10
        ws, texts, names, queries = _workload(root, args.workload, args.docs, args.queries + n_warm)
        warm, queries = queries[:n_warm], queries[n_warm:]
        urls, pids = {}, {}
        for name, repo in repos.items():
            config = root / f"{name}.json"
            config.write_text(json.dumps({"workspace": str(ws), "stateDir": str(root / f"state-{name}"),
                                          "provider": "none"}), encoding="utf-8")
            _index(repo, config)
            proc, urls[name] = _start(repo, config)
            pids[name] = proc.pid
            procs.append(proc)
        anchors = Anchors(str(root / "anchor.sqlite"), texts, names, None)
        candidates = candidate_count(args.max_results, 4)
        load0 = os.getloadavg()
        rows, cpu = asyncio.run(_samples(urls, pids, anchors, queries, warm, args.max_results, candidates))
        load1 = os.getloadavg()
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=20)
            if proc.stdout is not None:
                proc.stdout.close()
        shutil.rmtree(root, ignore_errors=True)
    p50 = {name: float(np.percentile(v, 50)) for name, v in rows.items()}
    print(f"{args.workload} workload, {args.docs} documents, {len(queries)} queries, maxResults {args.max_results}; "
          f"load {load0[0]:.2f} -> {load1[0]:.2f}")
    print(f"{'row':<18}{'p50 ms':>9}{'p95 ms':>9}{'/anchor':>9}{'cpu ms':>9}")
    for name, v in rows.items():
        print(f"{name:<18}{p50[name]:>9.2f}{float(np.percentile(v, 95)):>9.2f}{p50[name] / p50['anchor FTS5 OR']:>9.2f}"
              + (f"{cpu[name]:>9.2f}" if name in cpu else ""))
    print(f"branch / baseline p50: {p50['branch'] / p50['baseline']:.3f}; CPU per search (server and its "
          f"workers): {cpu['branch'] / cpu['baseline']:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "cpu_ms": cpu, "load": [load0, load1]}), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
