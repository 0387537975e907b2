"""The gateway WebSocket server (protocol 4) on asyncio ``websockets``.

Per connection: send ``connect.challenge``; the first request must be ``connect`` (frames before it
are capped at 64 KiB); after hello-ok every ``req`` runs as its own task (responses carry the
request id and may arrive in any order), so one slow search never blocks the connection or the
server. Behaviour on bad frames follows the real 2026.9.6 gateway:

- before connect: a request other than ``connect`` gets ``INVALID_REQUEST "invalid handshake: first
  request must be connect"`` then close 1008; a frame that is not a JSON request (non-JSON text,
  binary junk, another frame type) closes 1008 ``invalid request frame``; a frame over 64 KiB
  closes 1009 ``preauth payload too large``; a bad ``connect`` gets its error then close 1008
  (1002 for a protocol mismatch);
- after connect: a frame that is not a valid request gets ``INVALID_REQUEST "invalid request frame:
  ..."`` (with the frame's id, or ``"invalid"``) and the connection stays open; a frame over the
  25 MiB ``maxPayload`` closes 1009.

Limits of its own: past ``gateway.maxConnections`` open connections a new one is closed at once
with 1013 (try again later); an authenticated connection that sends no request for
``gateway.idleTimeoutSeconds`` is closed with 1000; wrong secrets are throttled per address
(:mod:`memory_core.gateway.throttle`: a growing delay before each answer, then a lockout whose
connections are closed with 1008).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import math
import os
import sys
import uuid
from collections.abc import Callable
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from memory_core import __version__
from memory_core.errors import ConfigError
from memory_core.gateway import protocol as p
from memory_core.gateway.handlers import MemoryMethods, MemoryService, RequestScope, error_message
from memory_core.gateway.throttle import AUTH_RATE_LIMITED, AuthThrottle

log = logging.getLogger("memory_core.gateway")

SERVER_VERSION = f"memory-core-{__version__}"
HANDSHAKE_TIMEOUT_S = 10.0
MAX_IN_FLIGHT = 64
DEFAULT_MAX_CONNECTIONS = 256
DEFAULT_IDLE_TIMEOUT_S = 600.0
THROTTLED_DETAILS = ("AUTH_TOKEN_MISMATCH", "AUTH_PASSWORD_MISMATCH")  # wrong guesses, not a missing secret
TOKEN_ENV = "MEMORY_CORE_GATEWAY_TOKEN"
PASSWORD_ENV = "MEMORY_CORE_GATEWAY_PASSWORD"
MIN_SECRET_CHARS = 16


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _warn_stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def check_secret(
    kind: str, secret: str, *, host: str, from_argv: bool, warn: Callable[[str], None] = _warn_stderr
) -> None:
    """Refuse a secret under :data:`MIN_SECRET_CHARS` characters on a non-loopback bind (warn on
    loopback), and warn when it was given on the command line, where other local users can read it."""
    flag, env_name = ("--password", PASSWORD_ENV) if kind == "password" else ("--token", TOKEN_ENV)
    if len(secret) < MIN_SECRET_CHARS:
        fix = (f"use at least {MIN_SECRET_CHARS} random characters, e.g. "
               "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`")
        if not is_loopback(host):
            raise ConfigError(f"the gateway {kind} has {len(secret)} characters: too short to listen on {host}; {fix}")
        warn(f"the gateway {kind} has {len(secret)} characters, easy to guess; {fix}")
    if from_argv:
        warn(f"{flag} on the command line is visible to every local user (ps, /proc/PID/cmdline); set "
             f"{env_name} or gateway.{kind} in a config file only you can read (chmod 600) instead")


def resolve_auth(
    *,
    mode: str | None,
    host: str,
    token: str | None = None,
    password: str | None = None,
    config: Any = None,
    env: dict[str, str] | None = None,
    warn: Callable[[str], None] = _warn_stderr,
) -> p.AuthSettings:
    """Pick the auth mode and secret; refuse to run open unless ``--auth none`` on loopback.

    ``mode`` is the explicit ``--auth`` flag (None = the config's ``gateway.auth``, default token).
    Secrets: flag, then ``MEMORY_CORE_GATEWAY_TOKEN``/``_PASSWORD``, then ``gateway.token``/``password``;
    a short one or one on argv is checked by :func:`check_secret` (``warn`` reports).
    """
    env = dict(os.environ) if env is None else env
    gw = getattr(config, "gateway", None)
    if mode == "none":
        if not is_loopback(host):
            raise ConfigError(
                f"--auth none is allowed only on a loopback address (127.0.0.1, ::1, localhost), not {host!r}; "
                f"set a token (MEMORY_CORE_GATEWAY_TOKEN or gateway.token) to listen on {host}"
            )
        return p.AuthSettings("none")
    effective = mode or (gw.auth if gw is not None else "token")
    if effective == "none":
        raise ConfigError(
            "gateway.auth = \"none\" in the config is not enough to run without authentication: pass "
            "--auth none explicitly (loopback only), or set a token (MEMORY_CORE_GATEWAY_TOKEN or gateway.token)"
        )
    if effective == "password":
        secret = password or env.get(PASSWORD_ENV) or (gw.password if gw is not None else None)
        if not secret:
            raise ConfigError(
                "gateway auth is \"password\" but no password is set: pass --password, set "
                f"{PASSWORD_ENV}, or set gateway.password in the config"
            )
        check_secret("password", secret, host=host, from_argv=bool(password), warn=warn)
        return p.AuthSettings("password", secret)
    if effective != "token":
        raise ConfigError(f"gateway.auth must be token, password or none, not {effective!r}")
    secret = token or env.get(TOKEN_ENV) or (gw.token if gw is not None else None)
    if not secret:
        raise ConfigError(
            f"no gateway token: set {TOKEN_ENV} or gateway.token in the config (or pass --token); "
            "to run without authentication on loopback only, pass --auth none explicitly"
        )
    check_secret("token", secret, host=host, from_argv=bool(token), warn=warn)
    return p.AuthSettings("token", secret)


class AgentTools:
    """``tools.invoke`` for ``memory_search`` / ``memory_get``: memory-core's agent tools over the
    service's engines, answering in the 2026.9.6 host's shapes (:meth:`MemoryTools.host_search`,
    :meth:`MemoryTools.host_get`) wrapped as its ``tools.invoke`` result. Bad arguments are
    ``INVALID_REQUEST`` naming the argument; the tools themselves never raise a traceback."""

    def __init__(self, service: MemoryService) -> None:
        self.service = service
        self._tools: dict[str, Any] = {}

    def _for(self, agent_id: str) -> Any:
        from memory_core.tools import MemoryTools

        tools = self._tools.get(agent_id)
        if tools is None:
            cfg = self.service.runtime.agent_config(agent_id)
            tools = self._tools[agent_id] = MemoryTools(cfg, core_factory=lambda: self.service.core(agent_id))
        return tools

    async def __call__(self, method: str, params: dict[str, Any], scope: RequestScope) -> dict[str, Any]:
        from memory_core.tools import ToolArgumentError

        name = params.get("name")
        if name not in ("memory_search", "memory_get"):
            raise p.invalid_request(f"unknown tool {json.dumps(name)}: memory-core serves memory_search and memory_get")
        args = params.get("args", {})
        if not isinstance(args, dict):
            raise p.invalid_request("args must be an object")
        session_key = params.get("sessionKey")
        session_key = session_key if isinstance(session_key, str) else None
        agent_id = self.service.agents.resolve_v2(params)
        tools = self._for(agent_id)
        run = tools.host_search if name == "memory_search" else tools.host_get
        try:
            details = await asyncio.to_thread(run, args, session_key=session_key)
        except ToolArgumentError as exc:
            raise p.invalid_request(str(exc)) from exc
        scope.assert_current()
        text = json.dumps(details, ensure_ascii=False, indent=2)
        return {"ok": True, "toolName": name, "output": {"content": [{"type": "text", "text": text}],
                                                         "details": details}, "source": "plugin"}

    def close(self) -> None:
        for tools in self._tools.values():
            tools.close()
        self._tools.clear()


class GatewayServer:
    """Serves the memory methods of one :class:`MemoryService` over protocol 4."""

    def __init__(
        self,
        service: MemoryService,
        *,
        auth: p.AuthSettings,
        host: str = "127.0.0.1",
        port: int = 0,
        max_payload: int = p.MAX_PAYLOAD,
        handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
        tick_interval_s: float = p.TICK_INTERVAL_MS / 1000,
        max_connections: int | None = None,
        idle_timeout_s: float | None = None,
        throttle: AuthThrottle | None = None,
    ) -> None:
        """``max_connections`` and ``idle_timeout_s`` default to the service config's
        ``gateway.maxConnections`` and ``gateway.idleTimeoutSeconds``."""
        self.service = service
        self.methods = MemoryMethods(service)
        self.tools = AgentTools(service)
        self.methods.handlers["tools.invoke"] = self.tools
        self.auth = auth
        self.host = host
        self.port = port
        self.max_payload = max_payload
        self.handshake_timeout_s = handshake_timeout_s
        self.tick_interval_s = tick_interval_s
        gw = getattr(getattr(service, "config", None), "gateway", None)
        self.max_connections = max_connections or getattr(gw, "max_connections", DEFAULT_MAX_CONNECTIONS)
        self.idle_timeout_s = idle_timeout_s or getattr(gw, "idle_timeout_seconds", DEFAULT_IDLE_TIMEOUT_S)
        self.throttle = throttle or AuthThrottle()
        self._server: Server | None = None
        self.connections = 0

    async def start(self) -> None:
        self._server = await serve(
            self._handle,
            self.host,
            self.port,
            compression=None,  # small JSON frames: deflate costs more than it saves on loopback
            max_size=self.max_payload,
            max_queue=64,
            ping_interval=None,
            logger=log,
        )
        sock = next(iter(self._server.sockets))
        self.port = sock.getsockname()[1]

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ws://{host}:{self.port}"

    async def serve_forever(self) -> None:
        assert self._server is not None, "call start() first"
        await self._server.serve_forever()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        self.tools.close()

    async def __aenter__(self) -> GatewayServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # ------------------------------------------------------------------ one connection

    async def _send(self, ws: ServerConnection, frame: dict[str, Any]) -> None:
        try:
            await ws.send(p.encode(frame))
        except ConnectionClosed:
            pass

    async def _handle(self, ws: ServerConnection) -> None:
        self.connections += 1
        conn_id = str(uuid.uuid4())
        tasks: set[asyncio.Task[None]] = set()
        scopes: set[RequestScope] = set()
        tick: asyncio.Task[None] | None = None
        idle_timer: asyncio.TimerHandle | None = None
        try:
            if self.connections > self.max_connections:
                await ws.close(p.CLOSE_TRY_AGAIN_LATER, p.truncate_close_reason(
                    f"server busy: {self.max_connections} connections open (gateway.maxConnections); retry later"))
                return
            address = _address(ws)
            if self.throttle.locked(address):
                await ws.close(p.CLOSE_POLICY, self._lockout_reason(address))
                return
            await self._send(ws, p.challenge_event())
            session = await self._handshake(ws, conn_id, address)
            if session is None:
                return
            tick = asyncio.create_task(self._tick(ws))
            # At most MAX_IN_FLIGHT requests run per connection; further frames wait in the socket
            # (back-pressure on the client) instead of piling up as tasks.
            slots = asyncio.Semaphore(MAX_IN_FLIGHT)
            connection_open = lambda: ws.close_code is None  # noqa: E731 - one per connection, not per request
            # The idle timeout is one timer per connection that looks at the time of the last request
            # when it fires (and sets itself again for the rest), not a timeout around every recv():
            # asyncio.wait_for or asyncio.timeout would cost each request a timer of its own.
            loop = asyncio.get_running_loop()
            last_request = loop.time()
            closing: list[asyncio.Task[None]] = []

            def idle_check() -> None:
                nonlocal idle_timer
                now = loop.time()
                if now < last_request + self.idle_timeout_s:
                    idle_timer = loop.call_at(last_request + self.idle_timeout_s, idle_check)
                elif tasks:  # a request still running is not idleness: wait another whole period
                    idle_timer = loop.call_at(now + self.idle_timeout_s, idle_check)
                else:  # recv() below then ends with ConnectionClosed
                    closing.append(asyncio.create_task(self._close_idle(ws)))

            idle_timer = loop.call_at(last_request + self.idle_timeout_s, idle_check)
            while True:
                message = await ws.recv()
                last_request = loop.time()
                await slots.acquire()
                self._dispatch_frame(ws, session, message, tasks, scopes, slots.release, connection_open)
        except ConnectionClosed:
            pass
        finally:
            if idle_timer is not None:
                idle_timer.cancel()
            self.connections -= 1
            if tick is not None:
                tick.cancel()
            for scope in list(scopes):
                scope.signal.abort("connection closed")
            for task in list(tasks):
                task.cancel()

    async def _close_idle(self, ws: ServerConnection) -> None:
        try:
            await ws.close(p.CLOSE_NORMAL, p.truncate_close_reason(
                f"idle timeout: no request for {self.idle_timeout_s:g} s (gateway.idleTimeoutSeconds)"))
        except ConnectionClosed:
            pass

    def _lockout_reason(self, address: str) -> str:
        wait = math.ceil(self.throttle.locked(address))
        return p.truncate_close_reason(f"too many failed authentication attempts; retry in {wait} s")

    async def _handshake(self, ws: ServerConnection, conn_id: str, address: str) -> p.Session | None:
        try:
            message = await asyncio.wait_for(ws.recv(), self.handshake_timeout_s)
        except TimeoutError:
            await ws.close(p.CLOSE_POLICY, "connect timeout")
            return None
        size = len(message) if isinstance(message, bytes) else len(message.encode("utf-8"))
        if size > p.MAX_PREAUTH_PAYLOAD:
            await ws.close(p.CLOSE_TOO_BIG, p.PREAUTH_TOO_LARGE)
            return None
        try:
            request = p.parse_request(message)
        except p.FrameError:
            await ws.close(p.CLOSE_POLICY, "invalid request frame")
            return None
        try:
            if request.method != "connect":
                raise p.invalid_request(p.FIRST_REQUEST_MUST_BE_CONNECT, close_code=p.CLOSE_POLICY)
            if self.throttle.locked(address):  # no secret is checked while the address is locked out
                reason = self._lockout_reason(address)
                raise p.invalid_request(f"unauthorized: {reason}", details={"code": AUTH_RATE_LIMITED},
                                        close_code=p.CLOSE_POLICY, close_reason=reason)
            session = p.accept_connect(request.params, self.auth, conn_id)
        except p.GatewayError as err:
            if (err.details or {}).get("code") in THROTTLED_DETAILS:
                delay = self.throttle.failed(address)
                if delay:
                    log.warning("failed gateway authentication from %s; answering in %.1f s", address, delay)
                    await self.sleep(delay)
            await self._send(ws, p.response_error(request.id, err))
            await ws.close(err.close_code or p.CLOSE_POLICY, p.truncate_close_reason(err.close_reason or err.message))
            return None
        self.throttle.succeeded(address)
        await self._send(ws, p.response_ok(request.id, p.hello_ok(session, SERVER_VERSION)))
        return session

    async def sleep(self, seconds: float) -> None:
        """The throttle's wait (a seam for tests that check the delays without waiting them out)."""
        await asyncio.sleep(seconds)

    async def _tick(self, ws: ServerConnection) -> None:
        # Long-lived clients close with 4000 "tick timeout" after two silent intervals.
        while True:
            await asyncio.sleep(self.tick_interval_s)
            await self._send(ws, {"type": "event", "event": "tick", "payload": {"ts": p.now_ms()}})

    def _dispatch_frame(
        self,
        ws: ServerConnection,
        session: p.Session,
        message: str | bytes,
        tasks: set[asyncio.Task[None]],
        scopes: set[RequestScope],
        release: Callable[[], None],
        connection_open: Callable[[], bool],
    ) -> asyncio.Task[None]:
        """Start the task that answers ``message``; ``release()`` (its in-flight slot) runs when it ends."""
        try:
            request = p.parse_request(message)
        except p.FrameError as err:
            text = err.message if err.message.startswith("invalid request frame") else f"invalid request frame: {err.message}"
            frame = p.response_error(err.req_id or "invalid", p.invalid_request(text))
            bad = asyncio.create_task(self._send(ws, frame))
            tasks.add(bad)
            bad.add_done_callback(lambda t: (tasks.discard(t), release()))
            return bad
        scope = RequestScope(session=session, connection_open=connection_open)
        scopes.add(scope)

        def done() -> None:
            tasks.discard(task)
            scopes.discard(scope)
            release()

        task = asyncio.create_task(self._run(ws, request, scope, done))
        tasks.add(task)
        return task

    async def _run(self, ws: ServerConnection, request: p.Request, scope: RequestScope,
                   done: Callable[[], None]) -> None:
        """Answer one request, then ``done()``: called here, last, rather than as the task's done
        callback, which would cost every request one more turn of the event loop. (A task cancelled
        before it started never calls it: only the connection's end cancels, and it drops them all.)"""
        try:
            try:
                if request.method == "connect":
                    raise p.invalid_request(p.CONNECT_ONLY_FIRST)
                if request.method in p.METHOD_SCOPES:
                    p.check_method_scope(scope.session, request.method)
                payload = await self.methods.call(request.method, request.params, scope)
                frame = p.response_ok(request.id, payload)
                try:
                    text = p.encode(frame)
                except ValueError as exc:  # a NaN score must not reach JSON.parse in the client
                    raise p.unavailable(f"memory response could not be encoded: {exc}") from exc
            except p.GatewayError as err:
                if err.code == p.UNAVAILABLE:  # the client's copy has no host paths; the log keeps them
                    log.warning("request %s %s failed: %s", request.method, request.id, err.message)
                text = p.encode(p.response_error(request.id, err))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - one failed request never takes the connection down
                log.exception("request %s %s failed", request.method, request.id)
                text = p.encode(p.response_error(request.id, p.unavailable(error_message(exc))))
            finally:
                scope.open = False
            try:
                await ws.send(text)
            except ConnectionClosed:
                pass
        finally:
            done()


def _address(ws: ServerConnection) -> str:
    """The peer's IP address (the throttle's key)."""
    peer = ws.remote_address
    return str(peer[0]) if isinstance(peer, tuple) and peer else str(peer)


async def run_gateway(
    service: MemoryService,
    *,
    auth: p.AuthSettings,
    host: str,
    port: int,
    on_ready: Callable[[GatewayServer], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Start the server, report readiness, serve until ``stop`` is set (or the task is cancelled)."""
    server = GatewayServer(service, auth=auth, host=host, port=port)
    await server.start()
    try:
        if on_ready is not None:
            on_ready(server)
        if stop is None:
            await server.serve_forever()
        else:
            await stop.wait()
    finally:
        await server.close()
