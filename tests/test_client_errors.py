"""Errors sent to remote clients (gateway frames, MCP tool results) never carry host paths: an
unreadable index is reported by the file's name only; the server's log keeps the full message."""

from __future__ import annotations

import asyncio
import logging

import pytest

from memory_core.config import load_config
from memory_core.core import MemoryCore
from memory_core.errors import redact_paths
from memory_core.gateway import protocol as p
from memory_core.gateway.client import GatewayCallError, GatewayClient
from memory_core.gateway.handlers import MemoryService
from memory_core.gateway.server import GatewayServer
from tests.gateway_fixtures import TOKEN, make_workspace, write_config

pytestmark = pytest.mark.timeout(120)

NOT_A_DATABASE = ("<path>/main.sqlite is not a readable memory-core index (file is not a database); run "
                  "`memory-core index --force` to move it aside and rebuild the index")


def test_redact_paths_keeps_urls_relative_paths_and_the_last_part():
    assert redact_paths("state dir /home/u/.memory-core is not writable (permission denied); set "
                        "MEMORY_CORE_HOME") == "state dir <path>/.memory-core is not writable (permission denied); " \
                                               "set MEMORY_CORE_HOME"
    assert redact_paths("'/etc/passwd', ws://127.0.0.1:1/x, memory/2026-09-01.md, a/b") == \
        "'<path>/passwd', ws://127.0.0.1:1/x, memory/2026-09-01.md, a/b"


@pytest.fixture
def corrupt(tmp_path):
    base = tmp_path / "secret-host-folder"
    cfg = load_config(None, env={"MEMORY_CORE_HOME": str(base / "state")},
                      overrides={"workspace": str(make_workspace(base))})
    with MemoryCore(config=cfg) as core:
        core.index()
    db = base / "state" / "main.sqlite"
    for sidecar in ("-wal", "-shm"):
        (base / "state" / f"main.sqlite{sidecar}").unlink(missing_ok=True)
    db.write_bytes(b"this is not a database " * 200)
    return cfg, base


def test_gateway_errors_name_no_host_path(corrupt, caplog):
    cfg, base = corrupt
    service = MemoryService(cfg)

    async def main():
        async with GatewayServer(service, auth=p.AuthSettings("token", TOKEN)) as server:
            async with await GatewayClient.open(server.url, token=TOKEN) as client:
                out = []
                for params in ({"query": "coffee"}, {"query": "coffee", "version": 2}):
                    try:
                        out.append(await client.call("memory.search", params))
                    except GatewayCallError as err:
                        out.append({"code": err.code, "message": err.message})
                return out

    try:
        with caplog.at_level(logging.WARNING, logger="memory_core.gateway"):
            v1, v2 = asyncio.run(main())
    finally:
        service.close()
    assert v1 == {"code": "UNAVAILABLE", "message": f"memory search failed: {NOT_A_DATABASE}"}
    assert v2["code"] == "UNAVAILABLE" and str(base) not in v2["message"]
    assert str(base / "state" / "main.sqlite") in caplog.text  # the operator's log has the full path


def test_mcp_errors_name_no_host_path(corrupt):
    from tests.test_mcp import details, run_calls

    cfg, base = corrupt
    config_path = write_config(base, base / "workspace")
    search, get = run_calls(config_path, [("memory_search", {"query": "coffee"}),
                                          ("memory_get", {"path": "MEMORY.md"})])
    assert search.is_error
    data = details(search)
    assert data["error"] == NOT_A_DATABASE and str(base) not in str(data)
    assert str(base) not in str(details(get))
