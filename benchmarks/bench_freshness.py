"""Freshness benchmark (``memory-core bench freshness``): write-to-searchable latency, idle watcher
CPU, and the peak memory of indexing one large session transcript.

1. **Latency**: a real MemoryCore with its freshness scheduler and watcher running in-process over
   a workspace of ``--files`` memory files; each of ``--edits`` edits writes a new unique word into
   one file, and the time until a search finds it is recorded (p50/p95/max). The debounce is the
   configured ``sync.watchDebounceMs`` (1500 ms) unless ``--debounce-ms`` is given; the latency is
   the debounce plus the sync.
2. **Idle CPU**: the same service left alone for ``--idle-seconds`` (60): CPU seconds of the whole
   process (watchfiles' native thread included) from ``resource.getrusage(RUSAGE_SELF)``, and of
   each Python thread (watcher and scheduler) from its thread CPU clock.
3. **Transcript RSS**: a realistic OpenClaw JSONL transcript of ``--transcript-mb`` (400) MB is
   generated in a temp dir (user/assistant text, tool calls and large tool results), then indexed
   by ``memory-core index`` logic in a child process; the peak RSS of that child comes from
   ``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss``. Target: under 300 MB. The child's RSS right
   after importing memory-core is measured the same way as a baseline.

4. **Library search**: what a search costs an agent that uses memory-core as a library (a
   ``MemoryCore`` with no watcher): p50 of ``--searches`` searches on a workspace of 100 files and
   on one of ``--library-files`` (10,000), and their ratio (target: within 2x). The same 10,000-file
   search with ``sync.reconcileIntervalMs = 0`` (a stat of every file before each search) is the
   baseline it replaces.

``--quick``: 20 edits at 200 ms debounce, 10 s idle, a 40 MB transcript, 2,000 library files.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

from benchmarks import add_json_argument, emit, progress_log

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORDS = ["harbor", "lantern", "meadow", "copper", "violet", "summit", "orchard", "pebble", "falcon", "cedar", "ember", "glacier", "canyon", "willow", "thistle", "granite", "marble", "saffron", "juniper", "quartz", "tundra", "delta", "prairie", "coral", "birch"]


def _pct(values: Sequence[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[k]


def _make_workspace(root: str, files: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    ws = os.path.join(root, "ws")
    for i in range(files):
        d = os.path.join(ws, "memory", f"topic{i % 20:02d}")
        os.makedirs(d, exist_ok=True)
        body = "\n".join(" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(20))
        with open(os.path.join(d, f"note{i:04d}.md"), "w") as fh:
            fh.write(f"# Note {i}\n\n{body}\n")
    with open(os.path.join(ws, "MEMORY.md"), "w") as fh:
        fh.write("# Memory\n\n- The benchmark workspace.\n")
    return ws


def _service(ws: str, state: str, debounce_ms: int | None, extra: dict | None = None) -> Any:
    from memory_core.config import MemoryCoreConfig
    from memory_core.core import MemoryCore

    raw: dict[str, Any] = {"workspace": ws, "stateDir": state, **(extra or {})}
    if debounce_ms is not None:
        raw["sync"] = {"watchDebounceMs": debounce_ms}
    cfg = MemoryCoreConfig.model_validate(raw)
    core = MemoryCore(ws, config=cfg)
    core.index()
    core.serve_freshness()
    core.freshness.wait_idle(30)
    return core


LIBRARY_QUERY = "benchmark workspace"  # one file matches: the cost measured is not the corpus's


def _library_p50(ws: str, state: str, searches: int, reconcile_ms: int | None) -> float:
    """p50 ms of ``MemoryCore.search`` (no watcher) after one warm-up search."""
    from memory_core.config import MemoryCoreConfig
    from memory_core.core import MemoryCore

    raw: dict[str, Any] = {"workspace": ws, "stateDir": state}
    if reconcile_ms is not None:
        raw["sync"] = {"reconcileIntervalMs": reconcile_ms}
    with MemoryCore(ws, config=MemoryCoreConfig.model_validate(raw)) as core:
        core.index()
        assert core.search(LIBRARY_QUERY), "the library benchmark query found nothing"
        times = []
        for _ in range(searches):
            t0 = time.perf_counter()
            core.search(LIBRARY_QUERY)
            times.append((time.perf_counter() - t0) * 1000)
    return _pct(times, 50)


def bench_library(root: str, *, files: int, searches: int, log: Any) -> dict:
    small = _make_workspace(os.path.join(root, "lib-small"), 100)
    large = _make_workspace(os.path.join(root, "lib-large"), files)
    p50_small = _library_p50(small, os.path.join(root, "state-lib-small"), searches, None)
    p50_large = _library_p50(large, os.path.join(root, "state-lib-large"), searches, None)
    p50_walk = _library_p50(large, os.path.join(root, "state-lib-large"), max(20, searches // 10), 0)
    out = {"files_small": 100, "files_large": files, "searches": searches,
           "p50_ms_small": round(p50_small, 2), "p50_ms_large": round(p50_large, 2),
           "ratio_large_small": round(p50_large / p50_small, 2),
           "p50_ms_large_reconcile_every_search": round(p50_walk, 2)}
    log(f"library search: {json.dumps(out)}")
    return out


def bench_latency(root: str, *, edits: int, files: int, debounce_ms: int | None, log: Any) -> dict:
    from memory_core.search.engine import SearchEngine

    ws = _make_workspace(root, files)
    core = _service(ws, os.path.join(root, "state-latency"), debounce_ms)
    engine = SearchEngine(core.config, core.db_path, None)
    targets = [os.path.join(ws, "memory", f"topic{i % 20:02d}", f"note{i:04d}.md") for i in range(min(files, 10))]
    lat: list[float] = []
    timeouts = 0
    from memory_core.progress import Progress

    progress = Progress("  edits", edits, unit="edits")
    try:
        for n in range(edits):
            progress(n)
            word = f"zyxedit{n:05d}q"
            path = targets[n % len(targets)]
            with open(path, "a") as fh:
                t0 = time.perf_counter()
                fh.write(f"\nThe marker for this edit is {word}.\n")
            deadline = t0 + 30
            while time.perf_counter() < deadline:
                if engine.search(word, min_score=0.0):
                    lat.append((time.perf_counter() - t0) * 1000)
                    break
                time.sleep(0.005)
            else:
                timeouts += 1
            time.sleep(0.05)
        progress(edits)
        progress.finish()
        syncs = core.freshness.sync_count
    finally:
        engine.close()
        core.close()
    out = {
        "edits": edits, "files": files, "debounce_ms": debounce_ms if debounce_ms is not None else 1500,
        "p50_ms": round(_pct(lat, 50), 1), "p95_ms": round(_pct(lat, 95), 1), "max_ms": round(max(lat), 1) if lat else None,
        "timeouts": timeouts, "syncs": syncs,
    }
    log(f"latency: {json.dumps(out)}")
    return out


def _thread_cpu(thread: threading.Thread) -> float | None:
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))  # type: ignore[arg-type]
    except (AttributeError, OSError, TypeError):
        return None


def bench_idle(root: str, *, seconds: float, files: int, log: Any) -> dict:
    ws = _make_workspace(os.path.join(root, "idle"), files)
    core = _service(ws, os.path.join(root, "state-idle"), None)
    try:
        time.sleep(1.0)
        threads = [t for t in threading.enumerate() if t.name.startswith("memory-core-")]
        before_t = {t.name: _thread_cpu(t) for t in threads}
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        w0 = time.monotonic()
        time.sleep(seconds)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        wall = time.monotonic() - w0
        after_t = {t.name: _thread_cpu(t) for t in threads}
        state = core.freshness.status()["watcher"]["state"]
    finally:
        core.close()
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    per_thread = {n: round(after_t[n] - before_t[n], 4) for n in before_t
                  if before_t[n] is not None and after_t.get(n) is not None}
    out = {"seconds": round(wall, 1), "files": files, "process_cpu_s": round(cpu, 4),
           "cpu_percent": round(100 * cpu / wall, 3), "python_threads_cpu_s": per_thread, "watcher_state": state}
    log(f"idle: {json.dumps(out)}")
    return out


# ------------------------------------------------------------------ transcript generation + child

def generate_transcript(path: str, target_mb: float, seed: int = 0) -> dict:
    """A realistic transcript: session header, user and assistant text, tool calls, large tool results."""
    rng = random.Random(seed)
    target = int(target_mb * 1024 * 1024)
    written = lines = kept = 0
    ts = 1_790_000_000_000

    def sentence(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."

    with open(path, "w", buffering=1 << 20) as fh:
        head = json.dumps({"type": "session", "version": 3, "id": "bench", "timestamp": "2026-11-01T00:00:00Z"}) + "\n"
        fh.write(head)
        written += len(head)
        while written < target:
            ts += rng.randint(1000, 60_000)
            iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts / 1000)) + "Z"
            r = rng.random()
            if r < 0.3:
                text = " ".join(sentence(rng.randint(6, 20)) for _ in range(rng.randint(1, 4)))
                rec = {"type": "message", "timestamp": iso, "message": {"role": "user", "content": text}}
                kept += len(text)
            elif r < 0.6:
                text = " ".join(sentence(rng.randint(8, 24)) for _ in range(rng.randint(2, 10)))
                blocks: list[dict] = [{"type": "text", "text": text}]
                if rng.random() < 0.5:
                    blocks.append({"type": "toolCall", "id": f"call{lines}", "name": "read",
                                   "arguments": {"path": f"src/file{rng.randint(0, 999)}.py"}})
                rec = {"type": "message", "timestamp": iso, "message": {"role": "assistant", "content": blocks,
                                                                          "usage": {"input": 1200, "output": 300}}}
                kept += len(text)
            else:
                body = "\n".join(sentence(rng.randint(5, 15)) for _ in range(rng.randint(5, 60)))
                rec = {"type": "message", "timestamp": iso, "message": {
                    "role": "toolResult", "toolCallId": f"call{lines}", "content": [{"type": "text", "text": body}]}}
            line = json.dumps(rec) + "\n"
            fh.write(line)
            written += len(line)
            lines += 1
    return {"bytes": written, "lines": lines, "kept_text_bytes": kept}


_CHILD = r"""
import json, os, resource, sys
sys.path.insert(0, {root!r})
mode = sys.argv[1]
from memory_core.config import MemoryCoreConfig
from memory_core.core import MemoryCore
if mode == "baseline":
    import memory_core.indexer, memory_core.sources, host_facades.chunking.pipeline
    print(json.dumps({{"ok": True}}))
    sys.exit(0)
