"""MemoryCore.search/get end to end (real indexer, real SQLite), read bounds and the CLI."""

from __future__ import annotations

import json
from types import SimpleNamespace
import os

import numpy as np
import pytest

from memory_core.cli import main
from memory_core.config import MemoryCoreConfig
from memory_core.core import MemoryCore
from memory_core.errors import InvalidRequest, MemoryCoreError, ReferenceNotFound
from memory_core.read_file import build_read_result


@pytest.fixture
def ws(workspace):
    (workspace / "MEMORY.md").write_text("# Memory\n\nThe deploy key lives in the vault.\n")
    (workspace / "memory" / "projects.md").write_text("Project Falcon ships the billing rewrite in March.")
    (workspace / "memory" / "2026-01-02.md").write_text("Met Dana about the garden irrigation timer.")
    return workspace


def _core(ws, state_home, **cfg):
    return MemoryCore(str(ws), config=MemoryCoreConfig(workspace=str(ws), state_dir=str(state_home), **cfg))


def test_search_bootstraps_an_empty_index(ws, state_home):
    with _core(ws, state_home) as core:
        hits = core.search("billing rewrite")
        assert [(h.path, h.start_line, h.end_line, h.citation) for h in hits] == [
            ("memory/projects.md", 1, 1, "memory/projects.md#L1")]
        assert hits[0].vector_score is None and hits[0].text_score > 0 and hits[0].score > 0.35


def test_blank_query_returns_nothing(ws, state_home):
    with _core(ws, state_home) as core:
        assert core.search("   ") == []
        with pytest.raises(InvalidRequest, match="max_results"):
            core.search("x", max_results=0)


def test_exact_path_query(ws, state_home):
    with _core(ws, state_home) as core:
        core.index()
        hits = core.search("projects.md")
        assert [(h.path, h.score) for h in hits][:1] == [("memory/projects.md", 1.0)]


def test_get_reads_lines_and_bounds(ws, state_home):
    (ws / "memory" / "long.md").write_text("\n".join(f"line {i}" for i in range(1, 301)))
    with _core(ws, state_home) as core:
        r = core.get("memory/long.md")
        assert (r.from_, r.lines, r.truncated, r.next_from) == (1, 120, True, 121)
        assert r.text.endswith("line 120\n\n[More content available. Use from=121 to continue.]")
        r2 = core.get("memory/long.md", from_=295, lines=10)
        assert (r2.lines, r2.truncated, r2.next_from, r2.text) == (6, False, None, "\n".join(
            f"line {i}" for i in range(295, 301)))
        assert core.get("memory/missing.md").to_dict() == {"status": "not_found", "text": "", "path": "memory/missing.md"}
        for bad in ("../etc/passwd", "memory/../../x.md", "notes.txt", "/etc/passwd", "sessions/a.jsonl"):
            with pytest.raises(ReferenceNotFound):
                core.get(bad)


def test_get_refuses_symlink_escape(ws, state_home, tmp_path):
    outside = tmp_path / "outside.md"
    outside.write_text("secret")
    os.symlink(outside, ws / "memory" / "link.md")
    with _core(ws, state_home) as core:
        with pytest.raises(ReferenceNotFound):
            core.get("memory/link.md")


def test_read_result_char_budget():
    r = build_read_result("a" * 50 + "\n" + "b" * 50, "memory/x.md", max_chars=60)
    assert (r.lines, r.truncated, r.next_from) == (1, True, 2)
    assert r.text == "a" * 50 + "\n\n[More content available. Use from=2 to continue.]"
    r = build_read_result("x" * 100, "memory/x.md", max_chars=10)
    assert (r.lines, r.truncated, r.next_from) == (1, True, None)
    assert r.text.startswith("x" * 10 + "\n\n[More content available. Requested excerpt exceeded")
    assert r.text.endswith("use read on the source file.]")


