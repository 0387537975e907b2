"""Wrong types in every param over the wire: each gets its documented INVALID_REQUEST message.

The agent's workspace does not exist, so anything that reached the engine or the provider would
answer UNAVAILABLE: an INVALID_REQUEST proves validation ran before any provider call (§4.2).
After all of it, the same connection and a second one still serve.
"""

from __future__ import annotations

import asyncio

import pytest

from memory_core.config import load_config
from memory_core.gateway import protocol as p
from memory_core.gateway.client import GatewayCallError, GatewayClient
from memory_core.gateway.handlers import MemoryService
from memory_core.gateway.server import GatewayServer
from tests.gateway_fixtures import TOKEN

pytestmark = pytest.mark.timeout(60)

V1 = "maxResults and minScore must be finite numbers when provided"
REF = {"providerId": "memory-core", "id": "abc"}

CASES = [
    # v1 memory.search (unversioned and version 1)
    ("memory.search", {}, "query must be a non-empty string"),
    ("memory.search", {"query": 5}, "query must be a non-empty string"),
    ("memory.search", {"query": "   "}, "query must be a non-empty string"),
    ("memory.search", {"query": None, "version": 1}, "query must be a non-empty string"),
    ("memory.search", {"query": "x", "maxResults": "5"}, V1),
    ("memory.search", {"query": "x", "maxResults": True}, V1),
    ("memory.search", {"query": "x", "maxResults": None}, V1),
    ("memory.search", {"query": "x", "minScore": "0.5"}, V1),
    ("memory.search", {"query": "x", "minScore": []}, V1),
    ("memory.search", {"query": "x", "agentId": 5}, "agentId must be a string"),
    ("memory.search", {"query": "x", "agentId": ""}, "unknown agentId"),
    ("memory.search", {"query": "x", "agentId": "nope"}, "unknown agentId"),
    ("memory.search", {"query": "x", "version": 3}, "unsupported memory version"),
    ("memory.search", {"query": "x", "version": "2"}, "unsupported memory version"),
    ("memory.search", {"query": "x", "version": True}, "unsupported memory version"),
    # v2 memory.search
    ("memory.search", {"version": 2}, "query must be a non-empty string"),
    ("memory.search", {"version": 2, "query": ["x"]}, "query must be a non-empty string"),
    ("memory.search", {"version": 2, "query": "x", "maxResults": 0}, "maxResults must be a positive integer"),
    ("memory.search", {"version": 2, "query": "x", "maxResults": 1.5}, "maxResults must be a positive integer"),
    ("memory.search", {"version": 2, "query": "x", "maxResults": "5"}, "maxResults must be a positive integer"),
    ("memory.search", {"version": 2, "query": "x", "minScore": "x"}, "minScore must be a finite number"),
    ("memory.search", {"version": 2, "query": "x", "minScore": False}, "minScore must be a finite number"),
    ("memory.search", {"version": 2, "query": "x", "cursor": ""}, "cursor must be a non-empty string"),
    ("memory.search", {"version": 2, "query": "x", "cursor": 7}, "cursor must be a non-empty string"),
    ("memory.search", {"version": 2, "query": "x", "sources": "memory"},
     "sources must be a non-empty array of memory or sessions"),
    ("memory.search", {"version": 2, "query": "x", "sources": []},
     "sources must be a non-empty array of memory or sessions"),
    ("memory.search", {"version": 2, "query": "x", "sources": ["unknown"]},
     "sources must contain only memory or sessions"),
    ("memory.search", {"version": 2, "query": "x", "sources": ["memory", 1]},
     "sources must contain only memory or sessions"),
    ("memory.search", {"version": 2, "query": "x", "agentId": 5}, "agentId must be a non-empty string"),
    ("memory.search", {"version": 2, "query": "x", "agentId": "nope"}, "unknown agentId"),
    # memory.get
    ("memory.get", {}, "reference must be a provider-scoped memory reference"),
    ("memory.get", {"reference": "MEMORY.md"}, "reference must be a provider-scoped memory reference"),
    ("memory.get", {"reference": ["memory-core", "abc"]}, "reference must be a provider-scoped memory reference"),
    ("memory.get", {"path": "../../etc/passwd"}, "reference must be a provider-scoped memory reference"),
    ("memory.get", {"reference": {}}, "reference.providerId and reference.id are required"),
    ("memory.get", {"reference": {"providerId": "memory-core"}}, "reference.providerId and reference.id are required"),
    ("memory.get", {"reference": {"providerId": 5, "id": "abc"}}, "reference.providerId must be a non-empty string"),
    ("memory.get", {"reference": {"providerId": "memory-core", "id": ""}}, "reference.id must be a non-empty string"),
    ("memory.get", {"reference": {**REF, "revision": 5}}, "reference.revision must be a non-empty string"),
    ("memory.get", {"reference": {**REF, "fragment": ""}}, "reference.fragment must be a non-empty string"),
    ("memory.get", {"reference": REF, "from": -1}, "from must be a positive integer"),
    ("memory.get", {"reference": REF, "from": 0}, "from must be a positive integer"),
    ("memory.get", {"reference": REF, "from": "2"}, "from must be a positive integer"),
    ("memory.get", {"reference": REF, "lines": 0}, "lines must be a positive integer"),
    ("memory.get", {"reference": REF, "lines": 2.5}, "lines must be a positive integer"),
    ("memory.get", {"reference": REF, "agentId": "nope"}, "unknown agentId"),
    # memory.status
    ("memory.status", {"agentId": "nope"}, "unknown agentId"),
    ("memory.status", {"agentId": ""}, "agentId must be a non-empty string"),
]


