"""One hit, every surface: ``memory_core.surfaces.render`` on one hand-made SearchHit, the one citation
formatter and the one project-key splitter."""

from __future__ import annotations

import json
from dataclasses import fields, replace

from host_facades.search.hit import surface_fields
from host_facades.ranking.rank import citation_for, project_keys_of, project_multiplier
from memory_core.slot.legacy import MemorySearchResult, convert_legacy_hit
from memory_core.provider.runtime import project_admits
from memory_core.surfaces import render
from memory_core.search.types import SearchHit

HIT = SearchHit(
    id="c" * 64, path="memory/rocket.md", start_line=3, end_line=5, score=0.8125,
    snippet="<!-- importance: 7 -->\n- rotate the deploy key monthly  \n- it lives in Vault\n", source="memory",
    vector_score=0.75, text_score=0.5, citation="memory/rocket.md#L3-L5", importance=7,
    triggers='["deploy key", "rotation"]', project_key="github.com/acme/rocket; github.com/acme/infra",
    provenance={"origin_class": "agent", "session_kind": "unknown", "observed_at": 1794830400000},
    source_mtime=1794830400.0, hash="h" * 64,
)
SNIPPET = HIT.snippet
PROVENANCE = {"originClass": "agent", "sessionKind": "unknown", "observedAt": 1794830400000}


def test_wire_is_every_field_but_hash_in_field_order() -> None:
    assert json.dumps(render.wire(HIT)) == json.dumps({
        "id": "c" * 64, "path": "memory/rocket.md", "startLine": 3, "endLine": 5, "score": 0.8125,
        "snippet": SNIPPET, "source": "memory", "vectorScore": 0.75, "textScore": 0.5,
        "citation": "memory/rocket.md#L3-L5", "importance": 7, "triggers": '["deploy key", "rotation"]',
        "projectKey": "github.com/acme/rocket; github.com/acme/infra", "provenance": PROVENANCE,
        "sourceMtime": 1794830400.0})
    assert HIT.to_dict() == render.wire(HIT)
    assert [name for name, _ in surface_fields("wire")] == [f.name for f in fields(SearchHit) if f.name != "hash"]


def test_wire_omits_none_and_copies_provenance() -> None:
    bare = SearchHit(id="x", path="MEMORY.md", start_line=1, end_line=1, score=0.5, snippet="s", source="memory")
    assert render.wire(bare) == {"id": "x", "path": "MEMORY.md", "startLine": 1, "endLine": 1, "score": 0.5,
                                 "snippet": "s", "source": "memory", "citation": ""}
    render.wire(HIT)["provenance"]["originClass"] = "changed"
    assert HIT.provenance == {"origin_class": "agent", "session_kind": "unknown", "observed_at": 1794830400000}


def test_legacy_result_is_the_memory_search_result_shape() -> None:
    legacy = render.legacy_result(HIT)
    assert json.dumps(legacy) == json.dumps({
        "path": "memory/rocket.md", "startLine": 3, "endLine": 5, "score": 0.8125, "snippet": SNIPPET,
        "source": "memory", "vectorScore": 0.75, "textScore": 0.5, "citation": "memory/rocket.md#L3-L5",
        "importance": 7, "triggers": '["deploy key", "rotation"]',
        "projectKey": "github.com/acme/rocket; github.com/acme/infra", "provenance": PROVENANCE})
    model = MemorySearchResult.model_validate(legacy)
    assert model.model_extra == {}  # every key is a declared MemorySearchResult field
    assert model.model_dump(by_alias=True, exclude_none=True) == legacy


def test_v1_result_is_the_legacy_result_without_citation() -> None:
    assert json.dumps(render.v1_result(HIT)) == json.dumps({
        "path": "memory/rocket.md", "startLine": 3, "endLine": 5, "score": 0.8125, "snippet": SNIPPET,
        "source": "memory", "vectorScore": 0.75, "textScore": 0.5, "importance": 7,
        "triggers": '["deploy key", "rotation"]', "projectKey": "github.com/acme/rocket; github.com/acme/infra",
        "provenance": PROVENANCE})
    legacy = {"path": "virtual:record", "id": "r1", "startLine": 2, "endLine": 2, "citation": "virtual:record#L2",
              "sourceMtime": 1.0, "snippet": "x", "score": 1.0, "source": "memory", "custom": True}
    assert render.v1_result_of_legacy(legacy) == {"path": "virtual:record", "startLine": 2, "endLine": 2,
                                                  "snippet": "x", "score": 1.0, "source": "memory", "custom": True}


def test_mcp_result_with_and_without_citation() -> None:
    base = {"path": "memory/rocket.md", "startLine": 3, "endLine": 5, "score": 0.8125}
    rest = {"source": "memory", "vectorScore": 0.75, "textScore": 0.5, "importance": 7,
            "triggers": '["deploy key", "rotation"]', "projectKey": "github.com/acme/rocket; github.com/acme/infra",
            "provenance": PROVENANCE, "corpus": "memory"}
    assert json.dumps(render.mcp_result(HIT, cite=False)) == json.dumps(
        {**base, "snippet": "\n- rotate the deploy key monthly\n- it lives in Vault\n", **rest})
    assert json.dumps(render.mcp_result(HIT, cite=True)) == json.dumps(
        {**base, "snippet": "\n- rotate the deploy key monthly\n- it lives in Vault\n\nSource: memory/rocket.md#L3-L5",
         **rest, "citation": "memory/rocket.md#L3-L5"})


