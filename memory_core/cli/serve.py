"""``memory-core serve`` (the gateway WebSocket server) and ``memory-core mcp`` (the MCP stdio server)."""

from __future__ import annotations

import argparse
import asyncio
import errno
import gc
import signal
import socket
import sys
import threading
from typing import Any

from memory_core.errors import ConfigError, MemoryCoreError


# The collector's thresholds in a server. Each open agent is some hundred objects that live as long
# as it does; with CPython's defaults (700, 10, 10) a restart of 10,000 agents spent 14% of the
# server's CPU collecting (1,851 young, 167 middle and 11 full passes over the growing heap, 4.3 s
# of 30 s). Set once the server listens, these made it 263, 20 and 1 passes (1.0 s); the garbage
# waiting for a pass is a few MB at most.
SERVER_GC_THRESHOLDS = (20_000, 20, 100)


def load_service_config(args: argparse.Namespace) -> Any:
    """The config for ``--config``/``--workspace``/``--agent`` (the agent becomes the default agent)."""
    from memory_core.cli.common import load_cli_config

    overrides: dict[str, Any] = {}
    workspace = getattr(args, "workspace", None)
    if workspace:
        import os

        ws = os.path.abspath(os.path.expanduser(workspace))
        if not os.path.isdir(ws):
            raise ConfigError(f"workspace {ws} does not exist or is not a folder; pass --workspace PATH")
        overrides["workspace"] = ws
    cfg = load_cli_config(args, overrides)
    check_agents(cfg)
    return cfg


def check_agents(cfg: Any) -> None:
    """A configuration error of any agent the server would serve (an unknown embedding provider)
    stops it before it starts, exit 2, as every one-shot command does, not at the agent's first use."""
    from memory_core.config import override_shape
    from memory_core.embeddings.registry import check_provider_name

    if cfg.enabled:
        check_provider_name(cfg)
    checked: set[str] = set()
    for aid, override in cfg.agents.items():
        # agents whose overrides differ only in their workspace path have the same provider: one
        # check per shape (a config of 10,000 such agents is checked at once, not in 20 s of merging)
        shape = override_shape(override)
        if shape is not None and shape in checked:
            continue
        agent = cfg.for_agent(aid)
        if agent.enabled:
            check_provider_name(agent)
        if shape is not None:
            checked.add(shape)


def _cmd_serve(args: argparse.Namespace) -> int:
    from memory_core.gateway.handlers import MemoryService
    from memory_core.gateway.server import resolve_auth, run_gateway

    cfg = load_service_config(args)
    host = args.host or cfg.gateway.host
    port = cfg.gateway.port if args.port is None else args.port
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port must be 0..65535 (0 picks a free port), not {port}")
    auth = resolve_auth(mode=args.auth, host=host, token=args.token, password=args.password, config=cfg)
    from memory_core.open_agents import raise_fd_limit

    raise_fd_limit()  # before the service sizes its open agents by it
    service = MemoryService(cfg)

    def ready(server: Any) -> None:
        ids = service.agents.ids
        agents = ", ".join(ids) if len(ids) <= 10 else f"{', '.join(ids[:5])} and {len(ids) - 5} more"
        print(f"memory-core gateway listening on {server.url} (auth {auth.mode}; agents: {agents})", flush=True)
        # what exists now (modules, the config of every agent, the service) lives as long as the
        # server: the collector's full passes, which grow with the agents opened, skip it
        gc.freeze()
        gc.set_threshold(*SERVER_GC_THRESHOLDS)
        # warm: every configured agent opened, synced and watched now, not at its first request
        # (off the event loop: opening may read every file; a request meanwhile waits for its agent)
        threading.Thread(target=service.warm, args=(lambda line: print(line, file=sys.stderr, flush=True),),
                         name="memory-core-warm", daemon=True).start()

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):
                pass
        if args.exit_on_stdin_eof:
            # a supervisor (the OpenClaw plugin) holds our stdin: when it dies, even by SIGKILL, the
            # pipe closes and this server stops instead of living on as an orphan
            threading.Thread(target=_wait_stdin_eof, args=(loop, stop), name="memory-core-lifeline",
                             daemon=True).start()
        await run_gateway(service, auth=auth, host=host, port=port, on_ready=ready, stop=stop)

    try:
        asyncio.run(run())
    except OSError as exc:
        if isinstance(exc, socket.gaierror):  # the name, not the port
            raise MemoryCoreError(f"cannot listen on {host}:{port}: the host {host!r} does not resolve "
                                  f"({exc.strerror or exc}); pass an address of this machine to --host, "
                                  "e.g. 127.0.0.1") from exc
        fix = "pick another --port" if exc.errno == errno.EADDRINUSE else "check --host and --port"
        raise MemoryCoreError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; {fix}") from exc
    finally:
        service.close()
    return 0


def _wait_stdin_eof(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except (OSError, ValueError):
        pass
    loop.call_soon_threadsafe(stop.set)


def _cmd_mcp(args: argparse.Namespace) -> int:
    from memory_core.mcp_server import run_stdio

    cfg = load_service_config(args)
    if run_stdio(cfg) == signal.SIGINT:
        raise KeyboardInterrupt  # after a clean shutdown: the CLI's one mapping makes it exit 130
    return 0  # stdin closed or SIGTERM, like `serve`


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    parents = [common]
    p = sub.add_parser(
        "serve",
        parents=parents,
        help="serve memory.search/get/status over the OpenClaw gateway protocol (WebSocket)",
        description="Serve memory.search (v1 and v2), memory.get and memory.status to OpenClaw clients "
        "(`openclaw gateway call memory.search --url ws://127.0.0.1:PORT --token T`). Every configured "
        "agent is served (params.agentId). The token comes from --token, MEMORY_CORE_GATEWAY_TOKEN or "
        "gateway.token; without one the server refuses to start unless --auth none is given on loopback.",
    )
    p.add_argument("--host", default=None, help="address to bind (default: gateway.host, 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default: gateway.port; 0 picks a free port)")
    p.add_argument("--auth", choices=("token", "password", "none"), default=None,
                   help="connect authentication (default: gateway.auth, token); none only on loopback")
    p.add_argument("--token", default=None, help="gateway token (prefer MEMORY_CORE_GATEWAY_TOKEN: argv is visible)")
    p.add_argument("--password", default=None, help="gateway password (prefer MEMORY_CORE_GATEWAY_PASSWORD)")
    p.add_argument("--exit-on-stdin-eof", action="store_true",
                   help="stop when stdin closes (for a supervising process such as the OpenClaw plugin)")
    p.set_defaults(func=_cmd_serve)

    p = sub.add_parser(
        "mcp",
        parents=parents,
        help="run an MCP server on stdio with the memory_search and memory_get tools",
        description="Expose memory_search {query, maxResults?, minScore?, corpus?} and memory_get "
        "{path, from?, lines?, corpus?} to agents over MCP (stdio).",
    )
    p.set_defaults(func=_cmd_mcp)
