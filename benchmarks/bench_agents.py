"""Many agents in one server: time until every agent answers its own word, resources, search and edit latency.

    memory-core bench agents [--agents 200] [--files 5] [--searches 200] [--edits 20] [--restart] [--json OUT]

Builds ``--agents`` workspaces of ``--files`` small notes each (every file of agent ``aN`` is named
``memory/aN-note-K.md`` and holds the agent's unique word ``uwN``), writes one config naming every
agent with its own workspace, starts one ``memory-core serve`` on a free loopback port and measures:

- **all answering**: seconds from starting the server (nothing indexed) until every agent's
  ``memory.search`` for its unique word returns one of its own files (requests go out with at most
  ``--in-flight`` pending; an agent that has not answered yet is asked again in the next round);
- **resources** of the server's whole process tree (the server and its worker processes) read from
  ``/proc``: RSS, threads, open fds and inotify instances (fds that are ``anon_inode:inotify``);
- **search** p50/p95 of ``--searches`` sequential searches of random agents (with thousands of agents
  most are closed, so this includes opening them), and again among 50 agents kept open (the search
  itself);
- **edit to searchable**: for ``--edits`` random agents, a new note with a fresh word is written and
  searched every 50 ms: the time until an answer says ``stale`` or finds it, the time until it finds
  it, and the answers that neither found it nor said ``stale`` after the first second (silently old);
- **leaks**: any hit of any answer whose path is not the asked agent's (another agent's memory);
- **log**: the server's stderr lines, "Too many open files" lines and the most repeated line;
- ``--restart``: the server is stopped and started again over the indexes it built, and the time
  until all agents answer is measured again.

Every wait is bounded by ``--timeout`` (seconds, default 600).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks import add_json_argument, emit, progress_log

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-agents-token-0123456789"
WORDS = ("falcon staging latency coffee postgres deploy window certificate roast editor theme cluster backup "
         "quota migration schema index vector lexical ranking decay snippet citation session memory "
         "gateway socket release rollout incident alert metric budget review").split()


def agent_id(i: int) -> str:
    return f"a{i}"


def unique_word(i: int) -> str:
    return f"uw{i}"


def build(root: Path, agents: int, files: int, *, seed: int = 3) -> Path:
    """The workspaces and the config (memory-core's JSON shape: ``agents.<id>.workspace``)."""
    rng = random.Random(seed)
    base = root / "agents"
    for i in range(agents):
        mem = base / agent_id(i) / "memory"
        mem.mkdir(parents=True, exist_ok=True)
        for k in range(files):
            lines = [f"# {agent_id(i)} note {k}", f"The word of this agent is {unique_word(i)}."]
            for _ in range(rng.randint(3, 8)):
                lines.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 12))) + ".")
            (mem / f"{agent_id(i)}-note-{k}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = {
        "agentId": agent_id(0),
        "workspace": str(base / agent_id(0)),
        "stateDir": str(root / "state"),
        "agents": {agent_id(i): {"workspace": str(base / agent_id(i))} for i in range(agents)},
    }
    path = root / "memory-core.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- the server


