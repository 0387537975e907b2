"""Protocol 4 over real loopback sockets: challenge, connect/auth, hello-ok, frames, scopes, bad input.

The server runs in-process on a free port; the client is a plain ``websockets`` connection speaking
the frames the 2026.9.6 CLI sends (gateway-protocol.md §3-§5). None of these requests reach the
engine: they are all decided by the protocol layer or by input validation.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from memory_core.config import load_config
from memory_core.errors import ConfigError
from memory_core.gateway import protocol as p
from memory_core.gateway.client import CLI_CLIENT, GatewayCallError, GatewayClient
from memory_core.gateway.handlers import MemoryService
from memory_core.gateway.server import GatewayServer, resolve_auth
from tests.gateway_fixtures import TOKEN, make_workspace

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def service(tmp_path):
    ws = make_workspace(tmp_path)
    cfg = load_config(None, env={"MEMORY_CORE_HOME": str(tmp_path / "state")},
                      overrides={"workspace": str(ws), "agents": {"ops": {}}})
    svc = MemoryService(cfg)
    yield svc
    svc.close()


def run_with_server(service, body, *, auth=p.AuthSettings("token", TOKEN)):
    async def main():
        async with GatewayServer(service, auth=auth, host="127.0.0.1", port=0) as server:
            return await body(server.url)

    return asyncio.run(main())


def connect_params(**extra):
    params = {"minProtocol": 4, "maxProtocol": 4, "client": {**CLI_CLIENT, "instanceId": str(uuid.uuid4())},
              "caps": [], "auth": {"token": TOKEN}, "role": "operator", "scopes": ["operator.read"]}
    params.update(extra)
    return params


def req(method, params, req_id=None):
    return json.dumps({"type": "req", "id": req_id or f"1:{uuid.uuid4()}", "method": method, "params": params})


async def raw_exchange(url, frames):
    """Send raw frames after reading the challenge; return (challenge, responses, close code, reason)."""
    async with connect(url, compression=None, max_size=None) as ws:
        challenge = json.loads(await ws.recv())
        responses = []
        for frame in frames:
            await ws.send(frame)
        try:
            while True:
                responses.append(json.loads(await asyncio.wait_for(ws.recv(), 5)))
                if len(responses) >= len(frames):
                    break
        except ConnectionClosed:
            pass
        try:
            await asyncio.wait_for(ws.wait_closed(), 0.5)
        except TimeoutError:
            pass
        return challenge, responses, ws.close_code, ws.close_reason


# ------------------------------------------------------------------ handshake


def test_challenge_then_hello_ok_lists_the_memory_methods(service):
    async def body(url):
        async with await GatewayClient.open(url, token=TOKEN) as client:
            return client.challenge, client.hello

    challenge, hello = run_with_server(service, body)
    assert challenge["type"] == "event" and challenge["event"] == "connect.challenge"
    assert challenge["payload"]["nonce"] and isinstance(challenge["payload"]["ts"], int)
    assert challenge["payload"]["capabilities"] == []
    assert hello["type"] == "hello-ok" and hello["protocol"] == 4
    assert hello["features"] == {"methods": ["doctor.memory.status", "memory.flushPlan", "memory.get", "memory.search",
                                             "memory.status", "tools.invoke"], "events": [], "capabilities": []}
    assert hello["auth"] == {"method": "token", "role": "operator", "scopes": ["operator.read"]}
    assert hello["policy"] == {"maxPayload": 26214400, "maxBufferedBytes": 52428800, "tickIntervalMs": 30000}


def test_wrong_token_is_rejected_with_the_real_error_shape_and_close_1008(service):
    async def body(url):
        return await raw_exchange(url, [req("connect", connect_params(auth={"token": "nope"}))])

    _, [res], code, reason = run_with_server(service, body)
    message = "unauthorized: gateway token mismatch (use this gateway's gateway.auth.token or pair the device)"
    assert res["ok"] is False
    assert res["error"] == {"code": "INVALID_REQUEST", "message": message, "details": {
        "code": "AUTH_TOKEN_MISMATCH", "authReason": "token_mismatch", "canRetryWithDeviceToken": False,
        "recommendedNextStep": "update_auth_credentials"}}
    assert (code, reason) == (1008, message)


def test_missing_token_is_token_missing(service):
    async def body(url):
        params = connect_params()
        del params["auth"]
        return await raw_exchange(url, [req("connect", params)])

    _, [res], code, _ = run_with_server(service, body)
    assert res["error"]["message"] == (
        "unauthorized: gateway token missing (use this gateway's gateway.auth.token or pair the device)")
    assert res["error"]["details"]["code"] == "AUTH_TOKEN_MISSING"
    assert code == 1008


def test_password_auth(service):
    async def body(url):
        async with await GatewayClient.open(url, password="pw-1") as client:
            hello = client.hello
        with pytest.raises(GatewayCallError) as err:
            await GatewayClient.open(url, password="pw-2")
        return hello, err.value

    hello, err = run_with_server(service, body, auth=p.AuthSettings("password", "pw-1"))
    assert hello["auth"]["method"] == "password"
    assert err.message == "unauthorized: gateway password mismatch (use this gateway's gateway.auth.password)"


def test_request_before_connect_is_refused_and_closed(service):
    async def body(url):
        return await raw_exchange(url, [req("memory.search", {"query": "coffee"}, req_id="1:abc")])

    _, [res], code, reason = run_with_server(service, body)
    assert res == {"type": "res", "id": "1:abc", "ok": False, "error": {
        "code": "INVALID_REQUEST", "message": "invalid handshake: first request must be connect"}}
    assert (code, reason) == (1008, "invalid handshake: first request must be connect")


def test_protocol_mismatch_closes_1002(service):
    async def body(url):
        return await raw_exchange(url, [req("connect", connect_params(minProtocol=5, maxProtocol=6))])

    _, [res], code, _ = run_with_server(service, body)
    assert res["error"] == {"code": "INVALID_REQUEST", "message": "protocol mismatch", "details": {
        "code": "PROTOCOL_MISMATCH", "clientMinProtocol": 5, "clientMaxProtocol": 6, "expectedProtocol": 4,
        "minimumProbeProtocol": 3}}
    assert code == 1002


def test_invalid_connect_params(service):
    async def body(url):
        return await raw_exchange(url, [req("connect", {"minProtocol": 4, "maxProtocol": 4})])

    _, [res], code, _ = run_with_server(service, body)
    assert res["error"] == {"code": "INVALID_REQUEST",
                            "message": "invalid connect params: at root: must have required property 'client'"}
    assert code == 1008


@pytest.mark.parametrize("frame", ["not json at all", "{\"type\":\"req\"", "[1,2,3]", "{\"type\":\"event\"}", "null"])
def test_non_request_frames_before_connect_close_1008(service, frame):
    async def body(url):
        return await raw_exchange(url, [frame])

    _, responses, code, reason = run_with_server(service, body)
    assert (responses, code, reason) == ([], 1008, "invalid request frame")


def test_oversized_preauth_frame_closes_1009(service):
    async def body(url):
        return await raw_exchange(url, [req("connect", connect_params(pad="x" * 70_000))])

    _, responses, code, reason = run_with_server(service, body)
    assert (responses, code, reason) == ([], 1009, "preauth payload too large")


# ------------------------------------------------------------------ after connect


def test_bad_frames_after_connect_get_errors_and_the_connection_stays_usable(service):
    async def body(url):
        async with connect(url, compression=None) as ws:
            await ws.recv()
            await ws.send(req("connect", connect_params()))
            assert json.loads(await ws.recv())["ok"] is True
            answers = []
            for frame in ["{oops", "[]", json.dumps({"type": "req", "id": "7:x"}),
                          json.dumps({"type": "req", "id": "8:x", "method": "connect", "params": {}}),
                          json.dumps({"type": "req", "id": "9:x", "method": "memory.nonexistent", "params": {}}),
                          json.dumps({"type": "req", "id": "10:x", "method": "memory.search",
                                      "params": {"query": "   "}})]:
                await ws.send(frame)
                answers.append(json.loads(await ws.recv()))
            return answers

    answers = run_with_server(service, body)
    assert [(a["id"], a["ok"], a["error"]["code"]) for a in answers] == [
        ("invalid", False, "INVALID_REQUEST"), ("invalid", False, "INVALID_REQUEST"),
        ("7:x", False, "INVALID_REQUEST"), ("8:x", False, "INVALID_REQUEST"),
        ("9:x", False, "INVALID_REQUEST"), ("10:x", False, "INVALID_REQUEST")]
    assert answers[0]["error"]["message"].startswith("invalid request frame: frame is not valid JSON")
    assert answers[1]["error"]["message"] == "invalid request frame: at root: must be object"
    assert answers[2]["error"]["message"] == "invalid request frame: at /method: must be a non-empty string"
    assert answers[3]["error"]["message"] == "connect is only valid as the first request"
    assert answers[4]["error"]["message"] == "unknown method: memory.nonexistent"
    assert answers[5]["error"]["message"] == "query must be a non-empty string"


def test_missing_scope_is_forbidden_with_details(service):
    async def body(url):
        async with await GatewayClient.open(url, token=TOKEN, scopes=["operator.approvals"]) as client:
            with pytest.raises(GatewayCallError) as err:
                await client.call("memory.search", {"query": "coffee", "version": 2})
            return err.value

    err = run_with_server(service, body)
    assert (err.code, err.message) == ("FORBIDDEN", "missing scope: operator.read")
    assert err.details == {"code": "MISSING_SCOPE", "missingScope": "operator.read",
                           "requiredScopes": ["operator.read"]}


def test_operator_write_and_admin_satisfy_read():
    for scopes in (("operator.write",), ("operator.admin",), ("operator.read",)):
        p.check_method_scope(p.Session("c", "operator", scopes, "token"), "memory.get")
    with pytest.raises(p.GatewayError):
        p.check_method_scope(p.Session("c", "operator", (), "token"), "memory.status")


def test_oversized_frame_after_connect_closes_1009_and_other_connections_keep_working(service):
    async def body(url):
        async with await GatewayClient.open(url, token=TOKEN) as other:
            ws = await connect(url, compression=None, max_size=None)
            await ws.recv()
            await ws.send(req("connect", connect_params()))
            await ws.recv()
            try:
                await ws.send(req("memory.search", {"query": "x" * (p.MAX_PAYLOAD + 10)}))
                await asyncio.wait_for(ws.recv(), 10)
            except (ConnectionClosed, AttributeError):  # the server closes while the client still writes
                pass
            await asyncio.wait_for(ws.wait_closed(), 10)
            code = ws.close_code
            with pytest.raises(GatewayCallError) as err:
                await other.call("memory.search", {"query": ""})
            return code, err.value.message

    assert run_with_server(service, body) == (1009, "query must be a non-empty string")


def test_auth_none_needs_the_explicit_flag_and_loopback():
    assert resolve_auth(mode="none", host="127.0.0.1", env={}) == p.AuthSettings("none")
    assert resolve_auth(mode="none", host="::1", env={}) == p.AuthSettings("none")
    with pytest.raises(ConfigError, match="only on a loopback address"):
        resolve_auth(mode="none", host="0.0.0.0", env={})
    with pytest.raises(ConfigError, match="no gateway token: set MEMORY_CORE_GATEWAY_TOKEN"):
        resolve_auth(mode=None, host="127.0.0.1", env={})
    assert resolve_auth(mode=None, host="127.0.0.1", env={"MEMORY_CORE_GATEWAY_TOKEN": "e"}).secret == "e"
    assert resolve_auth(mode=None, host="127.0.0.1", token="flag", env={"MEMORY_CORE_GATEWAY_TOKEN": "e"}).secret == "flag"
    cfg = load_config(None, env={}, overrides={"gateway": {"token": "cfg", "auth": "token"}})
    assert resolve_auth(mode=None, host="127.0.0.1", config=cfg, env={}).secret == "cfg"
    cfg_none = load_config(None, env={}, overrides={"gateway": {"auth": "none"}})
    with pytest.raises(ConfigError, match="pass --auth none explicitly"):
        resolve_auth(mode=None, host="127.0.0.1", config=cfg_none, env={})


def test_auth_none_accepts_a_client_without_credentials(service):
    async def body(url):
        async with await GatewayClient.open(url) as client:
            return client.hello["auth"]

    assert run_with_server(service, body, auth=p.AuthSettings("none")) == {
        "method": "none", "role": "operator", "scopes": ["operator.read"]}


def test_many_concurrent_connections(service):
    async def body(url):
        async def one(i):
            async with await GatewayClient.open(url, token=TOKEN) as client:
                with pytest.raises(GatewayCallError) as err:
                    await client.call("memory.search", {"query": "q", "version": 3})
                return err.value.message

        return await asyncio.gather(*(one(i) for i in range(20)))

    assert run_with_server(service, body) == ["unsupported memory version"] * 20


def test_tick_events_keep_long_lived_clients_alive(service):
    async def main():
        server = GatewayServer(service, auth=p.AuthSettings("token", TOKEN), tick_interval_s=0.05)
        async with server:
            async with connect(server.url, compression=None) as ws:
                await ws.recv()
                await ws.send(req("connect", connect_params()))
                await ws.recv()
                return json.loads(await asyncio.wait_for(ws.recv(), 5))

    tick = asyncio.run(main())
    assert tick["type"] == "event" and tick["event"] == "tick" and isinstance(tick["payload"]["ts"], int)


def test_a_burst_of_requests_on_one_connection_all_get_answers(service):
    async def body(url):
        async with await GatewayClient.open(url, token=TOKEN) as client:
            frames = await asyncio.gather(*(client.call_frame("memory.get", {"reference": {"providerId": "x"}})
                                            for _ in range(300)))
            return {f["error"]["message"] for f in frames}, len({f["id"] for f in frames})

    assert run_with_server(service, body) == ({"reference.providerId and reference.id are required"}, 300)