@pytest.fixture
def service(tmp_path):
    cfg = load_config(None, env={"MEMORY_CORE_HOME": str(tmp_path / "state")},
                      overrides={"workspace": str(tmp_path / "missing-workspace")})
    svc = MemoryService(cfg)
    yield svc
    svc.close()


def test_every_bad_param_gets_its_message_before_any_provider_call(service):
    async def main():
        async with GatewayServer(service, auth=p.AuthSettings("token", TOKEN)) as server:
            async with await GatewayClient.open(server.url, token=TOKEN) as client:
                frames = await asyncio.gather(*(client.call_frame(m, params) for m, params, _ in CASES))
                reached = await client.call_frame("memory.search", {"query": "coffee", "version": 2})
                v1_reached = await client.call_frame("memory.search", {"query": "coffee"})
            async with await GatewayClient.open(server.url, token=TOKEN) as second:
                with pytest.raises(GatewayCallError) as err:
                    await second.call("memory.status", {"agentId": "nope"})
            return frames, reached, v1_reached, err.value

    frames, reached, v1_reached, again = asyncio.run(main())
    got = [(f["ok"], f["error"]["code"], f["error"]["message"]) for f in frames]
    assert got == [(False, "INVALID_REQUEST", message) for _, _, message in CASES]
    # the same requests with valid params do reach the (unavailable) engine
    assert reached["error"] == {"code": "UNAVAILABLE", "message": "memory-core cannot open this agent's workspace; "
                                "check the memory-core configuration and log"}
    assert v1_reached["error"]["code"] == "UNAVAILABLE"
    assert v1_reached["error"]["message"].startswith("memory search unavailable: workspace ")
    assert again.message == "unknown agentId"


def test_params_that_are_not_an_object_count_as_empty(service):
    async def main():
        async with GatewayServer(service, auth=p.AuthSettings("token", TOKEN)) as server:
            async with await GatewayClient.open(server.url, token=TOKEN) as client:
                return [await client.call_frame("memory.search", params) for params in ("coffee", [1], None, 5)]

    assert [f["error"]["message"] for f in asyncio.run(main())] == ["query must be a non-empty string"] * 4
