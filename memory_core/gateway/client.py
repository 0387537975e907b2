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
    """One connection. Responses are read by a caller waiting for its own: a call that finds no
    reader reads frames itself (handing each to the call it answers) until its answer is in, then
    leaves the reading to a task while other calls still wait. A lone call is so answered as its
    frame arrives, not one loop turn later through a reader task."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.hello: dict[str, Any] = {}
        self.challenge: dict[str, Any] = {}
        self._seq = itertools.count(1)
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._reading = False  # a call or ``_reader`` reads the connection now
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

    async def _read(self, until: asyncio.Future[dict[str, Any]] | None) -> None:
        """Read frames and answer the waiting calls until ``until`` is done (None: until no call
        waits); then, if calls still wait, leave the reading to a task. A closed connection (or a
        frame that is not JSON) fails every waiting call."""
        self._reading = True
        try:
            while not until.done() if until is not None else self._pending:
                frame = json.loads(await self.ws.recv())
                if frame.get("type") != "res":
                    continue
                future = self._pending.pop(frame.get("id"), None)
                if future is not None and not future.done():
                    future.set_result(frame)
        except (ConnectionClosed, ValueError):
            self._fail_pending()
            return
        finally:
            self._reading = False
        self._hand_over()

    def _hand_over(self) -> None:
        """Calls still wait and nobody reads: a task reads for them."""
        if self._pending and not self._reading:
            self._reading = True  # now, so that no call starts reading before the task does
            self._reader = asyncio.create_task(self._read(None))

    def _fail_pending(self) -> None:
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
        if not self._reading:
            try:
                await self._read(future)
            except BaseException:  # cancelled while reading: the calls still waiting get a reader
                if self._pending.pop(req_id, None) is not None:
                    future.cancel()  # as a call cancelled while awaiting its future
                self._hand_over()
                raise
        return await future

    async def call(self, method: str, params: Any = None) -> Any:
        """The payload of an ``ok:true`` response; raises GatewayCallError otherwise."""
        frame = await self.call_frame(method, params)
        if not frame["ok"]:
            raise GatewayCallError(frame["error"])
        return frame.get("payload")

    async def close(self) -> None:
        await self.ws.close()
        reader = self._reader
        if reader is not None and not reader.done():
            await reader
        self._fail_pending()

    async def __aenter__(self) -> GatewayClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
