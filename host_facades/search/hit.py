"""One search hit, declared once: :class:`SearchHit`.

Everything else about a hit is derived from ``dataclasses.fields(SearchHit)``: the worker reply's
row (:data:`HIT_FIELDS` order, :func:`hit_row`), the owner's rebuild (:func:`hit_from_row`), each
surface's field table (:func:`surface_fields`: the camelCase wire key of every field a surface
carries) and so the CLI / gateway v1 / MCP / legacy dicts built from them in
``memory_core/surfaces/render.py``. Adding a field is one edit here plus the golden files: a field
named like a ranking ``Candidate`` attribute is copied from the candidate, any other from the
chunk's stored row (``host_facades/db/chunk_rows.py``'s ``CHUNK_FIELDS``).

A field's ``metadata={"omit": (...)}`` names the surfaces that leave it out: ``wire`` (CLI JSON,
``SearchHit.to_dict``, ``--explain``), ``legacy`` (upstream's ``MemorySearchResult``), ``v1`` (gateway
v1 ``results[]`` and the MCP tool's entries). Gateway v2 takes the provider contract's
``MemorySearchHit`` shape (``memory_core/contract/types.py``), which a hit field does not extend.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from host_facades.ranking.rank import Candidate, citation_for
from host_facades.search.edge import frozen_new

SURFACES = ("wire", "legacy", "v1")


@dataclass(frozen=True)
class SearchHit:
    """One search result (upstream ``MemorySearchResult`` plus ``id``, ``sourceMtime`` and the content
    ``hash``); ``score`` is the public score minScore applies to."""

    id: str = field(metadata={"omit": ("legacy", "v1")})
    path: str
    start_line: int
    end_line: int
    score: float
    snippet: str
    source: str
    vector_score: float | None = None
    text_score: float | None = None
    citation: str = field(default="", metadata={"omit": ("v1",)})
    importance: int | None = None
    triggers: str | None = None
    project_key: str | None = None
    provenance: dict[str, Any] | None = None
    source_mtime: float | None = field(default=None, metadata={"omit": ("legacy", "v1")})
    # the chunk's content hash: the provider reference's revision, on no dict surface
    hash: str | None = field(default=None, metadata={"omit": SURFACES})

    def to_dict(self) -> dict[str, Any]:
        """camelCase wire form, None fields omitted (:func:`surface_dict` ``"wire"``)."""
        return surface_dict(self, "wire")


HIT_FIELDS = tuple(f.name for f in fields(SearchHit))
_PROVENANCE_KEYS = {"origin_class": "originClass", "session_kind": "sessionKind", "observed_at": "observedAt",
                    "supersedes_key": "supersedesKey"}


def camel(name: str) -> str:
    """``start_line`` -> ``startLine``."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def surface_fields(surface: str) -> tuple[tuple[str, str], ...]:
    """``(attribute, wire key)`` of each :class:`SearchHit` field ``surface`` carries, in field order."""
    if surface not in SURFACES:
        raise ValueError(f"unknown hit surface {surface!r}: expected one of {', '.join(SURFACES)}")
    return tuple((f.name, camel(f.name)) for f in fields(SearchHit)
                 if surface not in f.metadata.get("omit", ()))


_TABLES = {surface: surface_fields(surface) for surface in SURFACES}


def _dict_builder(surface: str) -> Any:
    """``surface_dict(hit, surface)`` as one function whose body reads each field of the table in
    turn, compiled once (as :data:`_ROW`): every hit of every answer is turned into a dict, on the
    event loop of a gateway search."""
    lines = ["def build(hit):", "    out = {}"]
    for name, key in _TABLES[surface]:
        value = "{_PK.get(k, k): x for k, x in v.items()}" if name == "provenance" else "v"
        lines += [f"    v = hit.{name}", "    if v is not None:", f"        out[{key!r}] = {value}"]
    lines.append("    return out")
    namespace: dict[str, Any] = {"_PK": _PROVENANCE_KEYS}
    exec("\n".join(lines), namespace)  # noqa: S102 - built from the dataclass's own field names
    return namespace["build"]


_BUILDERS = {surface: _dict_builder(surface) for surface in SURFACES}


def surface_dict(hit: Any, surface: str) -> dict[str, Any]:
    """The camelCase dict of ``hit`` on ``surface``, None fields omitted; ``provenance`` is a fresh
    camelCase dict (the caller may mutate the result)."""
    return _BUILDERS[surface](hit)


# How a selected candidate fills a field other than by its same-named attribute (``vm``: the search
# has vector scores); a field the candidate lacks comes from the chunk's stored row (``Candidate.row``).
_FROM_CANDIDATE = {
    "score": "float(c.score)",
    "vector_score": "float(c.vector_score) if vm else None",
    "text_score": "float(c.text_score)",
    "citation": "citation_for(c.path, c.start_line, c.end_line)",
}
_CANDIDATE_FIELDS = frozenset(f.name for f in fields(Candidate))


def _expression(name: str) -> str:
    if name in _FROM_CANDIDATE:
        return _FROM_CANDIDATE[name]
    if name in _CANDIDATE_FIELDS:
        return f"c.{name}"
    return f"(c.row or {{}}).get({name!r})"


# one tuple display built from the fields, compiled once (as dataclasses builds __init__): a row is
# built for every hit of every search, in the worker
_ROW = eval("lambda c, vm: (" + "".join(f"{_expression(n)}, " for n in HIT_FIELDS) + ")",  # noqa: S307
            {"citation_for": citation_for})


def hit_row(c: Candidate, *, vector_mode: bool) -> tuple[Any, ...]:
    """A selected candidate as a row of :data:`HIT_FIELDS` (``vector_score`` None outside the
    vector and hybrid modes): what a worker's reply carries."""
    return _ROW(c, vector_mode)


def hit_from_row(row: tuple[Any, ...]) -> SearchHit:
    """The :class:`SearchHit` of a :func:`hit_row` row (``frozen_new``: no ``__init__``)."""
    return frozen_new(SearchHit, dict(zip(HIT_FIELDS, row)))
