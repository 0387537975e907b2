"""Host enforcement (provider-runtime.md §2): acceptance cases 1-10 and checklist items 33-40.

The providers here are small hand-written implementations of the provider contract: they exist to
exercise the *host*, whose behaviour is what these cases specify. Every rejection asserts the exact
upstream message.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from memory_core.errors import AuthorityNotCurrent, CapabilityNotDeclared, Forbidden, InvalidRequest, ProviderContractError
from memory_core.slot.audiences import AudienceRegistry
from memory_core.slot.enforcement import (
    BoundMemoryProvider,
    MemoryCapabilityRegistration,
    MemoryHost,
    PluginInstance,
    refresh_memory_provider_with_handoff,
)
from memory_core.contract.types import (
    AbortSignal,
    HostAuthority,
    MemoryCallerContext,
    MemoryProviderCapabilities,
    MemoryProviderOpenParams,
    MemoryProviderOpenResult,
    OperatorAuthority,
    OwnerPrivateAudience,
    SessionAuthority,
)

PID = "records"
INVALID_HANDLE = ("memory provider must implement search, get, health, close, "
                  "and valid capabilities with matching candidates")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class Caller:
    """A caller whose own currency the test controls."""

    def __init__(self, authority: Any, signal: AbortSignal | None = None) -> None:
        self.revoked: str | None = None
        self.context = MemoryCallerContext(authority=authority, assert_current=self.assert_current, signal=signal)

    def assert_current(self) -> None:
        if self.revoked:
            raise AuthorityNotCurrent(self.revoked)

    def revoke(self, message: str = "caller authority revoked") -> None:
        self.revoked = message


def operator() -> Caller:
    return Caller(OperatorAuthority(scopes=("operator.read",), conn_id="c1"))


def hit(id_: str = "record", provider_id: str = PID, **extra: Any) -> dict[str, Any]:
    return {"reference": {"providerId": provider_id, "id": id_}, "excerpt": f"text of {id_}", **extra}


class Records:
    """A contract-conforming provider that counts calls; options shape its behaviour per test."""

    def __init__(self, *, caps: Any = "default", hits: list[dict] | None = None, with_candidates: bool = False,
                 gate: asyncio.Event | None = None, get_result: Any = None) -> None:
        self.calls: dict[str, int] = {"search": 0, "get": 0, "health": 0, "close": 0, "candidates": 0}
        if caps == "default":
            caps = {"sources": ["memory"], "pagination": False, "candidates": [], "projectFilter": False}
        if caps is not None:
            self.capabilities = caps
        self._hits = hits if hits is not None else [hit()]
        self._gate = gate
        self._get_result = get_result or {"status": "ok", "reference": {"providerId": PID, "id": "record"},
                                          "text": "full text"}
        if with_candidates:
            self.candidates = self._candidates
        self.last_search: Any = None

    async def search(self, request: Any) -> dict:
        self.calls["search"] += 1
        self.last_search = request
        if self._gate is not None:
            await self._gate.wait()
        return {"hits": self._hits, "coverage": "complete"}

    async def get(self, request: Any) -> dict:
        self.calls["get"] += 1
        return self._get_result

    async def health(self) -> dict:
        self.calls["health"] += 1
        return {"status": "ready"}

    async def _candidates(self, request: Any) -> dict:
        self.calls["candidates"] += 1
        return {"hits": []}

    async def close(self) -> None:
        self.calls["close"] += 1


class Runtime:
    """A provider runtime whose ``open`` returns the given provider (or runs a hook first)."""

    def __init__(self, provider: Any = None, *, before: Any = None, result: Any = None) -> None:
        self.provider = provider
        self.before = before
        self.result = result
        self.opened: list[MemoryProviderOpenParams] = []

    async def open(self, params: MemoryProviderOpenParams) -> Any:
        self.opened.append(params)
        if self.before is not None:
            await self.before(params)
        if self.result is not None:
            return self.result
        return MemoryProviderOpenResult(provider=self.provider)


class LegacyRuntimeSpy:
    def __init__(self) -> None:
        self.acquired = 0

    def get_memory_search_manager(self, **_: Any) -> dict:
        self.acquired += 1
        return {"manager": None, "error": "legacy"}


def native_host(runtime: Any, *, audiences: AudienceRegistry | None = None, legacy: Any = None,
                instance: PluginInstance | None = None) -> MemoryHost:
    return MemoryHost(MemoryCapabilityRegistration(plugin_id=PID, provider_runtime=runtime, runtime=legacy,
                                                   instance=instance),
                      audiences=audiences or AudienceRegistry())


async def open_bound(provider: Records, caller: Caller | None = None, **kw: Any) -> BoundMemoryProvider:
    host = native_host(Runtime(provider), **kw)
    result = await host.open(MemoryProviderOpenParams(agent_id="main", context=(caller or operator()).context))
    assert result.provider_id == PID and result.adapter == "native"
    return result.provider


async def expect_open_rejects(provider: Records, message: str) -> None:
    host = native_host(Runtime(provider))
    with pytest.raises(Exception) as info:
        await host.open(MemoryProviderOpenParams(agent_id="main", context=operator().context))
    assert str(info.value) == message


# --- acceptance 1: invalid capability declarations fail at open -------------------------------

@pytest.mark.parametrize("caps,with_candidates", [
    (None, False),
    ({"sources": [], "pagination": False, "candidates": [], "projectFilter": False}, False),
    ({"sources": ["memory", "notes"], "pagination": False, "candidates": [], "projectFilter": False}, False),
    ({"sources": ["memory"], "pagination": False, "candidates": ["trigger"], "projectFilter": False}, False),
    ({"sources": ["memory"], "pagination": False, "candidates": [], "projectFilter": False}, True),
], ids=["no-capabilities", "empty-sources", "unknown-source", "declared-without-function", "function-without-declared"])
def test_acceptance_01_invalid_capabilities_fail_at_open(caps: Any, with_candidates: bool) -> None:
    provider = Records(caps=caps, with_candidates=with_candidates)
    run(expect_open_rejects(provider, INVALID_HANDLE))
    assert provider.calls["close"] == 1


def test_checklist_36_validation_after_open_closes_exactly_once() -> None:
    provider = Records(caps={"sources": ["memory"], "pagination": "yes", "candidates": [], "projectFilter": False})
    run(expect_open_rejects(provider, INVALID_HANDLE))
    assert provider.calls["close"] == 1
    missing_get = Records()
    missing_get.get = None  # type: ignore[assignment]
    run(expect_open_rejects(missing_get, INVALID_HANDLE))
    assert missing_get.calls["close"] == 1


# --- acceptance 2/3: undeclared options refused before provider code ---------------------------

SEARCH_REFUSALS = [
    ({"query": "q", "sources": ["sessions"]}, "memory provider does not support the sessions source capability"),
    ({"query": "q", "cursor": "next"}, "memory provider does not support the pagination capability"),
    ({"query": "q", "activeProjectKeys": ["repo"]}, "memory provider does not support the project filter capability"),
]


async def _search_refusals() -> Records:
    provider = Records()
    bound = await open_bound(provider)
    for request, message in SEARCH_REFUSALS:
        with pytest.raises(CapabilityNotDeclared) as info:
            await bound.search(request)
        assert str(info.value) == message
    return provider


def test_acceptance_02_undeclared_search_options_refused() -> None:
    provider = run(_search_refusals())
    assert provider.calls["search"] == 0


async def _candidate_refusals() -> Records:
    provider = Records(caps={"sources": ["memory"], "pagination": False, "candidates": ["trigger"],
                             "projectFilter": False}, with_candidates=True)
    bound = await open_bound(provider)
    with pytest.raises(CapabilityNotDeclared) as info:
        await bound.candidates({"kind": "project"})
    assert str(info.value) == "memory provider does not support the project candidates capability"
    with pytest.raises(CapabilityNotDeclared) as info:
        await bound.candidates({"kind": "trigger", "activeProjectKeys": ["repo"]})
    assert str(info.value) == "memory provider does not support the project filter capability"
    assert (await bound.candidates({"kind": "trigger"})).hits == []
    return provider


def test_acceptance_03_undeclared_candidates_refused() -> None:
    provider = run(_candidate_refusals())
    assert provider.calls["candidates"] == 1  # only the declared, unfiltered request reached it


def test_checklist_37_frozen_snapshot_and_refusals_before_provider_code() -> None:
    caps = {"sources": ["memory"], "pagination": False, "candidates": [], "projectFilter": False}
    provider = Records(caps=caps)
    bound = run(open_bound(provider))
    caps["sources"].append("sessions")  # the provider mutating its declaration changes nothing
    assert bound.capabilities == MemoryProviderCapabilities(sources=("memory",), pagination=False, candidates=(),
                                                            project_filter=False)
    with pytest.raises(Exception):
        bound.capabilities.pagination = True  # type: ignore[misc]
    assert isinstance(bound.capabilities.sources, tuple) and isinstance(bound.capabilities.candidates, tuple)
    assert run(_search_refusals()).calls["search"] == 0
    assert run(_candidate_refusals()).calls["candidates"] == 1


# --- acceptance 4: foreign references ----------------------------------------------------------

async def _foreign() -> None:
    provider = Records()
    bound = await open_bound(provider)
    with pytest.raises(InvalidRequest) as info:
        await bound.get({"reference": {"providerId": "other", "id": "record"}})
    assert str(info.value) == "memory reference belongs to a different provider"
    assert provider.calls["get"] == 0
    for bad in ([hit(provider_id="other")],
                [hit(citations=[{"label": "x", "reference": {"providerId": "other", "id": "r"}}])]):
        other = await open_bound(Records(hits=bad))
        with pytest.raises(InvalidRequest) as info:
            await other.search({"query": "q"})
        assert str(info.value) == "memory reference belongs to a different provider"
    wrong_get = await open_bound(Records(get_result={"status": "ok", "text": "t",
                                                     "reference": {"providerId": "other", "id": "record"}}))
    with pytest.raises(InvalidRequest) as info:
        await wrong_get.get({"reference": {"providerId": PID, "id": "record"}})
    assert str(info.value) == "memory reference belongs to a different provider"
    not_found = await open_bound(Records(get_result={"status": "not_found"}))
    assert (await not_found.get({"reference": {"providerId": PID, "id": "x"}})).to_json() == {"status": "not_found"}


def test_acceptance_04_foreign_reference_refused() -> None:
    run(_foreign())


def test_checklist_38_foreign_references_rejected_both_ways() -> None:
    run(_foreign())


# --- acceptance 5: revocation mid-call discards the result ------------------------------------

async def _revoked_mid_search() -> Records:
    gate = asyncio.Event()
    provider = Records(gate=gate)
    caller = operator()
    bound = await open_bound(provider, caller)
    task = asyncio.create_task(bound.search({"query": "q"}))
    await asyncio.sleep(0)
    caller.revoke("caller authority revoked")
    gate.set()
    with pytest.raises(AuthorityNotCurrent) as info:
        await task
    assert str(info.value) == "caller authority revoked"
    return provider


def test_acceptance_05_revocation_mid_call_discards_result() -> None:
    provider = run(_revoked_mid_search())
    assert provider.calls["search"] == 1


async def _currency_before_and_after() -> None:
    instance = PluginInstance()
    provider = Records()
    caller = operator()
    bound = await open_bound(provider, caller, instance=instance)
    assert [h.reference.id for h in (await bound.search({"query": "q"})).hits] == ["record"]
    instance.accepting_calls = False
    with pytest.raises(AuthorityNotCurrent) as info:
        await bound.health()
    assert str(info.value) == "memory provider instance is no longer current"
    assert provider.calls["health"] == 0
    instance.accepting_calls = True
    caller.revoke("gone")
    with pytest.raises(AuthorityNotCurrent, match="^gone$"):
        await bound.get({"reference": {"providerId": PID, "id": "record"}})
    assert provider.calls["get"] == 0


def test_checklist_39_currency_rechecked_before_and_after_every_call() -> None:
    run(_currency_before_and_after())
    run(_revoked_mid_search())


# --- acceptance 6: close semantics ------------------------------------------------------------

async def _close_twice() -> Records:
    provider = Records()
    caller = operator()
    bound = await open_bound(provider, caller)
    await bound.close()
    caller.revoke("revoked after close")  # release after revocation still works (and is a no-op here)
    await bound.close()
    for call in (bound.search({"query": "q"}), bound.health(),
                 bound.get({"reference": {"providerId": PID, "id": "r"}})):
        with pytest.raises(AuthorityNotCurrent) as info:
            await call
        assert str(info.value) == "memory provider handle is closed"
    return provider


def test_acceptance_06_close_semantics() -> None:
    provider = run(_close_twice())
    assert provider.calls == {"search": 0, "get": 0, "health": 0, "close": 1, "candidates": 0}


def test_checklist_40_close_idempotent_and_closed_handle_rejects() -> None:
    provider = run(_close_twice())
    assert provider.calls["close"] == 1

    async def close_after_revocation() -> int:
        p = Records()
        caller = operator()
        bound = await open_bound(p, caller)
        caller.revoke()
        await bound.close()
        return p.calls["close"]

    assert run(close_after_revocation()) == 1


# --- acceptance 7: lease acquired after revocation is released --------------------------------

async def _open_after_revocation() -> tuple[Records, str]:
    provider = Records()
    caller = operator()

    async def revoke_during_open(_params: Any) -> None:
        caller.revoke("caller authority revoked during open")

    host = native_host(Runtime(provider, before=revoke_during_open))
    with pytest.raises(AuthorityNotCurrent) as info:
        await host.open(MemoryProviderOpenParams(agent_id="main", context=caller.context))
    return provider, str(info.value)


def test_acceptance_07_lease_acquired_after_revocation_is_released() -> None:
    provider, message = run(_open_after_revocation())
    assert message == "caller authority revoked during open"
    assert provider.calls["close"] == 1


# --- acceptance 8: no legacy fallback ---------------------------------------------------------

class Denying:
    async def open(self, params: Any) -> Any:
        raise RuntimeError("provider denied")


async def _no_fallback() -> LegacyRuntimeSpy:
    legacy = LegacyRuntimeSpy()
    ctx = operator().context
    with pytest.raises(RuntimeError, match="^provider denied$"):
        await native_host(Denying(), legacy=legacy).open(MemoryProviderOpenParams(agent_id="main", context=ctx))
    result = await native_host(Runtime(result={"provider": None, "error": "unavailable"}), legacy=legacy).open(
        MemoryProviderOpenParams(agent_id="main", context=ctx))
    assert (result.provider, result.error, result.adapter, result.provider_id) == (None, "unavailable", "native", PID)
    for malformed in (None, {}, object()):
        with pytest.raises(ProviderContractError) as info:
            await native_host(malformed, legacy=legacy).open(MemoryProviderOpenParams(agent_id="main", context=ctx))
        assert str(info.value) == "memory providerRuntime must implement open"
    return legacy


def test_acceptance_08_no_legacy_fallback() -> None:
    assert run(_no_fallback()).acquired == 0


def test_checklist_35_provider_runtime_preferred_never_falls_back() -> None:
    legacy = run(_no_fallback())
    assert legacy.acquired == 0
    provider = Records()
    result = run(native_host(Runtime(provider), legacy=legacy).open(
        MemoryProviderOpenParams(agent_id="main", context=operator().context)))
    assert result.adapter == "native" and legacy.acquired == 0


def test_host_unavailable_owner_and_identity() -> None:
    ctx = operator().context
    params = MemoryProviderOpenParams(agent_id="main", context=ctx)
    r = run(MemoryHost(None, audiences=AudienceRegistry()).open(params))
    assert (r.provider, r.error) == (None, "memory plugin unavailable")
    failed = MemoryCapabilityRegistration(plugin_id=None, error='Memory plugin "x" failed to load')
    assert run(MemoryHost(failed).open(params)).error == 'Memory plugin "x" failed to load'
    anonymous = MemoryCapabilityRegistration(plugin_id=None, provider_runtime=Runtime(Records()))
    assert run(MemoryHost(anonymous).open(params)).error == "memory provider identity unavailable"
    slot = MemoryHost(anonymous, slot_id="records")
    assert run(slot.open(params)).provider_id == "records"


# --- checklist 33: assertCurrent required -----------------------------------------------------

def test_checklist_33_assert_current_must_be_callable() -> None:
    runtime = Runtime(Records())
    ctx = MemoryCallerContext(authority=OperatorAuthority(scopes=("operator.read",)), assert_current=None)  # type: ignore[arg-type]
    with pytest.raises(ProviderContractError) as info:
        run(native_host(runtime).open(MemoryProviderOpenParams(agent_id="main", context=ctx)))
    assert str(info.value) == "memory provider requires caller authority with assertCurrent"
    assert runtime.opened == []


# --- acceptance 9 / checklist 34: audience guards ---------------------------------------------

def session_caller(audiences: AudienceRegistry, session_key: str = "agent:main:main",
                   audience: Any = None) -> Caller:
    return Caller(SessionAuthority(session_key=session_key, sandboxed=False, session_id="s-1", audience=audience))


async def _audience_guards() -> None:
    reg = AudienceRegistry()
    # forged: right shape, not minted
    runtime = Runtime(Records())
    forged = session_caller(reg, audience=OwnerPrivateAudience(agent_id="main"))
    with pytest.raises(Forbidden) as info:
        await native_host(runtime, audiences=reg).open(MemoryProviderOpenParams(agent_id="main", context=forged.context))
    assert str(info.value) == "memory provider requires a host-minted memory audience"
    # a minted audience that is equal by value is still not the forged one
    grant = reg.mint_owner_private("main", "agent:main:main")
    assert grant.audience == OwnerPrivateAudience(agent_id="main") and not reg.is_host_audience(
        OwnerPrivateAudience(agent_id="main"))
    # minted for another session
    elsewhere = session_caller(reg, session_key="agent:main:other", audience=grant.audience)
    with pytest.raises(Forbidden) as info:
        await native_host(runtime, audiences=reg).open(MemoryProviderOpenParams(agent_id="main", context=elsewhere.context))
    assert str(info.value) == "memory audience is bound to a different session"
    # stale before open: open never called
    stale = reg.mint_owner_private("main", "agent:main:main")
    reg.mark_stale(stale.audience)
    with pytest.raises(AuthorityNotCurrent) as info:
        await native_host(runtime, audiences=reg).open(
            MemoryProviderOpenParams(agent_id="main", context=session_caller(reg, audience=stale.audience).context))
    assert str(info.value) == "memory audience is no longer current"
    # released by its owner
    released = reg.mint_owner_private("main", "agent:main:main")
    released.release()
    with pytest.raises(AuthorityNotCurrent) as info:
        await native_host(runtime, audiences=reg).open(
            MemoryProviderOpenParams(agent_id="main", context=session_caller(reg, audience=released.audience).context))
    assert str(info.value) == "memory audience was released by its owner"
    assert runtime.opened == []
    # currency that cannot be verified now
    def unverifiable() -> None:
        raise OSError("session store locked")
    flaky = reg.mint_owner_private("main", "agent:main:main", currency_check=unverifiable)
    with pytest.raises(AuthorityNotCurrent) as info:
        await native_host(runtime, audiences=reg).open(
            MemoryProviderOpenParams(agent_id="main", context=session_caller(reg, audience=flaky.audience).context))
    assert str(info.value) == "memory audience currency is unavailable; retry the operation"
    assert runtime.opened == []

    # stale during open: provider closed once, health never called
    during = reg.mint_owner_private("main", "agent:main:main")
    provider = Records()

    async def go_stale(_params: Any) -> None:
        reg.mark_stale(during.audience)

    with pytest.raises(AuthorityNotCurrent, match="^memory audience is no longer current$"):
        await native_host(Runtime(provider, before=go_stale), audiences=reg).open(
            MemoryProviderOpenParams(agent_id="main", context=session_caller(reg, audience=during.audience).context))
    assert provider.calls["close"] == 1 and provider.calls["health"] == 0


def test_acceptance_09_audience_guards() -> None:
    run(_audience_guards())


def test_acceptance_09_provider_assert_current_fails_mid_search_before_read() -> None:
    reg = AudienceRegistry()
    parent = reg.mint_owner_private("main", "agent:main:main")
    child = reg.delegate(parent.audience, "agent:main:main:active-memory:0123456789ab")
    reads: list[str] = []

    class ChecksBeforeRead(Records):
        def __init__(self, params: MemoryProviderOpenParams) -> None:
            super().__init__()
            self.params = params

        async def search(self, request: Any) -> dict:
            reg.mark_stale(parent.audience)  # parent lifecycle change while the search runs
            self.params.context.assert_current()  # the provider's own check before I/O
            reads.append("read")
            return {"hits": []}

    class OpensChecker:
        async def open(self, params: MemoryProviderOpenParams) -> Any:
            return {"provider": ChecksBeforeRead(params)}

    caller = session_caller(reg, session_key="agent:main:main:active-memory:0123456789ab", audience=child.audience)

    async def go() -> None:
        bound = (await native_host(OpensChecker(), audiences=reg).open(
            MemoryProviderOpenParams(agent_id="main", context=caller.context))).provider
        with pytest.raises(AuthorityNotCurrent) as info:
            await bound.search({"query": "q"})
        assert str(info.value) == "memory audience is no longer current"

    run(go())
    assert reads == []


def test_checklist_34_only_host_minted_audiences_bound_to_the_session() -> None:
    run(_audience_guards())


async def _publication_wait() -> list[str]:
    """Reads wait for a pending session publication before the currency check (prepare step)."""
    reg = AudienceRegistry()
    grant = reg.mint_owner_private("main", "agent:main:main")
    order: list[str] = []
    provider = Records()
    bound = (await native_host(Runtime(provider), audiences=reg).open(
        MemoryProviderOpenParams(agent_id="main", context=session_caller(reg, audience=grant.audience).context))).provider
    done = reg.begin_publication(grant.audience)
    task = asyncio.create_task(bound.search({"query": "q"}))
    await asyncio.sleep(0.01)
    order.append(f"searched={provider.calls['search']}")
    done()
    await task
    order.append(f"searched={provider.calls['search']}")
    return order


def test_host_waits_for_audience_publications() -> None:
    assert run(_publication_wait()) == ["searched=0", "searched=1"]


def test_host_abort_signal_rejects_before_provider_code() -> None:
    signal = AbortSignal()
    caller = Caller(OperatorAuthority(scopes=("operator.read",)), signal=signal)
    provider = Records()

    async def go() -> None:
        bound = await open_bound(provider, caller)
        signal.abort("request aborted")
        with pytest.raises(Exception, match="^request aborted$"):
            await bound.search({"query": "q"})

    run(go())
    assert provider.calls["search"] == 0


# --- acceptance 10: conversation audience -----------------------------------------------------

class Partitioned(Records):
    """Stores records per partition; returns only the caller's conversation partition."""

    ROWS = {("conversation", "agent:main:group:g1"): ["g1-note"], ("owner-private", None): ["private-note"]}

    def __init__(self, authority: Any) -> None:
        super().__init__()
        self.authority = authority

    async def search(self, request: Any) -> dict:
        aud = self.authority.audience
        key = (aud.kind, getattr(aud, "session_key", None)) if aud else None
        return {"hits": [hit(r) for r in self.ROWS.get(key, [])]}


