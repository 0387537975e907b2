"""The legacy adapter (upstream `src/plugins/memory-provider-adapter.ts`) and session-hit authorization
(upstream `extensions/memory-core/src/session-search-visibility.ts`).

A legacy owner registers a file-shaped *runtime* (``get_memory_search_manager`` plus an optional
``authorize_search_hits`` hook) instead of a provider runtime. :func:`adapt_legacy_memory_provider`
presents its manager through the neutral contract: fixed capabilities (memory+sessions, no
pagination, project filter, no candidates), manager receivers kept, virtual paths kept verbatim,
``read_file`` as the read-authorization boundary, host paths redacted from health, and only
transient (``cli``/``status``) managers closed by a lease. Session-source hits pass only through the
runtime's ``authorize_search_hits``; without that hook every session hit is withheld (fail closed).

Python shape of the legacy contract (upstream camelCase methods, snake_case here; sync or async):
``runtime.get_memory_search_manager(cfg=, agent_id=, purpose=) -> {"manager", "error"?}``,
``runtime.authorize_search_hits(cfg=, agent_id=, requester_session_key=, sandboxed=, hits=,
trusted_agent_scope=, conversation_recall=)``; ``manager.search(query, opts) -> [MemorySearchResult
dicts]``, ``manager.read_file(rel_path=, from_=, lines=)``, ``manager.status() -> dict``, optional
``manager.sync(reason=)`` and ``manager.close()``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from host_facades.chunking.pipeline import strip_annotation_carriers
from host_facades.db.chunk_rows import triggers_text
from host_facades.ranking.rank import citation_for, project_keys_of
from memory_core.errors import ProviderContractError
from memory_core.slot.awaiting import resolve
from memory_core.contract.types import (
    AutomaticRecall,
    ConversationRecallContext,
    MemoryCitation,
    MemoryGetNotFound,
    MemoryGetOk,
    MemoryGetRequest,
    MemoryHealth,
    MemoryProviderCapabilities,
    MemoryProviderOpenParams,
    MemoryProviderOpenResult,
    MemoryReference,
    MemorySearchHit,
    MemorySearchPage,
    MemorySearchRequest,
    SessionAuthority,
)

LEGACY_NO_CURSORS = "legacy memory search does not support cursors"
MANAGER_NO_SEARCH = "memory runtime manager must implement search"
MANAGER_NO_READ_FILE = "memory runtime manager must implement readFile"

LEGACY_CAPABILITIES = MemoryProviderCapabilities(
    sources=("memory", "sessions"), pagination=False, candidates=(), project_filter=True)

class LegacyModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")


class MemoryProvenance(LegacyModel):
    origin_class: Literal["owner", "agent", "untrusted", "system"]
    session_kind: str | None = None
    observed_at: int | float | None = None
    supersedes_key: str | None = None


class MemorySearchResult(LegacyModel):
    """The legacy file-shaped hit (upstream `src/memory-host-sdk/host/types.ts`), as a legacy manager
    returns it; memory-core's own hits take
    this shape from ``surfaces.render.legacy_result`` and, without ``citation``, are the v1 ``results[]``."""

    path: str
    start_line: int
    end_line: int
    score: float
    vector_score: float | None = None
    text_score: float | None = None
    snippet: str
    source: Literal["memory", "sessions"]
    importance: float | None = None
    triggers: str | list[str] | None = None
    project_key: str | None = None
    origin_class: str | None = None
    citation: str | None = None
    provenance: MemoryProvenance | None = None


def is_automatic_memory_entry_eligible(hit: MemorySearchResult) -> bool:
    """``isAutomaticMemoryEntryEligible``: owner or agent provenance only."""
    return hit.provenance is not None and hit.provenance.origin_class in ("owner", "agent")


def as_memory_search_result(value: Any) -> MemorySearchResult:
    """One hit of a legacy manager's ``search`` as a :class:`MemorySearchResult`."""
    return value if isinstance(value, MemorySearchResult) else MemorySearchResult.model_validate(value)


def convert_legacy_hit(provider_id: str, hit: MemorySearchResult) -> MemorySearchHit:
    """upstream `src/plugins/memory-provider-adapter.ts` hit conversion: path reference with an
    ``L<start>-L<end>`` fragment, one citation."""
    reference = MemoryReference(provider_id=provider_id, id=hit.path,
                                fragment=f"L{hit.start_line}-L{hit.end_line}")
    project_keys = project_keys_of(hit.project_key)
    triggers = triggers_text(hit.triggers)
    eligible = (hit.source == "memory" and is_automatic_memory_entry_eligible(hit)
                and project_keys != [])
    return MemorySearchHit(
        reference=reference,
        excerpt=strip_annotation_carriers(hit.snippet),
        score=hit.score,
        source=hit.source,
        citations=[MemoryCitation(label=hit.citation or citation_for(hit.path, hit.start_line, hit.end_line,
                                                                     always_range=True),
                                  reference=reference, start_line=hit.start_line, end_line=hit.end_line)],
        automatic_recall=AutomaticRecall(eligible=eligible, project_keys=project_keys, triggers=triggers,
                                         importance=hit.importance),
    )


