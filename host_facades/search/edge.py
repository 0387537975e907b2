"""The typed edge of one search: a :class:`SearchRequest` goes in, a :class:`SearchReply` comes out.

Both are frozen dataclasses of plain values, tuples and numpy arrays, so they pickle into and
out of a worker (``workers.tasks`` task ``search``) and are passed as they are in-process: the
owner (``memory_core.search.engine``) builds the request, :func:`host_facades.search.run.run_search`
answers it, and the owner turns the reply's hit rows (``host_facades.search.hit.hit_row``) back into
``SearchHit`` objects (``host_facades.search.hit.hit_from_row``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any, TypeVar

import numpy as np

from host_facades.ranking.rank import RankingOptions
from host_facades.db.vectors import decode_vector, encode_vector

DEFAULT_RANKING = RankingOptions()
T = TypeVar("T")


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

    def wire(self) -> tuple[Any, ...]:
        """The request as plain values (``qvec`` as its BLOB, ``ranking`` as a tuple): what the
        pooled owner sends, since a pickled global costs more than the rest of the frame;
        :func:`request_from_wire` is its inverse."""
        values = list(_request_values(self))
        if values[_QVEC] is not None:
            values[_QVEC] = encode_vector(values[_QVEC])
        values[_RANKING] = _ranking_values(values[_RANKING])
        return tuple(values)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # one global and plain values: a dataclass's default pickle (class, copyreg and numpy
        # globals, a state dict per object) costs many times more
        return _request_from_wire, self.wire()


@dataclass(frozen=True)
class SearchReply:
    """The answer to a :class:`SearchRequest` on one index generation (``revision``).

    ``mode``: ``"hybrid"``, ``"keyword"``, ``"vector"`` or ``"empty"``; ``hits``: the selected hits
    as rows of ``host_facades.search.hit.HIT_FIELDS`` (snippets, no chunk text); ``empty_index``: the index has no
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

    def wire(self) -> tuple[Any, ...]:
        """The reply as plain values, in field order; :func:`reply_from_wire` is its inverse."""
        return _reply_values(self)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _reply_from_wire, _reply_values(self)


_REQUEST_FIELDS = tuple(f.name for f in fields(SearchRequest))
_REPLY_FIELDS = tuple(f.name for f in fields(SearchReply))
_RANKING_FIELDS = tuple(f.name for f in fields(RankingOptions))
_QVEC, _RANKING = _REQUEST_FIELDS.index("qvec"), _REQUEST_FIELDS.index("ranking")
_request_values = attrgetter(*_REQUEST_FIELDS)
_reply_values = attrgetter(*_REPLY_FIELDS)
_ranking_values = attrgetter(*_RANKING_FIELDS)


_NOW_MS = _REQUEST_FIELDS.index("now_ms")


def request_key(req: SearchRequest) -> tuple[Any, ...]:
    """``req``'s wire values without its clock (``now_ms``): two requests with the same key ask
    the same search a moment apart."""
    values = list(req.wire())
    values[_NOW_MS] = None
    return tuple(values)


def request_from_wire(values: tuple[Any, ...]) -> SearchRequest:
    """The :class:`SearchRequest` of :meth:`SearchRequest.wire`'s values."""
    if len(values) != len(_REQUEST_FIELDS):
        raise ValueError(f"a SearchRequest's wire form has {len(_REQUEST_FIELDS)} values, got {len(values)}")
    return _request_from_wire(*values)


def reply_from_wire(values: tuple[Any, ...]) -> SearchReply:
    """The :class:`SearchReply` of :meth:`SearchReply.wire`'s values."""
    mode, hits, tokenizer, revision, empty_index, keyword, vector, ranked, timings_ms = values
    return frozen_new(SearchReply, {
        "mode": mode, "hits": hits, "tokenizer": tokenizer, "revision": revision, "empty_index": empty_index,
        "keyword": keyword, "vector": vector, "ranked": ranked, "timings_ms": timings_ms})


def _request_from_wire(*values: Any) -> SearchRequest:
    named = dict(zip(_REQUEST_FIELDS, values))
    qvec = named["qvec"]
    named["qvec"] = None if qvec is None else decode_vector(qvec)
    named["ranking"] = frozen_new(RankingOptions, dict(zip(_RANKING_FIELDS, named["ranking"])))
    return frozen_new(SearchRequest, named)


def _reply_from_wire(*values: Any) -> SearchReply:
    return reply_from_wire(values)


def frozen_new(cls: type[T], values: dict[str, Any]) -> T:
    """``cls(**values)`` for a frozen dataclass without its ``__init__`` (one ``object.__setattr__``
    per field, the most expensive step of building a request or a hit on the owner): ``values``
    becomes the instance dict and must name every field, in field order."""
    obj = _new(cls)
    _set_attr(obj, "__dict__", values)
    return obj


_new = object.__new__
_set_attr = object.__setattr__