def test_cli_search_table_and_json(ws, state_home, capsys):
    args = ["--workspace", str(ws)]
    assert main(["index", *args]) == 0
    capsys.readouterr()
    assert main(["search", "Falcon billing", *args]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.split()[1] == "memory/projects.md#L1" and float(first.split()[0]) > 0.35
    assert main(["search", "--query", "Falcon", "--json", *args]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["path"] for r in data["results"]] == ["memory/projects.md"]
    assert main(["search", "zzzqqq", *args]) == 0
    assert capsys.readouterr().out == "No matches.\n"
    assert main(["search", "Falcon", "--explain", *args]) == 0
    out = capsys.readouterr().out
    assert 'fts query: "Falcon"' in out and "score parts" in out
    assert main(["search", *args]) == 2
    assert "a query is required" in capsys.readouterr().err
    assert main(["search", "   ", *args]) == 2  # blank: the same usage error, not "No matches."
    assert "the query given was blank" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["get", "MEMORY.md", "--lines", "0"], ["get", "MEMORY.md", "--lines", "-5"], ["get", "MEMORY.md", "--from", "0"],
    ["search", "x", "--max-results", "0"], ["search", "x", "--max-results", "many"], ["nosuchcommand"],
])
def test_cli_usage_errors_are_one_line(argv, ws, state_home, capsys):
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--workspace", str(ws)] if argv[0] != "nosuchcommand" else argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: memory-core") and "--help" in err, err


def test_cli_get(ws, state_home, capsys):
    args = ["--workspace", str(ws)]
    assert main(["get", "MEMORY.md", "--from", "3", "--lines", "1", *args]) == 0
    assert capsys.readouterr().out == (  # line 3 is the last one: the final newline ends it
        "The deploy key lives in the vault.\n")
    assert main(["get", "MEMORY.md", "--json", "--lines", "1", *args]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "from": 1, "lines": 1, "nextFrom": 2, "path": "MEMORY.md", "text":
        "# Memory\n\n[More content available. Use from=2 to continue.]", "truncated": True}
    assert main(["get", "../x.md", *args]) == 1
    assert "not an indexed memory file" in capsys.readouterr().err


def test_bad_sources_and_paused_index(ws, state_home, tmp_path):
    from memory_core.errors import IndexPaused, ProviderUnavailable
    from memory_core.search.engine import SearchEngine

    with _core(ws, state_home) as core:
        core.index()
        with pytest.raises(InvalidRequest, match="unknown source"):
            core.search("falcon", sources=["bogus"])
        paused = SearchEngine(core.config, core.db_path, None, identity_check=lambda: ["model", "chunkTokens"])
        with pytest.raises(IndexPaused, match=r"\(model, chunkTokens\).*memory-core index --force"):
            paused.search("falcon")
        closed = SearchEngine(MemoryCoreConfig(provider="openai"), core.db_path, None)
        with pytest.raises(ProviderUnavailable, match="openai"):
            closed.search("falcon")
        assert [h.path for h in closed.search("falcon", lexical_only=True)] == ["memory/projects.md"]
        paused.close()
        closed.close()


def test_get_extra_paths_and_sessions(ws, tmp_path):
    from memory_core.read_file import read_memory_file

    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "note.md").write_text("extra note\nline two")
    (extra / "data.txt").write_text("not markdown")
    r = read_memory_file(str(ws), str(extra / "note.md"), extra_paths=[str(extra)], lines=1)
    assert (r.text, r.path, r.next_from) == ("extra note\n\n[More content available. Use from=2 to continue.]",
                                            str(extra / "note.md"), 2)
    with pytest.raises(ReferenceNotFound):
        read_memory_file(str(ws), str(extra / "data.txt"), extra_paths=[str(extra)])
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    (sessions / "s1.jsonl").write_text('{"a": 1}\n' + _msg("user", "hello there"))
    indexed = {"sessions/s1.jsonl"}
    r = read_memory_file(str(ws), "sessions/s1.jsonl", sessions_dir=str(sessions), is_indexed_session=indexed.__contains__,
                         from_=2)
    assert (r.text, r.from_, r.lines, r.truncated) == ("User: hello there", 2, 1, False)
    with pytest.raises(ReferenceNotFound):  # not indexed
        read_memory_file(str(ws), "sessions/s2.jsonl", sessions_dir=str(sessions), is_indexed_session=indexed.__contains__)
    for bad in ("sessions/../x.jsonl", "sessions/a/b.jsonl"):  # traversal, even if the index claimed it
        with pytest.raises(ReferenceNotFound):
            read_memory_file(str(ws), bad, sessions_dir=str(sessions), is_indexed_session=lambda p: True)