def redact_legacy_health_details(status: dict[str, Any]) -> dict[str, Any]:
    """Drop host paths (workspaceDir, dbPath, extraPaths, vector.extensionPath) from a legacy status."""
    rest = {k: v for k, v in status.items() if k not in ("workspaceDir", "dbPath", "extraPaths")}
    if isinstance(rest.get("vector"), dict):
        rest["vector"] = {k: v for k, v in rest["vector"].items() if k != "extensionPath"}
    return rest


async def authorize_search_hits(runtime: Any, *, cfg: Any, agent_id: str, authority: Any,
                                hits: Sequence[MemorySearchResult]) -> list[MemorySearchResult]:
    """Pass hits through the runtime's hook, or withhold every session hit when it has none."""
    session = authority if isinstance(authority, SessionAuthority) else None
    hook = getattr(runtime, "authorize_search_hits", None)
    if not callable(hook):
        return [h for h in hits if h.source != "sessions"]
    out = await resolve(hook(
        cfg=cfg, agent_id=agent_id,
        requester_session_key=session.session_key if session else None,
        sandboxed=session.sandboxed if session else False,
        trusted_agent_scope=session is None,
        conversation_recall=session.conversation_recall if session else None,
        hits=list(hits)))
    return [as_memory_search_result(h) for h in out]


class LegacyMemoryProvider:
    """A legacy manager seen through the neutral contract. It has no ``candidates`` member."""

    capabilities = LEGACY_CAPABILITIES

    def __init__(self, runtime: Any, manager: Any, provider_id: str, params: MemoryProviderOpenParams) -> None:
        self._runtime = runtime
        self._manager = manager
        self._provider_id = provider_id
        self._params = params
        self._session = params.context.authority if isinstance(params.context.authority, SessionAuthority) else None
        if callable(getattr(manager, "sync", None)):
            self.refresh = self._refresh

    def _assert_current(self) -> None:
        context = self._params.context
        context.assert_current()
        if context.signal is not None:
            context.signal.throw_if_aborted()

    async def search(self, request: MemorySearchRequest) -> MemorySearchPage:
        if request.cursor is not None:
            raise ProviderContractError(LEGACY_NO_CURSORS)
        if not callable(getattr(self._manager, "search", None)):
            raise ProviderContractError(MANAGER_NO_SEARCH)
        opts: dict[str, Any] = {
            "max_results": request.max_results, "min_score": request.min_score,
            "sources": list(request.sources) if request.sources is not None else None,
            "lexical_only": request.lexical_only,
            "active_project_keys": list(request.active_project_keys) if request.active_project_keys else None,
            "session_key": self._session.session_key if self._session else None,
            "signal": self._params.context.signal,
        }
        raw = await resolve(self._manager.search(request.query, {k: v for k, v in opts.items() if v is not None}))
        hits = [as_memory_search_result(h) for h in raw]
        self._assert_current()
        authorized = await authorize_search_hits(self._runtime, cfg=self._params.cfg, agent_id=self._params.agent_id,
                                                 authority=self._params.context.authority, hits=hits)
        self._assert_current()
        return MemorySearchPage(hits=[convert_legacy_hit(self._provider_id, h) for h in authorized],
                                coverage="complete")

    async def get(self, request: MemoryGetRequest) -> MemoryGetOk | MemoryGetNotFound:
        # read_file is the legacy read-authorization boundary; search visibility never grants a read.
        if not callable(getattr(self._manager, "read_file", None)):
            raise ProviderContractError(MANAGER_NO_READ_FILE)
        read = await resolve(self._manager.read_file(rel_path=request.reference.id, from_=request.from_,
                                                     lines=request.lines))
        if isinstance(read, BaseModel):
            read = read.model_dump(by_alias=True)
        if read.get("status") == "not_found":
            return MemoryGetNotFound()
        return MemoryGetOk(reference=MemoryReference(provider_id=self._provider_id, id=read["path"]),
                           text=read["text"], truncated=read.get("truncated"),
                           from_=read.get("from", read.get("from_")), lines=read.get("lines"),
                           next_from=read.get("nextFrom", read.get("next_from")))

    async def health(self) -> MemoryHealth:
        status = await resolve(self._manager.status())
        error = status.get("lastSyncError")
        return MemoryHealth(status="degraded" if error else "ready", message=error or None,
                            details={"legacy": redact_legacy_health_details(status)})

    async def _refresh(self) -> None:
        await resolve(self._manager.sync(reason="provider-refresh"))

    async def close(self) -> None:
        if self._params.purpose in ("cli", "status") and callable(getattr(self._manager, "close", None)):
            await resolve(self._manager.close())


