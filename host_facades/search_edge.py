"""The typed edge of one search: a :class:`SearchRequest` goes in, a :class:`SearchReply` comes out.

Both are frozen dataclasses of plain values, tuples and numpy arrays, so they pickle into and
out of a worker (``workers.tasks`` op ``run_search``) and are passed as they are in-process: the
owner (``memory_core.search.engine``) builds the request, :func:`host_facades.search_run.run_search`
answers it, and the owner turns the reply's hit rows into ``SearchHit`` objects in one function
(``memory_core.search.types.hits_from_reply``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from host_facades.ranking import Candidate, RankingOptions, citation_for

# The fields of ``memory_core.search.types.SearchHit``, in its order: a hit row is one value per name.
HIT_FIELDS = ("id", "path", "start_line", "end_line", "score", "snippet", "source", "vector_score", "text_score",
              "citation", "importance", "triggers", "project_key", "provenance", "source_mtime", "hash")
DEFAULT_RANKING = RankingOptions()


@dataclass(frozen=True)
class SearchRequest:
    """One search: ``query`` is trimmed and non-empty; ``qvec`` (float32, one row) asks for the
    vector retriever; ``want_keyword`` for the keyword one. ``ranking`` holds the configured
    knobs, ``now_ms`` and ``active_project_keys`` are this search's own (decay clock, project
    filter). ``probe_content``: answer ``empty_index`` when the index has no chunks (the pooled
    path, whose content probe runs in the worker's snapshot); ``details``: also return what
    ``--explain`` shows."""

    query: str
    candidates: int
    max_results: int
    min_score: float
    sources: tuple[str, ...] = ("memory",)
    model: str | None = None
    backend: str = "auto"
    or_fallback: bool = True
    want_keyword: bool = True
    qvec: np.ndarray | None = None
    ranking: RankingOptions = DEFAULT_RANKING
    now_ms: float | None = None
    active_project_keys: tuple[str, ...] | None = None
    probe_content: bool = False
    details: bool = False


@dataclass(frozen=True)
class SearchReply:
    """The answer to a :class:`SearchRequest` on one index generation (``revision``).

    ``mode``: ``"hybrid"``, ``"keyword"``, ``"vector"`` or ``"empty"``; ``hits``: the selected hits
    as rows of :data:`HIT_FIELDS` (snippets, no chunk text); ``empty_index``: the index has no
    chunks (only with ``probe_content``). With ``details``: ``keyword`` (the FTS step: query,
    probes, candidate dicts), ``vector`` (candidate dicts), ``ranked`` (each candidate's score
    parts, in ranked order) and ``timings_ms``."""

    mode: str
    hits: tuple[tuple[Any, ...], ...] = ()
    tokenizer: str = "unicode61"
    revision: int | None = None
    empty_index: bool = False
    keyword: dict[str, Any] | None = None
    vector: tuple[dict[str, Any], ...] | None = None
    ranked: tuple[dict[str, Any], ...] = ()
    timings_ms: dict[str, float] = field(default_factory=dict)


def hit_row(c: Candidate, *, vector_mode: bool) -> tuple[Any, ...]:
    """A selected candidate as a row of :data:`HIT_FIELDS` (``vector_score`` None outside the
    vector and hybrid modes)."""
    return (c.id, c.path, c.start_line, c.end_line, float(c.score), c.snippet, c.source,
            float(c.vector_score) if vector_mode else None, float(c.text_score),
            citation_for(c.path, c.start_line, c.end_line), c.importance, c.triggers, c.project_key, c.provenance,
            c.source_mtime, c.hash)
