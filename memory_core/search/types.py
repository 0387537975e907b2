"""Search result types: the public frozen :class:`SearchHit` (declared in ``host_facades/search/hit.py``),
built from a search's reply by :func:`hits_from_reply`, and :class:`SearchResults`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from host_facades.search.hit import SearchHit, hit_from_row
from host_facades.search.edge import SearchReply

__all__ = ["SearchHit", "SearchResults", "hits_from_reply"]


def hits_from_reply(reply: SearchReply) -> list[SearchHit]:
    """The :class:`SearchHit` objects of a search's reply (rows of ``host_facades.search.hit.HIT_FIELDS``)."""
    return [hit_from_row(row) for row in reply.hits]


class SearchResults(list):  # type: ignore[type-arg]
    """The one result of a search (``SearchEngine.search``, :meth:`MemoryCore.search`): the hits (a
    list of :class:`SearchHit`), ``mode`` (``hybrid``/``keyword``/``vector``/``empty``), the index
    ``revision`` they were read at, this search's own ``staleness`` (upstream's ``{stale, warning,
    action}`` while the index may miss changes, else None) and, when asked for, the ``details``
    ``--explain`` shows (a ``memory_core.search.engine.SearchDetails``, else None)."""

    def __init__(self, hits: Sequence[SearchHit] = (), staleness: dict[str, Any] | None = None, *,
                 mode: str = "empty", revision: int | None = None, details: Any = None) -> None:
        super().__init__(hits)
        self.staleness = staleness
        self.mode = mode
        self.revision = revision
        self.details = details