class Server:
    """``memory-core serve`` in a child process; stderr drained by a thread (counted, never blocking)."""

    def __init__(self, config: Path, env: dict[str, str], timeout: float) -> None:
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memory_core", "serve", "--config", str(config), "--port", "0", "--auth", "none"],
            cwd=str(ROOT), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: collections.Counter[str] = collections.Counter()
        self.line_count = 0
        self.emfile = 0
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()
        line = self.proc.stdout.readline()
        match = re.search(r"listening on (ws://\S+)", line)
        if not match:
            self.stop()
            raise RuntimeError(f"memory-core serve did not start: {line!r}; stderr: {list(self.lines)[:5]}")
        self.url = match.group(1)
        self.listening_s = time.monotonic() - self.started
        threading.Thread(target=self._read_stdout, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for _line in self.proc.stdout:
            pass

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.line_count += 1
            if "Too many open files" in line or "os error 24" in line:
                self.emfile += 1
            # the same message with other numbers in it counts as a repeat
            self.lines[re.sub(r"\d+", "N", line.strip())[:200]] += 1

    def log_summary(self) -> dict[str, Any]:
        top = self.lines.most_common(1)
        return {"stderr_lines": self.line_count, "too_many_open_files": self.emfile,
                "most_repeated_line": top[0][0] if top else None, "most_repeated_count": top[0][1] if top else 0}

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self._drain.join(10)


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (from /proc/*/stat)."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children[ppid].append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def resources(pid: int) -> dict[str, Any]:
    """RSS, threads, fds and inotify instances summed over the process tree of ``pid``."""
    rss_kb = threads = fds = inotify = 0
    pids = process_tree(pid)
    for p in pids:
        try:
            with open(f"/proc/{p}/status", encoding="utf-8") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        rss_kb += int(line.split()[1])
                    elif line.startswith("Threads:"):
                        threads += int(line.split()[1])
            for fd in os.listdir(f"/proc/{p}/fd"):
                fds += 1
                try:
                    if os.readlink(f"/proc/{p}/fd/{fd}") == "anon_inode:inotify":
                        inotify += 1
                except OSError:
                    pass
        except OSError:
            continue
    return {"processes": len(pids), "rss_mb": round(rss_kb / 1024, 1), "threads": threads, "fds": fds,
            "inotify_instances": inotify}


# --------------------------------------------------------------------------- the client side


class Leaks:
    def __init__(self) -> None:
        self.count = 0
        self.examples: list[str] = []

    def check(self, i: int, payload: dict[str, Any]) -> None:
        own = f"memory/{agent_id(i)}-"
        for hit in payload.get("results") or []:
            if not str(hit.get("path", "")).startswith(own):
                self.count += 1
                if len(self.examples) < 5:
                    self.examples.append(f"{agent_id(i)} got {hit.get('path')}")


async def _search(client: Any, i: int, query: str) -> dict[str, Any]:
    return await client.call("memory.search", {"query": query, "agentId": agent_id(i), "maxResults": 5})


def _found(i: int, payload: dict[str, Any], query: str) -> bool:
    return any(str(h.get("path", "")).startswith(f"memory/{agent_id(i)}-") and query in str(h.get("snippet", ""))
               for h in payload.get("results") or [])


async def all_answering(url: str, agents: int, in_flight: int, deadline: float, leaks: Leaks,
                        log: Any) -> dict[str, Any]:
    """Ask every agent for its word until all found it; seconds from now, rounds, errors."""
    from memory_core.gateway.client import GatewayClient

    waiting = set(range(agents))
    errors: collections.Counter[str] = collections.Counter()
    rounds = 0
    sem = asyncio.Semaphore(in_flight)
    async with await GatewayClient.open(url, scopes=["operator.read"]) as client:
        async def ask(i: int) -> None:
            async with sem:
                try:
                    payload = await asyncio.wait_for(_search(client, i, unique_word(i)), 120)
                except Exception as exc:  # noqa: BLE001 - counted; the agent is asked again
                    errors[type(exc).__name__ + ": " + re.sub(r"\d+", "N", str(exc))[:120]] += 1
                    return
                leaks.check(i, payload)
                if _found(i, payload, unique_word(i)):
                    waiting.discard(i)

        while waiting and time.monotonic() < deadline:
            rounds += 1
            await asyncio.gather(*(ask(i) for i in sorted(waiting)))
            log(f"  round {rounds}: {agents - len(waiting)}/{agents} agents answer their word")
            if waiting:
                await asyncio.sleep(0.2)
    return {"answered": agents - len(waiting), "rounds": rounds, "errors": sum(errors.values()),
            "error_kinds": dict(errors.most_common(3))}


def percentiles(values: list[float]) -> dict[str, Any]:
    s = sorted(values)
    if not s:
        return {"p50_ms": None, "p95_ms": None, "n": 0}
    return {"p50_ms": round(statistics.median(s), 2), "p95_ms": round(s[int(0.95 * (len(s) - 1))], 2), "n": len(s)}


async def search_latency(url: str, agents: int, searches: int, rng: random.Random, leaks: Leaks,
                         among: list[int] | None = None) -> dict[str, Any]:
    """p50/p95 of sequential searches of random agents (of ``among``, asked once each first, when given)."""
    from memory_core.gateway.client import GatewayClient

    times: list[float] = []
    pool = among if among is not None else range(agents)
    async with await GatewayClient.open(url, scopes=["operator.read"]) as client:
        for i in among or ():
            await _search(client, i, unique_word(i))  # open (and keep open) these agents first
        for _ in range(searches):
            i = rng.choice(pool)
            query = rng.choice((unique_word(i), f"{rng.choice(WORDS)} {rng.choice(WORDS)}"))
            t = time.perf_counter()
            payload = await _search(client, i, query)
            times.append((time.perf_counter() - t) * 1000)
            leaks.check(i, payload)
    return percentiles(times)


async def edit_latency(url: str, root: Path, agents: int, edits: int, rng: random.Random, leaks: Leaks,
                       deadline: float) -> dict[str, Any]:
    """Per edit: seconds until an answer finds the new word or says stale, and until it finds it."""
    from memory_core.gateway.client import GatewayClient

    noticed: list[float] = []
    found: list[float] = []
    silent_late = 0
    missed = 0
    async with await GatewayClient.open(url, scopes=["operator.read"]) as client:
        for k in range(edits):
            i = rng.randrange(agents)
            word = f"edit{k}x{rng.randrange(10**6)}"
            path = root / "agents" / agent_id(i) / "memory" / f"{agent_id(i)}-edit-{k}.md"
            path.write_text(f"# edit {k}\nThe new word is {word}.\n", encoding="utf-8")
            t0 = time.monotonic()
            seen = None
            while time.monotonic() < min(deadline, t0 + 60):
                payload = await _search(client, i, word)
                leaks.check(i, payload)
                took = time.monotonic() - t0
                if _found(i, payload, word):
                    if seen is None:
                        seen = took
                    found.append(took)
                    break
                if payload.get("stale"):
                    if seen is None:
                        seen = took
                elif took > 1.0:
                    silent_late += 1
                await asyncio.sleep(0.05)
            else:
                missed += 1
            if seen is not None:
                noticed.append(seen)
    return {"edits": edits, "stale_or_found_s": _seconds(noticed), "found_s": _seconds(found),
            "not_found_in_60s": missed, "silently_old_answers_after_1s": silent_late}


def _seconds(values: list[float]) -> dict[str, Any]:
    s = sorted(values)
    if not s:
        return {"p50": None, "max": None}
    return {"p50": round(statistics.median(s), 3), "max": round(s[-1], 3)}


# --------------------------------------------------------------------------- the run


def start_and_wait(config: Path, env: dict[str, str], agents: int, in_flight: int, timeout: float,
                   leaks: Leaks, log: Any) -> tuple[Server, dict[str, Any]]:
    server = Server(config, env, timeout)
    deadline = server.started + timeout
    answered = asyncio.run(all_answering(server.url, agents, in_flight, deadline, leaks, log))
    answered["all_answering_s"] = (round(time.monotonic() - server.started, 2)
                                   if answered["answered"] == agents else None)
    answered["listening_s"] = round(server.listening_s, 2)
    return server, answered


def run_bench(*, agents: int, files: int, searches: int, edits: int, in_flight: int, timeout: float,
              restart: bool, workdir: str | None, log: Any) -> dict[str, Any]:
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="memory-core-bench-agents-") as tmp:
            return run_bench(agents=agents, files=files, searches=searches, edits=edits, in_flight=in_flight,
                             timeout=timeout, restart=restart, workdir=tmp, log=log)
    root = Path(workdir)
    rng = random.Random(11)
    t = time.perf_counter()
    config = build(root, agents, files)
    results: dict[str, Any] = {"agents": agents, "files": files, "cpu_count": os.cpu_count(),
                               "build_s": round(time.perf_counter() - t, 2)}
    try:
        with open("/proc/sys/fs/inotify/max_user_instances", encoding="utf-8") as fh:
            results["inotify_max_user_instances"] = int(fh.read())
    except OSError:
        pass
    env = dict(os.environ, MEMORY_CORE_HOME=str(root / "state"))
    env.pop("MEMORY_CORE_CONFIG", None)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    leaks = Leaks()
    log(f"built {agents} workspaces of {files} notes in {results['build_s']} s; starting memory-core serve")
    server, first = start_and_wait(config, env, agents, in_flight, timeout, leaks, log)
    try:
        results["cold"] = first
        results["cold_resources"] = resources(server.proc.pid)
        log("searching random agents")
        results["search"] = asyncio.run(search_latency(server.url, agents, searches, rng, leaks))
        # the engine's cost apart from opening: searches among 50 agents that stay open
        among = rng.sample(range(agents), min(agents, 50))
        results["search_open"] = asyncio.run(search_latency(server.url, agents, searches, rng, leaks, among))
        log("editing random agents' workspaces")
        results["edit"] = asyncio.run(edit_latency(server.url, root, agents, edits, rng, leaks,
                                                   time.monotonic() + timeout))
        results["resources"] = resources(server.proc.pid)
    finally:
        server.stop()
        results["log"] = server.log_summary()
    if restart:
        log("restarting over the existing indexes")
        server, again = start_and_wait(config, env, agents, in_flight, timeout, leaks, log)
        try:
            results["restart"] = again
            results["restart_resources"] = resources(server.proc.pid)
        finally:
            server.stop()
            results["restart_log"] = server.log_summary()
    results["leaks"] = leaks.count
    results["leak_examples"] = leaks.examples
    return results


def table(r: dict[str, Any]) -> str:
    def start_line(label: str, s: dict[str, Any], res: dict[str, Any]) -> str:
        when = f"{s['all_answering_s']} s" if s["all_answering_s"] is not None else f"never ({s['answered']} answered)"
        return (f"{label}: all {r['agents']} agents answer their word after {when} (listening after "
                f"{s['listening_s']} s, {s['rounds']} rounds, {s['errors']} errors); RSS {res['rss_mb']} MB, "
                f"{res['threads']} threads, {res['fds']} fds, {res['inotify_instances']} inotify instances "
                f"({res['processes']} processes)")

    lines = [f"agents benchmark: {r['agents']} agents x {r['files']} notes, {r['cpu_count']} CPUs",
             start_line("cold start", r["cold"], r["cold_resources"])]
    res, s, e = r["resources"], r["search"], r["edit"]
    lines.append(f"after searches and edits: RSS {res['rss_mb']} MB, {res['threads']} threads, {res['fds']} fds, "
                 f"{res['inotify_instances']} inotify instances")
    lines.append(f"search over random agents: p50 {s['p50_ms']} ms, p95 {s['p95_ms']} ms (n={s['n']})")
    o = r["search_open"]
    lines.append(f"search over 50 open agents: p50 {o['p50_ms']} ms, p95 {o['p95_ms']} ms (n={o['n']})")
    lines.append(f"edit to stale-or-found: p50 {e['stale_or_found_s']['p50']} s, max {e['stale_or_found_s']['max']} s; "
                 f"to searchable: p50 {e['found_s']['p50']} s, max {e['found_s']['max']} s; "
                 f"{e['not_found_in_60s']} not found in 60 s; {e['silently_old_answers_after_1s']} silently old "
                 "answers after 1 s")
    lg = r["log"]
    lines.append(f"server log: {lg['stderr_lines']} lines, {lg['too_many_open_files']} 'Too many open files'; "
                 f"most repeated ({lg['most_repeated_count']}x): {lg['most_repeated_line']}")
    if "restart" in r:
        lines.append(start_line("restart", r["restart"], r["restart_resources"]))
    lines.append(f"answers carrying another agent's memory: {r['leaks']}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agents", type=int, default=200, help="agents in the one server (default 200)")
    parser.add_argument("--files", type=int, default=5, help="notes per agent workspace (default 5)")
    parser.add_argument("--searches", type=int, default=200, help="sequential searches of random agents")
    parser.add_argument("--edits", type=int, default=20, help="edits of random agents' workspaces")
    parser.add_argument("--in-flight", type=int, default=32, help="requests pending at once while waiting")
    parser.add_argument("--timeout", type=float, default=600.0, help="bound of every wait, in seconds")
    parser.add_argument("--restart", action="store_true", help="also time a restart over the built indexes")
    parser.add_argument("--workdir", default=None, help="folder for the workspaces and indexes (default: temp)")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    for name, low in (("agents", 1), ("files", 1), ("searches", 1), ("edits", 0), ("in_flight", 1)):
        if getattr(args, name) < low:
            print(f"error: --{name.replace('_', '-')} must be >= {low}", file=sys.stderr)
            return 2
    results = run_bench(agents=args.agents, files=args.files, searches=args.searches, edits=args.edits,
                        in_flight=args.in_flight, timeout=args.timeout, restart=args.restart,
                        workdir=args.workdir, log=progress_log(args))
    emit(args, results, lambda: table(results))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_agents", description=(__doc__ or "").splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
