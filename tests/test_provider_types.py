"""Contract types (provider-runtime.md §1): camelCase JSON, optional fields omitted (never null)."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from memory_core.contract.types import (
    MemoryCandidateRequest,
    MemoryCitation,
    MemoryGetNotFound,
    MemoryGetOk,
    MemoryGetRequest,
    MemoryGetResult,
    MemoryHealth,
    MemoryProviderCapabilities,
    MemoryProviderOpenResult,
    MemoryReference,
    MemorySearchHit,
    MemorySearchPage,
    MemorySearchRequest,
    OperatorAuthority,
    OwnerPrivateAudience,
    SessionAuthority,
    to_json,
)


def test_reference_and_citation_camel_case_and_omitted_optionals() -> None:
    ref = MemoryReference(provider_id="memory-core", id="abc")
    assert ref.to_json() == {"providerId": "memory-core", "id": "abc"}
    cite = MemoryCitation(label="MEMORY.md#L1-L2", reference=ref, start_line=1, end_line=2)
    assert cite.to_json() == {"label": "MEMORY.md#L1-L2", "reference": {"providerId": "memory-core", "id": "abc"},
                              "startLine": 1, "endLine": 2}


def test_search_request_and_page_round_trip() -> None:
    wire = {"query": "q", "maxResults": 3, "minScore": 0.5, "cursor": "c", "sources": ["memory"],
            "lexicalOnly": True, "activeProjectKeys": ["repo"]}
    assert MemorySearchRequest.model_validate(wire).to_json() == wire
    page = MemorySearchPage(hits=[MemorySearchHit(reference=MemoryReference(provider_id="p", id="1"), excerpt="x",
                                                  automatic_recall={"eligible": False})], coverage="complete")
    assert page.to_json() == {"hits": [{"reference": {"providerId": "p", "id": "1"}, "excerpt": "x",
                                        "automaticRecall": {"eligible": False}}], "coverage": "complete"}


def test_get_request_and_results_use_from_and_next_from() -> None:
    req = MemoryGetRequest.model_validate({"reference": {"providerId": "p", "id": "1"}, "from": 2, "lines": 1})
    assert (req.from_, req.lines) == (2, 1)
    ok = MemoryGetOk(reference=req.reference, text="t", from_=2, lines=1, truncated=True, next_from=3)
    assert ok.to_json() == {"status": "ok", "reference": {"providerId": "p", "id": "1"}, "text": "t",
                            "truncated": True, "from": 2, "lines": 1, "nextFrom": 3}
    adapter = TypeAdapter(MemoryGetResult)
    assert isinstance(adapter.validate_python({"status": "not_found"}), MemoryGetNotFound)
    assert MemoryGetNotFound().to_json() == {"status": "not_found"}


def test_unknown_fields_rejected_and_capabilities_frozen() -> None:
    with pytest.raises(ValidationError):
        MemorySearchRequest.model_validate({"query": "q", "limit": 3})
    caps = MemoryProviderCapabilities.model_validate({"sources": ["memory"], "pagination": False,
                                                      "candidates": [], "projectFilter": True})
    assert caps.sources == ("memory",)
    with pytest.raises(ValidationError):
        caps.pagination = True  # type: ignore[misc]


def test_authorities_keep_the_minted_audience_object() -> None:
    audience = OwnerPrivateAudience(agent_id="main")
    session = SessionAuthority(session_key="agent:main:main", sandboxed=False, audience=audience)
    assert session.audience is audience
    assert session.to_json() == {"kind": "session", "sessionKey": "agent:main:main", "sandboxed": False,
                                 "audience": {"kind": "owner-private", "agentId": "main"}}
    assert OperatorAuthority(scopes=("operator.read",), conn_id="c").to_json() == {
        "kind": "operator", "scopes": ["operator.read"], "connId": "c"}


def test_health_candidates_open_result_and_to_json_helper() -> None:
    assert MemoryHealth(status="ready").to_json() == {"status": "ready"}
    assert MemoryCandidateRequest(kind="trigger", active_project_keys=["r"]).to_json() == {
        "kind": "trigger", "activeProjectKeys": ["r"]}
    assert MemoryProviderOpenResult(provider=None, error="Memory is disabled for this agent.").to_json() == {
        "provider": None, "error": "Memory is disabled for this agent."}
    assert to_json({"a": MemoryHealth(status="degraded", message="m"), "b": None}) == {
        "a": {"status": "degraded", "message": "m"}}
