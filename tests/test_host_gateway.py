"""The host role of the gateway handlers (provider-runtime.md §4, §6): acceptance cases 15-21 and
checklist items 43-44.

The gateway's method layer (``memory_core.gateway.handlers.MemoryMethods``, with the dispatcher's
scope check from ``memory_core.gateway.protocol``) is driven in-process; for the cases that name a
provider ``records`` the service's host is pointed at a small contract-conforming provider, exactly
as a different slot owner would be. Wire-level behaviour is covered by the gateway's own tests.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from memory_core.config import MemoryCoreConfig
from memory_core.core import MemoryCore
from memory_core.gateway import protocol as p
from memory_core.gateway.handlers import MemoryMethods, MemoryService, RequestScope
from memory_core.slot.audiences import AudienceRegistry
from memory_core.slot.enforcement import MemoryCapabilityRegistration, MemoryHost, native_owner_v1_refusal
from memory_core.slot.legacy import MemorySearchResult, SessionVisibilityAuthorizer
from memory_core.contract.types import MemoryProviderOpenParams

RECORD_HIT = {"reference": {"providerId": "records", "id": "record"}, "excerpt": "a record"}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class RecordsProvider:
    def __init__(self, log: list[Any], *, on_health: Any = None) -> None:
        self.log = log
        self.on_health = on_health
        self.capabilities = {"sources": ["memory", "sessions"], "pagination": True, "candidates": [],
                             "projectFilter": False}

    async def search(self, request: Any) -> dict:
        self.log.append(("search", request.to_json() | {"minScore": request.min_score, "cursor": request.cursor}))
        return {"hits": [RECORD_HIT], "coverage": "partial", "nextCursor": "page2"}

    async def get(self, request: Any) -> dict:
        self.log.append(("get", request.to_json()))
        return {"status": "ok", "reference": request.reference.to_json(), "text": "record text"}

    async def health(self) -> dict:
        self.log.append(("health",))
        if self.on_health is not None:
            self.on_health()
        return {"status": "ready"}

    async def close(self) -> None:
        self.log.append(("close",))


class RecordsRuntime:
    def __init__(self, *, during_open: Any = None, on_health: Any = None, raises: str | None = None) -> None:
        self.log: list[Any] = []
        self.opened: list[MemoryProviderOpenParams] = []
        self.during_open = during_open
        self.on_health = on_health
        self.raises = raises

    async def open(self, params: MemoryProviderOpenParams) -> dict:
        self.opened.append(params)
        if self.raises:
            raise RuntimeError(self.raises)
        if self.during_open is not None:
            self.during_open()
        return {"provider": RecordsProvider(self.log, on_health=self.on_health)}


class LegacySpy:
    def __init__(self, manager: Any = None, hook: Any = None) -> None:
        self.acquired = 0
        self.manager = manager
        if hook is not None:
            self.authorize_search_hits = hook

    def get_memory_search_manager(self, **_: Any) -> dict:
        self.acquired += 1
        return {"manager": self.manager}


@pytest.fixture
def service(tmp_path: Path) -> MemoryService:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("- tomatoes grow best in full sun\n")
    cfg = MemoryCoreConfig(workspace=str(ws), state_dir=str(tmp_path / "state"))
    MemoryCore(config=cfg).index()
    svc = MemoryService(cfg)
    yield svc
    svc.close()


def use_owner(service: MemoryService, runtime: Any = None, *, legacy: Any = None, plugin_id: str = "records") -> None:
    kwargs: dict[str, Any] = {"runtime": legacy}
    if runtime is not None:
        kwargs["provider_runtime"] = runtime
    service.host = MemoryHost(MemoryCapabilityRegistration(plugin_id=plugin_id, **kwargs), audiences=AudienceRegistry())


def cli_session(scopes: tuple[str, ...] = ("operator.read",), role: str = "operator") -> p.Session:
    return p.Session(conn_id="cli-connection", role=role, scopes=scopes, auth_method="token")


async def call(service: MemoryService, method: str, params: Any, session: p.Session | None = None,
               scope: RequestScope | None = None) -> tuple[str, Any]:
    """What the server's ``_run`` does: the method-scope check, then the method; errors as (code, message)."""
    scope = scope or RequestScope(session=session or cli_session(), connection_open=lambda: True)
    try:
        if method in p.METHOD_SCOPES:
            p.check_method_scope(scope.session, method)
        return "ok", await MemoryMethods(service).call(method, params, scope)
    except p.GatewayError as err:
        return err.code, err.message


