"""The gateway's own limits over real loopback sockets: failed-auth throttling per address (a growing
delay, then a lockout), the connection cap (close 1013) and the idle timeout (close 1000).

Delays are checked through the server's ``sleep`` seam and a fake clock, never by timing."""

from __future__ import annotations

import asyncio
import json

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from memory_core.config import load_config
from memory_core.gateway import protocol as p
from memory_core.gateway.client import GatewayClient
from memory_core.gateway.handlers import MemoryService
from memory_core.gateway.server import GatewayServer
from memory_core.gateway.throttle import AuthThrottle
from tests.gateway_fixtures import TOKEN, make_workspace
from tests.test_gateway_protocol import connect_params, req

pytestmark = pytest.mark.timeout(60)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def service(tmp_path):
    cfg = load_config(None, env={"MEMORY_CORE_HOME": str(tmp_path / "state")},
                      overrides={"workspace": str(make_workspace(tmp_path))})
    svc = MemoryService(cfg)
    yield svc
    svc.close()


class RecordingServer(GatewayServer):
    """Records the throttle's delays instead of waiting them out."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.delays: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.delays.append(seconds)


async def attempt(url, token):
    """One connect with ``token``: (got the challenge, response frame or None, close code, close reason)."""
    async with connect(url, compression=None) as ws:
        got_challenge, response = False, None
        try:
            got_challenge = json.loads(await ws.recv())["event"] == "connect.challenge"
            await ws.send(req("connect", connect_params(auth={"token": token})))
            response = json.loads(await ws.recv())
            await asyncio.wait_for(ws.recv(), 5)
        except ConnectionClosed:
            pass
        await ws.wait_closed()
        return got_challenge, response, ws.close_code, ws.close_reason


def test_throttle_delays_double_then_lock_out():
    clock = Clock()
    throttle = AuthThrottle(clock=clock)
    assert [throttle.failed("10.0.0.1") for _ in range(10)] == [0, 0, 0, 0.5, 1, 2, 4, 8, 8, 8]
    assert throttle.locked("10.0.0.1") == 60 and throttle.locked("10.0.0.2") == 0
    clock.now += 61
    assert throttle.locked("10.0.0.1") == 0
    assert throttle.failed("10.0.0.1") == 8  # still counted until it has been quiet for forget_after_s
    clock.now += 601
    assert throttle.failed("10.0.0.1") == 0
    throttle.succeeded("10.0.0.1")
    assert throttle.failed("10.0.0.1") == 0 and throttle.locked("10.0.0.1") == 0


def test_throttle_keeps_a_bounded_number_of_addresses():
    throttle = AuthThrottle(max_addresses=2, clock=Clock())
    for address in ("a", "b", "c"):
        throttle.failed(address)
    assert sorted(throttle._records) == ["b", "c"]


def test_wrong_tokens_are_delayed_then_the_address_is_locked_out(service):
    clock = Clock()

    async def main():
        async with RecordingServer(service, auth=p.AuthSettings("token", TOKEN),
                                   throttle=AuthThrottle(clock=clock)) as server:
            wrong = [await attempt(server.url, "wrong-token-guess") for _ in range(10)]
            locked_wrong = await attempt(server.url, "wrong-token-guess")
            locked_right = await attempt(server.url, TOKEN)
            clock.now += 61  # the lockout is over: the right token works and clears the record
            async with await GatewayClient.open(server.url, token=TOKEN) as client:
                status = await client.call("memory.status", {"version": 2})
            again = await attempt(server.url, "wrong-token-guess")
            return server.delays, wrong, locked_wrong, locked_right, status, again

    delays, wrong, locked_wrong, locked_right, status, again = asyncio.run(main())
    assert delays == [0.5, 1, 2, 4, 8, 8, 8]
    for got_challenge, response, code, reason in wrong:
        assert got_challenge and response["error"]["details"]["code"] == "AUTH_TOKEN_MISMATCH"
        assert code == 1008 and reason.startswith("unauthorized: gateway token mismatch")
    refused = (False, None, 1008, "too many failed authentication attempts; retry in 60 s")
    assert locked_wrong == refused and locked_right == refused  # no secret is checked while locked
    assert status["version"] == 2
    assert again[1]["error"]["details"]["code"] == "AUTH_TOKEN_MISMATCH" and delays[-1] == 8  # no new delay


def test_connection_cap_closes_with_1013(service):
    async def main():
        async with GatewayServer(service, auth=p.AuthSettings("token", TOKEN), max_connections=2) as server:
            held = [await GatewayClient.open(server.url, token=TOKEN) for _ in range(2)]
            try:
                async with connect(server.url, compression=None) as ws:
                    with pytest.raises(ConnectionClosed):
                        await ws.recv()
                    refused = (ws.close_code, ws.close_reason)
                await held[0].close()
                for _ in range(200):  # the server notices the close on its own schedule
                    if server.connections < 2:
                        break
                    await asyncio.sleep(0.01)
                async with await GatewayClient.open(server.url, token=TOKEN) as client:
                    status = await client.call("memory.status", {"version": 2})
                return refused, status
            finally:
                for client in held:
                    await client.close()

    refused, status = asyncio.run(main())
    assert refused == (1013, "server busy: 2 connections open (gateway.maxConnections); retry later")
    assert status["version"] == 2


def test_cap_and_idle_timeout_come_from_the_config(tmp_path):
    cfg = load_config(None, env={"MEMORY_CORE_HOME": str(tmp_path / "state"),
                                 "MEMORY_CORE_GATEWAY__MAX_CONNECTIONS": "7",
                                 "MEMORY_CORE_GATEWAY__IDLE_TIMEOUT_SECONDS": "90"},
                      overrides={"workspace": str(make_workspace(tmp_path))})
    service = MemoryService(cfg)
    try:
        server = GatewayServer(service, auth=p.AuthSettings("token", TOKEN))
        assert (server.max_connections, server.idle_timeout_s) == (7, 90)
    finally:
        service.close()


def test_idle_authenticated_connection_is_closed(service):
    async def main():
        async with GatewayServer(service, auth=p.AuthSettings("token", TOKEN), idle_timeout_s=0.2) as server:
            async with connect(server.url, compression=None) as ws:
                await ws.recv()
                await ws.send(req("connect", connect_params()))
                hello = json.loads(await ws.recv())
                await ws.send(req("memory.status", {"version": 2}))
                status = json.loads(await ws.recv())
                with pytest.raises(ConnectionClosed):
                    while True:  # ticks, then the close
                        await asyncio.wait_for(ws.recv(), 30)
                return hello["ok"], status["ok"], ws.close_code, ws.close_reason

    assert asyncio.run(main()) == (True, True, 1000,
                                   "idle timeout: no request for 0.2 s (gateway.idleTimeoutSeconds)")
