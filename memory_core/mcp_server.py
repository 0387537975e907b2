"""``memory-core mcp``: the agent tools ``memory_search`` and ``memory_get`` over MCP (stdio).

Tool parameters and result shapes are upstream's (engine.md §9.1-9.2). Each call's result is the
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
import math
import os
import signal
import threading
import time
from dataclasses import asdict, is_dataclass
from typing import Any, cast

import anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from memory_core import __version__
from memory_core.errors import MemoryCoreError

CORPORA = ("memory", "wiki", "all", "sessions")
GET_CORPORA = ("memory", "wiki", "all")

SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What to look for in the agent's memory."},
        "maxResults": {"type": "integer", "minimum": 1, "description": "Most results to return."},
        "minScore": {"type": "number", "description": "Drop results scoring below this (0..1)."},
        "corpus": {"type": "string", "enum": list(CORPORA), "description": "memory, sessions, wiki or all."},
    },
    "required": ["query"],
    "additionalProperties": False,
}
GET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "Workspace-relative path: MEMORY.md or memory/**/*.md."},
        "from": {"type": "integer", "minimum": 1, "description": "1-based first line."},
        "lines": {"type": "integer", "minimum": 1, "description": "Number of lines to read."},
        "corpus": {"type": "string", "enum": list(GET_CORPORA)},
    },
    "required": ["path"],
    "additionalProperties": False,
}

TOOLS = [
    types.Tool(
        name="memory_search",
        description="Search the agent's memory files (MEMORY.md, memory/**/*.md) and, when configured, "
        "session transcripts. Returns ranked snippets with path#line citations.",
        input_schema=SEARCH_SCHEMA,
    ),
    types.Tool(
        name="memory_get",
        description="Read lines of a memory file found by memory_search (default 120 lines).",
        input_schema=GET_SCHEMA,
    ),
]


class ToolArgumentError(ValueError):
    """A tool argument has the wrong type or value; the message says which and what is allowed."""


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _positive_int(args: dict[str, Any], key: str) -> int | None:
    value = args.get(key)
    if value is None:
        return None
    if not _is_number(value) or not float(value).is_integer() or value < 1:
        raise ToolArgumentError(f"{key} must be a positive integer, got {json.dumps(value)}")
    return int(value)


def _camel_read(result: Any) -> dict[str, Any]:
    """A ReadResult (dataclass, model or dict) in the tool's camelCase form, None fields omitted."""
    if hasattr(result, "to_dict"):
        data = result.to_dict()
    elif hasattr(result, "model_dump"):
        data = result.model_dump(by_alias=True, exclude_none=True)
    elif is_dataclass(result):
        data = asdict(result)
    else:
        data = dict(result)
    names = {"from_": "from", "next_from": "nextFrom"}
    return {names.get(k, k): v for k, v in data.items() if v is not None}