# --- acceptance 15 ------------------------------------------------------------------------------

def _happy_path(service: MemoryService) -> RecordsRuntime:
    runtime = RecordsRuntime()
    legacy = LegacySpy()
    use_owner(service, runtime, legacy=legacy)

    async def go() -> None:
        status, payload = await call(service, "memory.search",
                                     {"version": 2, "query": "record", "agentId": "main", "sources": ["memory"]})
        assert (status, payload) == ("ok", {"version": 2, "agentId": "main", "providerId": "records",
                                            "hits": [RECORD_HIT], "nextCursor": "page2", "coverage": "partial"})
        ref = {"providerId": "records", "id": "record"}
        assert await call(service, "memory.get", {"reference": ref, "from": 2, "lines": 10}) == (
            "ok", {"version": 2, "agentId": "main", "providerId": "records", "status": "ok", "reference": ref,
                   "text": "record text"})
        assert await call(service, "memory.status", {}) == (
            "ok", {"version": 2, "agentId": "main", "providerId": "records", "status": "ready"})

    run(go())
    assert runtime.log == [
        ("search", {"query": "record", "maxResults": 20, "sources": ["memory"], "minScore": None, "cursor": None}),
        ("close",),
        ("get", {"reference": {"providerId": "records", "id": "record"}, "from": 2, "lines": 10}),
        ("close",),
        ("health",),
        ("close",),
    ]
    assert legacy.acquired == 0
    assert [o.purpose for o in runtime.opened] == ["cli", "cli", "cli"]
    return runtime


def test_acceptance_15_gateway_v2_happy_path(service: MemoryService) -> None:
    _happy_path(service)


# --- acceptance 16 ------------------------------------------------------------------------------

INVALID = [
    ("memory.search", {"version": 2, "query": "  "}, "query must be a non-empty string"),
    ("memory.search", {"version": 2, "query": "q", "agentId": "ghost"}, "unknown agentId"),
    ("memory.search", {"version": 3, "query": "q"}, "unsupported memory version"),
    ("memory.search", {"version": 2, "query": "q", "sources": "memory"},
     "sources must be a non-empty array of memory or sessions"),
    ("memory.search", {"version": 2, "query": "q", "sources": ["unknown"]}, "sources must contain only memory or sessions"),
    ("memory.search", {"version": 2, "query": "q", "sources": []},
     "sources must be a non-empty array of memory or sessions"),
    ("memory.get", {"reference": {"id": "record"}}, "reference.providerId and reference.id are required"),
    ("memory.get", {"reference": {"providerId": "records", "id": "record"}, "from": -1},
     "from must be a positive integer"),
]


def test_acceptance_16_gateway_input_validation(service: MemoryService) -> None:
    runtime = RecordsRuntime()
    use_owner(service, runtime)

    async def go() -> list[tuple[str, Any]]:
        return [await call(service, method, params) for method, params, _ in INVALID]

    assert run(go()) == [("INVALID_REQUEST", message) for _, _, message in INVALID]
    assert runtime.opened == []


# --- acceptance 17 ------------------------------------------------------------------------------

def test_acceptance_17_gateway_scope_and_caller_checks(service: MemoryService) -> None:
    runtime = RecordsRuntime()
    use_owner(service, runtime)

    async def go() -> None:
        code, message = await call(service, "memory.get", {"reference": {"providerId": "records", "id": "r"}},
                                   cli_session(scopes=("operator.approvals",)))
        assert (code, message) == ("FORBIDDEN", "missing scope: operator.read") and "operator.read" in message
        # a caller that is not an authenticated operator connection is refused before open
        scope = RequestScope(session=p.Session(conn_id="", role="operator", scopes=("operator.read",),
                                               auth_method="none"), connection_open=lambda: True)
        assert await call(service, "memory.status", {}, scope=scope) == (
            "UNAVAILABLE", "Memory provider reads require an authenticated operator connection")
        assert runtime.opened == []
        assert (await call(service, "memory.status", {}))[0] == "ok"

    run(go())
    authority = runtime.opened[0].context.authority
    assert authority.to_json() == {"kind": "operator", "scopes": ["operator.read"], "connId": "cli-connection"}


