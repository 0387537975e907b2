"""The provider-neutral memory contract (upstream `src/plugins/memory-provider-types.ts`) as pydantic models.

JSON field names are the spec's camelCase; optional fields are omitted, never null: serialise with
:func:`to_json` (``model_dump(by_alias=True, exclude_none=True)``). Python attributes are snake_case.
Objects that never cross a wire (the caller context with its ``assert_current`` callable, the abort
signal, open parameters and results) are plain dataclasses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from memory_core.errors import Aborted

MemorySource = Literal["memory", "sessions"]
CandidateKind = Literal["trigger", "project"]
MEMORY_SOURCES: tuple[str, ...] = ("memory", "sessions")
CANDIDATE_KINDS: tuple[str, ...] = ("trigger", "project")


class ContractModel(BaseModel):
    """Base of every contract shape: camelCase aliases, unknown fields refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    def to_json(self) -> dict[str, Any]:
        """The wire form: camelCase keys, optional fields omitted rather than null."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


def to_json(value: Any) -> Any:
    """Serialise a contract model (or a list/dict of them) to its camelCase wire form."""
    if isinstance(value, BaseModel):
        return value.model_dump(by_alias=True, exclude_none=True, mode="json")
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items() if v is not None}
    return value


# --- references, citations (upstream `src/plugins/memory-provider-types.ts`) --------------------------------


class MemoryReference(ContractModel):
    """An opaque identity scoped to its provider; never an authorization grant."""

    model_config = ConfigDict(frozen=True)
    provider_id: str
    id: str
    revision: str | None = None
    fragment: str | None = None


class MemoryCitation(ContractModel):
    label: str
    reference: MemoryReference | None = None
    url: str | None = None
    start_line: int | None = None
    end_line: int | None = None


# --- search (upstream `src/plugins/memory-provider-types.ts`) -----------------------------------------------


class MemorySearchRequest(ContractModel):
    query: str
    max_results: int | None = None
    min_score: float | None = None
    cursor: str | None = None
    sources: list[MemorySource] | None = None
    lexical_only: bool | None = None
    active_project_keys: list[str] | None = None


class AutomaticRecall(ContractModel):
    """Provider-owned trusted selection facts; a missing eligibility never permits injection."""

    eligible: bool
    project_keys: list[str] | None = None
    triggers: str | None = None
    importance: float | None = None


class MemorySearchHit(ContractModel):
    reference: MemoryReference
    excerpt: str
    score: float | None = None
    source: str | None = None
    citations: list[MemoryCitation] | None = None
    automatic_recall: AutomaticRecall | None = None


class MemorySearchPage(ContractModel):
    hits: list[MemorySearchHit]
    next_cursor: str | None = None
    coverage: Literal["complete", "partial"] | None = None
    warning: str | None = None


# --- get (upstream `src/plugins/memory-provider-types.ts`) --------------------------------------------------


class MemoryGetRequest(ContractModel):
    reference: MemoryReference
    from_: int | None = Field(default=None, alias="from")
    lines: int | None = None


class MemoryGetOk(ContractModel):
    status: Literal["ok"] = "ok"
    reference: MemoryReference
    text: str
    citations: list[MemoryCitation] | None = None
    truncated: bool | None = None
    from_: int | None = Field(default=None, alias="from")
    lines: int | None = None
    next_from: int | None = None


class MemoryGetNotFound(ContractModel):
    status: Literal["not_found"] = "not_found"


MemoryGetResult = Annotated[Union[MemoryGetOk, MemoryGetNotFound], Field(discriminator="status")]


# --- health, candidates, capabilities (upstream `src/plugins/memory-provider-types.ts`) ---------------------


class MemoryHealth(ContractModel):
    status: Literal["ready", "degraded", "unavailable"]
    message: str | None = None
    details: dict[str, Any] | None = None


class MemoryCandidateRequest(ContractModel):
    kind: CandidateKind
    limit: int | None = None
    active_project_keys: list[str] | None = None


class MemoryProviderCapabilities(ContractModel):
    """Frozen: the host binds a snapshot and its arrays are tuples."""

    model_config = ConfigDict(frozen=True)
    sources: tuple[MemorySource, ...]
    pagination: bool
    candidates: tuple[CandidateKind, ...]
    project_filter: bool


# --- caller authority (upstream `src/plugins/memory-provider-types.ts`) -------------------------------------


class ConversationRecallContext(ContractModel):
    model_config = ConfigDict(frozen=True)
    anchor_session_key: str
    scope: Literal["same-agent-private"]
    corpus: Literal["sessions", "configured"]


class OwnerPrivateAudience(ContractModel):
    model_config = ConfigDict(frozen=True)
    kind: Literal["owner-private"] = "owner-private"
    agent_id: str


class ConversationAudience(ContractModel):
    model_config = ConfigDict(frozen=True)
    kind: Literal["conversation"] = "conversation"
    agent_id: str
    session_key: str
    session_id: str


MemoryAudience = Union[OwnerPrivateAudience, ConversationAudience]


class OperatorAuthority(ContractModel):
    model_config = ConfigDict(frozen=True)
    kind: Literal["operator"] = "operator"
    scopes: tuple[str, ...]
    conn_id: str | None = None


class SessionAuthority(ContractModel):
    """A session caller. ``audience`` must be the very object the host minted (identity checked)."""

    model_config = ConfigDict(frozen=True, revalidate_instances="never")
    kind: Literal["session"] = "session"
    session_key: str
    sandboxed: bool
    conversation_recall: ConversationRecallContext | None = None
    session_id: str | None = None
    audience: Annotated[MemoryAudience, Field(discriminator="kind")] | None = None


class HostAuthority(ContractModel):
    model_config = ConfigDict(frozen=True)
    kind: Literal["host"] = "host"
    operation: str


MemoryCallerAuthority = Union[OperatorAuthority, SessionAuthority, HostAuthority]


# --- in-process objects (never serialised) --------------------------------------------------


class AbortSignal:
    """A minimal AbortSignal: ``abort()`` once, ``throw_if_aborted()`` before work, listeners on abort."""

    def __init__(self) -> None:
        self.aborted = False
        self.reason: str | None = None
        self._listeners: list[Callable[[], None]] = []

    def abort(self, reason: str = "This operation was aborted") -> None:
        if self.aborted:
            return
        self.aborted = True
        self.reason = reason
        for listener in self._listeners:
            listener()
        self._listeners.clear()

    def throw_if_aborted(self) -> None:
        if self.aborted:
            raise Aborted(self.reason or "This operation was aborted")

    def add_listener(self, listener: Callable[[], None]) -> None:
        if self.aborted:
            listener()
        else:
            self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)


@dataclass
class MemoryCallerContext:
    """Who is asking. ``assert_current()`` raises once the caller (or its audience) is no longer current."""

    authority: OperatorAuthority | SessionAuthority | HostAuthority
    assert_current: Callable[[], None]
    signal: AbortSignal | None = None


OpenPurpose = Literal["default", "status", "cli"]


@dataclass
class MemoryProviderOpenParams:
    agent_id: str
    context: MemoryCallerContext
    purpose: OpenPurpose | None = None
    cfg: Any = None


@dataclass
class MemoryProviderOpenResult:
    """``provider is None`` with an ``error`` says "unavailable for this caller or agent"."""

    provider: Any | None
    error: str | None = None
    provider_id: str | None = None
    adapter: Literal["native", "legacy"] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"provider": None if self.provider is None else "<handle>"}
        if self.error is not None:
            out["error"] = self.error
        if self.provider_id is not None:
            out["providerId"] = self.provider_id
        if self.adapter is not None:
            out["adapter"] = self.adapter
        return out
