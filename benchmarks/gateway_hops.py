"""Where a keyword ``memory.search`` through ``memory-core serve`` spends its time beyond the search.

    python -m benchmarks.gateway_hops [--docs 1000] [--seconds 15] [--max-results 6]

The long workload of ``bench latency`` (documents of 10-15 lines, 10-20 word queries), keyword-only,
indexed by this checkout and served by it. Interleaved sample by sample, each query text used once:

- anchor FTS5 OR: the in-process FTS5 ``MATCH`` of ``bench latency``;
- keyword gateway: one v1 ``memory.search`` over a warm connection (client, server, worker pool);
- websockets echo: the same client and request against a bare ``websockets`` server (same settings:
  no compression, no ping) that answers every request with the payload of a real search: the floor of
  the transport (frames, JSON both ways, two loopback wake-ups) without any memory-core code.

Then, per search, each process's on-CPU time and run-queue wait (``/proc/PID/task/*/schedstat``,
Linux): the server's event loop thread and its other threads, its workers, the echo server. On a
machine with few cores the run-queue wait is latency too: a worker woken by a task waits for a core
while the server, the client or another program still runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

TOKEN = "bench-token"

ECHO_SERVER = r'''
import asyncio, json, sys
from websockets.asyncio.server import serve
PAYLOAD = json.loads(sys.stdin.readline())
async def answer(ws):
    async for message in ws:
        request = json.loads(message)
        await ws.send(json.dumps({"type": "res", "id": request["id"], "ok": True, "payload": PAYLOAD},
                                 ensure_ascii=False, separators=(",", ":")))
async def main():
    async with serve(answer, "127.0.0.1", 0, compression=None, ping_interval=None) as server:
        print("ws://127.0.0.1:%d" % next(iter(server.sockets)).getsockname()[1], flush=True)
        await asyncio.Future()
asyncio.run(main())
'''


def threads_schedstat(pid: int) -> dict[int, tuple[str, int, int]]:
    """``{tid: (name, ns on CPU, ns waiting on a run queue)}`` of ``pid``'s threads."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            run, wait, _ = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
        except (OSError, ValueError):
            continue
        out[int(tid)] = (name, int(run), int(wait))
    return out


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(entry))
    out, todo = [], list(children.get(pid, ()))
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


def cpu_rows(server: int, echo: int, before: dict[int, dict], after: dict[int, dict], n: int) -> list[tuple]:
    """``(process, on-CPU us, run-queue wait us)`` per search."""
    rows = []
    for pid, label in [(server, "server"), (echo, "echo server")] + [(p, f"server child {p}") for p in after
                                                                        if p not in (server, echo)]:
        a, b = after.get(pid, {}), before.get(pid, {})
        main = [(a[t][1] - b.get(t, ("", 0, 0))[1], a[t][2] - b.get(t, ("", 0, 0))[2]) for t in a if t == pid]
        rest = [(a[t][1] - b.get(t, ("", 0, 0))[1], a[t][2] - b.get(t, ("", 0, 0))[2]) for t in a if t != pid]
        if pid == server:
            rows.append(("server event loop", *(x / n / 1000 for x in main[0])) if main else ("server", 0, 0))
            rows.append(("server other threads", sum(x for x, _ in rest) / n / 1000, sum(y for _, y in rest) / n / 1000))
        else:
            on = sum(x for x, _ in main + rest) / n / 1000
            if on >= 1.0:
                rows.append((label, on, sum(y for _, y in main + rest) / n / 1000))
    return rows


