"""Search result types: the public frozen :class:`SearchHit`, built from a search's reply by
:func:`hits_from_reply`, and :class:`SearchResults`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from host_facades.search_edge import SearchReply, frozen_new
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


def hits_from_reply(reply: SearchReply) -> list[SearchHit]:
    """The :class:`SearchHit` objects of a search's reply: the one place hits are built. A reply
    row holds the fields in :data:`host_facades.search_edge.HIT_FIELDS` order, which is the
    dataclass's (a test compares both)."""
    hits = []
    for (id_, path, start_line, end_line, score, snippet, source, vector_score, text_score, citation, importance,
         triggers, project_key, provenance, source_mtime, hash_) in reply.hits:
        # at most 15 pairs in one display: CPython builds a longer one key by key, with resizes
        values = {
            "id": id_, "path": path, "start_line": start_line, "end_line": end_line, "score": score, "snippet": snippet,
            "source": source, "vector_score": vector_score, "text_score": text_score, "citation": citation,
            "importance": importance, "triggers": triggers, "project_key": project_key, "provenance": provenance,
            "source_mtime": source_mtime}
        values["hash"] = hash_
        hits.append(frozen_new(SearchHit, values))
    return hits


class SearchResults(list):  # type: ignore[type-arg]
    """What :meth:`MemoryCore.search` returns: the hits (a list of :class:`SearchHit`) and this
    search's own staleness report, ``staleness``: upstream's ``{stale, warning, action}`` while the
    index may miss changes, else None."""

    def __init__(self, hits: Sequence[SearchHit] = (), staleness: dict[str, Any] | None = None) -> None:
        super().__init__(hits)
        self.staleness = staleness

