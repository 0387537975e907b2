"""The memory methods over a real socket against real indexes of two agents (one config).

v1 (unversioned / ``version: 1``) is the 2026.9.6 file-shaped payload; ``version: 2``, ``memory.get``
and ``memory.status`` are the neutral contract through host enforcement and the memory-core
provider (provider-runtime.md §4.2, gateway-protocol.md §6-7).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading

import pytest

from memory_core.config import load_config
from memory_core.core import MemoryCore
from memory_core.gateway import protocol as p
from memory_core.gateway.client import GatewayCallError, GatewayClient
from memory_core.gateway.handlers import MemoryService
from memory_core.gateway.server import GatewayServer
from tests.gateway_fixtures import OPS_MD, TOKEN, make_workspace

pytestmark = pytest.mark.timeout(120)

COFFEE_SNIPPET = "# Memory\n\n## Preferences\n- The user prefers dark roast coffee, brewed with an AeroPress."
HEX64 = re.compile(r"^[0-9a-f]{64}$")


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    base = tmp_path_factory.mktemp("gw")
    ws = make_workspace(base)
    ops = make_workspace(base, "ops", {"MEMORY.md": OPS_MD})
    cfg = load_config(None, env={"MEMORY_CORE_HOME": str(base / "state")},
                      overrides={"workspace": str(ws), "agents": {"ops": {"workspace": str(ops)}}})
    for agent in ("main", "ops"):
        with MemoryCore(agent_id=agent, config=cfg) as core:
            core.index()
    return cfg


def call_all(config, calls, *, scopes=None):
    """Run ``(method, params)`` calls on one connection; each result is a payload or a GatewayCallError."""
    service = MemoryService(config)

    async def main():
        async with GatewayServer(service, auth=p.AuthSettings("token", TOKEN)) as server:
            async with await GatewayClient.open(server.url, token=TOKEN, scopes=scopes) as client:
                out = []
                for method, params in calls:
                    if callable(params):  # built from the earlier results (e.g. a nextCursor)
                        params = params(out)
                    try:
                        out.append(await client.call(method, params))
                    except GatewayCallError as err:
                        out.append(err)
                return out

    try:
        return asyncio.run(main())
    finally:
        service.close()


def test_v1_search_is_the_2026_9_6_shape(config):
    unversioned, v1 = call_all(config, [("memory.search", {"query": "coffee"}),
                                        ("memory.search", {"query": "coffee", "version": 1})])
    assert unversioned == v1
    results = unversioned.pop("results")
    assert unversioned == {"agentId": "main", "provider": "none", "searchMode": "fts-only"}
    assert [{k: r[k] for k in ("path", "startLine", "endLine", "score", "snippet", "source")} for r in results] == [
        {"path": "MEMORY.md", "startLine": 1, "endLine": 4, "score": 1.0, "snippet": COFFEE_SNIPPET,
         "source": "memory"}]
    assert set(results[0]) == {"path", "startLine", "endLine", "score", "textScore", "snippet", "source",
                               "provenance"}
    assert results[0]["provenance"]["originClass"] == "agent"


def test_v1_no_match_and_clamps(config):
    none, clamped = call_all(config, [("memory.search", {"query": "zzzqqq"}),
                                      ("memory.search", {"query": "coffee", "maxResults": 0.4, "minScore": 0})])
    assert none == {"agentId": "main", "provider": "none", "searchMode": "fts-only", "results": []}
    assert [r["path"] for r in clamped["results"]] == ["MEMORY.md"]


def test_v2_search_get_and_status(config):
    page, status = call_all(config, [("memory.search", {"query": "coffee", "version": 2}),
                                     ("memory.status", {"version": 2})])
    hits = page.pop("hits")
    assert page == {"version": 2, "agentId": "main", "providerId": "memory-core", "coverage": "complete"}
    assert len(hits) == 1
    hit = hits[0]
    ref = hit["reference"]
    assert ref["providerId"] == "memory-core" and HEX64.match(ref["id"]) and HEX64.match(ref["revision"])
    assert (hit["excerpt"], hit["score"], hit["source"]) == (COFFEE_SNIPPET, 1.0, "memory")
    assert hit["citations"] == [{"label": "MEMORY.md#L1-L4", "reference": ref, "startLine": 1, "endLine": 4}]
    assert hit["automaticRecall"] == {"eligible": True}
    assert status == {"version": 2, "agentId": "main", "providerId": "memory-core", "status": "ready",
                      "details": {"backend": "memory-core", "provider": "none", "sources": ["memory"],
                                  "files": 2, "chunks": 4, "revision": status["details"]["revision"]}}

    whole, part, stale = call_all(config, [
        ("memory.get", {"reference": ref}),
        ("memory.get", {"reference": ref, "from": 2, "lines": 2}),
        ("memory.get", {"reference": {**ref, "revision": "0" * 64}}),
    ])
    assert (whole["status"], whole["text"], whole["reference"], whole["from"], whole["lines"]) == (
        "ok", COFFEE_SNIPPET, ref, 1, 4)
    assert (part["text"], part["from"], part["lines"], part["truncated"], part["nextFrom"]) == (
        "\n## Preferences\n", 2, 2, True, 4)
    assert stale == {"version": 2, "agentId": "main", "providerId": "memory-core", "status": "not_found"}


def test_many_agents_from_one_config(config):
    v1, v2, unknown, unknown_v2 = call_all(config, [
        ("memory.search", {"query": "deploy window", "agentId": "ops"}),
        ("memory.search", {"query": "deploy window", "agentId": "OPS", "version": 2}),
        ("memory.search", {"query": "deploy", "agentId": "nope"}),
        ("memory.status", {"agentId": "nope"}),
    ])
    assert v1["agentId"] == "ops" and [r["path"] for r in v1["results"]] == ["MEMORY.md"]
    assert v1["results"][0]["snippet"] == "# Ops agent\nThe deploy window is Tuesday at 14:00 UTC.\n"
    assert v2["agentId"] == "ops" and [h["citations"][0]["label"] for h in v2["hits"]] == ["MEMORY.md#L1-L3"]
    assert (unknown.code, unknown.message) == ("INVALID_REQUEST", "unknown agentId")
    assert (unknown_v2.code, unknown_v2.message) == ("INVALID_REQUEST", "unknown agentId")


def test_foreign_reference_and_path_traversal_never_read_anything(config):
    foreign, traversal, file_id = call_all(config, [
        ("memory.get", {"reference": {"providerId": "other", "id": "record"}}),
        ("memory.get", {"reference": {"providerId": "memory-core", "id": "../../etc/passwd"}}),
        ("memory.get", {"reference": {"providerId": "memory-core", "id": "MEMORY.md"}}),
    ])
    assert (foreign.code, foreign.message) == ("UNAVAILABLE", "memory reference belongs to a different provider")
    assert traversal == {"version": 2, "agentId": "main", "providerId": "memory-core", "status": "not_found"}
    assert file_id == {"version": 2, "agentId": "main", "providerId": "memory-core", "status": "not_found"}


def test_v2_with_write_scope_reads_and_pagination_round_trips(config):
    search = {"query": "Falcon", "version": 2, "maxResults": 1, "minScore": 0}
    first, second = call_all(config, [
        ("memory.search", search),
        ("memory.search", lambda out: {**search, "cursor": out[0]["nextCursor"]}),
    ], scopes=["operator.write"])
    assert [h["citations"][0]["label"] for h in first["hits"]] == ["MEMORY.md#L7-L11"]
    assert first["coverage"] == "complete" and isinstance(first["nextCursor"], str)
    assert [h["citations"][0]["label"] for h in second["hits"]] == ["memory/2026-09-01.md#L1-L4"]
    assert "nextCursor" not in second


def test_v2_get_of_two_lines_ending_in_a_blank_one_is_the_text_the_cli_get_prints(config, capsys, monkeypatch):
    """Line 2 of the hit is blank: gateway v2 `memory.get` with `lines: 2` gives both lines, with
    the newline that ends each, the same text as `memory-core get MEMORY.md --lines 2`."""
    from memory_core.cli import main

    (page,) = call_all(config, [("memory.search", {"query": "coffee", "version": 2})])
    ref = page["hits"][0]["reference"]
    (two,) = call_all(config, [("memory.get", {"reference": ref, "lines": 2})])
    assert (two["text"], two["from"], two["lines"], two["truncated"], two["nextFrom"]) == ("# Memory\n\n", 1, 2,
                                                                                          True, 3)
    monkeypatch.setenv("MEMORY_CORE_HOME", config.state_dir)  # the same index
    assert main(["get", "MEMORY.md", "--lines", "2", "--workspace", config.workspace]) == 0
    out = capsys.readouterr()
    assert (out.out, out.err) == (two["text"], "note: more lines follow; use --from 3 to continue\n")


def test_paused_index_is_unavailable_with_the_fix(tmp_path):
    ws = make_workspace(tmp_path)
    env = {"MEMORY_CORE_HOME": str(tmp_path / "state")}
    with MemoryCore(config=load_config(None, env=env, overrides={"workspace": str(ws)})) as core:
        core.index()
    changed = load_config(None, env=env, overrides={"workspace": str(ws), "chunking": {"tokens": 200}})
    v1, v2 = call_all(changed, [("memory.search", {"query": "coffee"}),
                                ("memory.search", {"query": "coffee", "version": 2})])
    fix = ("memory search paused: the index was built with other settings than the configuration's (index: "
           "chunking.tokens 400; configuration: chunking.tokens 200); set `chunking.tokens = 400` in the config "
           "to search it as built, or run `memory-core index` to rebuild it with the configuration")
    assert (v1.code, v1.message) == ("UNAVAILABLE", f"memory search failed: {fix}")
    assert (v2.code, v2.message) == ("UNAVAILABLE", fix)


def test_a_request_whose_connection_closed_never_opens_the_provider(config):
    from memory_core.gateway.handlers import MemoryMethods, RequestScope

    service = MemoryService(config)
    session = p.Session("conn-1", "operator", ("operator.read",), "token")
    closed = RequestScope(session=session, connection_open=lambda: False)
    aborted = RequestScope(session=session, connection_open=lambda: True)
    aborted.signal.abort("connection closed")
    methods = MemoryMethods(service)

    async def main():
        out = []
        for scope in (closed, aborted):
            with pytest.raises(p.GatewayError) as err:
                await methods.call("memory.search", {"query": "coffee", "version": 2}, scope)
            out.append((err.value.code, err.value.message, scope.open))
        return out

    try:
        assert asyncio.run(main()) == [("UNAVAILABLE", "Memory request authority is no longer active", False),
                                       ("UNAVAILABLE", "connection closed", False)]
        assert service.runtime._cores == {}  # nothing was opened for either request
    finally:
        service.close()


def test_node_role_cannot_read_memory(config):
    service = MemoryService(config)

    async def main():
        async with GatewayServer(service, auth=p.AuthSettings("token", TOKEN)) as server:
            async with await GatewayClient.open(server.url, token=TOKEN, role="node") as client:
                with pytest.raises(GatewayCallError) as err:
                    await client.call("memory.status", {})
                return err.value

    try:
        err = asyncio.run(main())
    finally:
        service.close()
    assert (err.code, err.message) == ("FORBIDDEN", "unauthorized role: node")


def test_doctor_memory_status_is_the_native_owners_health(config):
    main, ops, bad, unknown = call_all(config, [("doctor.memory.status", {}),
                                                ("doctor.memory.status", {"agentId": "OPS"}),
                                                ("doctor.memory.status", {"agentId": 7}),
                                                ("doctor.memory.status", {"agentId": "nope"})])
    embedding = {"ok": False, "checked": False,
                 "error": "memory embedding readiness not checked; run `openclaw memory status --deep` to probe"}
    details = main["health"].pop("details")
    assert main == {"agentId": "main", "provider": "memory-core", "health": {"status": "ready"},
                    "embedding": embedding}
    assert (details["backend"], details["provider"], details["sources"]) == ("memory-core", "none", ["memory"])
    assert str(config.workspace) not in json.dumps(details) and config.state_dir not in json.dumps(details)
    assert (ops["agentId"], ops["health"]["status"]) == ("ops", "ready")
    assert (bad.code, bad.message) == ("INVALID_REQUEST", "agentId must be a string")
    assert (unknown.code, unknown.message) == ("INVALID_REQUEST", 'unknown agent id "nope"')


def test_doctor_memory_status_reports_a_failing_provider_as_unavailable(config):
    paused = config.model_copy(update={"chunking": config.chunking.model_copy(update={"tokens": 123})})
    (status,) = call_all(paused, [("doctor.memory.status", {})])
    assert status["health"]["status"] == "unavailable"
    assert status["health"]["message"] == (  # the paused search's own message: what differs, both fixes
        "memory search paused: the index was built with other settings than the configuration's (index: "
        "chunking.tokens 400; configuration: chunking.tokens 123); set `chunking.tokens = 400` in the config to "
        "search it as built, or run `memory-core index` to rebuild it with the configuration")


def test_flush_plan_method(config):
    new_york = config.model_copy(update={"user_timezone": "America/New_York"})
    plan, bad_now, bad_window = call_all(new_york, [
        ("memory.flushPlan", {"nowMs": 1764561600000, "contextWindowTokens": 10000}),
        ("memory.flushPlan", {"agentId": "ops", "nowMs": "soon"}),
        ("memory.flushPlan", {"contextWindowTokens": 0}),
    ])
    assert plan["agentId"] == "main"
    assert {k: v for k, v in plan["plan"].items() if "rompt" not in k} == {
        "softThresholdTokens": 3750, "forceFlushTranscriptBytes": 2097152, "reserveTokensFloor": 2500,
        "relativePath": "memory/2025-11-30.md"}
    assert plan["plan"]["prompt"].endswith("Current time: Sunday, November 30th, 2025 - 11:00 PM (America/New_York)\n"
                                           "Reference UTC: 2025-12-01 04:00 UTC")
    assert (bad_now.code, bad_now.message) == ("INVALID_REQUEST", "nowMs must be a finite number (epoch milliseconds)")
    assert bad_window.message == "contextWindowTokens must be a positive integer"
    off = config.model_copy(update={"compaction": config.compaction.model_copy(update={
        "memory_flush": config.compaction.memory_flush.model_copy(update={"enabled": False})})})
    (none,) = call_all(off, [("memory.flushPlan", {})])
    assert none == {"agentId": "main", "plan": None}


def test_v1_keyword_search_runs_on_the_event_loop_with_the_threads_answers(config, monkeypatch):
    """A warm keyword-only engine searches on the loop (the loop awaits the worker's reply, no thread
    hop); its answers are the thread path's, byte for byte."""
    from tests.helpers import wait_for

    queries = [{"query": "coffee"}, {"query": "roast coffee AeroPress", "maxResults": 2},
               {"query": "nothing matches this"}, {"query": "coffee", "minScore": 0.99}]
    on_loop = []
    search_async = MemoryCore.search_async

    async def spy(self, *args, **kwargs):
        on_loop.append(threading.current_thread() is threading.main_thread())
        return await search_async(self, *args, **kwargs)

    monkeypatch.setattr(MemoryCore, "search_async", spy)
    allowed = MemoryCore.searches_on_loop
    loop_allowed = [False]
    monkeypatch.setattr(MemoryCore, "searches_on_loop", lambda self: loop_allowed[0] and allowed(self))

    def answers(loop_path: bool):
        loop_allowed[0] = loop_path
        service = MemoryService(config)
        try:
            core = service.core("main")
            core.search("coffee")  # bootstraps freshness: the steps before the task only read state now
            assert wait_for(lambda: not loop_path or core.searches_on_loop())

            async def main():
                async with GatewayServer(service, auth=p.AuthSettings("token", TOKEN)) as server:
                    async with await GatewayClient.open(server.url, token=TOKEN) as client:
                        return [json.dumps(await client.call("memory.search", q)) for q in queries]

            return asyncio.run(main())
        finally:
            service.close()

    on_thread = answers(False)
    assert on_loop == []
    assert answers(True) == on_thread
    assert on_loop == [True] * len(queries)
    assert json.loads(on_thread[0])["results"][0]["path"] == "MEMORY.md"