async def _samples(url: str, echo_url: str, anchors: Any, queries: list[str], seconds: float,
                   max_results: int, candidates: int, pids: tuple[int, int]) -> dict[str, Any]:
    from websockets.asyncio.client import connect

    from memory_core.gateway.client import GatewayClient

    client = await GatewayClient.open(url, token=TOKEN)
    echo = GatewayClient(await connect(echo_url, compression=None, ping_interval=None))
    params = {"maxResults": max_results}
    rows: dict[str, list[float]] = {"anchor FTS5 OR": [], "keyword gateway": [], "websockets echo": []}
    try:
        for q in queries[:20]:  # warm: first-use imports, reader connections, caches
            await client.call("memory.search", {"query": q, **params})
            await echo.call("memory.search", {"query": q, **params})
        watched = [pids[0], pids[1], *descendants(pids[0])]
        before = {p: threads_schedstat(p) for p in watched}
        end = time.monotonic() + seconds
        n = 0
        for q in queries[20:]:
            if time.monotonic() >= end:
                break
            t = time.perf_counter()
            anchors.fts(q, candidates)
            rows["anchor FTS5 OR"].append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            await client.call("memory.search", {"query": q, **params})
            rows["keyword gateway"].append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            await echo.call("memory.search", {"query": q, **params})
            rows["websockets echo"].append((time.perf_counter() - t) * 1000)
            n += 1
        after = {p: threads_schedstat(p) for p in watched}
    finally:
        await client.close()
        await echo.close()
    return {"rows": rows, "n": n, "cpu": cpu_rows(pids[0], pids[1], before, after, n)}


def main(argv: list[str] | None = None) -> int:
    from benchmarks.ab_gateway import _index, _start
    from benchmarks.latency_long import Anchors, build_workspace
    from memory_core.gateway.client import GatewayClient
    from memory_core.search.engine import candidate_count

    p = argparse.ArgumentParser(prog="gateway_hops", description=__doc__.splitlines()[0])
    p.add_argument("--docs", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--max-results", type=int, default=6)
    args = p.parse_args(argv)
    repo = Path(__file__).resolve().parent.parent
    root = Path(tempfile.mkdtemp(prefix="mc-gateway-hops-"))
    procs: list[subprocess.Popen[str]] = []
    try:
        ws, texts, queries = build_workspace(root, args.docs, 5000)
        config = root / "keyword.json"
        config.write_text(json.dumps({"workspace": str(ws), "stateDir": str(root / "state"), "provider": "none"}),
                          encoding="utf-8")
        _index(repo, config)
        server, url = _start(repo, config)
        procs.append(server)

        async def one_payload() -> Any:
            async with await GatewayClient.open(url, token=TOKEN) as client:
                return await client.call("memory.search", {"query": queries[0], "maxResults": args.max_results})

        payload = asyncio.run(one_payload())
        echo = subprocess.Popen([sys.executable, "-c", ECHO_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)
        procs.append(echo)
        assert echo.stdin is not None and echo.stdout is not None
        echo.stdin.write(json.dumps(payload) + "\n")
        echo.stdin.flush()
        echo_url = echo.stdout.readline().strip()
        anchors = Anchors(str(root / "anchor.sqlite"), texts, [f"note-{d:05d}.md" for d in range(args.docs)], None)
        load0 = os.getloadavg()
        res = asyncio.run(_samples(url, echo_url, anchors, queries[1:], args.seconds, args.max_results,
                                   candidate_count(args.max_results, 4), (server.pid, echo.pid)))
        load1 = os.getloadavg()
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=20)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        shutil.rmtree(root, ignore_errors=True)
    rows = res["rows"]
    anchor = float(np.percentile(rows["anchor FTS5 OR"], 50))
    print(f"long workload, {args.docs} documents, {res['n']} samples, maxResults {args.max_results}, reply "
          f"{len(json.dumps(payload, ensure_ascii=False, separators=(',', ':')))} bytes; load "
          f"{load0[0]:.2f} -> {load1[0]:.2f}")
    print(f"{'row':<18}{'p50 ms':>9}{'p95 ms':>9}{'/anchor':>9}")
    for name, v in rows.items():
        p50 = float(np.percentile(v, 50))
        print(f"{name:<18}{p50:>9.2f}{float(np.percentile(v, 95)):>9.2f}{p50 / anchor:>9.2f}")
    print(f"{'per search':<28}{'on CPU us':>10}{'run-queue wait us':>19}")
    for name, on, wait in res["cpu"]:
        print(f"{name:<28}{on:>10.0f}{wait:>19.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
