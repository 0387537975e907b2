"""The memory-core provider runtime against real indexed workspaces (provider-runtime.md §1, §5, §6):
acceptance cases 22-25 and provider checklist items 1-32.

Every lease is opened through the host (:class:`MemoryHost`), as a real host would; indexes are
built with ``MemoryCore(...).index()`` in tmp_path. A fixed-table embedder gives exact cosine scores.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory_core.config import MemoryCoreConfig
from memory_core.core import MemoryCore
from memory_core.embeddings import register_embedding_provider
from memory_core.errors import (
    Aborted,
    AuthorityNotCurrent,
    CursorExpired,
    Forbidden,
    InvalidRequest,
    ProviderUnavailable,
)
from memory_core.slot.audiences import AudienceRegistry
from memory_core.slot.enforcement import MemoryCapabilityRegistration, MemoryHost, is_valid_capabilities
from memory_core.provider import runtime as rt
from memory_core.provider.runtime import (
    CAPABILITIES,
    DEGRADED_EMBEDDING,
    DEGRADED_SYNC,
    EMBEDDING_FAILED,
    UNAVAILABLE_STORE,
    MemoryCoreProviderRuntime,
)
from memory_core.contract.types import (
    AbortSignal,
    ConversationAudience,
    ConversationRecallContext,
    HostAuthority,
    MemoryCallerContext,
    MemoryProviderOpenParams,
    OperatorAuthority,
    SessionAuthority,
)

PID = "memory-core"
VOCAB = ["alpha", "beta", "gamma", "delta"]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class TableEmbedder:
    """One dimension per vocabulary word: exact cosine scores; ``fail`` simulates a backend outage."""

    id = "h5table"
    model = "table-v1"
    provider_key = "table"
    dims = 4
    max_input_bytes = 8192

    def __init__(self) -> None:
        self.calls = 0
        self.fail = False
        self.during: Any = None

    def embed_batch(self, texts: Any) -> np.ndarray:
        self.calls += 1
        if self.during is not None:
            self.during()
        if self.fail:
            raise ProviderUnavailable("table backend down at /secret/path/creds.json")
        out = []
        for t in texts:
            words = re.findall(r"\w+", t.lower())
            v = np.array([1.0 if w in words else 0.0 for w in VOCAB], np.float32)
            if not v.any():
                v[3] = 1.0
            out.append(v / np.linalg.norm(v))
        return np.vstack(out)


EMBEDDER = TableEmbedder()
register_embedding_provider("h5table", lambda _cfg: EMBEDDER)

MEMORY_MD = """- deploy checklist lives in the runbook
  <!-- trigger: deploy -->
  <!-- importance: 7 -->
- the repo uses uv for builds
  <!-- project: repo-x -->
  <!-- importance: 9 -->