def _msg(role, content):
    return json.dumps({"type": "message", "message": {"role": role, "content": content}})


TRANSCRIPT = [
    json.dumps({"type": "session", "id": "s1"}),                                    # 1 not a message
    _msg("user", "How do I rotate the falcon deploy key?"),                          # 2
    _msg("assistant", [{"type": "text", "text": "Let me check the vault."},         # 3 text kept, tool call not
                       {"type": "toolCall", "name": "exec", "arguments": {"cmd": "vault read secret/falcon"}}]),
    _msg("toolResult", "secret=hunter2"),                                            # 4 tool result
    _msg("user", "[cron:weekly-report] send the falcon report"),                     # 5 cron prompt
    "{not json",                                                                     # 6 malformed
    _msg("assistant", "Rotate the falcon deploy key with vault rotate."),            # 7
]
FLAT = ("User: How do I rotate the falcon deploy key?\nAssistant: Let me check the vault.\n"
        "Assistant: Rotate the falcon deploy key with vault rotate.")


@pytest.fixture
def session_core(ws, state_home):
    sessions = ws.parent / "sessions"
    sessions.mkdir()
    (sessions / "s1.jsonl").write_text("\n".join(TRANSCRIPT) + "\n")
    core = _core(ws, state_home, sources=["memory", "sessions"], sessions_dir=str(sessions),
                 experimental={"sessionMemory": True})
    core.index()
    yield core
    core.close()


def test_get_of_a_transcript_returns_the_flattened_text_not_the_jsonl(session_core):
    r = session_core.get("sessions/s1.jsonl")
    assert r.to_dict() == {"text": FLAT, "path": "sessions/s1.jsonl", "from": 1, "lines": 7}


def test_get_with_a_session_hits_lines_returns_that_hits_text(session_core):
    hit = session_core.search("falcon deploy key", sources=["sessions"])[0]
    assert (hit.path, hit.start_line, hit.end_line, hit.citation) == ("sessions/s1.jsonl", 2, 7, "sessions/s1.jsonl#L2-L7")
    r = session_core.get(hit.path, from_=hit.start_line, lines=hit.end_line - hit.start_line + 1)
    assert (r.text, r.from_, r.lines, r.truncated, r.next_from) == (hit.snippet, 2, 6, False, None)
    assert r.text == FLAT


def test_get_pages_a_transcript_by_jsonl_lines(session_core):
    first = session_core.get("sessions/s1.jsonl", lines=3)
    assert first.to_dict() == {
        "text": ("User: How do I rotate the falcon deploy key?\nAssistant: Let me check the vault.\n\n"
                 "[More content available. Use from=4 to continue.]"),
        "path": "sessions/s1.jsonl", "from": 1, "lines": 3, "truncated": True, "nextFrom": 4}
    rest = session_core.get("sessions/s1.jsonl", from_=first.next_from)
    assert rest.to_dict() == {"text": "Assistant: Rotate the falcon deploy key with vault rotate.",
                              "path": "sessions/s1.jsonl", "from": 4, "lines": 4}
    # lines the flattener drops contribute nothing
    assert session_core.get("sessions/s1.jsonl", from_=4, lines=3).to_dict() == {
        "text": "", "path": "sessions/s1.jsonl", "from": 4, "lines": 3, "truncated": True, "nextFrom": 7}


def test_get_of_a_transcript_keeps_the_char_budget_per_message(session_core):
    r = session_core.get("sessions/s1.jsonl", max_chars=60)
    assert (r.text, r.lines, r.truncated, r.next_from) == (
        "User: How do I rotate the falcon deploy key?\n\n[More content available. Use from=3 to continue.]",
        2, True, 3)
    hard = session_core.get("sessions/s1.jsonl", max_chars=10)
    assert (hard.text, hard.lines, hard.truncated, hard.next_from) == (
        "User: How \n\n[More content available. Requested excerpt exceeded the default maxChars budget.]",
        2, True, None)


