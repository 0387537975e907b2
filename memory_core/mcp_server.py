"""``memory-core mcp``: the agent tools ``memory_search`` and ``memory_get`` over MCP (stdio).

Tool parameters and result shapes are upstream's (upstream `extensions/memory-core/src/tools.ts`,
`host/read-file.ts`). Each call's result is the
tool's ``details`` object, sent both as JSON text content and as structured content, like the
``output`` of OpenClaw's ``tools.invoke``. Bad arguments and memory_search failures come back as tool
errors (``isError``) whose text names the problem and the fix; a path memory_get cannot read comes
back, as upstream, with ``isError: false`` and ``{path, text: "", disabled: true, error}``. A line that
is not JSON gets a -32700 error and one that is not a JSON-RPC message a -32600 error; the server keeps
serving. SIGINT and SIGTERM close the engine and end the server at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
from typing import Any, cast

import anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from memory_core import __version__
from memory_core.errors import MemoryCoreError
from memory_core.tools import (
    GET_DESCRIPTION,
    GET_SCHEMA,
    SEARCH_DESCRIPTION,
    SEARCH_SCHEMA,
    MemoryTools,
    ToolArgumentError,
    unavailable_result,
)

TOOLS = [
    types.Tool(name="memory_search", description=SEARCH_DESCRIPTION, input_schema=SEARCH_SCHEMA),
    types.Tool(name="memory_get", description=GET_DESCRIPTION, input_schema=GET_SCHEMA),
]


def _tool_result(details: dict[str, Any], *, error: bool = False) -> types.CallToolResult:
    text = json.dumps(details, ensure_ascii=False)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=details,
        is_error=error,
    )


def build_server(tools: MemoryTools) -> Server[Any]:
    """The MCP server object (transport-independent)."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        registered = {c.name for c in tools.contracts()}  # none when memory search is disabled
        return types.ListToolsResult(tools=[t for t in TOOLS if t.name in registered])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        args = dict(params.arguments or {})
        try:
            if params.name == "memory_search":
                details = await asyncio.to_thread(tools.search, args)
            elif params.name == "memory_get":
                details = await asyncio.to_thread(tools.get, args)
            else:
                return _tool_result({"error": f"unknown tool {params.name!r}: use memory_search or memory_get"},
                                    error=True)
        except ToolArgumentError as exc:
            return _tool_result({"error": str(exc)}, error=True)
        except MemoryCoreError as exc:
            return _tool_result(unavailable_result(exc.message), error=True)
        except Exception as exc:  # noqa: BLE001 - a failed call must not end the session
            return _tool_result(unavailable_result(str(exc) or type(exc).__name__), error=True)
        return _tool_result(details, error=details.get("unavailable") is True)

    return Server(
        "memory-core",
        version=__version__,
        instructions="Search and read the agent's memory: memory_search, then memory_get on a result's path.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _jsonrpc_error(line: str) -> types.JSONRPCError | None:
    """The error reply to a line that is not one JSON-RPC message, or None when it is one."""
    try:
        message = json.loads(line)
    except ValueError as exc:
        return types.JSONRPCError(jsonrpc="2.0", id=None,
                                  error=types.ErrorData(code=types.PARSE_ERROR, message=f"Parse error: {exc}"))
    try:
        types.jsonrpc_message_adapter.validate_json(line, by_name=False)  # as stdio_server will
        return None
    except ValueError:
        pass
    request_id = message.get("id") if isinstance(message, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, int | str):
        request_id = None
    hint = "Invalid Request: send one JSON-RPC 2.0 object with a string method (batches are not supported)"
    return types.JSONRPCError(jsonrpc="2.0", id=request_id,
                              error=types.ErrorData(code=types.INVALID_REQUEST, message=hint))


class _StdinLines:
    """stdin as the line iterator ``stdio_server`` reads, answering malformed lines itself (the SDK
    drops them unanswered). A daemon thread does the blocking reads, so a signal never waits on it."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lines: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self.write_stream: Any = None
        self.ready = anyio.Event()  # set once write_stream is there to answer on
        threading.Thread(target=self._read, name="memory-core mcp stdin", daemon=True).start()

    def _read(self) -> None:
        pending = b""
        while True:
            try:
                chunk = os.read(self._fd, 65536)
            except OSError:
                chunk = b""
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop() if chunk else b""
            try:
                for line in lines:
                    self._loop.call_soon_threadsafe(self._lines.put_nowait, line)
                if not chunk:
                    self._loop.call_soon_threadsafe(self._lines.put_nowait, None)
                    return
            except RuntimeError:  # the loop is closed: the server is gone
                return

    def __aiter__(self) -> _StdinLines:
        return self

    async def __anext__(self) -> str:
        await self.ready.wait()
        while True:
            raw = await self._lines.get()
            if raw is None:
                raise StopAsyncIteration
            line = raw.decode("utf-8", errors="replace")
            if not line.strip():
                continue
            error = _jsonrpc_error(line)
            if error is None:
                return line
            await self.write_stream.send(SessionMessage(error))


async def serve_stdio(config: Any) -> int | None:
    """Serve until stdin closes (None) or SIGINT/SIGTERM arrives (that signal's number)."""
    tools = MemoryTools(config)
    server = build_server(tools)
    stdin = _StdinLines(0)
    loop = asyncio.get_running_loop()
    received: list[int] = []
    try:
        with anyio.CancelScope() as scope:

            def stop(sig: int) -> None:
                received.append(sig)
                scope.cancel()

            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop, sig)
            async with stdio_server(stdin=cast(Any, stdin)) as (read_stream, write_stream):
                stdin.write_stream = write_stream
                stdin.ready.set()
                await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        tools.close()
    return received[0] if received else None


def run_stdio(config: Any) -> int | None:
    """Run the server; the signal that stopped it, if one did."""
    return anyio.run(serve_stdio, config)