# --- acceptance 18 ------------------------------------------------------------------------------

def test_acceptance_18_gateway_currency(service: MemoryService) -> None:
    async def go() -> None:
        # request abort during open: UNAVAILABLE, search never called, close once
        scope = RequestScope(session=cli_session(), connection_open=lambda: True)
        runtime = RecordsRuntime(during_open=lambda: scope.signal.abort("request aborted"))
        use_owner(service, runtime)
        assert await call(service, "memory.search", {"version": 2, "query": "q"}, scope=scope) == (
            "UNAVAILABLE", "request aborted")
        assert runtime.log == [("close",)]
        # connection closed during open
        open_flag = [True]
        scope = RequestScope(session=cli_session(), connection_open=lambda: open_flag[0])
        runtime = RecordsRuntime(during_open=lambda: open_flag.__setitem__(0, False))
        use_owner(service, runtime)
        assert await call(service, "memory.search", {"version": 2, "query": "q"}, scope=scope) == (
            "UNAVAILABLE", "Memory request authority is no longer active")
        assert runtime.log == [("close",)]
        # a late health result after the caller lost authority is not released
        open_flag = [True]
        scope = RequestScope(session=cli_session(), connection_open=lambda: open_flag[0])
        runtime = RecordsRuntime(on_health=lambda: open_flag.__setitem__(0, False))
        use_owner(service, runtime)
        assert await call(service, "memory.status", {}, scope=scope) == (
            "UNAVAILABLE", "Memory request authority is no longer active")
        assert runtime.log == [("health",), ("close",)]

    run(go())


# --- acceptance 19 / checklist 44 ---------------------------------------------------------------

def test_acceptance_19_v1_with_a_native_owner(service: MemoryService) -> None:
    records = MemoryHost(MemoryCapabilityRegistration(plugin_id="records", provider_runtime=RecordsRuntime()))
    assert native_owner_v1_refusal(records) == (
        'memory plugin "records" uses the provider runtime; retry memory.search with version: 2')
    assert native_owner_v1_refusal(MemoryHost(MemoryCapabilityRegistration(plugin_id="legacy",
                                                                            runtime=LegacySpy()))) is None
    # memory-core's own server answers unversioned and v1 requests with the 2026.9.6 shape (engine.md D8)
    runtime = RecordsRuntime()
    use_owner(service, runtime)

    async def go() -> list[Any]:
        return [await call(service, "memory.search", {"query": "tomatoes", **v}) for v in ({}, {"version": 1})]

    for status, payload in run(go()):
        assert status == "ok" and set(payload) == {"agentId", "provider", "searchMode", "results"}
        assert (payload["agentId"], payload["provider"], payload["searchMode"]) == ("main", "none", "fts-only")
        assert [r["path"] for r in payload["results"]] == ["MEMORY.md"]
    assert runtime.opened == []


def test_checklist_44_unversioned_and_v1_keep_file_shape(service: MemoryService) -> None:
    test_acceptance_19_v1_with_a_native_owner(service)

    async def go() -> tuple[str, Any]:
        return await call(service, "memory.search", {"query": "tomatoes", "version": "2"})

    assert run(go()) == ("INVALID_REQUEST", "unsupported memory version")


# --- acceptance 20 ------------------------------------------------------------------------------

OWN = {"path": "sessions/main/own.jsonl", "startLine": 1, "endLine": 1, "score": 0.9, "snippet": "own",
       "source": "sessions"}
THEIRS = {"path": "sessions/other/theirs.jsonl", "startLine": 1, "endLine": 1, "score": 0.8, "snippet": "theirs",
          "source": "sessions"}
MEMORY = {"path": "MEMORY.md", "startLine": 1, "endLine": 1, "score": 0.7, "snippet": "memory", "source": "memory"}


class RawManager:
    closed = 0

    def search(self, query: str, opts: dict) -> list[dict]:
        return [OWN, THEIRS, MEMORY]

    def close(self) -> None:
        self.closed += 1

    def read_file(self, **_: Any) -> dict:
        return {"status": "not_found", "text": "", "path": ""}

    def status(self) -> dict:
        return {"backend": "builtin", "provider": "none"}


def _transcript(hit: MemorySearchResult) -> tuple[str, str] | None:
    parts = hit.path.split("/")
    return (parts[1], f"agent:{parts[1]}:{parts[2]}") if len(parts) == 3 else None


