"""The gateway memory methods: ``memory.search`` (v1 and v2), ``memory.get``, ``memory.status``,
``memory.flushPlan`` and ``doctor.memory.status``.

v1 (no ``version`` or ``version: 1``) answers in the released OpenClaw 2026.9.6 shape
``{agentId, provider, searchMode, results, stale?, warning?, action?}`` from the agent's engine
(the legacy manager path). v2, get and status are the neutral handler of upstream
`src/gateway/server-methods/memory-provider.ts`:
validate, open the ``memory-core`` provider through host enforcement (``memory_core.slot``) with
operator authority and purpose ``"cli"``, call exactly one method, recheck currency, answer
``{version: 2, agentId, providerId, ...result}``, map any failure to ``UNAVAILABLE`` and always
close the lease. Blocking engine work runs in threads so the event loop keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memory_core.errors import AuthorityNotCurrent, Forbidden, MemoryCoreError, on_surfaces, redact_paths
from memory_core.gateway.params import (
    Agents,
    as_record,
    memory_version,
    parse_operation,
    parse_v1_search,
)
from memory_core.gateway.protocol import INVALID_REQUEST, GatewayError, Session, invalid_request, unavailable
from memory_core.slot.awaiting import resolve
from memory_core.slot.legacy import acquire_legacy_manager, as_memory_search_result
from memory_core.contract.types import (
    AbortSignal,
    MemoryCallerContext,
    MemoryProviderOpenParams,
    OperatorAuthority,
    to_json,
)
from memory_core.surfaces.render import v1_result, v1_result_of_legacy
from memory_core.validation import QueryBudget

if TYPE_CHECKING:
    from memory_core.config import MemoryCoreConfig

PROVIDER_ID = "memory-core"
REQUEST_NOT_CURRENT = "Memory request authority is no longer active"
REQUIRES_OPERATOR = "Memory provider reads require an authenticated operator connection"
PROVIDER_UNAVAILABLE = "Memory provider unavailable"
WARM_LOG_AGENTS = 20  # past this many agents, serve logs summaries instead of a line per agent
WARM_AGENTS = 256  # agents serve opens before any request (the others open at their first request)
OPEN_SYNC_WAIT_S = 10.0  # a request that opens a behind agent waits this long for its catch-up sync
SKIPPED_EMBEDDING_PROBE = {"ok": False, "checked": False,
                           "error": "memory embedding readiness not checked; run `openclaw memory status --deep` to probe"}


# the search of the request that is opening an agent, handed to MemoryService._make_core in its thread
_opening = threading.local()


def error_message(exc: BaseException) -> str:
    """``formatErrorMessage``: the error's own message, never empty."""
    if isinstance(exc, MemoryCoreError):
        return exc.message or type(exc).__name__
    return str(exc) or type(exc).__name__


# --------------------------------------------------------------------------- the service


