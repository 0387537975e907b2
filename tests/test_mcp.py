"""``memory-core mcp`` driven by the official MCP SDK's stdio client: list tools, search, get, bad input."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.gateway_fixtures import ROOT, child_env, index_agents, make_workspace, write_config

pytestmark = pytest.mark.timeout(120)


async def _session_calls(config_path, calls):
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memory_core", "mcp", "--config", str(config_path)],
        env=child_env(config_path.parent),
        cwd=str(ROOT),
    )
    out = []
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for name, args in calls:
                if name == "list":
                    out.append(await session.list_tools())
                else:
                    out.append(await session.call_tool(name, args))
    return out


def run_calls(config_path, calls):
    return anyio.run(_session_calls, config_path, calls)


def details(result):
    assert len(result.content) == 1 and result.content[0].type == "text"
    data = json.loads(result.content[0].text)
    assert result.structured_content == data
    return data


@pytest.fixture(scope="module")
def indexed_config(tmp_path_factory):
    base = tmp_path_factory.mktemp("mcp")
    ws = make_workspace(base)
    cfg = write_config(base, ws)
    index_agents(cfg)
    return cfg


def test_mcp_lists_tools_searches_and_gets(indexed_config):
    tools, search, get, bounded = run_calls(indexed_config, [
        ("list", None),
        ("memory_search", {"query": "coffee", "maxResults": 3}),
        ("memory_get", {"path": "MEMORY.md"}),
        ("memory_get", {"path": "MEMORY.md", "from": 4, "lines": 2}),
    ])
    by_name = {t.name: t for t in tools.tools}
    assert sorted(by_name) == ["memory_get", "memory_search"]
    assert by_name["memory_search"].input_schema["required"] == ["query"]
    assert sorted(by_name["memory_search"].input_schema["properties"]) == ["corpus", "maxResults", "minScore", "query"]
    assert sorted(by_name["memory_get"].input_schema["properties"]) == ["corpus", "from", "lines", "path"]

    assert search.is_error is False
    found = details(search)
    assert found["provider"] == "none" and found["mode"] == "fts-only" and found["citations"] == "auto"
    top = found["results"][0]
    assert [(r["path"], r["startLine"], r["endLine"]) for r in found["results"]] == [("MEMORY.md", 1, 4)]
    assert top["snippet"] == ("# Memory\n\n## Preferences\n- The user prefers dark roast coffee, brewed with an "
                              "AeroPress.\n\nSource: MEMORY.md#L1-L4")
    assert (top["citation"], top["corpus"], top["source"], top["score"]) == ("MEMORY.md#L1-L4", "memory", "memory", 1.0)
    assert "model" not in found and found["fallback"] == "none"
    assert found["debug"]["hits"] == len(found["results"])

    whole = details(get)
    assert whole["path"] == "MEMORY.md"
    assert whole["text"].startswith("# Memory\n")
    part = details(bounded)
    assert part["text"].startswith(
        "- The user prefers dark roast coffee, brewed with an AeroPress.\n"
        "- Favourite editor: Neovim with the gruvbox theme."
    )
    assert (part["from"], part["lines"], part["truncated"], part["nextFrom"]) == (4, 2, True, 6)


def test_mcp_bad_arguments_are_tool_errors_and_the_server_keeps_serving(indexed_config):
    results = run_calls(indexed_config, [
        ("memory_search", {"query": "   "}),
        ("memory_search", {"query": "coffee", "maxResults": 0}),
        ("memory_search", {"query": "coffee", "corpus": "everything"}),
        ("memory_get", {"path": "../../etc/passwd"}),
        ("memory_get", {"path": "MEMORY.md", "from": -1}),
        ("memory_search", {"query": "coffee"}),
    ])
    errors = [details(r) for r in results[:5]]
    assert [r.is_error for r in results] == [True, True, True, False, True, False]
    assert errors[0] == {"error": "query must be a non-empty string"}
    assert errors[1] == {"error": "maxResults must be a positive integer, got 0"}
    assert errors[2]["error"].startswith("corpus must be one of memory, wiki, all, sessions")
    assert errors[3]["text"] == "" and "root:" not in json.dumps(errors[3])
    assert errors[3].get("error") or errors[3].get("status") == "not_found"
    assert errors[4] == {"error": "from must be a positive integer, got -1"}
    assert details(results[5])["results"][0]["path"] == "MEMORY.md"


# ---------------------------------------------------------------------- raw stdio: signals, malformed lines

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw-test", "version": "0"}}}
SEARCH_CALL = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
               "params": {"name": "memory_search", "arguments": {"query": "coffee"}}}


class RawServer:
    """``python -m memory_core mcp`` as a subprocess spoken to line by line (no SDK client in the way)."""

    def __init__(self, config_path):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memory_core", "mcp", "--config", str(config_path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=child_env(config_path.parent), cwd=str(ROOT),
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line)

    def send(self, message):
        line = message if isinstance(message, str) else json.dumps(message)
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def recv(self, timeout=30.0):
        return json.loads(self.lines.get(timeout=timeout))

    def initialize(self):
        self.send(INIT)
        assert self.recv()["id"] == 1
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def stop(self, sig, timeout=30.0):
        """Send ``sig`` with stdin still open; the exit code and stderr once the process is gone."""
        self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"still running {timeout}s after {sig.name}")
        finally:
            self.proc.stdin.close()
        return code, self.proc.stderr.read().decode()


@pytest.fixture
def raw_server(indexed_config):
    server = RawServer(indexed_config)
    yield server
    if server.proc.poll() is None:
        server.proc.kill()
        server.proc.wait()


@pytest.mark.parametrize(("sig", "code", "message"), [
    (signal.SIGINT, 130, "error: interrupted\n"),
    (signal.SIGTERM, 0, ""),  # like `memory-core serve`
], ids=["SIGINT", "SIGTERM"])
def test_mcp_stops_on_a_signal_with_stdin_still_open(raw_server, sig, code, message):
    raw_server.initialize()
    assert raw_server.stop(sig) == (code, message)  # fails if it is still running 30 s later


def test_mcp_stops_on_sigint_after_opening_the_engine(raw_server):
    raw_server.initialize()
    raw_server.send(SEARCH_CALL)
    assert raw_server.recv()["result"]["isError"] is False
    assert raw_server.stop(signal.SIGINT) == (130, "error: interrupted\n")


@pytest.mark.parametrize(("line", "error"), [
    ("not json", {"id": None, "code": -32700}),
    ("{", {"id": None, "code": -32700}),
    ("[]", {"id": None, "code": -32600}),
    ('{"jsonrpc":"2.0","id":99}', {"id": 99, "code": -32600}),
    ('{"jsonrpc":"2.0","id":"a","method":5}', {"id": "a", "code": -32600}),
    ('"just a string"', {"id": None, "code": -32600}),
], ids=["not-json", "truncated", "empty-batch", "no-method", "method-not-string", "not-an-object"])
def test_mcp_answers_a_malformed_line_with_a_jsonrpc_error_and_keeps_serving(raw_server, line, error):
    raw_server.initialize()
    raw_server.send(line)
    reply = raw_server.recv()
    assert {"id": reply["id"], "code": reply["error"]["code"]} == error
    assert reply["jsonrpc"] == "2.0" and reply["error"]["message"]
    raw_server.send(SEARCH_CALL)
    answer = raw_server.recv()
    assert answer["id"] == 7 and answer["result"]["isError"] is False
    assert answer["result"]["structuredContent"]["results"][0]["path"] == "MEMORY.md"
