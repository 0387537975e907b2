"""Search result types: the public frozen :class:`SearchHit` (and, re-exported, the internal :class:`Candidate`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

# the internal Candidate and citation_for live with the pure ranking code (host_facades.ranking) so workers
# can rank; re-exported here
from host_facades.ranking import Candidate, citation_for  # noqa: F401
from memory_core.search.render import wire


@dataclass(frozen=True)
class SearchHit:
    """One search result (spec §6.8); ``score`` is the public score used for minScore."""

    id: str
    path: str
    start_line: int
    end_line: int
    score: float
    snippet: str
    source: str
    vector_score: float | None = None
    text_score: float | None = None
    citation: str = ""
    importance: int | None = None
    triggers: str | None = None
    project_key: str | None = None
    provenance: dict[str, Any] | None = None
    source_mtime: float | None = None
    hash: str | None = None   # the chunk's content hash: the provider reference's revision (not on the v1 wire)

    def to_dict(self) -> dict[str, Any]:
        """camelCase wire form (upstream ``MemorySearchResult``), None fields omitted (``render.wire``)."""
        return wire(self)


# the field names in order: the keys hit_from_row sets
_FIELD_NAMES = tuple(f.name for f in fields(SearchHit))


def hit_from_row(row: Sequence[Any]) -> SearchHit:
    """A :class:`SearchHit` from ``host_facades.ranking.Candidate.hit_row`` (citation derived here).

    Built without the frozen dataclass ``__init__`` (15 ``object.__setattr__`` calls, ~2 us a hit,
    a tenth of the owner's work per pooled search): the instance dict is set in one step (0.7 us).
    The keys are :data:`_FIELD_NAMES` (a test compares both)."""
    (cid, path, start, end, score, snippet, source, vscore, tscore, importance, triggers, project_key,
     provenance, mtime, chunk_hash) = row
    hit = _new_hit(SearchHit)
    _set_attr(hit, "__dict__", {
        "id": cid, "path": path, "start_line": start, "end_line": end, "score": score, "snippet": snippet,
        "source": source, "vector_score": vscore, "text_score": tscore, "citation": citation_for(path, start, end),
        "importance": importance, "triggers": triggers, "project_key": project_key, "provenance": provenance,
        "source_mtime": mtime, "hash": chunk_hash})
    return hit


_new_hit = object.__new__
_set_attr = object.__setattr__
