"""Where a keyword ``memory.search`` through ``memory-core serve`` spends its time beyond the search.

    python -m benchmarks.gateway_hops [--docs 1000] [--seconds 15] [--max-results 6] [--gap-ms 0,2,8,30]
                                      [--json PATH]

The long workload of ``bench latency`` (documents of 10-15 lines, 10-20 word queries), keyword-only,
indexed by this checkout and served by it. Interleaved sample by sample, each query text used once:

- anchor FTS5 OR: the in-process FTS5 ``MATCH`` of ``bench latency``;
- keyword gateway: one v1 ``memory.search`` over a warm connection (client, server, worker pool);
- websockets echo: the same client and request against a bare ``websockets`` server (same settings:
  no compression, no ping) that answers every request with the payload of a real search: the floor of
  the transport (frames, JSON both ways, two loopback wake-ups) without any memory-core code.

``--gap-ms``: the client pauses that many ms before each row's request, as an agent pauses between
queries; every process of the run is idle meanwhile, and each server is idle for about three gaps
plus the other two rows' requests before its own (0: the other rows' requests only). Several gaps
take turns in blocks of 8 samples (the first of each block, which followed the previous gap's
pauses, is not counted), and each gap gets its own table. After an idle spell a process runs slower
for a while (cold caches, and on a virtual machine a vCPU whose host core did other work): the
gateway's three processes and their Python lose more to it than the anchor's one FTS5 statement in
C, so the gateway's ratio to the anchor grows with the gap. ``bench latency --workload long`` leaves
each server idle for the ~30 ms its other rows take, while the anchor's process stays busy.

Then, per search (all gaps together), each process's on-CPU time and run-queue wait
(``/proc/PID/task/*/schedstat``, Linux): the server's event loop thread and its other threads, its
workers, the echo server. On a machine with few cores the run-queue wait is latency too: a worker
woken by a task waits for a core while the server, the client or another program still runs.
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


ROWS = ("anchor FTS5 OR", "keyword gateway", "websockets echo")
GAP_BLOCK = 8  # samples in a row with one gap; the gaps take turns block by block


async def _samples(url: str, echo_url: str, anchors: Any, queries: list[str], seconds: float,
                   max_results: int, candidates: int, pids: tuple[int, int],
                   gaps: list[float]) -> dict[str, Any]:
    """Each row's latencies (ms) per gap: ``{"rows": {gap: {row: [ms]}}, "n", "cpu"}``."""
    from websockets.asyncio.client import connect

    from memory_core.gateway.client import GatewayClient

    client = await GatewayClient.open(url, token=TOKEN)
    echo = GatewayClient(await connect(echo_url, compression=None, ping_interval=None))
    params = {"maxResults": max_results}
    rows: dict[float, dict[str, list[float]]] = {gap: {name: [] for name in ROWS} for gap in gaps}
    try:
        for q in queries[:20]:  # warm: first-use imports, reader connections, caches
            await client.call("memory.search", {"query": q, **params})
            await echo.call("memory.search", {"query": q, **params})
        watched = [pids[0], pids[1], *descendants(pids[0])]
        before = {p: threads_schedstat(p) for p in watched}
        end = time.monotonic() + seconds
        n = 0
        for i, q in enumerate(queries[20:]):
            if time.monotonic() >= end and i >= len(gaps) * GAP_BLOCK:  # every gap has samples
                break
            gap = gaps[i // GAP_BLOCK % len(gaps)]
            for name, gateway in zip(ROWS, (None, client, echo)):
                if gap:
                    await asyncio.sleep(gap / 1000)
                t = time.perf_counter()
                if gateway is None:
                    anchors.fts(q, candidates)
                else:
                    await gateway.call("memory.search", {"query": q, **params})
                if len(gaps) == 1 or i % GAP_BLOCK:  # a block's first sample followed the last gap's pauses
                    rows[gap][name].append((time.perf_counter() - t) * 1000)
            n += 1
        after = {p: threads_schedstat(p) for p in watched}
    finally:
        await client.close()
        await echo.close()
    return {"rows": rows, "n": n, "cpu": cpu_rows(pids[0], pids[1], before, after, n)}


def parse_gaps(text: str) -> list[float]:
    """``--gap-ms``: comma-separated idle gaps in ms, each 0 or more, none twice."""
    try:
        gaps = [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"takes comma-separated numbers of ms, e.g. 0,8,30; got {text!r}") from None
    if any(not 0 <= g < 10_000 for g in gaps) or len(set(gaps)) != len(gaps):
        raise argparse.ArgumentTypeError(f"takes distinct gaps from 0 to 9999 ms, e.g. 0,8,30; got {text!r}")
    return gaps


def summary(rows: dict[float, dict[str, list[float]]]) -> list[dict[str, Any]]:
    """Per gap: each row's p50 and p95 (ms), sample count, and p50 over the anchor's p50."""
    out = []
    for gap, by_row in rows.items():
        anchor = float(np.percentile(by_row["anchor FTS5 OR"], 50))
        out.append({"gap_ms": gap, "rows": [
            {"row": name, "p50_ms": round(float(np.percentile(v, 50)), 3),
             "p95_ms": round(float(np.percentile(v, 95)), 3), "n": len(v),
             "over_anchor": round(float(np.percentile(v, 50)) / anchor, 3)} for name, v in by_row.items()]})
    return out


def main(argv: list[str] | None = None) -> int:
    from benchmarks import add_json_argument, emit, progress_log
    from benchmarks.ab_gateway import _index, _start
    from benchmarks.latency_long import Anchors, build_workspace
    from memory_core.gateway.client import GatewayClient
    from memory_core.search.engine import candidate_count

    p = argparse.ArgumentParser(prog="gateway_hops", description=__doc__.splitlines()[0])
    p.add_argument("--docs", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--max-results", type=int, default=6)
    p.add_argument("--gap-ms", type=parse_gaps, default=[0.0], metavar="MS[,MS...]",
                   help="idle gap before each row's request; several are interleaved (default 0)")
    add_json_argument(p)
    args = p.parse_args(argv)
    log = progress_log(args)
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
                                   candidate_count(args.max_results, 4), (server.pid, echo.pid), args.gap_ms))
        load1 = os.getloadavg()
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=20)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        shutil.rmtree(root, ignore_errors=True)
    reply_bytes = len(json.dumps(payload, ensure_ascii=False, separators=(",", ":")))
    log(f"long workload, {args.docs} documents, {res['n']} samples, maxResults {args.max_results}, reply "
        f"{reply_bytes} bytes; load {load0[0]:.2f} -> {load1[0]:.2f}")
    results = {"docs": args.docs, "samples": res["n"], "max_results": args.max_results,
               "reply_bytes": reply_bytes, "load": [round(load0[0], 2), round(load1[0], 2)],
               "gaps": summary(res["rows"]),
               "per_search": [{"process": name, "on_cpu_us": round(on), "run_queue_wait_us": round(wait)}
                              for name, on, wait in res["cpu"]]}

    def table() -> str:
        lines = []
        for gap in results["gaps"]:
            if len(results["gaps"]) > 1:
                lines.append(f"idle gap {gap['gap_ms']:g} ms before each request")
            lines.append(f"{'row':<18}{'p50 ms':>9}{'p95 ms':>9}{'/anchor':>9}")
            lines.extend(f"{r['row']:<18}{r['p50_ms']:>9.2f}{r['p95_ms']:>9.2f}{r['over_anchor']:>9.2f}"
                         for r in gap["rows"])
        lines.append(f"{'per search':<28}{'on CPU us':>10}{'run-queue wait us':>19}")
        lines.extend(f"{r['process']:<28}{r['on_cpu_us']:>10}{r['run_queue_wait_us']:>19}"
                     for r in results["per_search"])
        return "\n".join(lines)

    emit(args, results, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