def test_session_read_drops_a_wrapped_message_as_a_whole():
    from memory_core.read_file import build_session_read_result

    r = build_session_read_result("User: a\nUser: b\nAssistant: c", (2, 2, 5), "sessions/x.jsonl", max_chars=20)
    assert (r.text, r.lines, r.next_from) == ("User: a\nUser: b\n\n[More content available. Use from=5 to continue.]",
                                              4, 5)


def test_mcp_memory_get_of_a_transcript_returns_the_flattened_text(session_core):
    from memory_core.mcp_server import MemoryTools

    tools = MemoryTools(session_core.config)
    try:
        got = tools.get({"path": "sessions/s1.jsonl", "from": 2, "lines": 6})
    finally:
        tools.close()
    assert got == {"text": FLAT, "path": "sessions/s1.jsonl", "from": 2, "lines": 6}


def test_hits_from_reply_builds_the_same_hit_as_the_constructor():
    import dataclasses

    from host_facades.ranking.rank import Candidate
    from host_facades.search.hit import HIT_FIELDS, hit_row
    from host_facades.search.edge import SearchReply
    from memory_core.search.types import SearchHit, hits_from_reply

    c = Candidate(id="c1", path="memory/a.md", source="memory", start_line=3, end_line=5, snippet="snippet",
                  vector_score=0.4, text_score=0.25, score=0.5, importance=2, triggers="t", project_key="pk",
                  provenance={"origin_class": "agent"}, source_mtime=1.7e12, hash="h1")
    one_line = dataclasses.replace(c, start_line=4, end_line=4)
    hit, short = hits_from_reply(SearchReply(mode="hybrid", hits=(hit_row(c, vector_mode=True),
                                                                   hit_row(one_line, vector_mode=True))))
    want = SearchHit(id="c1", path="memory/a.md", start_line=3, end_line=5, score=0.5, snippet="snippet",
                     source="memory", vector_score=0.4, text_score=0.25, citation="memory/a.md#L3-L5", importance=2,
                     triggers="t", project_key="pk", provenance={"origin_class": "agent"}, source_mtime=1.7e12, hash="h1")
    assert HIT_FIELDS == tuple(f.name for f in dataclasses.fields(SearchHit))
    assert hit == want and list(vars(hit)) == list(vars(want))
    assert hit.to_dict() == want.to_dict() and "hash" not in hit.to_dict()
    with pytest.raises(dataclasses.FrozenInstanceError):
        hit.score = 1.0  # type: ignore[misc]
    assert short.citation == "memory/a.md#L4"
    keyword_only = hits_from_reply(SearchReply(mode="keyword", hits=(hit_row(c, vector_mode=False),)))
    assert keyword_only[0].vector_score is None


