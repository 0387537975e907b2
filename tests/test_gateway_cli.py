"""``memory-core serve`` as a process: refuses to start open, starts with --auth none on loopback."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from memory_core.gateway.client import GatewayClient
from tests.gateway_fixtures import ROOT, TOKEN, child_env, make_workspace, serve_process, write_config

pytestmark = pytest.mark.timeout(120)


def serve(config_path, *args, **env):
    return subprocess.run([sys.executable, "-m", "memory_core", "serve", "--config", str(config_path), "--port", "0",
                           *args], cwd=ROOT, env=child_env(config_path.parent, **env), capture_output=True,
                          text=True, timeout=60)


def test_serve_refuses_to_start_without_a_token(tmp_path):
    cfg = write_config(tmp_path, make_workspace(tmp_path))
    proc = serve(cfg)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "error: no gateway token: set MEMORY_CORE_GATEWAY_TOKEN or gateway.token in the config (or pass --token); "
        "to run without authentication on loopback only, pass --auth none explicitly")
    proc = serve(cfg, "--auth", "none", "--host", "0.0.0.0")
    assert proc.returncode == 2
    assert "--auth none is allowed only on a loopback address" in proc.stderr


def test_serve_says_which_of_host_and_port_is_wrong(tmp_path):
    import socket

    cfg = write_config(tmp_path, make_workspace(tmp_path))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = serve(cfg, "--auth", "none", "--port", str(port))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"error: cannot listen on 127.0.0.1:{port}: ") and "pick another --port" in proc.stderr
    proc = serve(cfg, "--token", "t" * 16, "--host", "nosuch.invalid")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "the host 'nosuch.invalid' does not resolve" in proc.stderr and "--host" in proc.stderr


def test_serve_with_auth_none_on_loopback_and_with_a_config_token(tmp_path):
    cfg = write_config(tmp_path, make_workspace(tmp_path), gateway={"token": TOKEN})

    async def hello(url, **kw):
        async with await GatewayClient.open(url, **kw) as client:
            return client.hello["auth"]["method"]

    with serve_process(cfg, "--auth", "none", env=child_env(tmp_path)) as url:
        assert url.startswith("ws://127.0.0.1:")
        assert asyncio.run(hello(url)) == "none"
    with serve_process(cfg, env=child_env(tmp_path)) as url:  # token from gateway.token in the config
        assert asyncio.run(hello(url, token=TOKEN)) == "token"


def test_concurrent_first_searches_on_a_fresh_server_agree(tmp_path):
    """Eight connections search at once on a just-started process (nothing loaded yet): same answer, not stale."""
    from tests.gateway_fixtures import index_agents

    cfg = write_config(tmp_path, make_workspace(tmp_path))
    index_agents(cfg)

    async def one(url):
        async with await GatewayClient.open(url, token=TOKEN) as client:
            return await client.call("memory.search", {"query": "coffee"})

    async def burst(url):
        return await asyncio.gather(*(one(url) for _ in range(8)))

    with serve_process(cfg) as url:
        payloads = asyncio.run(burst(url))
    assert all("stale" not in payload and "warning" not in payload for payload in payloads)
    assert [[r["path"] for r in payload["results"]] for payload in payloads] == [["MEMORY.md"]] * 8