ws, state, sessions = sys.argv[2:5]
cfg = MemoryCoreConfig.model_validate({{"workspace": ws, "stateDir": state, "sources": ["memory", "sessions"],
    "experimental": {{"sessionMemory": True}}, "sessionsDir": sessions}})
core = MemoryCore(ws, config=cfg)
s = core.index()
core.close()
print(json.dumps({{"files": s.files, "chunks": s.chunks, "seconds": round(s.seconds, 2), "failed": s.failed,
                   "problems": s.problems[:3]}}))
"""


def _run_child(args: list[str]) -> tuple[dict, float]:
    """Run one child; returns its JSON output and its peak RSS in MB (RUSAGE_CHILDREN of a fresh helper)."""
    # A fresh helper process waits for exactly this child, so RUSAGE_CHILDREN is this child's peak alone.
    helper = (
        "import json, resource, subprocess, sys\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(json.dumps({'rc': p.returncode, 'out': p.stdout, 'err': p.stderr[-2000:], 'maxrss_kb': peak}))\n"
    )
    code = _CHILD.format(root=ROOT)
    res = subprocess.run([sys.executable, "-c", helper, sys.executable, "-c", code, *args],
                         capture_output=True, text=True, check=True)
    data = json.loads(res.stdout)
    if data["rc"] != 0:
        raise RuntimeError(f"indexing child failed: {data['err']}")
    return json.loads(data["out"].strip().splitlines()[-1]), data["maxrss_kb"] / 1024


def bench_transcript(root: str, *, mb: float, log: Any) -> dict:
    ws = os.path.join(root, "tws")
    os.makedirs(os.path.join(ws, "memory"), exist_ok=True)
    sessions = os.path.join(root, "sessions")
    os.makedirs(sessions, exist_ok=True)
    t0 = time.monotonic()
    gen = generate_transcript(os.path.join(sessions, "big.jsonl"), mb)
    gen_s = time.monotonic() - t0
    _, base_mb = _run_child(["baseline"])
    result, peak_mb = _run_child(["index", ws, os.path.join(root, "state-transcript"), sessions])
    out = {"transcript_mb": round(gen["bytes"] / 1048576, 1), "lines": gen["lines"],
           "kept_text_mb": round(gen["kept_text_bytes"] / 1048576, 1), "generate_s": round(gen_s, 1),
           "index": result, "peak_rss_mb": round(peak_mb, 1), "baseline_rss_mb": round(base_mb, 1),
           "target_mb": 300, "meets_target": peak_mb < 300}
    log(f"transcript: {json.dumps(out)}")
    return out


# ------------------------------------------------------------------ CLI

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="20 edits at 200 ms debounce, 10 s idle, 40 MB transcript")
    p.add_argument("--edits", type=int, default=None, help="edits for the latency part (100)")
    p.add_argument("--files", type=int, default=200, help="memory files in the workspace (200)")
    p.add_argument("--debounce-ms", type=int, default=None, help="sync.watchDebounceMs (default: configured, 1500)")
    p.add_argument("--idle-seconds", type=float, default=None, help="idle CPU window (60)")
    p.add_argument("--transcript-mb", type=float, default=None, help="size of the generated transcript (400)")
    p.add_argument("--library-files", type=int, default=None, help="files of the large library workspace (10000)")
    p.add_argument("--searches", type=int, default=200, help="searches per library measurement (200)")
    p.add_argument("--skip", action="append", default=[], choices=["latency", "idle", "transcript", "library"],
                   help="skip a part (repeatable)")
    add_json_argument(p)


def run(args: argparse.Namespace) -> int:
    quick = bool(args.quick)
    edits = args.edits or (20 if quick else 100)
    debounce = args.debounce_ms if args.debounce_ms is not None else (200 if quick else None)
    idle = args.idle_seconds or (10.0 if quick else 60.0)
    mb = args.transcript_mb or (40.0 if quick else 400.0)
    log = progress_log(args)
    summary: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-freshness-") as root:
        if "latency" not in args.skip:
            summary["latency"] = bench_latency(root, edits=edits, files=args.files, debounce_ms=debounce, log=log)
        if "idle" not in args.skip:
            summary["idle"] = bench_idle(root, seconds=idle, files=args.files, log=log)
        if "transcript" not in args.skip:
            summary["transcript"] = bench_transcript(root, mb=mb, log=log)
        if "library" not in args.skip:
            files = args.library_files or (2000 if quick else 10_000)
            summary["library"] = bench_library(root, files=files, searches=args.searches, log=log)
    emit(args, summary, (lambda: _library_table(summary["library"])) if "library" in summary else None)
    return 0


def _library_table(lib: dict) -> str:
    """The library-search rows (the other parts are reported by the progress log)."""
    rows = [("library search p50, 100 files", f"{lib['p50_ms_small']:.2f} ms"),
            (f"library search p50, {lib['files_large']} files", f"{lib['p50_ms_large']:.2f} ms"),
            (f"ratio {lib['files_large']} / 100 files (target <= 2)", f"{lib['ratio_large_small']:.2f}x"),
            (f"baseline: reconcile before every search, {lib['files_large']} files",
             f"{lib['p50_ms_large_reconcile_every_search']:.2f} ms")]
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{name:<{width}}  {value:>10}" for name, value in rows)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_freshness", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    sys.exit(main())
