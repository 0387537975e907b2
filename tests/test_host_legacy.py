"""The legacy adapter and session-hit authorization (provider-runtime.md §3.4-3.5, §5):
acceptance cases 11-14 and checklist items 41-42."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from memory_core.errors import ProviderContractError
from memory_core.slot.audiences import AudienceRegistry
from memory_core.slot.enforcement import MemoryCapabilityRegistration, MemoryHost
from memory_core.slot.legacy import MemorySearchResult, SessionVisibilityAuthorizer
from memory_core.contract.types import (
    ConversationRecallContext,
    HostAuthority,
    MemoryCallerContext,
    MemoryProviderCapabilities,
    MemoryProviderOpenParams,
    OperatorAuthority,
    SessionAuthority,
)
from host_facades.chunking.pipeline import strip_annotation_carriers

PID = "memory-core"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def result(path: str, source: str = "memory", **extra: Any) -> dict[str, Any]:
    return {"path": path, "startLine": 1, "endLine": 2, "score": 0.9, "snippet": f"snippet of {path}",
            "source": source, **extra}


OWN_SESSION = result("sessions/main/own.jsonl", "sessions")
OTHER_SESSION = result("sessions/other/theirs.jsonl", "sessions")
MEMORY_MD = result("MEMORY.md", provenance={"originClass": "owner", "sessionKind": "unknown", "observedAt": 1})


@dataclass(frozen=True)
class FileManager:
    """A frozen class-instance manager (its receiver must be kept)."""

    results: tuple[dict[str, Any], ...] = (OWN_SESSION, OTHER_SESSION, MEMORY_MD)
    text: str = "l1\nl2\nl3\nl4\nl5\nl6\nl7"
    status_value: dict[str, Any] = field(default_factory=lambda: {"backend": "builtin", "provider": "none"})
    legacy_read: bool = False
    log: list[Any] = field(default_factory=list)

    def search(self, query: str, opts: dict[str, Any]) -> list[dict[str, Any]]:
        self.log.append(("search", query, opts))
        return list(self.results)

    def read_file(self, *, rel_path: str, from_: int | None = None, lines: int | None = None) -> dict[str, Any]:
        self.log.append(("read", rel_path, from_, lines))
        if rel_path != "MEMORY.md":
            return {"status": "not_found", "text": "", "path": rel_path}
        all_lines = self.text.split("\n")
        start = from_ or 1
        count = lines or len(all_lines)
        sel = all_lines[start - 1:start - 1 + count]
        end = start - 1 + len(sel)
        out: dict[str, Any] = {"text": "\n".join(sel), "path": rel_path, "from": start, "lines": len(sel)}
        if end < len(all_lines):
            out.update(truncated=True, nextFrom=end + 1)
        if not self.legacy_read:
            out["status"] = "ok"
        return out

    def status(self) -> dict[str, Any]:
        return dict(self.status_value)

    def close(self) -> None:
        self.log.append("close")


class LegacyRuntime:
    def __init__(self, manager: Any, hook: Any = None) -> None:
        self.manager = manager
        self.hook_calls: list[dict[str, Any]] = []
        if hook is not None:
            def authorize_search_hits(**kwargs: Any) -> Any:
                self.hook_calls.append(kwargs)
                return hook(**kwargs)
            self.authorize_search_hits = authorize_search_hits

    def get_memory_search_manager(self, *, cfg: Any, agent_id: str, purpose: Any) -> dict[str, Any]:
        return {"manager": self.manager}


def caller(authority: Any) -> MemoryCallerContext:
    return MemoryCallerContext(authority=authority, assert_current=lambda: None)


OPERATOR = OperatorAuthority(scopes=("operator.read",), conn_id="c1")
SESSION = SessionAuthority(session_key="agent:main:main", sandboxed=True)


async def open_legacy(runtime: LegacyRuntime, authority: Any = OPERATOR, purpose: Any = None) -> Any:
    host = MemoryHost(MemoryCapabilityRegistration(plugin_id=PID, runtime=runtime), audiences=AudienceRegistry())
    res = await host.open(MemoryProviderOpenParams(agent_id="main", context=caller(authority), purpose=purpose))
    assert res.adapter == "legacy" and res.provider_id == PID
    return res.provider


def pass_all(**kwargs: Any) -> list[Any]:
    return kwargs["hits"]


# --- acceptance 11 ------------------------------------------------------------------------------

def test_acceptance_11_legacy_adapter_shape() -> None:
    async def go() -> None:
        bound = await open_legacy(LegacyRuntime(FileManager()))
        assert bound.capabilities == MemoryProviderCapabilities(sources=("memory", "sessions"), pagination=False,
                                                                candidates=(), project_filter=True)
        assert bound.capabilities.to_json() == {"sources": ["memory", "sessions"], "pagination": False,
                                                "candidates": [], "projectFilter": True}
        assert not hasattr(bound, "candidates")
        with pytest.raises(Exception):
            bound.capabilities.sources = ("memory",)  # type: ignore[misc]
        assert isinstance(bound.capabilities.sources, tuple) and isinstance(bound.capabilities.candidates, tuple)
        # without a hook every session hit is withheld
        page = await bound.search({"query": "q"})
        assert [h.reference.id for h in page.hits] == ["MEMORY.md"]
        # with the hook, a session caller passes its own key, sandboxed, and no trusted scope
        runtime = LegacyRuntime(FileManager(), hook=pass_all)
        session_bound = await open_legacy(runtime, SESSION)
        await session_bound.search({"query": "q"})
        call = runtime.hook_calls[0]
        assert (call["requester_session_key"], call["sandboxed"], call["trusted_agent_scope"]) == (
            "agent:main:main", True, False)

    run(go())


# --- acceptance 12 ------------------------------------------------------------------------------

def test_acceptance_12_legacy_eligibility() -> None:
    manager = FileManager(results=(
        result("sessions/main/own.jsonl", "sessions", provenance={"originClass": "owner"}),
        result("memory/projects.md", projectKey=";", provenance={"originClass": "owner"}),
        result("MEMORY.md", provenance={"originClass": "owner"}, triggers="deploy", importance=8),
    ))

    async def go() -> list[Any]:
        bound = await open_legacy(LegacyRuntime(manager, hook=pass_all))
        return (await bound.search({"query": "q"})).hits

    hits = run(go())
    assert [h.automatic_recall.eligible for h in hits] == [False, False, True]
    assert hits[2].to_json() == {
        "reference": {"providerId": PID, "id": "MEMORY.md", "fragment": "L1-L2"},
        "excerpt": "snippet of MEMORY.md", "score": 0.9, "source": "memory",
        "citations": [{"label": "MEMORY.md#L1-L2", "reference": {"providerId": PID, "id": "MEMORY.md",
                                                                "fragment": "L1-L2"}, "startLine": 1, "endLine": 2}],
        "automaticRecall": {"eligible": True, "triggers": "deploy", "importance": 8.0},
    }
    assert hits[1].automatic_recall.project_keys == []


# --- acceptance 13 ------------------------------------------------------------------------------

def test_acceptance_13_legacy_health_redaction() -> None:
    status = {"backend": "builtin", "provider": "none", "files": 3, "workspaceDir": "/home/u/ws",
              "dbPath": "/home/u/.memory-core/main.sqlite", "extraPaths": ["/home/u/notes"],
              "vector": {"enabled": True, "extensionPath": "/usr/lib/vec0.so"}}

    async def go() -> dict[str, Any]:
        bound = await open_legacy(LegacyRuntime(FileManager(status_value=status)))
        return (await bound.health()).to_json()

    assert run(go()) == {"status": "ready", "details": {"legacy": {"backend": "builtin", "provider": "none",
                                                                   "files": 3, "vector": {"enabled": True}}}}
    degraded = dict(status, lastSyncError="disk full")
    health = run(open_legacy(LegacyRuntime(FileManager(status_value=degraded)))).health
    assert run(health()).to_json()["status"] == "degraded"
    assert run(health()).message == "disk full"


# --- acceptance 14 ------------------------------------------------------------------------------

def test_acceptance_14_legacy_reads_and_receivers() -> None:
    async def go() -> None:
        manager = FileManager(legacy_read=True)
        bound = await open_legacy(LegacyRuntime(manager))
        got = await bound.get({"reference": {"providerId": PID, "id": "MEMORY.md"}, "from": 4, "lines": 2})
        assert got.to_json() == {"status": "ok", "reference": {"providerId": PID, "id": "MEMORY.md"},
                                 "text": "l4\nl5", "truncated": True, "from": 4, "lines": 2, "nextFrom": 6}
        assert (await bound.get({"reference": {"providerId": PID, "id": "virtual:record"}})).to_json() == {
            "status": "not_found"}
        assert manager.log[-1] == ("read", "virtual:record", None, None)  # virtual path kept verbatim

        class NoSearch:
            def read_file(self, **_: Any) -> Any:
                return {"status": "not_found"}

            def status(self) -> dict:
                return {}

        class NoRead:
            def search(self, query: str, opts: Any) -> list:
                return []

            def status(self) -> dict:
                return {}

        with pytest.raises(ProviderContractError) as info:
            await (await open_legacy(LegacyRuntime(NoSearch()))).search({"query": "q"})
        assert str(info.value) == "memory runtime manager must implement search"
        with pytest.raises(ProviderContractError) as info:
            await (await open_legacy(LegacyRuntime(NoRead()))).get({"reference": {"providerId": PID, "id": "x"}})
        assert str(info.value) == "memory runtime manager must implement readFile"

        cached = FileManager()
        lease = await open_legacy(LegacyRuntime(cached))  # default purpose
        await lease.close()
        assert "close" not in cached.log
        transient = FileManager()
        lease = await open_legacy(LegacyRuntime(transient), purpose="status")
        await lease.close()
        await lease.close()
        assert transient.log.count("close") == 1

    run(go())


def test_legacy_search_forwards_options_and_strips_carriers() -> None:
    manager = FileManager(results=(result("MEMORY.md", snippet="- fact <!-- importance: 9 -->\n<!-- trigger: x -->\nmore"),))

    async def go() -> Any:
        bound = await open_legacy(LegacyRuntime(manager), SESSION)
        return await bound.search({"query": "fact", "maxResults": 3, "minScore": 0.2, "sources": ["memory"],
                                   "activeProjectKeys": ["repo"]})

    page = run(go())
    # one stripper for indexing and excerpts (upstream's stripMemoryAnnotationCarriers): an inline
    # carrier goes too, and the trailing space it leaves
    assert page.hits[0].excerpt == "- fact\n\nmore"
    assert manager.log[0] == ("search", "fact", {"max_results": 3, "min_score": 0.2, "sources": ["memory"],
                                                 "active_project_keys": ["repo"], "session_key": "agent:main:main"})
    assert strip_annotation_carriers("a\n<!-- PROJECT: repo -->  \nb  ") == "a\n\nb"


# --- checklist 41 / 42 --------------------------------------------------------------------------

def test_checklist_41_legacy_hits_filtered_through_authorize_search_hits() -> None:
    recall = ConversationRecallContext(anchor_session_key="agent:main:main", scope="same-agent-private",
                                       corpus="sessions")
    runtime = LegacyRuntime(FileManager(), hook=pass_all)

    async def go() -> None:
        await (await open_legacy(runtime, HostAuthority(operation="memory-wiki.query"))).search({"query": "q"})
        await (await open_legacy(runtime, SessionAuthority(session_key="agent:main:main", sandboxed=False,
                                                           conversation_recall=recall))).search({"query": "q"})
        no_hook = await open_legacy(LegacyRuntime(FileManager()), SESSION)
        assert [h.source for h in (await no_hook.search({"query": "q"})).hits] == ["memory"]

    run(go())
    host_call, session_call = runtime.hook_calls
    assert (host_call["requester_session_key"], host_call["sandboxed"], host_call["trusted_agent_scope"],
            host_call["conversation_recall"], host_call["agent_id"]) == (None, False, True, None, "main")
    assert (session_call["trusted_agent_scope"], session_call["conversation_recall"]) == (False, recall)


def test_checklist_42_legacy_adapter_contract() -> None:
    test_acceptance_11_legacy_adapter_shape()
    test_acceptance_13_legacy_health_redaction()
    test_acceptance_14_legacy_reads_and_receivers()


# --- memory-core's session visibility authorizer (§5) ------------------------------------------

def transcript_of(hit: MemorySearchResult) -> tuple[str, str] | None:
    parts = hit.path.split("/")
    if len(parts) != 3 or parts[0] != "sessions":
        return None
    return parts[1], f"agent:{parts[1]}:{parts[2].removesuffix('.jsonl')}"


AUTH = SessionVisibilityAuthorizer(transcript_of=transcript_of,
                                   agent_of_session=lambda key: key.split(":")[1] if key.startswith("agent:") else None,
                                   is_private=lambda key: key == "agent:main:main")
HITS = [MemorySearchResult.model_validate(h) for h in (OWN_SESSION, OTHER_SESSION, MEMORY_MD)]


def paths(hits: list[MemorySearchResult]) -> list[str]:
    return [h.path for h in hits]


def test_authorizer_trusted_agent_scope_keeps_own_transcripts_only() -> None:
    assert paths(AUTH(agent_id="main", requester_session_key=None, sandboxed=False, hits=HITS,
                      trusted_agent_scope=True)) == ["sessions/main/own.jsonl", "MEMORY.md"]


def test_authorizer_without_guard_or_pass_drops_session_hits() -> None:
    assert paths(AUTH(agent_id="main", requester_session_key="agent:main:main", sandboxed=False,
                      hits=HITS)) == ["MEMORY.md"]


def test_authorizer_recall_pass_rules() -> None:
    configured = ConversationRecallContext(anchor_session_key="agent:main:main", scope="same-agent-private",
                                           corpus="configured")
    sessions = configured.model_copy(update={"corpus": "sessions"})
    child = "agent:main:main:active-memory:0123456789ab"
    # valid pass: the anchor transcript itself is excluded, other agents never pass
    anchor_hit = MemorySearchResult.model_validate(result("sessions/main/main.jsonl", "sessions"))
    assert transcript_of(anchor_hit) == ("main", "agent:main:main")
    with_anchor = [anchor_hit, *HITS]
    assert paths(AUTH(agent_id="main", requester_session_key=child, sandboxed=False, hits=with_anchor,
                      conversation_recall=configured)) == ["sessions/main/own.jsonl", "MEMORY.md"]
    assert paths(AUTH(agent_id="main", requester_session_key=child, sandboxed=False, hits=with_anchor,
                      conversation_recall=sessions)) == ["sessions/main/own.jsonl"]
    # sandboxed caller: invalid pass
    assert paths(AUTH(agent_id="main", requester_session_key=child, sandboxed=True, hits=HITS,
                      conversation_recall=configured)) == ["MEMORY.md"]
    assert AUTH(agent_id="main", requester_session_key=child, sandboxed=True, hits=HITS,
                conversation_recall=sessions) == []
    # a requester that is neither the anchor nor its active-memory child
    assert AUTH(agent_id="main", requester_session_key="agent:main:other", sandboxed=False, hits=HITS,
                conversation_recall=sessions) == []
    # no session hits at all with a sessions corpus
    assert AUTH(agent_id="main", requester_session_key=child, sandboxed=False, hits=HITS[2:],
                conversation_recall=sessions) == []
