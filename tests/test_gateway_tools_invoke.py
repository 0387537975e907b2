"""``tools.invoke`` on ``memory-core serve``: the agent tools memory_search / memory_get in the shapes the
2026.9.6 host's own tools answer (what the OpenClaw plugin hands its agents), over a real loopback server."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from memory_core.config import load_config
from memory_core.gateway import protocol as p
from memory_core.gateway.client import GatewayCallError, GatewayClient
from memory_core.gateway.handlers import MemoryService
from memory_core.gateway.server import GatewayServer
from memory_core.tools import PATH_NOT_ALLOWED, SESSIONS_OFF_ACTION, SESSIONS_OFF_WARNING, WIKI_NOT_REGISTERED
from tests.gateway_fixtures import ROOT, TOKEN, child_env, make_workspace, write_config

pytestmark = pytest.mark.timeout(120)
WRITE = ["operator.read", "operator.write"]


@pytest.fixture
def service(tmp_path):
    ws = make_workspace(tmp_path)
    cfg = load_config(None, env={"MEMORY_CORE_HOME": str(tmp_path / "state")}, overrides={"workspace": str(ws)})
    svc = MemoryService(cfg)
    yield svc
    svc.close()


def invoke_all(service, calls, scopes=WRITE):
    """Each (name, args) through tools.invoke on one connection: the payload or the GatewayCallError."""
    async def main():
        async with GatewayServer(service, auth=p.AuthSettings("token", TOKEN), host="127.0.0.1", port=0) as server:
            async with await GatewayClient.open(server.url, token=TOKEN, scopes=scopes) as client:
                out = []
                for name, args in calls:
                    try:
                        out.append(await client.call("tools.invoke", {"name": name, "args": args}))
                    except GatewayCallError as exc:
                        out.append(exc)
                return out
    return asyncio.run(main())


def test_memory_get_answers_the_host_shapes(service):
    ok, not_allowed, missing, wiki = invoke_all(service, [
        ("memory_get", {"path": "MEMORY.md", "from": 4, "lines": 1}),
        ("memory_get", {"path": "../etc/passwd"}),
        ("memory_get", {"path": "memory/nope.md"}),
        ("memory_get", {"path": "MEMORY.md", "corpus": "wiki"}),
    ])
    details = ok["output"]["details"]
    assert ok["ok"] is True and ok["toolName"] == "memory_get" and ok["source"] == "plugin"
    assert details == {"status": "ok", "text": "- The user prefers dark roast coffee, brewed with an AeroPress."
                       "\n\n[More content available. Use from=5 to continue.]", "path": "MEMORY.md", "from": 4,
                       "lines": 1, "truncated": True, "nextFrom": 5}
    assert json.loads(ok["output"]["content"][0]["text"]) == details
    assert not_allowed["output"]["details"] == {"path": "../etc/passwd", "text": "", "status": "error",
                                                "code": "MEMORY_PATH_NOT_ALLOWED", "error": PATH_NOT_ALLOWED}
    assert missing["output"]["details"] == {"status": "not_found", "text": "", "path": "memory/nope.md"}
    assert wiki["output"]["details"] == {"path": "MEMORY.md", "text": "", "corpora": [
        {"corpus": "wiki", "outcome": "not-registered"}], "warning": WIKI_NOT_REGISTERED}


def test_memory_search_answers_the_host_shapes(service):
    hits, sessions, wiki, everything, bad = invoke_all(service, [
        ("memory_search", {"query": "AeroPress"}),
        ("memory_search", {"query": "AeroPress", "corpus": "sessions"}),
        ("memory_search", {"query": "AeroPress", "corpus": "wiki"}),
        ("memory_search", {"query": "AeroPress", "corpus": "all"}),
        ("memory_search", {"query": ""}),
    ])
    details = hits["output"]["details"]
    assert [(r["path"], r["startLine"], r["corpus"], r["citation"]) for r in details["results"]] == [
        ("MEMORY.md", 1, "memory", "MEMORY.md#L1-L4")]
    assert (details["provider"], details["citations"], details["mode"]) == ("none", "auto", "fts-only")
    assert sessions["output"]["details"] == {
        "results": [], "disabled": True, "unavailable": True, "error": "Session transcript search is not enabled.",
        "warning": SESSIONS_OFF_WARNING, "action": SESSIONS_OFF_ACTION,
        "debug": {"warning": SESSIONS_OFF_WARNING, "action": SESSIONS_OFF_ACTION,
                  "error": "Session transcript search is not enabled."}}
    assert wiki["output"]["details"] == {"results": [], "citations": "auto", "corpora": [
        {"corpus": "wiki", "outcome": "not-registered"}], "warning": WIKI_NOT_REGISTERED}
    assert everything["output"]["details"]["corpora"] == [{"corpus": "memory", "outcome": "ok"},
                                                          {"corpus": "wiki", "outcome": "not-registered"}]
    assert len(everything["output"]["details"]["results"]) == 1
    assert (bad.code, bad.message) == ("INVALID_REQUEST", "query must be a non-empty string")


def test_tools_invoke_needs_the_write_scope_and_a_known_tool(service):
    read_only, = invoke_all(service, [("memory_search", {"query": "x"})], scopes=["operator.read"])
    unknown, = invoke_all(service, [("exec", {})])
    assert (read_only.code, read_only.message) == ("FORBIDDEN", "missing scope: operator.write")
    assert (unknown.code, unknown.message) == (
        "INVALID_REQUEST", 'unknown tool "exec": memory-core serves memory_search and memory_get')


def test_serve_exits_when_its_supervisors_pipe_closes(tmp_path):
    """``--exit-on-stdin-eof``: the OpenClaw plugin holds serve's stdin; if the gateway dies without
    stopping it (even SIGKILL), the pipe closes and serve stops instead of living on as an orphan."""
    cfg = write_config(tmp_path, make_workspace(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "memory_core", "serve", "--config", str(cfg), "--port", "0",
                             "--exit-on-stdin-eof"], cwd=ROOT, env=child_env(tmp_path, MEMORY_CORE_GATEWAY_TOKEN=TOKEN),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert "listening on ws://127.0.0.1:" in proc.stdout.readline()
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
