"""Host benchmark: memory.search through a real OpenClaw 2026.9.6 gateway on memory-core's plugin vs the same gateway on its own bundled Memory Core.

    python -m benchmarks.bench_host [--files 10000] [--samples 200] [--json OUT]
    memory-core bench host ...

One generated workspace of ``--files`` small Markdown notes and one query list serve both runs, one
after the other (never at the same time, so they do not share the machine): an isolated OpenClaw
install (its own $HOME) starts ``openclaw gateway run`` offline on loopback, keyword-only
(``memory.search.provider none``),

- **baseline**: as installed, its bundled Memory Core owns the memory slot;
- **memory-core**: ``memory-core plugin install`` first, so the plugin owns the slot and the gateway
  starts ``memory-core serve`` as its child.

Index time is, in each run, the time from the gateway listening (its "http server listening" log
line) to the first ``memory.search`` that returns hits for a word only the workspace holds (polled
every 0.25 s; the bundled engine builds its index on the first search, memory-core's child indexes
at start). Then ``--samples`` searches (the queries in turn, after a warm-up) go through the gateway
over one warm protocol-4 connection and give p50/p95. Reported: both rows and the ratios
memory-core / baseline for p50 (goal <= 0.5) and index time (goal <= 0.1). Needs Node 24 +
openclaw@2026.9.6 (.ci/install-node-client); nothing is downloaded. Every wait has a deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import add_json_argument, emit, progress_log
from benchmarks.bench_gateway import WORDS, percentiles
from benchmarks.openclaw_host import TOKEN, OpenClawHost, find_client, wait_for

UNIQUE = "zanzibarquokka"
MAX_RESULTS = 6


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--files", type=int, default=10000, help="workspace notes (default 10000)")
    p.add_argument("--samples", type=int, default=200, help="timed searches per run (default 200)")
    p.add_argument("--index-timeout", type=float, default=1800, help="seconds to wait for the first hit (default 1800)")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder (logs, both $HOMEs)")
    add_json_argument(p)


def build_workspace(root: Path, files: int, seed: int = 7) -> Path:
    """``files`` small notes (4-10 lines of the bench vocabulary), one of them holding :data:`UNIQUE`."""
    rng = random.Random(seed)
    ws = root / "workspace"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\n- The user prefers dark roast coffee.\n", encoding="utf-8")
    for i in range(files):
        lines = [f"# Note {i}"]
        lines += [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 12))) + "." for _ in range(rng.randint(4, 10))]
        if i == files // 2:
            lines.append(f"The quarterly review codeword is {UNIQUE}.")
        (ws / "memory" / f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}-{i}.md").write_text("\n".join(lines) + "\n",
                                                                                       encoding="utf-8")
    return ws


def queries(n: int = 20, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    return [UNIQUE] + [" ".join(rng.sample(WORDS, rng.choice((1, 2, 3)))) for _ in range(n - 1)]


async def _timed_searches(url: str, qs: list[str], samples: int) -> list[float]:
    from memory_core.gateway.client import GatewayClient

    times: list[float] = []
    async with await GatewayClient.open(url, token=TOKEN) as client:
        for q in qs:  # warm-up: every query once
            await asyncio.wait_for(client.call("memory.search", {"query": q, "maxResults": MAX_RESULTS}), 120)
        for i in range(samples):
            q = qs[i % len(qs)]
            t = time.perf_counter()
            await asyncio.wait_for(client.call("memory.search", {"query": q, "maxResults": MAX_RESULTS}), 120)
            times.append((time.perf_counter() - t) * 1000)
    return times


def _first_hit(url: str) -> bool:
    from memory_core.gateway.client import GatewayCallError, GatewayClient

    async def go() -> bool:
        async with await GatewayClient.open(url, token=TOKEN) as client:
            out = await asyncio.wait_for(client.call("memory.search", {"query": UNIQUE, "maxResults": MAX_RESULTS}), 1800)
            return bool(out.get("results"))
    try:
        return asyncio.run(go())
    except (GatewayCallError, OSError, TimeoutError):
        return False


def run_host(name: str, client: tuple[str, str], base: Path, ws: Path, qs: list[str], args: argparse.Namespace,
             log: Any, *, plugin: bool) -> dict[str, Any]:
    host = OpenClawHost(*client, base / name)
    host.configure(ws)
    if plugin:
        done = host.install_plugin()
        if done.returncode != 0:
            raise RuntimeError(f"memory-core plugin install failed: {done.stdout}{done.stderr}")
    log(f"{name}: starting the gateway ({'memory-core plugin' if plugin else 'bundled Memory Core'})")
    host.start()
    try:
        host.wait_logged(r"http server listening", timeout=300)
        t0 = time.monotonic()
        wait_for(lambda: _first_hit(host.url), args.index_timeout, f"{name}: the first hit", interval=0.25)
        index_s = time.monotonic() - t0
        log(f"{name}: first hit {index_s:.1f} s after the gateway listened; timing {args.samples} searches")
        times = asyncio.run(_timed_searches(host.url, qs, args.samples))
        row: dict[str, Any] = {"index_s": round(index_s, 2), **percentiles(times)}
        if plugin:
            m = re.search(r"memory-core: agent main: in sync .*\((\d+) ms after start\)", host.log_text())
            row["child_in_sync_ms"] = int(m.group(1)) if m else None
        return row
    finally:
        host.stop()


def run(args: argparse.Namespace) -> int:
    log = progress_log(args)
    found = find_client()
    if isinstance(found, str):
        print(f"bench host: {found}")
        return 2
    base = Path(tempfile.mkdtemp(prefix="bench-host-"))
    try:
        t = time.monotonic()
        ws = build_workspace(base, args.files)
        log(f"workspace: {args.files} notes in {time.monotonic() - t:.1f} s")
        qs = queries()
        baseline = run_host("openclaw", found, base, ws, qs, args, log, plugin=False)
        ours = run_host("memory-core", found, base, ws, qs, args, log, plugin=True)
    finally:
        if args.keep:
            log(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    results = {
        "files": args.files, "samples": args.samples, "queries": len(qs), "max_results": MAX_RESULTS,
        "openclaw_memory_core": baseline, "memory_core_plugin": ours,
        "p50_ratio": round(ours["p50_ms"] / baseline["p50_ms"], 3),
        "index_ratio": round(ours["index_s"] / baseline["index_s"], 3),
        "goals": {"p50_ratio": 0.5, "index_ratio": 0.1},
    }

    def table() -> str:
        rows = [("OpenClaw's own Memory Core", baseline), ("memory-core plugin", ours)]
        out = [f"memory.search through the real OpenClaw 2026.9.6 gateway, {args.files} notes, {args.samples} samples",
               f"{'':28} {'index (s)':>10} {'p50 (ms)':>10} {'p95 (ms)':>10}"]
        out += [f"{name:28} {r['index_s']:>10.2f} {r['p50_ms']:>10.2f} {r['p95_ms']:>10.2f}" for name, r in rows]
        out.append(f"p50 ratio {results['p50_ratio']:.3f} (goal <= 0.5); index ratio {results['index_ratio']:.3f} "
                   "(goal <= 0.1)")
        return "\n".join(out)

    emit(args, results, table)
    return 0