def test_a_search_request_is_frozen_and_reads_the_typed_config(tmp_path):
    import dataclasses

    from host_facades.search.edge import SearchRequest
    from memory_core.search.engine import SearchEngine

    cfg = MemoryCoreConfig(workspace=str(tmp_path), state_dir=str(tmp_path),
                           query={"hybrid": {"fusion": "rrf", "candidateMultiplier": 3, "mmr": {"lambda": 0.5}}})
    engine = SearchEngine(cfg, str(tmp_path / "x.sqlite"), now_ms=lambda: 1234.0)

    def request(query, keys=None):
        return engine._request(query, ("memory",), 6, 0.35, want_vector=False, qvec=None, active_project_keys=keys,
                               details=False, probe_content=False)

    a, b = request("one"), request("two", ["p"])
    assert isinstance(a, SearchRequest) and (a.query, b.query) == ("one", "two")
    assert (a.candidates, a.sources, a.now_ms, a.active_project_keys, b.active_project_keys) == (
        18, ("memory",), 1234.0, None, ("p",))
    assert (a.ranking.fusion, a.ranking.mmr_lambda, a.ranking.vector_weight, a.ranking.half_life_days) == (
        "rrf", 0.5, 0.7, 30.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.query = "other"  # type: ignore[misc]
    engine.close()


def test_core_explain_is_what_search_explain_json_prints(ws, state_home, capsys):
    from memory_core.output import camel_keys

    args = ["--workspace", str(ws)]
    assert main(["index", *args]) == 0
    capsys.readouterr()
    assert main(["search", "Falcon billing", "--explain", "--json", *args]) == 0
    printed = json.loads(capsys.readouterr().out)
    with MemoryCore(str(ws)) as core:
        details = core.explain("Falcon billing")
    data = json.loads(json.dumps(camel_keys(details.to_dict()), default=str))
    timings = data.pop("timingsMs")
    # each keyword probe's statements, timed: the exact-path tier and the strict query at least
    assert {"exactPath", "strict"} <= set(printed["fts"].pop("statementsMs")) == set(data["fts"].pop("statementsMs"))
    # "pool": a search that ran as a worker task (the task's round trip less the worker's stages)
    assert set(printed.pop("timingsMs")) - {"pool"} == set(timings) - {"pool"} == {
        "freshness", "prepare", "identity", "embed", "keyword", "metadata", "rank", "hits", "remainder", "total"}
    # every millisecond is named: the stages and the remainder add up to the total
    assert sum(v for k, v in timings.items() if k != "total") == pytest.approx(timings["total"])
    assert data == printed
    assert [h.citation for h in details.hits] == [r["citation"] for r in printed["results"]] == ["memory/projects.md#L1"]
    assert (printed["mode"], printed["ftsPlan"]["matchQuery"]) == ("keyword", '"Falcon" AND "billing"')
    assert details.staleness is None


def test_odd_queries_get_typed_answers_and_a_closed_core_refuses(ws, state_home):
    with _core(ws, state_home) as core:
        core.index()
        # a lone surrogate (undecodable argv bytes) is replaced, not sent to SQLite
        assert [h.path for h in core.search("Falcon \ud800")] == [h.path for h in core.search("Falcon")]
        assert core.search("\udcff") == []
        for bad in (None, 123, b"Falcon"):
            with pytest.raises(InvalidRequest, match="query must be a string"):
                core.search(bad)  # type: ignore[arg-type]
    for call in (lambda: core.search("Falcon"), lambda: core.get("MEMORY.md"), core.status, core.index):
        with pytest.raises(MemoryCoreError, match="this MemoryCore is closed"):
            call()


def test_identity_state_sees_a_changed_stored_identity_at_once(ws, state_home):
    with _core(ws, state_home) as core:
        core.index()
        assert core.identity_state() == core.identity_state() == {"state": "ok", "mismatch": []}
        meta = core.writer.read_meta()
        core.writer.write_meta({**meta, "chunkTokens": meta["chunkTokens"] + 1})
        assert core.identity_state() | {"message": None} == {"state": "mismatch", "mismatch": ["chunkTokens"],
                                                             "message": None}
        state = core.identity_state()
        state["mismatch"].append("caller's own list")
        assert core.identity_state()["mismatch"] == ["chunkTokens"]
        core.writer.write_meta(meta)
        assert core.identity_state() == {"state": "ok", "mismatch": []}


def test_a_repeated_query_is_embedded_once_within_the_cache_time():
    from memory_core.embeddings.query_cache import QueryVectorCache

    now = [0.0]
    calls: list[str] = []

    def embed(provider, text):
        calls.append(text)
        return np.full(3, float(len(calls)), dtype=np.float32)

    cache = QueryVectorCache(ttl_s=60, max_entries=2, clock=lambda: now[0])
    provider = SimpleNamespace(id="p", model="m", provider_key="k")
    first = cache.vector(provider, "who owns billing", embed)
    assert cache.vector(provider, "who owns billing", embed) is first and calls == ["who owns billing"]
    assert not first.flags.writeable  # shared between searches: nobody may change it
    other = SimpleNamespace(id="p", model="m2", provider_key="k")
    cache.vector(other, "who owns billing", embed)  # another model: its own vector
    now[0] = 61.0
    assert cache.vector(provider, "who owns billing", embed)[0] == 3.0  # expired: embedded again
    assert calls == ["who owns billing"] * 3