def test_acceptance_10_conversation_audience() -> None:
    reg = AudienceRegistry()
    grant = reg.mint_conversation("main", "agent:main:group:g1", "0f0e0d0c-0000-4000-8000-000000000001",
                                  session_key="agent:main:group:g1:thread:7")
    seen: list[Any] = []

    class Opens:
        async def open(self, params: MemoryProviderOpenParams) -> Any:
            seen.append(params.context.authority.audience)
            return {"provider": Partitioned(params.context.authority)}

    caller = session_caller(reg, session_key="agent:main:group:g1:thread:7", audience=grant.audience)

    async def go() -> list[str]:
        bound = (await native_host(Opens(), audiences=reg).open(
            MemoryProviderOpenParams(agent_id="main", context=caller.context))).provider
        return [h.reference.id for h in (await bound.search({"query": "note"})).hits]

    assert run(go()) == ["g1-note"]
    assert seen[0] is grant.audience
    assert seen[0].to_json() == {"kind": "conversation", "agentId": "main", "sessionKey": "agent:main:group:g1",
                                 "sessionId": "0f0e0d0c-0000-4000-8000-000000000001"}


# --- refresh handoff ---------------------------------------------------------------------------

def test_host_refresh_handoff_requires_bound_handle() -> None:
    class Refreshing(Records):
        refreshed = 0

        async def refresh(self) -> None:
            Refreshing.refreshed += 1

    async def go() -> list[str]:
        events: list[str] = []
        bound = await open_bound(Refreshing())
        await refresh_memory_provider_with_handoff(bound, lambda: events.append("started"))
        with pytest.raises(ProviderContractError) as info:
            await refresh_memory_provider_with_handoff(Refreshing(), lambda: None)
        assert str(info.value) == "memory refresh requires a bound provider handle"
        plain = await open_bound(Records())
        assert not hasattr(plain, "refresh") and not hasattr(plain, "candidates")
        return events

    assert run(go()) == ["started"]
    assert Refreshing.refreshed == 1


def test_host_authority_passes_through_open() -> None:
    runtime = Runtime(Records())
    ctx = Caller(HostAuthority(operation="status")).context
    run(native_host(runtime).open(MemoryProviderOpenParams(agent_id="main", context=ctx, purpose="status")))
    params = runtime.opened[0]
    assert params.purpose == "status" and params.context.authority is ctx.authority
    assert params.context.assert_current is not ctx.assert_current  # the host-wrapped check