class MemoryService:
    """Everything the gateway serves for one config: its agents, their engines and the provider host.

    One ``MemoryCore`` per agent, opened lazily and shared by the v1 path, the ``memory-core``
    provider runtime (v2/get/status) and every connection.
    """

    def __init__(self, config: MemoryCoreConfig, *, provider_id: str = PROVIDER_ID) -> None:
        from memory_core.slot.enforcement import MemoryCapabilityRegistration, MemoryHost
        from memory_core.provider.runtime import MemoryCoreProviderRuntime

        self.config = config
        self.provider_id = provider_id
        configured = [config.agent_id] + [a for a in config.agents if a != config.agent_id]
        self.agents = Agents.from_ids(configured)
        self.budget = QueryBudget.of(config)  # checked before any engine work, for every agent
        self._lock = threading.Lock()
        self.runtime = MemoryCoreProviderRuntime(config, core_factory=self._make_core)
        self.host = MemoryHost(MemoryCapabilityRegistration(plugin_id=provider_id, provider_runtime=self.runtime))

    @staticmethod
    def _make_core(cfg: MemoryCoreConfig, agent_id: str) -> Any:
        from memory_core.core import MemoryCore

        core = MemoryCore(cfg.workspace, agent_id=agent_id, config=cfg, prefetch=True,
                          first_search=getattr(_opening, "first_search", None))
        core.serve_freshness()  # watcher, interval and startup catch-up while serving
        return core

    def warm(self, log: Callable[[str], None]) -> None:
        """Open configured agents now (index owner, file watch, startup catch-up sync), so an idle
        server does not stay stale until its first request: the first :data:`WARM_AGENTS` (at most
        ``gateway.maxOpenAgents``), the others at their first request. ``log`` gets one line per agent
        (a summary past :data:`WARM_LOG_AGENTS` agents), and another when the startup syncs are done.
        An agent that cannot be opened is logged and left to answer its requests with the error."""
        # gateway.maxOpenAgents, and at most WARM_AGENTS: past those the requests open their agents
        # (a warm-up of thousands would compete with them, each agent's first search asked twice)
        cap = min(int(self.runtime.open_agents.cap), WARM_AGENTS)
        ids = self.agents.ids[:cap]
        verbose = len(self.agents.ids) <= WARM_LOG_AGENTS
        opened = []
        for agent_id in ids:
            try:
                core = self.core(agent_id)
            except Exception as exc:  # noqa: BLE001 - logged; the agent's requests report it
                log(f"memory-core: agent {agent_id}: cannot open: {error_message(exc)}")
                continue
            opened.append((agent_id, core))
            if verbose:
                pending = core.freshness.status()
                log(f"memory-core: agent {agent_id}: opened {core.workspace} (index {core.db_path}); watcher "
                    f"{pending['watcher']['state']}; startup sync of {pending['pendingCount']} changed file(s)"
                    + (" and a full pass" if pending["fullSyncPending"] else ""))
        if not verbose:
            rest = len(self.agents.ids) - len(ids)
            log(f"memory-core: {len(opened)} agents opened and watched" + (
                f"; {rest} more open at their first request (at most {self.runtime.open_agents.cap} open at once: "
                "gateway.maxOpenAgents)"
                if rest else ""))
        self._log_in_sync(opened, log, verbose)

    @staticmethod
    def _log_in_sync(opened: list[tuple[str, Any]], log: Callable[[str], None], verbose: bool) -> None:
        failed = 0
        for agent_id, core in opened:
            fresh = core.freshness
            while not fresh.wait_idle(60.0):
                if core.closed:  # the server stopped first, or the agent was closed as least recently used
                    break
            st = fresh.status()
            if st["lastSyncError"]:
                failed += 1
                log(f"memory-core: agent {agent_id}: startup sync failed: {st['lastSyncError']} (retrying)")
            elif verbose:
                log(f"memory-core: agent {agent_id}: in sync ({st['syncCount']} sync(s) run)")
        if not verbose:
            log(f"memory-core: {len(opened) - failed} agents in sync" + (f", {failed} failed (retrying)" if failed else ""))

    def agent_config(self, agent_id: str) -> MemoryCoreConfig:
        return self.core(agent_id).config

    def core(self, agent_id: str, first_search: tuple | None = None) -> Any:
        """The agent's engine, opened on first use (raises what ``MemoryCore`` raises). An agent
        opened here whose startup catch-up found changes syncs them first (up to
        :data:`OPEN_SYNC_WAIT_S`), so the request that opened it does not answer from an old index.

        Behind, not only dirty: the catch-up sync may already have taken the changed paths (nothing
        is dirty while it publishes them), and the index does not hold them until it is done.
        ``first_search``: ``(query, max_results, min_score)`` of the search this request runs next,
        answered ahead by the task that reads the agent's open-time facts (``MemoryCore``)."""
        core = self.runtime.opened_core(agent_id)
        if core is not None:
            return core
        _opening.first_search = first_search  # to _make_core, called in this thread under the runtime's lock
        try:
            core = self.runtime.core(agent_id)  # agents open in parallel, each once (the runtime's locks)
        finally:
            _opening.first_search = None
        fresh = core.freshness
        if fresh.is_behind():
            if fresh.is_dirty():
                fresh.request_sync([], reason="open")
            fresh.wait_idle(OPEN_SYNC_WAIT_S)  # still behind after that: the answer says stale
        return core

    def preopen(self, agent_id: str) -> None:
        """Open the agent's engine under the lock before the runtime needs it; failures are the runtime's to report."""
        try:
            self.core(agent_id)
        except Exception:  # noqa: BLE001 - the provider's open answers with its own (path-free) error
            pass

    def close(self) -> None:
        with self._lock:
            self.runtime.close_all()


class _OpenFailed(Exception):
    """Opening the agent failed (``error``), as opposed to its search."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


# --------------------------------------------------------------------------- requests


@dataclass(eq=False)
class RequestScope:
    """One in-flight request: the connection's session and the signals that end its authority."""

    session: Session
    connection_open: Callable[[], bool]
    signal: AbortSignal = field(default_factory=AbortSignal)
    open: bool = True

    def assert_current(self) -> None:
        self.signal.throw_if_aborted()
        if not self.open or not self.connection_open():
            raise AuthorityNotCurrent(REQUEST_NOT_CURRENT)


