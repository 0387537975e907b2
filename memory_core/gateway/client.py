"""A small protocol-4 client (what ``openclaw gateway call`` does, without Node start-up).

Used by the tests and by ``benchmarks/bench_gateway.py``: one connection, ``connect`` once, then
any number of ``call``s, concurrent ones matched by request id.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

CLI_CLIENT = {"id": "cli", "version": "2026.9.6", "platform": "linux", "deviceFamily": "Linux", "mode": "cli"}


class GatewayCallError(Exception):
    """An ``ok:false`` response: ``code``, ``message`` and optional ``details``."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.code = error.get("code")
        self.message = error.get("message")
        self.details = error.get("details")
        self.error = error


class GatewayClient:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.hello: dict[str, Any] = {}
        self.challenge: dict[str, Any] = {}
        self._seq = itertools.count(1)
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._reader: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        token: str | None = None,
        password: str | None = None,
        scopes: list[str] | None = None,
        role: str = "operator",
        max_size: int | None = 2**25,
    ) -> GatewayClient:
        """Connect, answer the challenge and finish the handshake; raises GatewayCallError on rejection."""
        ws = await connect(url, compression=None, max_size=max_size, ping_interval=None)
        client = cls(ws)
        try:
            client.challenge = json.loads(await ws.recv())
            auth = {k: v for k, v in (("token", token), ("password", password)) if v}
            params: dict[str, Any] = {
                "minProtocol": 4,
                "maxProtocol": 4,
                "client": {**CLI_CLIENT, "instanceId": str(uuid.uuid4())},
                "caps": [],
                "role": role,
                "scopes": scopes if scopes is not None else ["operator.read"],
            }
            if auth:
                params["auth"] = auth
            frame = await client._request_raw("connect", params)
            if not frame["ok"]:
                raise GatewayCallError(frame["error"])
            client.hello = frame["payload"]
        except BaseException:
            await ws.close()
            raise
        client._reader = asyncio.create_task(client._read())
        return client

    def _next_id(self) -> str:
        return f"{next(self._seq)}:{uuid.uuid4()}"

    async def _request_raw(self, method: str, params: Any) -> dict[str, Any]:
        req_id = self._next_id()
        await self.ws.send(json.dumps({"type": "req", "id": req_id, "method": method, "params": params}))
        while True:
            frame = json.loads(await self.ws.recv())
            if frame.get("type") == "res" and frame.get("id") == req_id:
                return frame

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                frame = json.loads(message)
                if frame.get("type") != "res":
                    continue
                future = self._pending.pop(frame.get("id"), None)
                if future is not None and not future.done():
                    future.set_result(frame)
        except ConnectionClosed:
            pass
        finally:
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionError("gateway connection closed"))
            self._pending.clear()

    async def call_frame(self, method: str, params: Any = None) -> dict[str, Any]:
        """Send one request and return its whole ``res`` frame."""
        req_id = self._next_id()
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[req_id] = future
        await self.ws.send(json.dumps({"type": "req", "id": req_id, "method": method, "params": params}))
        return await future

    async def call(self, method: str, params: Any = None) -> Any:
        """The payload of an ``ok:true`` response; raises GatewayCallError otherwise."""
        frame = await self.call_frame(method, params)
        if not frame["ok"]:
            raise GatewayCallError(frame["error"])
        return frame.get("payload")

    async def close(self) -> None:
        await self.ws.close()
        if self._reader is not None:
            await self._reader

    async def __aenter__(self) -> GatewayClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
