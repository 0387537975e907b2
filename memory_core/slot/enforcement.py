"""Host enforcement around a memory provider (upstream `src/plugins/memory-runtime.ts`).

:class:`MemoryHost` resolves the memory slot owner and opens a caller-bound lease
(``getActiveMemoryProviderCore``): it checks the caller context and its audience *before* ``open``,
rechecks currency and validates the handle *after* ``open`` (closing a rejected handle exactly
once), and wraps the handle in :class:`BoundMemoryProvider` (``bindMemoryProvider``): a frozen
capability snapshot, capability checks before provider code runs, foreign-reference checks on the
way in and out, currency rechecks before and after every call (late results are discarded), and an
idempotent close. It is generic over any provider object implementing the contract; provider
methods may be ``async`` or plain functions, results may be contract models or camelCase dicts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from memory_core.errors import (
    AuthorityNotCurrent,
    CapabilityNotDeclared,
    Forbidden,
    InvalidRequest,
    ProviderContractError,
)
from memory_core.slot.audiences import HOST_AUDIENCES, AudienceRegistry
from memory_core.slot.awaiting import race_with_signal, resolve
from memory_core.slot.legacy import adapt_legacy_memory_provider
from memory_core.contract.types import (
    CANDIDATE_KINDS,
    MEMORY_SOURCES,
    MemoryCallerContext,
    MemoryCandidateRequest,
    MemoryCitation,
    MemoryGetNotFound,
    MemoryGetOk,
    MemoryGetRequest,
    MemoryGetResult,
    MemoryHealth,
    MemoryProviderCapabilities,
    MemoryProviderOpenParams,
    MemoryProviderOpenResult,
    MemoryReference,
    MemorySearchPage,
    MemorySearchRequest,
    SessionAuthority,
)

# Exact upstream messages (upstream `src/plugins/memory-runtime.ts`).
REQUIRES_ASSERT_CURRENT = "memory provider requires caller authority with assertCurrent"
REQUIRES_MINTED_AUDIENCE = "memory provider requires a host-minted memory audience"
RUNTIME_MUST_IMPLEMENT_OPEN = "memory providerRuntime must implement open"
PLUGIN_UNAVAILABLE = "memory plugin unavailable"
IDENTITY_UNAVAILABLE = "memory provider identity unavailable"
INVALID_HANDLE = ("memory provider must implement search, get, health, close, "
                  "and valid capabilities with matching candidates")
HANDLE_CLOSED = "memory provider handle is closed"
INSTANCE_NOT_CURRENT = "memory provider instance is no longer current"
DIFFERENT_PROVIDER = "memory reference belongs to a different provider"
PAGINATION_NOT_DECLARED = "memory provider does not support the pagination capability"
PROJECT_FILTER_NOT_DECLARED = "memory provider does not support the project filter capability"
REFRESH_REQUIRES_BOUND = "memory refresh requires a bound provider handle"


def source_not_declared(source: str) -> str:
    return f"memory provider does not support the {source} source capability"


def candidates_not_declared(kind: str) -> str:
    return f"memory provider does not support the {kind} candidates capability"


_MISSING: Any = object()
_GET_RESULT = TypeAdapter(MemoryGetResult)


@dataclass
class PluginInstance:
    """The plugin instance that registered a runtime; a reload or revocation makes it not current."""

    accepting_calls: bool = True
    revoked: bool = False
    aborted: bool = False

    def is_current(self) -> bool:
        return self.accepting_calls and not self.revoked and not self.aborted


@dataclass
class MemoryCapabilityRegistration:
    """What the memory slot owner registered: ``provider_runtime`` (native) and/or ``runtime`` (legacy).

    ``provider_runtime`` left at its default means "not registered"; ``None`` or an object without
    ``open`` means "registered but malformed" (there is no fallback to ``runtime`` then).
    """

    plugin_id: str | None
    provider_runtime: Any = _MISSING
    runtime: Any = None
    instance: PluginInstance | None = None
    error: str | None = None

    @property
    def has_provider_runtime(self) -> bool:
        return self.provider_runtime is not _MISSING


def raw_capabilities(provider: Any) -> Any:
    """The capabilities a provider declared, as a camelCase dict (or the raw value if odd)."""
    caps = getattr(provider, "capabilities", None)
    if isinstance(caps, MemoryProviderCapabilities):
        return caps.to_json()
    if isinstance(caps, dict):
        out = dict(caps)
        if "project_filter" in out and "projectFilter" not in out:
            out["projectFilter"] = out.pop("project_filter")
        return out
    return caps


def is_valid_capabilities(caps: Any) -> bool:
    """``isValidMemoryProviderCapabilities``: non-empty known sources, booleans, known kinds."""
    if not isinstance(caps, dict):
        return False
    sources, candidates = caps.get("sources"), caps.get("candidates")
    return (
        isinstance(sources, list | tuple) and len(sources) > 0
        and all(s in MEMORY_SOURCES for s in sources)
        and isinstance(caps.get("pagination"), bool)
        and isinstance(candidates, list | tuple)
        and all(k in CANDIDATE_KINDS for k in candidates)
        and isinstance(caps.get("projectFilter"), bool)
    )


def validate_handle(provider: Any) -> None:
    """upstream `src/plugins/memory-runtime.ts`: methods present, capabilities valid, candidates parity."""
    caps = raw_capabilities(provider)
    ok = (
        all(callable(getattr(provider, name, None)) for name in ("search", "get", "health", "close"))
        and is_valid_capabilities(caps)
        and (len(caps["candidates"]) > 0) == callable(getattr(provider, "candidates", None))
    )
    if not ok:
        raise ProviderContractError(INVALID_HANDLE)


def _normalize_open_result(result: Any) -> MemoryProviderOpenResult:
    if isinstance(result, MemoryProviderOpenResult):
        return result
    if isinstance(result, dict):
        return MemoryProviderOpenResult(provider=result.get("provider"), error=result.get("error"))
    raise ProviderContractError("memory provider open must return {provider} or {provider: None, error}")


class BoundMemoryProvider:
    """A caller-bound lease (``bindMemoryProvider``). ``candidates``/``refresh`` exist only if the
    raw provider has them (``hasattr`` tells)."""

    def __init__(self, provider: Any, provider_id: str, context: MemoryCallerContext, *,
                 audiences: AudienceRegistry = HOST_AUDIENCES,
                 instance: PluginInstance | None = None) -> None:
        self._provider = provider
        self.provider_id = provider_id
        self._context = context
        self._audiences = audiences
        self._instance = instance
        self._closed = False
        self.capabilities = MemoryProviderCapabilities.model_validate(raw_capabilities(provider))
        if callable(getattr(provider, "candidates", None)):
            self.candidates = self._candidates
        if callable(getattr(provider, "refresh", None)):
            self.refresh = self._refresh

    @property
    def closed(self) -> bool:
        return self._closed

    # --- currency -----------------------------------------------------------------------------

    def assert_current(self) -> None:
        if self._closed:
            raise AuthorityNotCurrent(HANDLE_CLOSED)
        self._audiences.assert_caller_current(self._context)
        if self._instance is not None and not self._instance.is_current():
            raise AuthorityNotCurrent(INSTANCE_NOT_CURRENT)

    async def _prepare(self) -> None:
        pending = self._audiences.prepare_caller_read(self._context)
        if pending is not None:
            await race_with_signal(pending, self._context.signal)

    async def _invoke(self, run: Callable[[], Awaitable[Any]]) -> Any:
        await self._prepare()
        self.assert_current()
        result = await run()
        await self._prepare()
        self.assert_current()  # a result that arrives after revocation is discarded
        return result

    # --- references ---------------------------------------------------------------------------

    def _assert_reference(self, reference: MemoryReference) -> None:
        if reference.provider_id != self.provider_id:
            raise InvalidRequest(DIFFERENT_PROVIDER)

    def _assert_citations(self, citations: list[MemoryCitation] | None) -> None:
        for citation in citations or ():
            if citation.reference is not None:
                self._assert_reference(citation.reference)

    def _validate_page(self, page: Any) -> MemorySearchPage:
        try:
            page = page if isinstance(page, MemorySearchPage) else MemorySearchPage.model_validate(page)
        except ValidationError as exc:
            raise ProviderContractError(f"memory provider returned an invalid search page: {exc}") from exc
        for hit in page.hits:
            self._assert_reference(hit.reference)
            self._assert_citations(hit.citations)
        return page

    # --- operations ---------------------------------------------------------------------------

    def _assert_search_capabilities(self, request: MemorySearchRequest) -> None:
        caps = self.capabilities
        for source in request.sources or ():
            if source not in caps.sources:
                raise CapabilityNotDeclared(source_not_declared(source))
        if request.cursor is not None and not caps.pagination:
            raise CapabilityNotDeclared(PAGINATION_NOT_DECLARED)
        if request.active_project_keys and not caps.project_filter:
            raise CapabilityNotDeclared(PROJECT_FILTER_NOT_DECLARED)

    async def search(self, request: MemorySearchRequest | dict[str, Any]) -> MemorySearchPage:
        req = _coerce(MemorySearchRequest, request)

        async def run() -> MemorySearchPage:
            self._assert_search_capabilities(req)
            return self._validate_page(await resolve(self._provider.search(req)))

        return await self._invoke(run)

    async def get(self, request: MemoryGetRequest | dict[str, Any]) -> MemoryGetOk | MemoryGetNotFound:
        req = _coerce(MemoryGetRequest, request)

        async def run() -> MemoryGetOk | MemoryGetNotFound:
            self._assert_reference(req.reference)
            raw = await resolve(self._provider.get(req))
            try:
                result = raw if isinstance(raw, MemoryGetOk | MemoryGetNotFound) else _GET_RESULT.validate_python(raw)
            except ValidationError as exc:
                raise ProviderContractError(f"memory provider returned an invalid get result: {exc}") from exc
            if isinstance(result, MemoryGetOk):
                self._assert_reference(result.reference)
                self._assert_citations(result.citations)
            return result

        return await self._invoke(run)

    async def health(self) -> MemoryHealth:
        async def run() -> MemoryHealth:
            raw = await resolve(self._provider.health())
            try:
                return raw if isinstance(raw, MemoryHealth) else MemoryHealth.model_validate(raw)
            except ValidationError as exc:
                raise ProviderContractError(f"memory provider returned an invalid health: {exc}") from exc

        return await self._invoke(run)

    async def _candidates(self, request: MemoryCandidateRequest | dict[str, Any]) -> MemorySearchPage:
        req = _coerce(MemoryCandidateRequest, request)

        async def run() -> MemorySearchPage:
            if req.kind not in self.capabilities.candidates:
                raise CapabilityNotDeclared(candidates_not_declared(req.kind))
            if req.active_project_keys and not self.capabilities.project_filter:
                raise CapabilityNotDeclared(PROJECT_FILTER_NOT_DECLARED)
            return self._validate_page(await resolve(self._provider.candidates(req)))

        return await self._invoke(run)

    async def _refresh(self, on_started: Callable[[], None] | None = None) -> None:
        async def run() -> None:
            pending = self._provider.refresh()
            if on_started is not None:
                on_started()
            await resolve(pending)

        await self._invoke(run)

    async def close(self) -> None:
        """Idempotent; lease release works even after the caller was revoked."""
        if self._closed:
            return
        self._closed = True
        await resolve(self._provider.close())


def _coerce(model: Any, value: Any) -> Any:
    if isinstance(value, model):
        return value
    if isinstance(value, BaseModel):
        value = value.model_dump(by_alias=True, exclude_none=True)
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise InvalidRequest(f"invalid memory {model.__name__}: {exc.errors()[0]['msg']}") from exc


async def refresh_memory_provider_with_handoff(provider: Any, on_started: Callable[[], None]) -> None:
    """Run a bound handle's refresh and call ``on_started`` once the provider's refresh has begun."""
    if not isinstance(provider, BoundMemoryProvider) or not hasattr(provider, "refresh"):
        raise ProviderContractError(REFRESH_REQUIRES_BOUND)
    await provider._refresh(on_started)


class MemoryHost:
    """The host side of the memory slot: resolve the owner, open a lease, bind it (upstream
    `src/plugins/memory-runtime.ts`)."""

    def __init__(self, owner: MemoryCapabilityRegistration | None, *, slot_id: str | None = None,
                 audiences: AudienceRegistry = HOST_AUDIENCES) -> None:
        self.owner = owner
        self.slot_id = slot_id
        self.audiences = audiences

    @property
    def provider_id(self) -> str | None:
        pid = (self.owner.plugin_id if self.owner else None) or (self.slot_id or "").strip()
        return pid or None

    def is_native(self) -> bool:
        """``isActiveMemoryProviderNative``: the owner registered a provider runtime."""
        return self.owner is not None and self.owner.has_provider_runtime

    def backend_config(self) -> dict[str, str] | None:
        """``resolveActiveMemoryBackendConfig``."""
        if self.is_native():
            return {"backend": "provider-runtime", "providerId": self.provider_id} if self.provider_id else None
        return {"backend": "builtin"} if self.owner is not None and self.owner.runtime is not None else None

    async def open(self, params: MemoryProviderOpenParams) -> MemoryProviderOpenResult:
        """``getActiveMemoryProviderCore``: every step of upstream `src/plugins/memory-runtime.ts` in
        order."""
        original = params.context
        if not callable(getattr(original, "assert_current", None)):
            raise ProviderContractError(REQUIRES_ASSERT_CURRENT)
        authority = original.authority
        if (isinstance(authority, SessionAuthority) and authority.audience is not None
                and not self.audiences.is_host_audience(authority.audience)):
            raise Forbidden(REQUIRES_MINTED_AUDIENCE)
        context = MemoryCallerContext(
            authority=authority,
            assert_current=lambda: self.audiences.assert_caller_current(original),
            signal=original.signal,
        )
        open_params = MemoryProviderOpenParams(agent_id=params.agent_id, context=context,
                                               purpose=params.purpose, cfg=params.cfg)
        await self._prepare(context)
        context.assert_current()

        owner = self.owner
        if owner is not None and owner.has_provider_runtime and not callable(
                getattr(owner.provider_runtime, "open", None)):
            raise ProviderContractError(RUNTIME_MUST_IMPLEMENT_OPEN)
        if owner is None or (not owner.has_provider_runtime and owner.runtime is None):
            return MemoryProviderOpenResult(provider=None,
                                            error=(owner.error if owner else None) or PLUGIN_UNAVAILABLE)
        provider_id = self.provider_id
        if not provider_id:
            return MemoryProviderOpenResult(provider=None, error=IDENTITY_UNAVAILABLE)

        if owner.has_provider_runtime:
            adapter = "native"
            result = _normalize_open_result(await resolve(owner.provider_runtime.open(open_params)))
        else:
            adapter = "legacy"
            result = await adapt_legacy_memory_provider(owner.runtime, provider_id, open_params)
        try:
            await self._prepare(context)
            context.assert_current()
            if result.provider is not None:
                validate_handle(result.provider)
        except BaseException:
            if result.provider is not None and callable(getattr(result.provider, "close", None)):
                await resolve(result.provider.close())
            raise
        bound = None
        if result.provider is not None:
            bound = BoundMemoryProvider(result.provider, provider_id, original,
                                        audiences=self.audiences, instance=owner.instance)
        return MemoryProviderOpenResult(provider=bound, error=result.error, provider_id=provider_id,
                                        adapter=adapter, extra=result.extra)

    async def _prepare(self, context: MemoryCallerContext) -> None:
        pending = self.audiences.prepare_caller_read(context)
        if pending is not None:
            await race_with_signal(pending, context.signal)


def native_owner_v1_refusal(host: MemoryHost) -> str | None:
    """upstream `src/gateway/server-methods/memory-search.ts`: the v1 ``memory.search`` message for a native
    slot owner (None for legacy owners).

    memory-core's own gateway answers v1 with the 2026.9.6 shape instead (docs/decisions.md D8); hosts that
    front other native providers use this to refuse v1 before opening anything.
    """
    backend = host.backend_config()
    if host.is_native() and backend is not None and backend.get("backend") == "provider-runtime":
        return (f'memory plugin "{backend["providerId"]}" uses the provider runtime; '
                "retry memory.search with version: 2")
    return None