class MemoryMethods:
    """Dispatch of the served methods; every method returns the response payload or raises GatewayError."""

    def __init__(self, service: MemoryService) -> None:
        self.service = service
        self.handlers = {
            "memory.search": self.search,
            "memory.get": self.neutral,
            "memory.status": self.neutral,
            "memory.flushPlan": self.flush_plan,
            "doctor.memory.status": self.doctor_status,
        }

    async def call(self, method: str, params: Any, scope: RequestScope) -> dict[str, Any]:
        handler = self.handlers.get(method)
        if handler is None:
            raise invalid_request(f"unknown method: {method}")
        return await handler(method, as_record(params), scope)

    async def search(self, method: str, params: dict[str, Any], scope: RequestScope) -> dict[str, Any]:
        if memory_version(params) == 2:
            return await self.neutral(method, params, scope)
        return await self.search_v1(params)

    async def search_v1(self, params: dict[str, Any]) -> dict[str, Any]:
        """The 2026.9.6 handler: validate, search the agent's engine, answer the file-shaped payload."""
        request = parse_v1_search(params, self.service.budget)
        agent_id = self.service.agents.resolve_v1(params)
        owner = self.service.host.owner
        if owner is not None and not owner.has_provider_runtime and owner.runtime is not None:
            return await self.search_v1_legacy(request, agent_id, owner.runtime)
        # An open engine is a dict lookup; an agent not open yet is opened (which may index) in the
        # search's own thread, one hop off the event loop. An open keyword-only engine whose
        # freshness step only reads state searches on the loop, which awaits the worker's reply:
        # no thread hop at all (MemoryCore.searches_on_loop).
        core = self.service.runtime.opened_core(agent_id)

        def search() -> tuple[list[Any], dict[str, Any] | None]:
            nonlocal core
            if core is None:
                try:
                    core = self.service.core(agent_id, (request.query, request.max_results, request.min_score))
                except Exception as exc:  # noqa: BLE001 - any acquisition failure is UNAVAILABLE
                    raise _OpenFailed(exc) from exc
            hits = core.search(request.query, max_results=request.max_results, min_score=request.min_score)
            return hits, hits.staleness

        try:
            if core is not None and core.searches_on_loop():
                hits = await core.search_async(request.query, max_results=request.max_results,
                                               min_score=request.min_score)
                staleness = hits.staleness
            else:
                hits, staleness = await asyncio.to_thread(search)
        except _OpenFailed as failed:
            raise unavailable(f"memory search unavailable: {error_message(failed.error)}") from failed.error
        except Exception as exc:  # noqa: BLE001 - e.g. an agent whose own query budget is smaller
            if on_surfaces(exc).gateway == INVALID_REQUEST:
                raise invalid_request(error_message(exc)) from exc
            raise unavailable(f"memory search failed: {error_message(exc)}") from exc
        cfg = core.config
        payload: dict[str, Any] = {
            "agentId": agent_id,
            "provider": cfg.provider,
            "searchMode": cfg.search_mode,
            "results": [v1_result(hit) for hit in hits],
        }
        if isinstance(staleness, dict) and staleness.get("stale"):
            payload["stale"] = True
            for key in ("warning", "action"):
                if staleness.get(key):  # a last sync error may name a host path
                    payload[key] = redact_paths(str(staleness[key]))
        return payload

    async def search_v1_legacy(self, request: Any, agent_id: str, runtime: Any) -> dict[str, Any]:
        """v1 when the slot owner is a legacy plugin (upstream
        `src/gateway/server-methods/memory-search.ts`): its manager, opened
        with purpose "cli" and always closed, answers with its raw results, unfiltered."""
        cfg = self.service.agent_config(agent_id)
        try:
            manager, error = await acquire_legacy_manager(runtime, cfg=cfg, agent_id=agent_id, purpose="cli")
        except Exception as exc:  # noqa: BLE001 - any acquisition failure is UNAVAILABLE
            raise unavailable(f"memory search unavailable: {error_message(exc)}") from exc
        if manager is None:
            raise unavailable(error or f"memory search unavailable: {PROVIDER_UNAVAILABLE}")
        try:
            opts: dict[str, Any] = {"max_results": request.max_results}
            if request.min_score is not None:
                opts["min_score"] = request.min_score
            try:
                raw = await resolve(manager.search(request.query, opts))
                status = await resolve(manager.status()) if callable(getattr(manager, "status", None)) else {}
            except Exception as exc:  # noqa: BLE001
                raise unavailable(f"memory search failed: {error_message(exc)}") from exc
        finally:
            if callable(getattr(manager, "close", None)):
                await resolve(manager.close())
        status = status if isinstance(status, dict) else {}
        provider = str(status.get("provider") or "none")
        custom = status.get("custom") if isinstance(status.get("custom"), dict) else {}
        vector = status.get("vector") if isinstance(status.get("vector"), dict) else {}
        mode = custom.get("searchMode") or (
            "fts-only" if provider == "none" or vector.get("enabled") is False else "hybrid")
        return {"agentId": agent_id, "provider": provider, "searchMode": mode,
                "results": [v1_result_of_legacy(
                    as_memory_search_result(h).model_dump(by_alias=True, exclude_none=True))
                            for h in raw]}

    async def neutral(self, method: str, params: dict[str, Any], scope: RequestScope) -> dict[str, Any]:
        """``handleMemoryProviderRequest``: v2 search, get and status through the provider runtime."""
        operation = parse_operation(method, params, self.service.budget)
        agent_id = self.service.agents.resolve_v2(params)
        try:
            async with self._operator_lease(agent_id, scope, "cli") as (provider, provider_id):
                if operation.kind == "search":
                    result = await provider.search(operation.request)
                elif operation.kind == "get":
                    result = await provider.get(operation.request)
                else:
                    result = await provider.health()
                scope.assert_current()
                return {"version": 2, "agentId": agent_id, "providerId": provider_id, **to_json(result)}
        except GatewayError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure, denials included, is UNAVAILABLE
            raise unavailable(error_message(exc)) from exc

    @contextlib.asynccontextmanager
    async def _operator_lease(self, agent_id: str, scope: RequestScope,
                              purpose: str) -> AsyncIterator[tuple[Any, str | None]]:
        """The slot owner's provider for ``agent_id``, opened with the connection's operator authority
        (``(provider, provider_id)``); on exit the request's authority ends and the lease is closed."""
        provider = None
        try:
            scope.assert_current()
            session = scope.session
            if session.role != "operator" or not session.conn_id:
                raise Forbidden(REQUIRES_OPERATOR)
            context = MemoryCallerContext(
                authority=OperatorAuthority(scopes=tuple(session.scopes), conn_id=session.conn_id),
                assert_current=scope.assert_current,
                signal=scope.signal,
            )
            if self.service.runtime.opened_core(agent_id) is None:  # opening may index: off the event loop
                await asyncio.to_thread(self.service.preopen, agent_id)
            acquired = await self.service.host.open(
                MemoryProviderOpenParams(agent_id=agent_id, context=context, purpose=purpose, cfg=self.service.config)
            )
            provider = acquired.provider
            if provider is None:
                raise RuntimeError(acquired.error or PROVIDER_UNAVAILABLE)
            yield provider, acquired.provider_id
        finally:
            scope.open = False
            if provider is not None:
                try:
                    await provider.close()
                except Exception:  # noqa: BLE001 - the response is already decided
                    pass

    def _doctor_agent(self, params: dict[str, Any]) -> str:
        """``resolveDoctorMemoryAgent``: the requested agent (a string naming a configured one) or the default."""
        raw = params.get("agentId")
        if raw is None:
            return self.service.agents.default
        if not isinstance(raw, str):
            raise invalid_request("agentId must be a string")
        agent = self.service.agents.by_key.get(self.service.agents.normalize(raw))
        if agent is None:
            raise invalid_request(f'unknown agent id "{self.service.agents.normalize(raw)}"')
        return agent

    async def doctor_status(self, method: str, params: dict[str, Any], scope: RequestScope) -> dict[str, Any]:
        """``doctor.memory.status`` for a native owner (upstream
        `src/gateway/server-methods/memory-provider.ts`): the provider's health
        read with operator authority and purpose "status"; any failure is ``health.status: unavailable``."""
        agent_id = self._doctor_agent(params)
        provider_id = self.service.provider_id
        try:
            async with self._operator_lease(agent_id, scope, "status") as (provider, opened_id):
                provider_id = opened_id or provider_id
                health = to_json(await provider.health())
                scope.assert_current()
        except Exception as exc:  # noqa: BLE001 - the doctor reports every failure as health
            health = {"status": "unavailable", "message": error_message(exc)}
        return {"agentId": agent_id, "provider": provider_id, "health": health,
                "embedding": dict(SKIPPED_EMBEDDING_PROBE)}

    async def flush_plan(self, method: str, params: dict[str, Any], scope: RequestScope) -> dict[str, Any]:
        """``memory.flushPlan``: the agent's pre-compaction flush plan, ``plan: null`` when disabled."""
        from memory_core.flush_plan import build_memory_flush_plan

        agent_id = self.service.agents.resolve_v2(params)
        now_ms = params.get("nowMs")
        if now_ms is not None and (isinstance(now_ms, bool) or not isinstance(now_ms, int | float)
                                   or not math.isfinite(now_ms)):
            raise invalid_request("nowMs must be a finite number (epoch milliseconds)")
        window = params.get("contextWindowTokens")
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
            raise invalid_request("contextWindowTokens must be a positive integer")
        cfg = self.service.runtime.agent_config(agent_id)
        plan = build_memory_flush_plan(cfg, now_ms, context_window_tokens=window)
        return {"agentId": agent_id, "plan": None if plan is None else plan.to_json()}
