"""Shared fixtures of the gateway and MCP tests: the spec's example workspace, a config file, a server.

The workspace is gateway-protocol.md §6's fixture (MEMORY.md with the coffee line at line 4 and a
dated note about the Falcon benchmark). ``serve_process`` runs ``python -m memory_core serve`` as a
real subprocess on a free loopback port and yields its URL.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MEMORY_MD = """# Memory

## Preferences
- The user prefers dark roast coffee, brewed with an AeroPress.
- Favourite editor: Neovim with the gruvbox theme.

## Infrastructure
Project Falcon runs on the staging cluster.
The main database is PostgreSQL 16.
It listens on port 5433 instead of the default.
"""

NOTE_MD = """# 2026-09-01
Met with Alice about the Falcon benchmark. She wants p95 search latency under 50 ms.
Reminder: renew the TLS certificate for staging before October.
"""

OPS_MD = """# Ops agent
The deploy window is Tuesday at 14:00 UTC.
"""

TOKEN = "test-token-7f3a"


def make_workspace(base: Path, name: str = "workspace", files: dict[str, str] | None = None) -> Path:
    ws = base / name
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    for rel, text in (files or {"MEMORY.md": MEMORY_MD, "memory/2026-09-01.md": NOTE_MD}).items():
        path = ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return ws


def write_config(base: Path, workspace: Path, *, agents: dict[str, dict] | None = None,
                 gateway: dict | None = None) -> Path:
    """A JSON config with the workspace, a state dir under ``base`` and optional extra agents."""
    doc: dict = {"workspace": str(workspace), "stateDir": str(base / "state")}
    if agents:
        doc["agents"] = agents
    if gateway:
        doc["gateway"] = gateway
    path = base / "memory-core.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def child_env(base: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["MEMORY_CORE_HOME"] = str(base / "state")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("MEMORY_CORE_GATEWAY_TOKEN", None)
    env.update(extra)
    return env


def index_agents(config_path: Path, agents: tuple[str, ...] = ("main",)) -> None:
    """Index every agent with the real CLI (``memory-core index``)."""
    for agent in agents:
        subprocess.run(
            [sys.executable, "-m", "memory_core", "index", "--config", str(config_path), "--agent", agent],
            check=True, cwd=ROOT, env=child_env(config_path.parent), capture_output=True, timeout=120,
        )


@contextlib.contextmanager
def serve_process(config_path: Path, *args: str, env: dict[str, str] | None = None,
                  stderr: Any = subprocess.PIPE) -> Iterator[str]:
    """Run ``memory-core serve --port 0`` and yield its ``ws://`` URL; terminated on exit.
    ``stderr``: where the server's log goes (a file for a long run: a pipe nobody reads fills up)."""
    cmd = [sys.executable, "-m", "memory_core", "serve", "--config", str(config_path), "--port", "0", *args]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env or child_env(config_path.parent, MEMORY_CORE_GATEWAY_TOKEN=TOKEN),
                            stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"listening on (ws://\S+)", line)
        if not match:
            proc.kill()
            _, err = proc.communicate(timeout=10)
            err = err or ""
            raise AssertionError(f"memory-core serve did not start: {line!r} {err}")
        yield match.group(1)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()

