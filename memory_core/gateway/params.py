"""Input validation of the gateway memory methods, before any provider or engine call.

Messages are upstream's exactly: the v1 ``memory.search`` rules of ``memory-search.ts``
(upstream `src/gateway/server-methods/memory-search.ts`) and the neutral v2/get/status rules of
``memory-provider.ts`` (upstream `src/gateway/server-methods/memory-provider.ts`). Every failure is an
``INVALID_REQUEST``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from memory_core.errors import InvalidRequest
from memory_core.gateway.protocol import invalid_request
from memory_core.validation import MAX_SAFE_INTEGER, QueryBudget, cap_results, is_finite_number

DEFAULT_MAX_RESULTS = 20
SOURCES = ("memory", "sessions")

UNSUPPORTED_VERSION = "unsupported memory version"
QUERY_REQUIRED = "query must be a non-empty string"
V1_NUMBERS = "maxResults and minScore must be finite numbers when provided"
AGENT_NOT_STRING = "agentId must be a string"
UNKNOWN_AGENT = "unknown agentId"
SOURCES_NON_EMPTY = "sources must be a non-empty array of memory or sessions"
SOURCES_ALLOWED = "sources must contain only memory or sessions"
REFERENCE_REQUIRED = "reference must be a provider-scoped memory reference"
REFERENCE_FIELDS = "reference.providerId and reference.id are required"

_MISSING: Any = object()


def _is_positive_int(value: Any) -> bool:
    return is_finite_number(value) and float(value).is_integer() and value >= 1


def as_record(params: Any) -> dict[str, Any]:
    """Non-object params count as ``{}`` (upstream ``params ?? {}`` plus its object check)."""
    return params if isinstance(params, dict) else {}


def memory_version(params: dict[str, Any]) -> Literal[1, 2]:
    """``version: 2`` selects the neutral handler; absent or ``1`` the 2026.9.6 shape; else an error."""
    version = params.get("version", _MISSING)
    if version is _MISSING or version is None:
        return 1
    if is_finite_number(version) and version == 2:
        return 2
    if is_finite_number(version) and version == 1:
        return 1
    raise invalid_request(UNSUPPORTED_VERSION)


# --------------------------------------------------------------------------- agents


@dataclass(frozen=True)
class Agents:
    """The configured agent ids; ``default`` is used when a request names none."""

    ids: tuple[str, ...]
    default: str
    by_key: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def normalize(raw: str) -> str:
        return raw.strip().lower()

    @classmethod
    def from_ids(cls, configured: list[str]) -> Agents:
        """Configured ids in order (the first is the default); requests match them case-insensitively."""
        by_key: dict[str, str] = {}
        for agent in configured:
            by_key.setdefault(cls.normalize(agent), agent)
        ids = tuple(by_key.values())
        return cls(ids=ids, default=ids[0], by_key=by_key)

    def _lookup(self, raw: str) -> str:
        agent = self.by_key.get(self.normalize(raw))
        if agent is None:
            raise invalid_request(UNKNOWN_AGENT)
        return agent

    def resolve_v1(self, params: dict[str, Any]) -> str:
        if "agentId" not in params:
            return self.default
        raw = params["agentId"]
        if not isinstance(raw, str):
            raise invalid_request(AGENT_NOT_STRING)
        return self._lookup(raw)

    def resolve_v2(self, params: dict[str, Any]) -> str:
        if "agentId" not in params:
            return self.default
        raw = params["agentId"]
        if not isinstance(raw, str) or not raw.strip():
            raise invalid_request("agentId must be a non-empty string")
        return self._lookup(raw)


# --------------------------------------------------------------------------- v1 search


@dataclass(frozen=True)
class V1Search:
    query: str
    max_results: int
    min_score: float | None


def check_budget(budget: QueryBudget | None, query: str) -> None:
    """The query budget as an ``INVALID_REQUEST`` naming the limit (checked before any engine work)."""
    if budget is None:
        return
    try:
        budget.check(query)
    except InvalidRequest as exc:
        raise invalid_request(exc.message) from None


def parse_v1_search(params: dict[str, Any], budget: QueryBudget | None = None) -> V1Search:
    raw_query = params.get("query")
    query = raw_query.strip() if isinstance(raw_query, str) else ""
    if not query:
        raise invalid_request(QUERY_REQUIRED)
    check_budget(budget, query)
    raw_max = params.get("maxResults", _MISSING)
    if raw_max is not _MISSING and not is_finite_number(raw_max):
        raise invalid_request(V1_NUMBERS)
    raw_min = params.get("minScore", _MISSING)
    if raw_min is not _MISSING and not is_finite_number(raw_min):
        raise invalid_request(V1_NUMBERS)
    max_results = DEFAULT_MAX_RESULTS if raw_max is _MISSING else cap_results(math.floor(raw_max))
    return V1Search(query=query, max_results=max_results, min_score=None if raw_min is _MISSING else float(raw_min))


# --------------------------------------------------------------------------- v2 operations


def _non_empty_string(params: dict[str, Any], key: str, name: str | None = None) -> str | None:
    value = params.get(key, _MISSING)
    if value is _MISSING:
        return None
    if not isinstance(value, str) or not value.strip():
        raise invalid_request(f"{name or key} must be a non-empty string")
    return value


def _number(params: dict[str, Any], key: str, *, integer: bool = False) -> int | float | None:
    value = params.get(key, _MISSING)
    if value is _MISSING:
        return None
    if not is_finite_number(value) or (integer and not _is_positive_int(value)):
        raise invalid_request(f"{key} must be a {'positive integer' if integer else 'finite number'}")
    if integer and value > MAX_SAFE_INTEGER:
        raise invalid_request(f"{key} must be a positive integer no larger than {MAX_SAFE_INTEGER}")
    return int(value) if integer else float(value)


def _sources(params: dict[str, Any]) -> list[str] | None:
    value = params.get("sources", _MISSING)
    if value is _MISSING:
        return None
    if not isinstance(value, list) or not value:
        raise invalid_request(SOURCES_NON_EMPTY)
    for source in value:
        if source not in SOURCES or not isinstance(source, str):
            raise invalid_request(SOURCES_ALLOWED)
    return list(value)


@dataclass(frozen=True)
class Operation:
    """A validated neutral operation: ``kind`` search|get|health and the request for the provider."""

    kind: Literal["search", "get", "health"]
    request: dict[str, Any]


def parse_operation(method: str, params: dict[str, Any], budget: QueryBudget | None = None) -> Operation:
    """``parseOperation`` of memory-provider.ts; raises GatewayError(INVALID_REQUEST)."""
    if method == "memory.search":
        query = (_non_empty_string(params, "query") or "").strip()
        if not query:
            raise invalid_request(QUERY_REQUIRED)
        check_budget(budget, query)
        max_results = _number(params, "maxResults", integer=True)
        request: dict[str, Any] = {"query": query,
                                   "maxResults": cap_results(int(max_results or DEFAULT_MAX_RESULTS))}
        min_score = _number(params, "minScore")
        if min_score is not None:
            request["minScore"] = min_score
        cursor = _non_empty_string(params, "cursor")
        if cursor is not None:
            request["cursor"] = cursor
        sources = _sources(params)
        if sources is not None:
            request["sources"] = sources
        return Operation("search", request)
    if method == "memory.get":
        record = params.get("reference")
        if not isinstance(record, dict):
            raise invalid_request(REFERENCE_REQUIRED)
        provider_id = _non_empty_string(record, "providerId", "reference.providerId")
        ref_id = _non_empty_string(record, "id", "reference.id")
        if not provider_id or not ref_id:
            raise invalid_request(REFERENCE_FIELDS)
        reference: dict[str, Any] = {"providerId": provider_id, "id": ref_id}
        for key in ("revision", "fragment"):
            value = _non_empty_string(record, key, f"reference.{key}")
            if value is not None:
                reference[key] = value
        request = {"reference": reference}
        for key in ("from", "lines"):
            value = _number(params, key, integer=True)
            if value is not None:
                request[key] = value
        return Operation("get", request)
    return Operation("health", {})

