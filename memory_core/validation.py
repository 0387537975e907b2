"""Request limits shared by every surface: the query budget and the range of numeric parameters.

Each check raises :class:`~memory_core.errors.InvalidRequest` with a one-line message naming the
limit and how to change it; the gateway answers it as ``INVALID_REQUEST``, MCP as a tool error and
the CLI with exit code 2. The checks are cheap and run before any index, embedding or worker work.
The public entry points call them (``MemoryCore.search``, the provider runtime, the gateway, MCP,
the CLI); the internal ``SearchEngine`` keeps its "any text returns a list" contract.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from memory_core.errors import InvalidRequest

# JavaScript's Number.MAX_SAFE_INTEGER: the largest count an OpenClaw client can send exactly.
MAX_SAFE_INTEGER = 2**53 - 1
# 8,192 tokens (the input limit of common embedding models) at about 4 characters a token: a longer
# query cannot be embedded whole anyway. A full query of this size searches in tens of milliseconds.
DEFAULT_MAX_QUERY_CHARS = 32_768
# A page of prose at the character limit has 5,000-6,000 words; only token spam ("a a a ...") or
# machine-generated input has more terms.
DEFAULT_MAX_QUERY_TERMS = 8_192
# The most hits one gateway (v1, v2) or provider page returns: upstream's memory.search cap.
MAX_PAGE_RESULTS = 50


def cap_results(n: int) -> int:
    """A requested page size within ``1..MAX_PAGE_RESULTS``: the one place the result cap applies."""
    return max(1, min(MAX_PAGE_RESULTS, n))


class QueryTooLarge(InvalidRequest):
    """A search query exceeds the configured query budget (``query.maxChars`` / ``query.maxTerms``)."""


def finite_number(value: Any) -> float | None:
    """``value`` as a float when it is a finite JSON number (not a boolean), else None.

    An integer too large for a float (``10**400``) counts as not finite, as it parses to
    ``Infinity`` in JavaScript."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def is_finite_number(value: Any) -> bool:
    """JavaScript ``typeof value === "number" && Number.isFinite(value)``, never raising."""
    return finite_number(value) is not None


def search_numbers(max_results: Any, min_score: Any) -> tuple[int, float]:
    """A search's ``(max_results, min_score)``: a count from 1 (fractions round down) and a finite number."""
    if not is_finite_number(max_results) or int(max_results) < 1 or max_results > MAX_SAFE_INTEGER:
        raise InvalidRequest(f"max_results must be an integer from 1 to {MAX_SAFE_INTEGER}, got {shown(max_results)}")
    if not is_finite_number(min_score):
        raise InvalidRequest(f"min_score must be a finite number, got {shown(min_score)}")
    return int(max_results), float(min_score)


def check_search(config: Any, query: Any, max_results: Any = None, min_score: Any = None) -> None:
    """The query budget of ``config`` and the given (not None) numbers, before any search work."""
    check_query(config, query)
    search_numbers(1 if max_results is None else max_results, 0.0 if min_score is None else min_score)


def shown(value: Any) -> str:
    """``value`` as JSON (else ``repr``), cut short for a huge number or string (an error message stays one short line)."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:20] + f"... ({len(text)} characters)"


@dataclass(frozen=True)
class QueryBudget:
    """The most characters and terms one search query may have (``query.maxChars``/``query.maxTerms``)."""

    max_chars: int = DEFAULT_MAX_QUERY_CHARS
    max_terms: int = DEFAULT_MAX_QUERY_TERMS

    @classmethod
    def of(cls, config: Any) -> QueryBudget:
        """The budget of a :class:`~memory_core.config.MemoryCoreConfig` (the defaults without one)."""
        query = getattr(config, "query", None)
        return cls(max_chars=int(getattr(query, "max_chars", DEFAULT_MAX_QUERY_CHARS)),
                   max_terms=int(getattr(query, "max_terms", DEFAULT_MAX_QUERY_TERMS)))

    def check(self, query: Any) -> None:
        """Raise :class:`QueryTooLarge` when the (stripped) query is over budget; other values pass
        through to the caller's own type checks."""
        if not isinstance(query, str):
            return
        chars = len(query) if len(query) <= self.max_chars else len(query.strip())
        if chars > self.max_chars:
            raise QueryTooLarge(
                f"query is too long: {chars} characters, the limit is {self.max_chars}; send a shorter "
                f"query, or raise query.maxChars in the config (MEMORY_CORE_QUERY__MAX_CHARS)")
        from host_facades.retrieval.fts_query import word_tokens

        terms = len(word_tokens(query))
        if terms > self.max_terms:
            raise QueryTooLarge(
                f"query has too many terms: {terms}, the limit is {self.max_terms}; send fewer words, "
                f"or raise query.maxTerms in the config (MEMORY_CORE_QUERY__MAX_TERMS)")


def check_query(config: Any, query: Any) -> None:
    """:meth:`QueryBudget.check` with the budget of ``config``."""
    QueryBudget.of(config).check(query)
