"""Host-minted memory audiences (upstream `src/plugins/memory-runtime.ts`).

Only :meth:`AudienceRegistry.mint_owner_private` / :meth:`mint_conversation` / :meth:`delegate`
create audiences the host accepts. Acceptance is an identity check (``registry[id(obj)] is obj``):
a structurally identical object built anywhere else - a forged audience - is rejected, and so is
an audience presented for a session other than the one it was minted for. Each minted audience
has a record that can go stale (session lifecycle change), be released by its owner, or report
that its currency is temporarily unavailable; delegated records also fail when their parent does.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from memory_core.errors import AuthorityNotCurrent, Forbidden
from memory_core.contract.types import (
    ConversationAudience,
    MemoryCallerContext,
    OwnerPrivateAudience,
    SessionAuthority,
)

MemoryAudience = OwnerPrivateAudience | ConversationAudience

NOT_MINTED = "memory audience was not minted by this host"
OTHER_SESSION = "memory audience is bound to a different session"
NOT_CURRENT = "memory audience is no longer current"
RELEASED = "memory audience was released by its owner"
CURRENCY_UNAVAILABLE = "memory audience currency is unavailable; retry the operation"


@dataclass
class AudienceRecord:
    """Lifecycle of one minted audience; ``parent`` is the record a delegated child borrows."""

    state: Literal["current", "stale", "released"] = "current"
    parent: AudienceRecord | None = None
    currency_check: Callable[[], None] | None = None   # raises when currency cannot be verified now
    pending: list[asyncio.Future[None]] = field(default_factory=list)


@dataclass
class AudienceGrant:
    """A minted audience plus the owner-held release."""

    audience: MemoryAudience
    release: Callable[[], None]


class AudienceRegistry:
    """The host's registry of minted audiences. One per host process (see :data:`HOST_AUDIENCES`)."""

    def __init__(self) -> None:
        self._minted: dict[int, weakref.ref[MemoryAudience]] = {}
        self._records: dict[int, AudienceRecord] = {}
        self._sessions: dict[int, str] = {}

    # --- minting ------------------------------------------------------------------------------

    def mint_owner_private(self, agent_id: str, session_key: str, *,
                           currency_check: Callable[[], None] | None = None) -> AudienceGrant:
        return self._mint(OwnerPrivateAudience(agent_id=agent_id), session_key,
                          AudienceRecord(currency_check=currency_check))

    def mint_conversation(self, agent_id: str, root_session_key: str, root_session_id: str, *,
                          session_key: str | None = None,
                          currency_check: Callable[[], None] | None = None) -> AudienceGrant:
        """A group/conversation root's audience, bound to ``session_key`` (default: the root)."""
        audience = ConversationAudience(agent_id=agent_id, session_key=root_session_key,
                                        session_id=root_session_id)
        return self._mint(audience, session_key or root_session_key,
                          AudienceRecord(currency_check=currency_check))

    def delegate(self, audience: MemoryAudience, child_session_key: str) -> AudienceGrant:
        """Mint a copy bound to a child session; it goes stale when the parent or child does."""
        self.assert_current(audience)
        parent = self._records[id(audience)]
        child = audience.model_copy()
        return self._mint(child, child_session_key, AudienceRecord(parent=parent))

    def _mint(self, audience: MemoryAudience, session_key: str, record: AudienceRecord) -> AudienceGrant:
        key = id(audience)
        self._minted[key] = weakref.ref(audience, lambda _ref, k=key: self._forget(k))
        self._records[key] = record
        self._sessions[key] = session_key

        def release() -> None:
            if record.state == "current":
                record.state = "released"

        return AudienceGrant(audience=audience, release=release)

    def _forget(self, key: int) -> None:
        self._minted.pop(key, None)
        self._records.pop(key, None)
        self._sessions.pop(key, None)

    # --- host lifecycle -----------------------------------------------------------------------

    def mark_stale(self, audience: MemoryAudience) -> None:
        """A session reset or lifecycle change: the grant is permanently stale."""
        record = self._record(audience)
        if record.state == "current":
            record.state = "stale"

    def begin_publication(self, audience: MemoryAudience) -> Callable[[], None]:
        """Start a pending session publication; reads wait for it. Returns the completion callable."""
        record = self._record(audience)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        record.pending.append(future)

        def done() -> None:
            if future in record.pending:
                record.pending.remove(future)
            if not future.done():
                future.set_result(None)

        return done

    # --- checks -------------------------------------------------------------------------------

    def is_host_audience(self, value: object) -> bool:
        ref = self._minted.get(id(value))
        return ref is not None and ref() is value

    def assert_session(self, audience: object, session_key: str | None) -> None:
        if not self.is_host_audience(audience):
            raise Forbidden(NOT_MINTED)
        if self._sessions.get(id(audience)) != session_key:
            raise Forbidden(OTHER_SESSION)

    def assert_current(self, audience: object) -> None:
        if not self.is_host_audience(audience):
            raise Forbidden(NOT_MINTED)
        record: AudienceRecord | None = self._records[id(audience)]
        while record is not None:
            if record.state == "released":
                raise AuthorityNotCurrent(RELEASED)
            if record.state == "stale":
                raise AuthorityNotCurrent(NOT_CURRENT)
            if record.currency_check is not None:
                try:
                    record.currency_check()
                except Exception as exc:  # noqa: BLE001 - any failure means "cannot verify now"
                    raise AuthorityNotCurrent(CURRENCY_UNAVAILABLE) from exc
            record = record.parent

    def prepare_read(self, audience: object) -> Awaitable[None] | None:
        """Pending publications to wait for before a read (None when there are none)."""
        self.assert_current(audience)
        pending: list[asyncio.Future[None]] = []
        record: AudienceRecord | None = self._records[id(audience)]
        while record is not None:
            pending.extend(f for f in record.pending if not f.done())
            record = record.parent
        if not pending:
            return None
        return asyncio.gather(*pending)

    def _record(self, audience: object) -> AudienceRecord:
        if not self.is_host_audience(audience):
            raise Forbidden(NOT_MINTED)
        return self._records[id(audience)]

    # --- whole-caller checks (assertMemoryCallerCurrent / prepareMemoryCallerRead) -------------

    def assert_caller_current(self, context: MemoryCallerContext) -> None:
        """The caller's own check, its audience's session binding and currency, then its signal."""
        context.assert_current()
        authority = context.authority
        if isinstance(authority, SessionAuthority) and authority.audience is not None:
            self.assert_session(authority.audience, authority.session_key)
            self.assert_current(authority.audience)
        if context.signal is not None:
            context.signal.throw_if_aborted()

    def prepare_caller_read(self, context: MemoryCallerContext) -> Awaitable[None] | None:
        if context.signal is not None:
            context.signal.throw_if_aborted()
        authority = context.authority
        if isinstance(authority, SessionAuthority) and authority.audience is not None:
            self.assert_session(authority.audience, authority.session_key)
            return self.prepare_read(authority.audience)
        return None


HOST_AUDIENCES = AudienceRegistry()
"""The process-wide registry; hosts that need isolation (tests) create their own."""