async def acquire_legacy_manager(runtime: Any, *, cfg: Any, agent_id: str, purpose: Any) -> tuple[Any, str | None]:
    """``runtime.getMemorySearchManager``: ``(manager, None)``, or ``(None, error)`` when it gave none."""
    acquired = await resolve(runtime.get_memory_search_manager(cfg=cfg, agent_id=agent_id, purpose=purpose))
    if not isinstance(acquired, dict):
        return acquired, None
    return acquired.get("manager"), acquired.get("error")


async def adapt_legacy_memory_provider(runtime: Any, provider_id: str,
                                       params: MemoryProviderOpenParams) -> MemoryProviderOpenResult:
    """``adaptLegacyMemoryProvider``: acquire the manager for this agent/purpose and wrap it."""
    manager, error = await acquire_legacy_manager(runtime, cfg=params.cfg, agent_id=params.agent_id,
                                                  purpose=params.purpose)
    if manager is None:
        return MemoryProviderOpenResult(provider=None, error=error)
    return MemoryProviderOpenResult(provider=LegacyMemoryProvider(runtime, manager, provider_id, params))


# --- memory-core's session visibility authorizer (upstream `extensions/memory-core/src/session-search-visibility.ts`)

_CHILD_SUFFIX = re.compile(r"^(?P<anchor>.+):active-memory:[0-9a-f]{12}$")


class SessionVisibilityAuthorizer:
    """``filterMemorySearchHitsBySessionVisibility`` for a legacy runtime's ``authorize_search_hits``.

    ``transcript_of(hit)`` resolves a session hit to ``(agent_id, session_key)`` or None when its
    identity cannot be resolved; ``is_private(session_key)`` says whether a session (and its
    aliases) is a private conversation; ``visible(requester_key, session_key)`` is the
    session-visibility guard for requester-scoped callers (absent: nothing is visible).
    """

    def __init__(self, *, transcript_of: Callable[[MemorySearchResult], tuple[str, str] | None],
                 agent_of_session: Callable[[str], str | None],
                 is_private: Callable[[str], bool] = lambda _k: False,
                 visible: Callable[[str, str], bool] | None = None) -> None:
        self._transcript_of = transcript_of
        self._agent_of_session = agent_of_session
        self._is_private = is_private
        self._visible = visible

    def _valid_pass(self, recall: ConversationRecallContext, requester: str | None, sandboxed: bool,
                    scoped_agent: str | None) -> bool:
        if sandboxed or recall.scope != "same-agent-private" or recall.corpus not in ("sessions", "configured"):
            return False
        anchor = recall.anchor_session_key
        child = _CHILD_SUFFIX.match(requester or "")
        if requester != anchor and not (child and child.group("anchor") == anchor):
            return False
        return self._agent_of_session(anchor) == scoped_agent and self._is_private(anchor)

    def __call__(self, *, cfg: Any = None, agent_id: str | None, requester_session_key: str | None,
                 sandboxed: bool, hits: list[MemorySearchResult], trusted_agent_scope: bool = False,
                 conversation_recall: ConversationRecallContext | None = None) -> list[MemorySearchResult]:
        recall = conversation_recall
        session_hits = [h for h in hits if h.source == "sessions"]
        if not session_hits:
            return [] if recall is not None and recall.corpus == "sessions" else list(hits)
        scoped = agent_id or (self._agent_of_session(requester_session_key) if requester_session_key else None)
        if scoped and trusted_agent_scope and not requester_session_key and recall is None:
            return [h for h in hits if h.source != "sessions" or self._owned_by(h, scoped)]
        if recall is not None:
            if not self._valid_pass(recall, requester_session_key, sandboxed, scoped):
                return [h for h in hits if h.source != "sessions"] if recall.corpus == "configured" else []
            out = []
            for h in hits:
                if h.source != "sessions":
                    if recall.corpus == "configured":
                        out.append(h)
                    continue
                ident = self._transcript_of(h)
                if ident and ident[0] == scoped and ident[1] != recall.anchor_session_key:
                    out.append(h)
            return out
        out = []
        for h in hits:
            if h.source != "sessions":
                out.append(h)
                continue
            ident = self._transcript_of(h)
            if (requester_session_key and self._visible is not None and ident is not None
                    and ident[0] == scoped and self._visible(requester_session_key, ident[1])):
                out.append(h)
        return out

    def _owned_by(self, hit: MemorySearchResult, agent_id: str) -> bool:
        ident = self._transcript_of(hit)
        return ident is not None and ident[0] == agent_id