def test_provider_hit_is_the_v2_wire_hit() -> None:
    ref = {"providerId": "memory-core", "id": "c" * 64, "revision": "h" * 64}
    recall = {"eligible": True, "projectKeys": ["github.com/acme/rocket", "github.com/acme/infra"],
              "triggers": "deploy key; rotation", "importance": 7.0}
    citation = {"label": "memory/rocket.md#L3-L5", "reference": ref, "startLine": 3, "endLine": 5}
    assert json.dumps(render.provider_hit(HIT, "memory-core").to_json()) == json.dumps({
        "reference": ref, "excerpt": SNIPPET, "score": 0.8125, "source": "memory", "citations": [citation],
        "automaticRecall": recall})
    assert render.provider_hit(HIT, "memory-core", scored=False).to_json() == {
        "reference": ref, "excerpt": SNIPPET, "source": "memory", "citations": [citation], "automaticRecall": recall}


def test_provider_hit_automatic_recall_rules() -> None:
    def recall(**changes: object) -> dict:
        fields_ = {**HIT.__dict__, **changes}
        return render.provider_hit(SearchHit(**fields_), "p").to_json()["automaticRecall"]

    keys = {"projectKeys": ["github.com/acme/rocket", "github.com/acme/infra"],
            "triggers": "deploy key; rotation", "importance": 7.0}
    assert recall(source="sessions") == {"eligible": False, **keys}
    assert recall(provenance={"origin_class": "untrusted"}) == {"eligible": False, **keys}
    assert recall(provenance=None, triggers=None, importance=None, project_key=None) == {"eligible": False}
    assert recall(project_key=None) == {"eligible": True, "triggers": "deploy key; rotation", "importance": 7.0}
    assert recall(project_key=";")["eligible"] is False  # annotated but keyless
    assert recall(project_key=render.INVALID_PROJECT_KEY)["eligible"] is False


def test_cli_text() -> None:
    assert render.cli_text([HIT], "deploy key") == (
        "0.812 memory/rocket.md#L3-L5  (vector 0.750, text 0.500)\n"
        "    <!-- importance: 7 -->\n"
        "    - rotate the deploy key monthly  \n"
        "    - it lives in Vault\n"
        "\n")
    texts = {HIT.id: "line one\nline\ttwo"}
    assert render.cli_text([HIT], "two", texts=texts) == (
        "0.812 memory/rocket.md#L3-L5  (vector 0.750, text 0.500)\n    line one\n    line\ttwo\n\n")
    assert render.cli_text([], "deploy") == "No matches.\n"


def test_cli_text_prints_a_score_part_with_the_digits_it_takes_to_be_true() -> None:
    """A lone keyword hit's text part of 9.99999e-07 is not "0.000", a score of
    0.99993 is not "1.000"; exact values and the rest keep 3 decimals (a multiplier may pass 1)."""
    lone = replace(HIT, score=0.99993, vector_score=0.0, text_score=9.99999e-07)
    assert render.cli_text([lone]).splitlines()[0] == "0.9999 memory/rocket.md#L3-L5  (vector 0.000, text 1e-06)"
    important = replace(HIT, score=1.2, vector_score=1.0, text_score=0.5)
    assert render.cli_text([important]).splitlines()[0] == "1.200 memory/rocket.md#L3-L5  (vector 1.000, text 0.500)"


def test_citation_for_one_line_and_range() -> None:
    assert citation_for("MEMORY.md", 4, 4) == "MEMORY.md#L4"
    assert citation_for("MEMORY.md", 4, 9) == "MEMORY.md#L4-L9"
    assert citation_for("MEMORY.md", 4, 4, always_range=True) == "MEMORY.md#L4-L4"
    assert citation_for("MEMORY.md", 4, 9, always_range=True) == "MEMORY.md#L4-L9"


def test_legacy_conversion_labels_a_hit_without_citation_as_a_range() -> None:
    hit = MemorySearchResult.model_validate({"path": "virtual:record", "startLine": 2, "endLine": 2, "score": 1.0,
                                             "snippet": "x", "source": "memory"})
    assert convert_legacy_hit("legacy", hit).citations[0].label == "virtual:record#L2-L2"
    cited = hit.model_copy(update={"citation": "virtual:record#L2"})
    assert convert_legacy_hit("legacy", cited).citations[0].label == "virtual:record#L2"


def test_project_keys_of() -> None:
    assert project_keys_of(None) is None
    assert project_keys_of("") == []
    assert project_keys_of("a; b;") == ["a", "b"]
    assert project_keys_of("a;;b") == ["a", "b"]


def test_project_key_callers_keep_none_and_empty_apart() -> None:
    active = frozenset({"a"})
    assert (project_multiplier(None, active), project_multiplier("", active), project_multiplier("a", active),
            project_multiplier("a; b", active)) == (1.0, 1.0, 1.15, 0.9)
    assert (project_admits(None, ["a"]), project_admits("", ["a"]), project_admits("a;", ["a"]),
            project_admits("a; b", ["a"]), project_admits("b", None)) == (True, False, True, False, True)
    legacy = {"path": "m.md", "startLine": 1, "endLine": 2, "score": 1.0, "snippet": "x", "source": "memory",
              "provenance": {"originClass": "owner"}}
    for key, keys, eligible in ((None, None, True), ("", [], False), ("a; b;", ["a", "b"], True)):
        hit = MemorySearchResult.model_validate({**legacy, "projectKey": key})
        got = convert_legacy_hit("legacy", hit).automatic_recall
        assert (got.project_keys, got.eligible) == (keys, eligible)