def test_acceptance_20_legacy_owner_through_v2_vs_v1(service: MemoryService) -> None:
    authorizer = SessionVisibilityAuthorizer(transcript_of=_transcript,
                                             agent_of_session=lambda key: key.split(":")[1])
    legacy = LegacySpy(RawManager(), hook=authorizer)
    use_owner(service, legacy=legacy, plugin_id="memory-core")

    async def go() -> Any:
        return await call(service, "memory.search", {"version": 2, "query": "q"})

    status, payload = run(go())
    assert status == "ok" and payload["providerId"] == "memory-core"
    assert [h["reference"]["id"] for h in payload["hits"]] == ["sessions/main/own.jsonl", "MEMORY.md"]
    # v1 with a legacy owner (provider-runtime.md §3.3): the owner's manager, opened with purpose
    # "cli" and closed after, answers with every raw result (another agent's transcript included)

    async def v1() -> Any:
        return await call(service, "memory.search", {"query": "tomatoes"})

    acquired, closed = legacy.acquired, legacy.manager.closed
    status, payload = run(v1())
    assert status == "ok" and set(payload) == {"agentId", "provider", "searchMode", "results"}
    assert (payload["agentId"], payload["provider"], payload["searchMode"]) == ("main", "none", "fts-only")
    assert [r["path"] for r in payload["results"]] == [
        MemorySearchResult.model_validate(h).path for h in (OWN, THEIRS, MEMORY)]
    assert (legacy.acquired, legacy.manager.closed) == (acquired + 1, closed + 1)


# --- acceptance 21 ------------------------------------------------------------------------------

def test_acceptance_21_provider_denial_at_open_is_surfaced(service: MemoryService) -> None:
    runtime = RecordsRuntime(raises="provider denied")
    legacy = LegacySpy(RawManager())
    use_owner(service, runtime, legacy=legacy)

    async def go() -> tuple[str, Any]:
        return await call(service, "memory.search", {"version": 2, "query": "q"})

    assert run(go()) == ("UNAVAILABLE", "provider denied")
    assert legacy.acquired == 0


# --- checklist 43 -------------------------------------------------------------------------------

def test_checklist_43_gateway_v2_get_status_host_duties(service: MemoryService) -> None:
    runtime = _happy_path(service)  # purpose cli, response shape, lease closed after every request
    assert [o.context.authority.kind for o in runtime.opened] == ["operator"] * 3

    async def go() -> list[Any]:
        no_scope = cli_session(scopes=())
        out = [await call(service, m, {"version": 2, "query": "q"}, no_scope)
               for m in ("memory.search", "memory.get", "memory.status")]
        out.append(await call(service, "memory.search", {"version": 2, "query": ""}))
        return out

    refused = run(go())
    assert refused[:3] == [("FORBIDDEN", "missing scope: operator.read")] * 3
    assert refused[3] == ("INVALID_REQUEST", "query must be a non-empty string")
    assert len(runtime.opened) == 3  # nothing more was opened
    # a provider failure (here memory-core rejecting a forged cursor) maps to UNAVAILABLE
    async def cursor_to_memory_core() -> tuple[str, Any]:
        service.host = MemoryHost(MemoryCapabilityRegistration(plugin_id="memory-core",
                                                               provider_runtime=service.runtime))
        return await call(service, "memory.search", {"version": 2, "query": "tomatoes", "cursor": "forged.cursor"})

    code, message = run(cursor_to_memory_core())
    assert code == "UNAVAILABLE" and message.startswith("memory-core: the cursor is not a valid memory-core cursor")


def test_gateway_v2_against_memory_core_provider(service: MemoryService) -> None:
    async def go() -> tuple[Any, Any]:
        search = await call(service, "memory.search", {"version": 2, "query": "tomatoes", "minScore": 0})
        ref = search[1]["hits"][0]["reference"]
        got = await call(service, "memory.get", {"reference": ref})
        return search, got

    (status, payload), (gstatus, got) = run(go())
    assert status == "ok" and payload["providerId"] == "memory-core" and payload["coverage"] == "complete"
    assert [h["excerpt"] for h in payload["hits"]] == ["- tomatoes grow best in full sun\n"]
    assert gstatus == "ok" and got["text"] == "- tomatoes grow best in full sun\n"
    assert json.dumps(got).count(str(service.config.state_dir)) == 0