class MemoryTools:
    """The two tools over one agent's engine (opened lazily; blocking work runs in a thread)."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self._core: Any = None

    def core(self) -> Any:
        if self._core is None:
            from memory_core.core import MemoryCore

            self._core = MemoryCore(self.config.workspace, agent_id=self.config.agent_id, config=self.config)
            self._core.serve_freshness()  # watcher, interval and startup catch-up while serving
        return self._core

    def close(self) -> None:
        if self._core is not None:
            self._core.close()
            self._core = None

    # ------------------------------------------------------------------ memory_search

    def _sources(self, corpus: str | None) -> list[str] | None:
        configured = list(self.config.sources)
        if corpus in (None, "all"):
            return configured
        if corpus == "memory":
            return ["memory"]
        if corpus == "sessions":
            if "sessions" not in configured:
                raise ToolArgumentError(
                    'corpus "sessions" needs session transcripts as a search source: add "sessions" to '
                    "`sources` in the config (and index), or use corpus memory"
                )
            return ["sessions"]
        return []  # wiki: no corpus supplement is registered in memory-core

    def search(self, args: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolArgumentError("query must be a non-empty string")
        max_results = _positive_int(args, "maxResults")
        min_score = args.get("minScore")
        if min_score is not None and not _is_number(min_score):
            raise ToolArgumentError(f"minScore must be a finite number, got {json.dumps(min_score)}")
        corpus = args.get("corpus")
        if corpus is not None and corpus not in CORPORA:
            raise ToolArgumentError(f"corpus must be one of {', '.join(CORPORA)}, got {json.dumps(corpus)}")
        sources = self._sources(corpus)
        core = self.core()
        manager_ms = (time.perf_counter() - started) * 1000
        t0 = time.perf_counter()
        hits: list[Any] = []
        if sources:
            kwargs = {"max_results": max_results, "min_score": min_score, "sources": sources}
            hits = list(core.search(query.strip(), **kwargs))
            if not hits:
                core.sync(reason="search")  # upstream: one forced sync, then search again
                hits = list(core.search(query.strip(), **kwargs))
        search_ms = (time.perf_counter() - t0) * 1000
        results = [self._result(hit) for hit in hits]
        mode = "hybrid" if self.config.vectors_enabled else "fts-only"
        tool_ms = (time.perf_counter() - started) * 1000
        out = {
            "results": results,
            "provider": self.config.provider,
            "model": self.config.model,
            "fallback": self.config.fallback,
            "citations": "auto",
            "mode": mode,
            "debug": {
                "backend": "builtin",
                "configuredMode": mode,
                "effectiveMode": mode,
                "fallback": self.config.fallback,
                "toolMs": round(tool_ms),
                "managerMs": round(manager_ms),
                "searchMs": round(search_ms),
                "outsideSearchMs": round(tool_ms - search_ms),
                "hits": len(results),
            },
        }
        return {k: v for k, v in out.items() if v is not None}

    @staticmethod
    def _result(hit: Any) -> dict[str, Any]:
        data = hit.to_dict() if hasattr(hit, "to_dict") else dict(hit)
        for key in ("id", "sourceMtime"):
            data.pop(key, None)
        start, end = data["startLine"], data["endLine"]
        citation = data.get("citation") or (
            f"{data['path']}#L{start}" if start == end else f"{data['path']}#L{start}-L{end}"
        )
        data["snippet"] = f"{data['snippet'].strip()}\n\nSource: {citation}"
        data["citation"] = citation
        data["corpus"] = data.get("source", "memory")
        return data

    # ------------------------------------------------------------------ memory_get

    def get(self, args: dict[str, Any]) -> dict[str, Any]:
        path = args.get("path")
        if not isinstance(path, str) or not path.strip():
            raise ToolArgumentError("path required: pass a workspace-relative path such as MEMORY.md")
        from_ = _positive_int(args, "from")
        lines = _positive_int(args, "lines")
        corpus = args.get("corpus")
        if corpus is not None and corpus not in GET_CORPORA:
            raise ToolArgumentError(f"corpus must be one of {', '.join(GET_CORPORA)}, got {json.dumps(corpus)}")
        if corpus == "wiki":
            return {"status": "not_found", "text": "", "path": path}
        try:
            result = self.core().get(path, from_=from_, lines=lines)
        except MemoryCoreError as exc:
            return {"path": path, "text": "", "disabled": True, "error": exc.message}
        return _camel_read(result)


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
        return types.ListToolsResult(tools=TOOLS)

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
            return _tool_result(_unavailable(exc.message), error=True)
        except Exception as exc:  # noqa: BLE001 - a failed call must not end the session
            return _tool_result(_unavailable(str(exc) or type(exc).__name__), error=True)
        return _tool_result(details)

    return Server(
        "memory-core",
        version=__version__,
        instructions="Search and read the agent's memory: memory_search, then memory_get on a result's path.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _unavailable(error: str) -> dict[str, Any]:
    """``buildMemorySearchUnavailableResult``."""
    warning = "Memory search is unavailable right now."
    action = "Check `memory-core status --deep`; run `memory-core index` if the index is missing."
    return {
        "results": [],
        "disabled": True,
        "unavailable": True,
        "error": error,
        "warning": warning,
        "action": action,
        "debug": {"warning": warning, "action": action, "error": error},
    }


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
