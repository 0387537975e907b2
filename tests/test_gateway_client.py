"""The test client (``memory_core.gateway.client``): the call waiting for its answer reads the
connection; concurrent calls, a reading call cancelled while others wait, and calls still waiting
when the connection closes."""

from __future__ import annotations

import asyncio

import pytest

from memory_core.gateway import protocol as p
from memory_core.gateway.client import GatewayClient
from memory_core.gateway.server import GatewayServer
from tests.gateway_fixtures import TOKEN
from tests.test_gateway_limits import service  # noqa: F401 - the fixture: a service over a small workspace


def test_client_concurrency_and_cancel(service):
    async def main():
        async with GatewayServer(service, auth=p.AuthSettings("token", TOKEN)) as server:
            orig = server.methods.call
            async def slow(method, params, scope):  # flushPlan answers after nowMs milliseconds
                if method == "memory.flushPlan":
                    await asyncio.sleep(float(params.get("nowMs", 0)) / 1000)
                    params = {}
                return await orig(method, params, scope)
            server.methods.call = slow
            c = await GatewayClient.open(server.url, token=TOKEN)
            # concurrent calls, answered out of order
            outs = await asyncio.gather(*[c.call_frame("memory.flushPlan", {"nowMs": (i % 5) * 40}) for i in range(30)],
                                        *[c.call("memory.search", {"query": "coffee"}) for i in range(10)])
            assert all(o["ok"] for o in outs[:30]) and all("results" in o for o in outs[30:])
            # a reading call cancelled while others wait: they still get their answers
            first = asyncio.create_task(c.call_frame("memory.flushPlan", {"nowMs": 300}))
            await asyncio.sleep(0.05)
            others = [asyncio.create_task(c.call_frame("memory.flushPlan", {"nowMs": 100})) for _ in range(3)]
            await asyncio.sleep(0.01)
            first.cancel()
            res = await asyncio.wait_for(asyncio.gather(*others), 5)
            assert all(r["ok"] for r in res)
            assert (await c.call("memory.search", {"query": "coffee"}))["results"] is not None
            # sequential calls
            for _ in range(20):
                await c.call("memory.search", {"query": "coffee"})
            # pending calls when the connection closes fail with ConnectionError
            pend = [asyncio.create_task(c.call_frame("memory.flushPlan", {"nowMs": 2000})) for _ in range(2)]
            await asyncio.sleep(0.1)
            await c.close()
            for t in pend:
                with pytest.raises(ConnectionError):
                    await asyncio.wait_for(t, 15)
            return True
    assert asyncio.run(main())