- gardening tips for tomatoes
"""
NOTES_MD = "line one about tomatoes\nline two about tomatoes\nline three about tomatoes\n"
ANCHOR_ID = "0f0e0d0c-0000-4000-8000-00000000000a"
OLDER_ID = "0f0e0d0c-0000-4000-8000-00000000000b"


def session_lines(*texts: str) -> str:
    return "".join(json.dumps({"type": "message", "message": {"role": "user", "content": t},
                               "timestamp": 1700000000000 + i}) + "\n" for i, t in enumerate(texts))


def make_workspace(root: Path, name: str = "ws", memory_md: str = MEMORY_MD) -> Path:
    ws = root / name
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text(memory_md)
    (ws / "memory" / "notes.md").write_text(NOTES_MD)
    sessions = root / f"{name}-sessions"
    sessions.mkdir()
    (sessions / f"{ANCHOR_ID}.jsonl").write_text(session_lines("we planned tomatoes for the anchor chat"))
    (sessions / f"{OLDER_ID}.jsonl").write_text(session_lines("older chat about tomatoes and soil"))
    return ws


def lexical_config(root: Path, ws: Path, **extra: Any) -> MemoryCoreConfig:
    return MemoryCoreConfig(workspace=str(ws), state_dir=str(root / "state"), sources=["memory", "sessions"],
                            sessions_dir=str(root / f"{ws.name}-sessions"), experimental={"sessionMemory": True},
                            **extra)


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> MemoryCoreConfig:
    """Agent "main" (memory + sessions, keyword-only) and agent "other" with its own workspace."""
    root = tmp_path_factory.mktemp("provider")
    ws = make_workspace(root)
    other_ws = make_workspace(root, "other", "- other agent secret about tomatoes\n")
    cfg = lexical_config(root, ws, agents={"other": {"workspace": str(other_ws),
                                                     "sessionsDir": str(root / "other-sessions")},
                                           "quiet": {"enabled": False}})
    for agent in ("main", "other"):
        core = MemoryCore(config=cfg, agent_id=agent)
        core.index()
        core.close()
    return cfg


@pytest.fixture
def near_far(tmp_path: Path) -> MemoryCoreConfig:
    """Semantic (table embedder), vector-only scores: "alpha" is 1.0 for the near row, 0.0 for the far one."""
    EMBEDDER.calls, EMBEDDER.fail, EMBEDDER.during = 0, False, None
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("- alpha near row\n- beta far row\n")
    cfg = MemoryCoreConfig(workspace=str(ws), state_dir=str(tmp_path / "state"), provider="h5table",
                           query={"hybrid": {"enabled": False}})
    core = MemoryCore(config=cfg)
    core.index()
    core.close()
    return cfg


class Caller:
    def __init__(self, authority: Any, signal: AbortSignal | None = None) -> None:
        self.revoked: str | None = None
        self.checks = 0
        self.context = MemoryCallerContext(authority=authority, assert_current=self.assert_current, signal=signal)

    def assert_current(self) -> None:
        self.checks += 1
        if self.revoked:
            raise AuthorityNotCurrent(self.revoked)


OPERATOR = OperatorAuthority(scopes=("operator.read",), conn_id="conn-1")
AUDIENCES = AudienceRegistry()


def owner_session(agent: str = "main", session_key: str = "agent:main:main", **kw: Any) -> SessionAuthority:
    grant = AUDIENCES.mint_owner_private(agent, session_key)
    return SessionAuthority(session_key=session_key, audience=grant.audience, **{"sandboxed": False, **kw})


async def open_lease(runtime: MemoryCoreProviderRuntime, authority: Any = OPERATOR, agent: str = "main",
                     purpose: Any = None, caller: Caller | None = None) -> Any:
    host = MemoryHost(MemoryCapabilityRegistration(plugin_id=PID, provider_runtime=runtime), audiences=AUDIENCES)
    result = await host.open(MemoryProviderOpenParams(agent_id=agent, context=(caller or Caller(authority)).context,
                                                      purpose=purpose))
    return result.provider if result.provider is not None else result


def engine_spy(runtime: MemoryCoreProviderRuntime, agent: str = "main") -> list[str]:
    """The queries the agent's engine read the store for: its request is built after the query
    embedding (and the embedding hook's currency check), right before the read."""
    engine = runtime.engine(agent)
    calls: list[str] = []
    real = engine._request

    def spy(q: str, *a: Any, **k: Any) -> Any:
        calls.append(q)
        return real(q, *a, **k)

    engine._request = spy  # type: ignore[method-assign]
    return calls


def excerpts(page: Any) -> list[str]:
    return [h.excerpt.strip() for h in page.hits]


# --- acceptance 22 / checklist 8, 9 --------------------------------------------------------------

def _near_far(cfg: MemoryCoreConfig) -> None:
    async def go() -> None:
        lease = await open_lease(MemoryCoreProviderRuntime(cfg))
        page = await lease.search({"query": "alpha", "minScore": 0.9})
        assert [(h.excerpt.strip(), h.score) for h in page.hits] == [("- alpha near row", 1.0)]
        both = await lease.search({"query": "alpha", "minScore": 0})
        assert [(h.excerpt.strip(), h.score) for h in both.hits] == [("- alpha near row", 1.0), ("- beta far row", 0.0)]
        one = await lease.search({"query": "alpha", "minScore": 0, "maxResults": 1})
        assert excerpts(one) == ["- alpha near row"]

    run(go())


def test_acceptance_22_min_score_and_max_results_honoured(near_far: MemoryCoreConfig) -> None:
    _near_far(near_far)


def test_checklist_08_min_score_applied_to_every_search(near_far: MemoryCoreConfig) -> None:
    _near_far(near_far)


def test_checklist_09_max_results_honoured_and_capped_at_50(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("".join(f"- tomatoes fact number {i}\n" for i in range(60)))
    cfg = MemoryCoreConfig(workspace=str(ws), state_dir=str(tmp_path / "state"))
    MemoryCore(config=cfg).index()

    async def go() -> tuple[int, int, bool]:
        lease = await open_lease(MemoryCoreProviderRuntime(cfg))
        big = await lease.search({"query": "tomatoes", "minScore": 0, "maxResults": 500})
        three = await lease.search({"query": "tomatoes", "minScore": 0, "maxResults": 3})
        return len(big.hits), len(three.hits), big.next_cursor is not None

    assert run(go()) == (50, 3, True)


# --- acceptance 23 / checklist 23, 24 --------------------------------------------------------------

def denied_callers() -> dict[str, Any]:
    conv = AUDIENCES.mint_conversation("main", "agent:main:group:g1", ANCHOR_ID)
    return {
        "session without audience": SessionAuthority(session_key="agent:main:main", sandboxed=False),
        "conversation audience": SessionAuthority(session_key="agent:main:group:g1", sandboxed=False,
                                                  audience=conv.audience),
        "other agent's audience": owner_session("other", "agent:main:main"),
        "host operation": HostAuthority(operation="project-memory-bootstrap"),
    }


DENIAL_REASONS = {
    "session without audience": "this session has no owner-private memory audience",
    "conversation audience": "this session has no owner-private memory audience",
    "other agent's audience": "the memory audience belongs to another agent",
    "host operation": "host operations cannot read stored memories",
}


def _authority_denial(cfg: MemoryCoreConfig) -> None:
    runtime = MemoryCoreProviderRuntime(cfg)

    async def go() -> None:
        owner = await open_lease(runtime, owner_session())
        real = (await owner.search({"query": "alpha", "minScore": 0})).hits
        assert [h.excerpt.strip() for h in real] == ["- alpha near row", "- beta far row"]
        calls = engine_spy(runtime)
        EMBEDDER.calls = 0
        for name, authority in denied_callers().items():
            lease = await open_lease(runtime, authority)
            page = await lease.search({"query": "alpha", "minScore": 0})
            assert page.to_json() == {"hits": [], "warning":
                                      f"memory-core: stored memories were not searched: {DENIAL_REASONS[name]}"}
            with pytest.raises(Forbidden) as info:
                await lease.get({"reference": real[0].reference.to_json()})
            assert str(info.value) == f"memory-core: memory access denied: {DENIAL_REASONS[name]}"
            health = (await lease.health()).to_json()
            assert health["status"] == "ready"
            assert set(health["details"]) == {"backend", "provider", "sources"}  # no counts, no text
            assert "alpha" not in json.dumps(health)
        assert calls == [] and EMBEDDER.calls == 0  # no embedding or store work for denied callers

    run(go())


def test_acceptance_23_authority_based_denial(near_far: MemoryCoreConfig) -> None:
    _authority_denial(near_far)


def test_checklist_23_authorize_from_supplied_authority_only(near_far: MemoryCoreConfig) -> None:
    _authority_denial(near_far)

    async def operator_acts_for_agent() -> list[str]:
        lease = await open_lease(MemoryCoreProviderRuntime(near_far), OPERATOR)
        return excerpts(await lease.search({"query": "alpha", "minScore": 0.5}))

    assert run(operator_acts_for_agent()) == ["- alpha near row"]


def test_checklist_24_audience_of_another_agent_rejected_never_reconstructed(indexed: MemoryCoreConfig) -> None:
    runtime = MemoryCoreProviderRuntime(indexed)

    async def go() -> None:
        # the session key names agent main, but only the audience counts: another agent's audience is denied
        other = await open_lease(runtime, owner_session("other", "agent:main:main"))
        assert (await other.search({"query": "tomatoes"})).warning == (
            "memory-core: stored memories were not searched: the memory audience belongs to another agent")
        bare = await open_lease(runtime, SessionAuthority(session_key="agent:main:main", sandboxed=False,
                                                          session_id=ANCHOR_ID))
        assert (await bare.search({"query": "tomatoes"})).hits == []

    run(go())


# --- acceptance 24 / checklist 14-17 ------------------------------------------------------------

def _first(page: Any, path_part: str) -> Any:
    return next(h for h in page.hits if path_part in h.citations[0].label)


def _get_semantics(cfg: MemoryCoreConfig) -> None:
    runtime = MemoryCoreProviderRuntime(cfg)

    async def go() -> None:
        lease = await open_lease(runtime)
        page = await lease.search({"query": "tomatoes", "minScore": 0, "sources": ["memory"]})
        notes = _first(page, "memory/notes.md")
        full = await lease.get({"reference": notes.reference.to_json()})
        assert full.to_json() == {
            "status": "ok", "reference": notes.reference.to_json(), "text": NOTES_MD,
            "citations": [{"label": "memory/notes.md#L1-L4", "reference": notes.reference.to_json(),
                           "startLine": 1, "endLine": 4}],
            "truncated": False, "from": 1, "lines": 3}  # the file's 3 lines (the chunker's citation counts 4)
        second = await lease.get({"reference": notes.reference.to_json(), "from": 2, "lines": 1})
        assert (second.text, second.from_, second.lines, second.truncated, second.next_from) == (
            "line two about tomatoes\n", 2, 1, True, 3)
        other_lease = await open_lease(runtime, agent="other")
        theirs = (await other_lease.search({"query": "secret", "minScore": 0})).hits[0]
        assert theirs.excerpt.strip() == "- other agent secret about tomatoes"
        assert (await lease.get({"reference": theirs.reference.to_json()})).to_json() == {"status": "not_found"}
        stale = dict(notes.reference.to_json(), revision="0" * 64)
        assert (await lease.get({"reference": stale})).to_json() == {"status": "not_found"}
        assert (await lease.get({"reference": {"providerId": PID, "id": "MEMORY.md"}})).to_json() == {
            "status": "not_found"}

    run(go())


def test_acceptance_24_get_semantics(indexed: MemoryCoreConfig) -> None:
    _get_semantics(indexed)


def test_checklist_14_get_ok_or_not_found_denial_throws(indexed: MemoryCoreConfig) -> None:
    _get_semantics(indexed)

    async def denied() -> None:
        lease = await open_lease(MemoryCoreProviderRuntime(indexed), HostAuthority(operation="memory-wiki.query"))
        with pytest.raises(Forbidden, match="^memory-core: memory access denied: host operations cannot read "
                                            "stored memories$"):
            await lease.get({"reference": {"providerId": PID, "id": "0" * 64}})

    run(denied())


def test_get_of_a_session_hit_is_the_indexed_text_that_core_get_returns_for_its_lines(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    noisy = [json.dumps({"type": "session", "id": "s"}),
             json.dumps({"type": "message", "message": {"role": "user", "content": "which soil for tomatoes?"}}),
             json.dumps({"type": "message", "message": {"role": "assistant", "content": [
                 {"type": "toolCall", "name": "exec", "arguments": {"cmd": "cat secret-soil.txt"}}]}}),
             json.dumps({"type": "message", "message": {"role": "user", "content": "[cron:weekly] tomatoes report"}}),
             "{not json",
             json.dumps({"type": "message", "message": {"role": "assistant", "content": "Loam suits tomatoes."}})]
    (tmp_path / "ws-sessions" / "noisy.jsonl").write_text("\n".join(noisy) + "\n")
    cfg = lexical_config(tmp_path, ws)
    with MemoryCore(config=cfg) as core:
        core.index()

        async def go() -> Any:
            lease = await open_lease(MemoryCoreProviderRuntime(cfg))
            page = await lease.search({"query": "loam soil tomatoes", "minScore": 0, "sources": ["sessions"]})
            hit = _first(page, "sessions/noisy.jsonl")
            return await lease.get({"reference": hit.reference.to_json()})

        got = run(go())
        citation = got.citations[0]
        assert (citation.label, got.text) == ("sessions/noisy.jsonl#L2-L6",
                                              "User: which soil for tomatoes?\nAssistant: Loam suits tomatoes.")
        read = core.get("sessions/noisy.jsonl", from_=citation.start_line,
                        lines=citation.end_line - citation.start_line + 1)
        assert read.text == got.text


def test_checklist_15_from_and_lines_bounds(indexed: MemoryCoreConfig) -> None:
    async def go() -> None:
        lease = await open_lease(MemoryCoreProviderRuntime(indexed))
        notes = _first(await lease.search({"query": "tomatoes", "minScore": 0, "sources": ["memory"]}),
                       "memory/notes.md")
        ref = notes.reference.to_json()
        tail = await lease.get({"reference": ref, "from": 3})
        assert tail.to_json() | {"citations": None} == {"status": "ok", "reference": ref,
                                                         "text": "line three about tomatoes\n", "citations": None,
                                                         "truncated": False, "from": 3, "lines": 1}
        with pytest.raises(InvalidRequest, match="^from must be a positive integer$"):
            await lease.get({"reference": ref, "from": 0})
        with pytest.raises(InvalidRequest, match="^lines must be a positive integer$"):
            await lease.get({"reference": ref, "lines": 0})

    run(go())


def test_get_of_a_range_with_a_blank_line_is_the_same_text_as_core_get(tmp_path: Path) -> None:
    """One range rule for every surface: ``lines: 2`` over "# Travel plans" and a blank line gives both lines, with
    the newline that ends each, on gateway v2 (the provider's get) as on the CLI's ``get``."""
    ws = make_workspace(tmp_path, memory_md="# Travel plans\n\nLisbon in May.\nPorto in June.\n")
    cfg = lexical_config(tmp_path, ws)
    with MemoryCore(config=cfg) as core:
        core.index()

        async def go() -> Any:
            lease = await open_lease(MemoryCoreProviderRuntime(cfg))
            hit = _first(await lease.search({"query": "travel plans", "minScore": 0}), "MEMORY.md")
            return [(await lease.get({"reference": hit.reference.to_json(), **kw})).to_json()
                    for kw in ({"lines": 2}, {"from": 3})]

        two, tail = run(go())
        assert (two["text"], two["from"], two["lines"], two["truncated"], two["nextFrom"]) == (
            "# Travel plans\n\n", 1, 2, True, 3)
        assert (tail["text"], tail["from"], tail["lines"], tail["truncated"]) == (
            "Lisbon in May.\nPorto in June.\n", 3, 2, False)
        read = core.get("MEMORY.md", lines=2)
        assert (read.text, read.lines, read.next_from) == (
            "# Travel plans\n\n\n[More content available. Use from=3 to continue.]", 2, 3)
        assert read.text[: -len(read.notice)] == two["text"]
        assert core.get("MEMORY.md", from_=3).text == tail["text"]


def test_checklist_16_stale_revision_is_not_found_never_other_content(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("- tomatoes version one\n")
    cfg = MemoryCoreConfig(workspace=str(ws), state_dir=str(tmp_path / "state"))
    core = MemoryCore(config=cfg)
    core.index()

    async def go() -> None:
        lease = await open_lease(MemoryCoreProviderRuntime(cfg))
        ref = (await lease.search({"query": "tomatoes", "minScore": 0})).hits[0].reference
        (ws / "MEMORY.md").write_text("- tomatoes version two\n")
        await lease.refresh()
        assert (await lease.get({"reference": ref.to_json()})).to_json() == {"status": "not_found"}
        fresh = (await lease.search({"query": "tomatoes", "minScore": 0})).hits[0]
        assert fresh.excerpt.strip() == "- tomatoes version two" and fresh.reference.revision != ref.revision

    run(go())


def test_checklist_17_other_agent_or_provider_reference_not_found(indexed: MemoryCoreConfig) -> None:
    _get_semantics(indexed)
    runtime = MemoryCoreProviderRuntime(indexed)

    async def raw_provider() -> dict:
        raw = (await runtime.open(MemoryProviderOpenParams(agent_id="main", context=Caller(OPERATOR).context))).provider
        return (await raw.get({"reference": {"providerId": "records", "id": "0" * 64}})).to_json()

    assert run(raw_provider()) == {"status": "not_found"}

    async def host_rejects() -> None:
        lease = await open_lease(runtime)
        with pytest.raises(InvalidRequest, match="^memory reference belongs to a different provider$"):
            await lease.get({"reference": {"providerId": "records", "id": "0" * 64}})

    run(host_rejects())


# --- acceptance 25 / checklist 18, 19, 21 -----------------------------------------------------------

def test_acceptance_25_health_hygiene_and_degradation(near_far: MemoryCoreConfig, indexed: MemoryCoreConfig) -> None:
    runtime = MemoryCoreProviderRuntime(near_far)

    async def go() -> None:
        lease = await open_lease(runtime)
        EMBEDDER.fail = True
        with pytest.raises(ProviderUnavailable) as info:
            await lease.search({"query": "alpha"})
        assert str(info.value) == EMBEDDING_FAILED
        health = (await lease.health()).to_json()
        assert (health["status"], health["message"]) == ("degraded", DEGRADED_EMBEDDING)
        assert "/secret" not in json.dumps(health) and near_far.workspace not in json.dumps(health)
        EMBEDDER.fail = False
        await lease.search({"query": "alpha"})
        assert (await lease.health()).status == "ready"
        # authority lapses during embedding: rejected before any store read
        caller = Caller(OPERATOR)
        lapsing = await open_lease(runtime, caller=caller)
        calls = engine_spy(runtime)
        EMBEDDER.during = lambda: caller.__setattr__("revoked", "caller authority lapsed")
        with pytest.raises(AuthorityNotCurrent, match="^caller authority lapsed$"):
            # a query not embedded before: "alpha"'s vector is in the engine's query cache now
            await lapsing.search({"query": "alpha gamma"})
        assert calls == []
        EMBEDDER.during = None
        # disabled agent
        quiet = await open_lease(MemoryCoreProviderRuntime(indexed), agent="quiet")
        assert (quiet.provider, quiet.error, quiet.adapter) == (None, "Memory is disabled for this agent.", "native")

    run(go())
    # an unreadable store: unavailable, without the error detail
    Path(near_far.db_path("main")).write_bytes(b"not sqlite" * 100)

    async def broken() -> dict:
        lease = await open_lease(MemoryCoreProviderRuntime(near_far))
        return (await lease.health()).to_json()

    health = run(broken())
    assert (health["status"], health["message"]) == ("unavailable", UNAVAILABLE_STORE)
    assert "sqlite" not in json.dumps(health).lower().replace("memory-core", "")


def test_health_is_unavailable_while_a_settings_change_pauses_search(tmp_path: Path) -> None:
    """An index built with other settings refuses every search ("run index --force"): health must
    not say ready meanwhile, and says the same fix."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("- tomatoes grow best in full sun\n")
    built = MemoryCoreConfig(workspace=str(ws), state_dir=str(tmp_path / "state"))
    with MemoryCore(config=built) as core:
        core.index()
    changed = built.model_copy(update={"chunking": built.chunking.model_copy(update={"tokens": 200})})

    async def go() -> tuple[dict, BaseException]:
        lease = await open_lease(MemoryCoreProviderRuntime(changed))
        health = (await lease.health()).to_json()
        with pytest.raises(Exception) as refused:
            await lease.search({"query": "tomatoes"})
        return health, refused.value

    health, refused = run(go())
    assert (health["status"], health["message"]) == ("unavailable", str(refused))
    assert str(refused).endswith("; set `chunking.tokens = 400` in the config to search it as built, or run "
                                 "`memory-core index` to rebuild it with the configuration")
    with MemoryCore(config=changed) as core:  # after the rebuild: ready again
        core.index(force=True)
    assert run(_health(MemoryCoreProviderRuntime(changed)))["status"] == "ready"


def test_health_is_degraded_after_a_failed_sync(indexed: MemoryCoreConfig) -> None:
    runtime = MemoryCoreProviderRuntime(indexed)
    fresh = runtime.core("main").freshness  # the serving engine's scheduler
    fresh.last_sync_error = "sync failed: disk full at /secret/path"
    health = run(_health(runtime))
    assert (health["status"], health["message"]) == ("degraded", DEGRADED_SYNC)
    assert "/secret" not in json.dumps(health)
    fresh.last_sync_error = None
    assert run(_health(runtime))["status"] == "ready"
    runtime.close_all()


async def _health(runtime: MemoryCoreProviderRuntime) -> dict:
    return (await (await open_lease(runtime)).health()).to_json()


def test_checklist_18_health_answers_every_authenticated_caller(indexed: MemoryCoreConfig) -> None:
    runtime = MemoryCoreProviderRuntime(indexed)

    async def go() -> list[str]:
        out = []
        for authority, purpose in ((OPERATOR, "cli"), (owner_session(), None),
                                   (SessionAuthority(session_key="agent:main:x", sandboxed=True), None),
                                   (HostAuthority(operation="status"), "status")):
            lease = await open_lease(runtime, authority, purpose=purpose)
            out.append((await lease.health()).status)
        return out

    assert run(go()) == ["ready", "ready", "ready", "ready"]


def test_checklist_19_health_reveals_no_content_paths_or_counts(indexed: MemoryCoreConfig) -> None:
    runtime = MemoryCoreProviderRuntime(indexed)

    async def go() -> tuple[dict, dict]:
        reader = (await (await open_lease(runtime)).health()).to_json()
        host = (await (await open_lease(runtime, HostAuthority(operation="status"), purpose="status")).health()).to_json()
        return reader, host

    reader, host = run(go())
    assert reader == {"status": "ready", "details": {"backend": "memory-core", "provider": "none",
                                                     "sources": ["memory", "sessions"], "files": 4, "chunks": 6,
                                                     "revision": reader["details"]["revision"]}}
    assert host == {"status": "ready", "details": {"backend": "memory-core", "provider": "none",
                                                   "sources": ["memory", "sessions"]}}
    assert str(indexed.state_dir) not in json.dumps(reader) and "tomatoes" not in json.dumps(reader)


def test_checklist_21_assert_current_before_each_io(indexed: MemoryCoreConfig) -> None:
    runtime = MemoryCoreProviderRuntime(indexed)

    async def go() -> None:
        caller = Caller(OPERATOR)
        raw = (await runtime.open(MemoryProviderOpenParams(agent_id="main", context=caller.context))).provider
        calls = engine_spy(runtime)
        before = caller.checks
        await raw.search({"query": "tomatoes", "minScore": 0})
        assert caller.checks - before >= 3  # entry, before and after the engine read (the hits carry their rows)
        caller.revoked = "revoked before search"
        with pytest.raises(AuthorityNotCurrent, match="^revoked before search$"):
            await raw.search({"query": "tomatoes"})
        with pytest.raises(AuthorityNotCurrent, match="^revoked before search$"):
            await raw.get({"reference": {"providerId": PID, "id": "0" * 64}})
        with pytest.raises(AuthorityNotCurrent, match="^revoked before search$"):
            await raw.health()
        assert len(calls) == 1

    run(go())


def test_checklist_22_signal_honoured(indexed: MemoryCoreConfig) -> None:
    runtime = MemoryCoreProviderRuntime(indexed)
    signal = AbortSignal()

    async def go() -> None:
        raw = (await runtime.open(MemoryProviderOpenParams(agent_id="main",
                                                           context=Caller(OPERATOR, signal).context))).provider
        calls = engine_spy(runtime)
        signal.abort("request aborted by the client")
        with pytest.raises(Aborted, match="^request aborted by the client$"):
            await raw.search({"query": "tomatoes"})
        assert calls == []

    run(go())


def test_checklist_22_abort_during_embedding_rejects_before_store_read(near_far: MemoryCoreConfig) -> None:
    runtime = MemoryCoreProviderRuntime(near_far)
    signal = AbortSignal()

    async def go() -> None:
        raw = (await runtime.open(MemoryProviderOpenParams(agent_id="main",
                                                           context=Caller(OPERATOR, signal).context))).provider
        calls = engine_spy(runtime)
        EMBEDDER.during = lambda: signal.abort("client went away")  # fired from the embedding thread
        with pytest.raises(Aborted, match="^client went away$"):
            await raw.search({"query": "alpha"})
        assert calls == []

    try:
        run(go())
    finally:
        EMBEDDER.during = None


# --- checklist 1-7 ---------------------------------------------------------------------------------

def test_checklist_01_runtime_open_returns_provider_or_error(indexed: MemoryCoreConfig) -> None:
    runtime = MemoryCoreProviderRuntime(indexed)
    ctx = Caller(OPERATOR).context
    ok = run(runtime.open(MemoryProviderOpenParams(agent_id="main", context=ctx)))
    assert ok.provider is not None and ok.error is None
    missing = run(runtime.open(MemoryProviderOpenParams(agent_id="nobody", context=ctx)))
    assert missing.to_json() == {"provider": None, "error": "Memory is disabled for this agent."}
    assert callable(runtime.open)


def test_checklist_02_open_binds_agent_and_context(indexed: MemoryCoreConfig) -> None:
    runtime = MemoryCoreProviderRuntime(indexed)

    async def go() -> tuple[list[str], list[str], list[str]]:
        main = await open_lease(runtime, agent="main")
        other = await open_lease(runtime, agent="other")
        denied = await open_lease(runtime, SessionAuthority(session_key="agent:main:main", sandboxed=False))
        q = {"query": "tomatoes", "minScore": 0, "sources": ["memory"]}
        return excerpts(await main.search(q)), excerpts(await other.search(q)), excerpts(await denied.search(q))

    main, other, denied = run(go())
    assert "- other agent secret about tomatoes" in other and "- other agent secret about tomatoes" not in main
    assert "- gardening tips for tomatoes" in main and denied == []


def test_checklist_03_capabilities_declared(indexed: MemoryCoreConfig) -> None:
    lease = run(open_lease(MemoryCoreProviderRuntime(indexed)))
    assert lease.capabilities.to_json() == {"sources": ["memory", "sessions"], "pagination": True,
                                            "candidates": ["trigger", "project"], "projectFilter": True}
    assert is_valid_capabilities(CAPABILITIES.to_json())


def test_checklist_04_search_get_health_close_are_functions(indexed: MemoryCoreConfig) -> None:
    raw = run(MemoryCoreProviderRuntime(indexed).open(
        MemoryProviderOpenParams(agent_id="main", context=Caller(OPERATOR).context))).provider
    assert all(callable(getattr(raw, m)) for m in ("search", "get", "health", "close"))


def test_checklist_05_candidates_iff_declared(indexed: MemoryCoreConfig) -> None:
    raw = run(MemoryCoreProviderRuntime(indexed).open(
        MemoryProviderOpenParams(agent_id="main", context=Caller(OPERATOR).context))).provider
    assert callable(raw.candidates) and raw.capabilities.candidates == ("trigger", "project")


def test_checklist_06_references_carry_provider_id(indexed: MemoryCoreConfig) -> None:
    async def go() -> set[str]:
        lease = await open_lease(MemoryCoreProviderRuntime(indexed))
        page = await lease.search({"query": "tomatoes", "minScore": 0})
        ids = {h.reference.provider_id for h in page.hits}
        ids |= {c.reference.provider_id for h in page.hits for c in h.citations}
        got = await lease.get({"reference": page.hits[0].reference.to_json()})
        ids |= {got.reference.provider_id} | {c.reference.provider_id for c in got.citations}
        cands = await lease.candidates({"kind": "trigger"})
        return ids | {h.reference.provider_id for h in cands.hits}

    assert run(go()) == {PID}


def test_checklist_07_hits_have_stable_reference_and_excerpt(indexed: MemoryCoreConfig) -> None:
    async def go() -> tuple[list[str], list[str], list[Any]]:
        runtime = MemoryCoreProviderRuntime(indexed)
        a = await (await open_lease(runtime)).search({"query": "tomatoes", "minScore": 0})
        b = await (await open_lease(runtime)).search({"query": "tomatoes", "minScore": 0})
        return [h.reference.id for h in a.hits], [h.reference.id for h in b.hits], a.hits

    first, second, hits = run(go())
    assert first == second and len(first) == 4 and all(re.fullmatch(r"[0-9a-f]{64}", i) for i in first)
    assert all(isinstance(h.excerpt, str) and h.excerpt for h in hits)


# --- checklist 10-13 ---------------------------------------------------------------------------------

def test_checklist_10_lexical_only_skips_query_embedding(near_far: MemoryCoreConfig) -> None:
    async def go() -> tuple[int, list[str]]:
        lease = await open_lease(MemoryCoreProviderRuntime(near_far))
        EMBEDDER.calls = 0
        page = await lease.search({"query": "alpha", "minScore": 0, "lexicalOnly": True})
        return EMBEDDER.calls, excerpts(page)

    assert run(go()) == (0, ["- alpha near row"])


def test_checklist_11_pagination_cursor(indexed: MemoryCoreConfig) -> None:
    now = [1000.0]
    runtime = MemoryCoreProviderRuntime(indexed, clock=lambda: now[0])

    async def go() -> None:
        lease = await open_lease(runtime)
        q = {"query": "tomatoes", "minScore": 0}
        everything = [h.reference.id for h in (await lease.search({**q, "maxResults": 50})).hits]
        assert len(everything) == 4
        pages, cursor = [], None
        while True:
            page = await lease.search({**q, "maxResults": 3, **({"cursor": cursor} if cursor else {})})
            pages.append([h.reference.id for h in page.hits])
            cursor = page.next_cursor
            if cursor is None:
                break
        assert [len(p) for p in pages] == [3, 1] and sum(pages, []) == everything
        first = await lease.search({**q, "maxResults": 2})
        with pytest.raises(InvalidRequest) as info:
            await lease.search({"query": "gardening", "minScore": 0, "cursor": first.next_cursor})
        assert str(info.value) == ("memory-core: the cursor belongs to a different search (query, sources, filters "
                                   "or caller changed); run the search again without a cursor")
        with pytest.raises(InvalidRequest, match="^memory-core: the cursor is not a valid memory-core cursor; "):
            await lease.search({**q, "cursor": first.next_cursor[:-2] + "xx"})
        now[0] += 61
        with pytest.raises(CursorExpired) as info:
            await lease.search({**q, "maxResults": 2, "cursor": first.next_cursor})
        assert str(info.value) == ("pagination cursor expired (cursors pin their index generation for 60 s) "
                                   "or is unknown; run the search again without a cursor")

    run(go())


def test_search_pages_come_from_the_search_hits_alone(indexed: MemoryCoreConfig, monkeypatch: Any) -> None:
    """No second chunk read and no score parts: each hit carries its hash and recall metadata, and
    cursor pages render the pinned hits."""
    runtime = MemoryCoreProviderRuntime(indexed)

    def no_reread(conn: Any, ids: list[str], **_: Any) -> dict:
        raise AssertionError(f"search re-read chunk rows {ids}")

    monkeypatch.setattr(rt, "read_chunks", no_reread)
    engine = runtime.engine("main")
    real, asked = engine.search_steps, []  # every search of the engine goes through its steps
    engine.search_steps = lambda *a, **k: asked.append(k.get("details", False)) or real(*a, **k)  # type: ignore

    async def go() -> tuple[list[dict], list[dict]]:
        lease = await open_lease(runtime)
        q = {"query": "tomatoes", "minScore": 0}
        everything = [h.to_json() for h in (await lease.search({**q, "maxResults": 50})).hits]
        first = await lease.search({**q, "maxResults": 3})
        second = await lease.search({**q, "maxResults": 3, "cursor": first.next_cursor})
        return everything, [h.to_json() for h in first.hits + second.hits]

    everything, paged = run(go())

    def unscored(hits: list[dict]) -> list[dict]:  # transcript scores decay with the clock between searches
        return [{k: v for k, v in h.items() if k != "score"} for h in hits]

    assert unscored(paged) == unscored(everything) and asked == [False, False]  # the cursor page searches nothing
    assert [h["citations"][0]["label"] for h in everything] == [
        "MEMORY.md#L7-L8", "memory/notes.md#L1-L4", f"sessions/{OLDER_ID}.jsonl#L1", f"sessions/{ANCHOR_ID}.jsonl#L1"]
    assert [h["automaticRecall"]["eligible"] for h in everything] == [True, True, False, False]
    hashes = dict(runtime.reader("main").run(lambda c: c.execute("SELECT id, hash FROM memory_index_chunks").fetchall()))
    assert [h["reference"]["revision"] for h in everything] == [hashes[h["reference"]["id"]] for h in everything]


def test_v2_ranks_the_candidates_of_one_page_and_keeps_the_window_for_its_cursors(indexed: MemoryCoreConfig) -> None:
    """A v2 search sizes its candidates as v1 does for one page (``maxResults`` x multiplier) and
    keeps up to the window of them for the cursor pages: its first page is v1's answer."""
    runtime = MemoryCoreProviderRuntime(indexed)
    engine = runtime.engine("main")
    real, asked = engine.search_steps, []  # every search of the engine goes through its steps
    engine.search_steps = lambda *a, **k: asked.append(  # type: ignore[method-assign]
        (k["max_results"], k["candidates_for"])) or real(*a, **k)

    async def go() -> list[str]:
        lease = await open_lease(runtime)
        page = await lease.search({"query": "tomatoes", "minScore": 0, "maxResults": 2})
        return [h.citations[0].label for h in page.hits]

    first_page = run(go())
    v2_asked = list(asked)
    v1 = runtime.core("main").search("tomatoes", max_results=2, min_score=0)
    assert v2_asked == [(24, 2)] and first_page == [h.citation for h in v1] == ["MEMORY.md#L7-L8", "memory/notes.md#L1-L4"]


def test_checklist_12_project_filter(indexed: MemoryCoreConfig) -> None:
    async def go() -> tuple[list[str], list[str], list[str]]:
        lease = await open_lease(MemoryCoreProviderRuntime(indexed))
        q = {"query": "repo uv builds deploy", "minScore": 0, "sources": ["memory"]}
        other = excerpts(await lease.search({**q, "activeProjectKeys": ["repo-y"]}))
        active = excerpts(await lease.search({**q, "activeProjectKeys": ["repo-x"]}))
        cands = excerpts(await lease.candidates({"kind": "project", "activeProjectKeys": ["repo-y"]}))
        return other, active, cands

    other, active, cands = run(go())
    assert "- the repo uses uv for builds" not in other and "- deploy checklist lives in the runbook" in other
    assert "- the repo uses uv for builds" in active
    assert cands == []


def test_checklist_13_coverage_and_single_warning(indexed: MemoryCoreConfig) -> None:
    async def go() -> tuple[dict, dict]:
        runtime = MemoryCoreProviderRuntime(indexed)
        full = await (await open_lease(runtime)).search({"query": "gardening", "minScore": 0})
        sandboxed = await (await open_lease(runtime, owner_session(sandboxed=True))).search(
            {"query": "tomatoes", "minScore": 0})
        return full.to_json(), sandboxed.to_json()

    full, sandboxed = run(go())
    assert full["coverage"] == "complete" and "warning" not in full
    assert sandboxed["warning"] == "memory-core: session transcripts were not searched: the session is sandboxed"
    assert {h["source"] for h in sandboxed["hits"]} == {"memory"}


# --- checklist 20 --------------------------------------------------------------------------------------

def test_checklist_20_close_releases_only_this_lease(indexed: MemoryCoreConfig) -> None:
    runtime = MemoryCoreProviderRuntime(indexed)

    async def go() -> list[str]:
        caller = Caller(OPERATOR)
        # the provider's own lease, not the host wrapper (which refuses closed handles by itself)
        a = (await runtime.open(MemoryProviderOpenParams(agent_id="main", context=caller.context))).provider
        b = await open_lease(runtime)
        await a.search({"query": "tomatoes"})
        caller.revoked = "revoked"
        await a.close()  # tolerated after revocation
        await a.close()
        caller.revoked = None  # authority back: the lease stays released
        with pytest.raises(AuthorityNotCurrent, match="^memory-core: this memory provider lease is closed$"):
            await a.search({"query": "tomatoes"})
        return excerpts(await b.search({"query": "gardening", "minScore": 0}))

    assert run(go()) == ["- gardening tips for tomatoes"]


# --- checklist 25-27: sandbox, recall pass, eligibility --------------------------------------------------

def test_checklist_25_sandboxed_sessions_read_memory_only(indexed: MemoryCoreConfig) -> None:
    async def go() -> tuple[set[str], set[str]]:
        runtime = MemoryCoreProviderRuntime(indexed)
        open_ = await (await open_lease(runtime, owner_session())).search({"query": "tomatoes", "minScore": 0})
        boxed = await (await open_lease(runtime, owner_session(sandboxed=True))).search(
            {"query": "tomatoes", "minScore": 0})
        return {h.source for h in open_.hits}, {h.source for h in boxed.hits}

    assert run(go()) == ({"memory", "sessions"}, {"memory"})


def _recall(corpus: str) -> ConversationRecallContext:
    return ConversationRecallContext(anchor_session_key="agent:main:main", scope="same-agent-private", corpus=corpus)


def test_checklist_26_conversation_recall_admits_only_what_the_pass_allows(indexed: MemoryCoreConfig) -> None:
    runtime = MemoryCoreProviderRuntime(indexed)
    q = {"query": "tomatoes", "minScore": 0}

    async def labels(authority: Any) -> list[str]:
        page = await (await open_lease(runtime, authority)).search(q)
        return sorted(h.citations[0].label.split("#")[0] for h in page.hits)

    async def go() -> None:
        sessions_pass = owner_session(session_id=ANCHOR_ID, conversation_recall=_recall("sessions"))
        assert await labels(sessions_pass) == [f"sessions/{OLDER_ID}.jsonl"]  # anchor transcript excluded
        configured = owner_session(session_id=ANCHOR_ID, conversation_recall=_recall("configured"))
        assert await labels(configured) == ["MEMORY.md", "memory/notes.md", f"sessions/{OLDER_ID}.jsonl"]
        # a requester that is not the anchor (nor its active-memory child): invalid pass
        stranger = owner_session(session_key="agent:main:elsewhere", conversation_recall=_recall("sessions"))
        page = await (await open_lease(runtime, stranger)).search(q)
        assert page.to_json() == {"hits": [], "coverage": "complete", "warning":
                                  "memory-core: stored memories were not searched: the conversation recall pass "
                                  "does not apply to this session"}
        stranger_cfg = owner_session(session_key="agent:main:elsewhere", conversation_recall=_recall("configured"))
        assert await labels(stranger_cfg) == ["MEMORY.md", "memory/notes.md"]
        # the anchor's active-memory child: its own id is not the anchor's, so transcripts cannot be vetted
        child = owner_session(session_key="agent:main:main:active-memory:0123456789ab",
                              conversation_recall=_recall("configured"))
        assert await labels(child) == ["MEMORY.md", "memory/notes.md"]

    run(go())


def test_checklist_27_automatic_recall_only_for_trusted_entries(indexed: MemoryCoreConfig) -> None:
    async def go() -> dict[str, Any]:
        lease = await open_lease(MemoryCoreProviderRuntime(indexed))
        page = await lease.search({"query": "tomatoes deploy repo", "minScore": 0})
        return {h.citations[0].label: h.automatic_recall.to_json() for h in page.hits}

    recall = run(go())
    assert recall["MEMORY.md#L1-L3"] == {"eligible": True, "triggers": "deploy", "importance": 7.0}
    assert recall["MEMORY.md#L4-L6"] == {"eligible": True, "projectKeys": ["repo-x"], "importance": 9.0}
    assert recall[f"sessions/{OLDER_ID}.jsonl#L1"] == {"eligible": False}


def test_checklist_28_trigger_recall_participation(indexed: MemoryCoreConfig) -> None:
    assert "memory" in CAPABILITIES.sources and "trigger" in CAPABILITIES.candidates
    assert rt.RECALL_TOOL_NAMES == ("memory_search", "memory_get")

    async def go() -> list[dict]:
        lease = await open_lease(MemoryCoreProviderRuntime(indexed), owner_session())
        return [h.to_json() for h in (await lease.candidates({"kind": "trigger"})).hits]

    hits = run(go())
    assert [(h["excerpt"].strip(), h["automaticRecall"]) for h in hits] == [
        ("- deploy checklist lives in the runbook", {"eligible": True, "triggers": "deploy", "importance": 7.0})]


def test_checklist_29_project_recall_participation(indexed: MemoryCoreConfig) -> None:
    async def go() -> list[dict]:
        lease = await open_lease(MemoryCoreProviderRuntime(indexed))
        return [h.to_json() for h in (await lease.candidates({"kind": "project", "limit": 48,
                                                               "activeProjectKeys": ["repo-x"]})).hits]

    hits = run(go())
    assert [(h["excerpt"].strip(), h["automaticRecall"]) for h in hits] == [
        ("- the repo uses uv for builds", {"eligible": True, "projectKeys": ["repo-x"], "importance": 9.0})]
    assert CAPABILITIES.project_filter is True


def test_checklist_30_declares_sources_voice_and_wiki_request(indexed: MemoryCoreConfig) -> None:
    async def go() -> set[str]:
        lease = await open_lease(MemoryCoreProviderRuntime(indexed), owner_session())
        page = await lease.search({"query": "tomatoes", "minScore": 0, "sources": ["sessions"]})
        return {h.source for h in page.hits}

    assert run(go()) == {"sessions"}


def test_checklist_31_refresh_reindexes(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("- first fact\n")
    cfg = MemoryCoreConfig(workspace=str(ws), state_dir=str(tmp_path / "state"))
    MemoryCore(config=cfg).index()

    async def go() -> tuple[list[str], list[str]]:
        lease = await open_lease(MemoryCoreProviderRuntime(cfg), HostAuthority(operation="post-compaction-refresh"))
        reader = await open_lease(MemoryCoreProviderRuntime(cfg))
        before = excerpts(await reader.search({"query": "zucchini", "minScore": 0}))
        (ws / "memory" / "new.md").write_text("zucchini harvest notes\n")
        await lease.refresh()
        return before, excerpts(await reader.search({"query": "zucchini", "minScore": 0}))

    assert run(go()) == ([], ["zucchini harvest notes"])


def test_provider_conversation_audience_denied_for_get(indexed: MemoryCoreConfig) -> None:
    conv = AUDIENCES.mint_conversation("main", "agent:main:group:g1", ANCHOR_ID)
    authority = SessionAuthority(session_key="agent:main:group:g1", sandboxed=False, audience=conv.audience)
    assert isinstance(authority.audience, ConversationAudience)

    async def go() -> None:
        lease = await open_lease(MemoryCoreProviderRuntime(indexed), authority)
        with pytest.raises(Forbidden, match="memory access denied"):
            await lease.get({"reference": {"providerId": PID, "id": "0" * 64}})

    run(go())


def test_provider_before_first_index(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    cfg = MemoryCoreConfig(workspace=str(ws), state_dir=str(tmp_path / "state"))

    async def go() -> tuple[dict, dict, dict]:
        lease = await open_lease(MemoryCoreProviderRuntime(cfg))
        return ((await lease.health()).to_json(), (await lease.search({"query": "anything"})).to_json(),
                (await lease.get({"reference": {"providerId": PID, "id": "0" * 64}})).to_json())

    health, page, got = run(go())
    assert health == {"status": "degraded", "message": "The memory index has not been built yet. Run `memory-core "
                      "index`.", "details": {"backend": "memory-core", "provider": "none", "sources": ["memory"]}}
    assert page == {"hits": [], "coverage": "complete"} and got == {"status": "not_found"}


def test_provider_reader_reopens_after_atomic_reindex(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("- kiwi one\n")
    cfg = MemoryCoreConfig(workspace=str(ws), state_dir=str(tmp_path / "state"))
    MemoryCore(config=cfg).index()
    runtime = MemoryCoreProviderRuntime(cfg)

    async def go() -> tuple[list[str], list[str]]:
        lease = await open_lease(runtime)
        before = excerpts(await lease.search({"query": "kiwi", "minScore": 0}))
        (ws / "MEMORY.md").write_text("- kiwi two\n")
        core = MemoryCore(config=cfg)
        core.index(force=True)  # builds a new file and swaps it in
        core.close()
        return before, excerpts(await lease.search({"query": "kiwi", "minScore": 0}))

    assert run(go()) == (["- kiwi one"], ["- kiwi two"])


def test_provider_concurrent_leases_share_one_runtime(indexed: MemoryCoreConfig) -> None:
    runtime = MemoryCoreProviderRuntime(indexed)

    async def one(i: int) -> list[str]:
        lease = await open_lease(runtime, agent="main" if i % 2 == 0 else "other")
        try:
            return excerpts(await lease.search({"query": "tomatoes", "minScore": 0, "sources": ["memory"]}))
        finally:
            await lease.close()

    async def go() -> list[list[str]]:
        return list(await asyncio.gather(*(one(i) for i in range(16))))

    results = run(go())
    assert all(r == results[0] for r in results[0::2]) and all(r == results[1] for r in results[1::2])
    assert "- other agent secret about tomatoes" in results[1] and "- gardening tips for tomatoes" in results[0]
    assert "- other agent secret about tomatoes" not in results[0] and "- gardening tips for tomatoes" not in results[1]
