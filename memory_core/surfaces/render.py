"""How one :class:`~memory_core.search.types.SearchHit` looks on every surface.

- :func:`wire`: the camelCase wire form (``SearchHit.to_dict``, ``search --json``, ``--explain``);
- :func:`legacy_result`: a hit as the legacy ``MemorySearchResult`` dict (what memory-core's legacy
  runtime answers; ``host.legacy.as_memory_search_result`` reads a legacy manager's hit back);
- :func:`v1_result`: gateway v1 ``results[]`` (the legacy shape without its citation);
- :func:`mcp_result`: the MCP ``memory_search`` tool's result entry;
- :func:`provider_hit`: gateway v2 / the provider contract's ``MemorySearchHit``;
- :func:`cli_text`: ``memory-core search``'s human output.

Pure: no I/O. A hit is taken by its attributes; the dict surfaces' field tables are derived from
the one declaration, ``host_facades/search/hit.py``. Citations come from
``host_facades.ranking.rank.citation_for`` and project keys from
``host_facades.ranking.rank.project_keys_of``, the one formatter and splitter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from host_facades.chunking.pipeline import strip_annotation_carriers
from host_facades.db.chunk_rows import triggers_text
from host_facades.search.hit import surface_dict, surface_fields
from host_facades.ranking.rank import citation_for, project_keys_of
from memory_core.output import escape_control
from memory_core.contract.types import AutomaticRecall, MemoryCitation, MemoryReference, MemorySearchHit
from memory_core.surfaces.snippets import render_snippet

INVALID_PROJECT_KEY = "!invalid-project-annotation"

# what v1 drops of a legacy manager's MemorySearchResult dict: the wire keys the v1 table lacks
_V1_DROPPED = frozenset(key for _, key in surface_fields("wire")) - {key for _, key in surface_fields("v1")}


def wire(hit: Any) -> dict[str, Any]:
    """camelCase wire form of a hit (upstream ``MemorySearchResult`` plus ``id`` and ``sourceMtime``),
    None fields omitted."""
    return surface_dict(hit, "wire")


def legacy_result(hit: Any) -> dict[str, Any]:
    """The legacy ``MemorySearchResult`` dict (upstream `src/memory-host-sdk/host/types.ts`): no internal id
    or mtime."""
    return surface_dict(hit, "legacy")


def v1_result(hit: Any) -> dict[str, Any]:
    """One gateway v1 ``results[]`` entry (the 2026.9.6 shape): the legacy result without ``citation``."""
    return surface_dict(hit, "v1")


def v1_result_of_legacy(result: dict[str, Any]) -> dict[str, Any]:
    """A legacy manager's ``MemorySearchResult`` dict in the v1 ``results[]`` form (its key order kept)."""
    return {k: v for k, v in result.items() if k not in _V1_DROPPED}


def mcp_result(hit: Any, *, cite: bool) -> dict[str, Any]:
    """The MCP ``memory_search`` entry: the legacy result with annotation carriers stripped from the
    snippet and a ``corpus``; with ``cite``, the citation last and a ``Source:`` line in the snippet."""
    data = surface_dict(hit, "v1")
    data["corpus"] = data.get("source", "memory")
    snippet = strip_annotation_carriers(data["snippet"])
    if cite:
        citation = citation_for(hit.path, hit.start_line, hit.end_line)
        snippet = f"{snippet.rstrip()}\n\nSource: {citation}"
        data["snippet"] = snippet
        data["citation"] = citation
    else:
        data["snippet"] = snippet
    return data


def automatic_recall(source: str, provenance: dict[str, Any] | None, project_key: str | None,
                     triggers: Any, importance: Any) -> AutomaticRecall:
    """Eligible only for owner/agent memory entries whose project annotation (if any) is usable."""
    keys = project_keys_of(project_key)
    origin = (provenance or {}).get("origin_class") or (provenance or {}).get("originClass")
    eligible = (source == "memory" and origin in ("owner", "agent") and keys != []
                and INVALID_PROJECT_KEY not in (keys or []))
    return AutomaticRecall(eligible=eligible, project_keys=keys or None, triggers=triggers_text(triggers),
                           importance=importance if isinstance(importance, int | float) else None)


def provider_hit(hit: Any, provider_id: str, *, scored: bool = True) -> MemorySearchHit:
    """The contract's ``MemorySearchHit``: a reference to the chunk at its content hash, the snippet as
    the excerpt, one line-range citation, the automatic-recall facts (no score unless ``scored``)."""
    ref = MemoryReference(provider_id=provider_id, id=hit.id, revision=hit.hash)
    start, end = hit.start_line, hit.end_line
    return MemorySearchHit(
        reference=ref, excerpt=hit.snippet, score=hit.score if scored else None, source=hit.source,
        citations=[MemoryCitation(label=citation_for(hit.path, start, end), reference=ref, start_line=start,
                                  end_line=end)],
        automatic_recall=automatic_recall(hit.source, hit.provenance, hit.project_key, hit.triggers, hit.importance),
    )


def score_text(value: float) -> str:
    """A score with 3 decimals, unless they would round it onto a whole number it is not: a
    keyword part of ``9.99999e-07`` prints ``1e-06`` (not ``0.000``), ``0.99993`` prints ``0.9999``."""
    text = f"{value:.3f}"
    whole = round(value)
    if value == whole or float(text) != whole:
        return text
    if abs(value) < 1e-3:
        return f"{value:.3g}"
    for digits in range(4, 10):
        text = f"{value:.{digits}f}"
        if float(text) != whole:
            break
    return text


def cli_text(hits: Sequence[Any], query: str = "", *, texts: dict[str, str] | None = None,
             color: bool = False) -> str:
    """Upstream's human output: ``<score> <citation>``, the lines around the match (from the chunk's
    full text in ``texts`` when there, else the snippet; see ``snippets.render_snippet``), a blank line."""
    if not hits:
        return "No matches.\n"
    out = []
    for h in hits:
        out.append(f"{score_text(h.score)} {escape_control(h.citation)}")
        parts = []
        if h.vector_score is not None:
            parts.append(f"vector {score_text(h.vector_score)}")
        if h.text_score is not None:
            parts.append(f"text {score_text(h.text_score)}")
        if parts:
            out[-1] += f"  ({', '.join(parts)})"
        text = (texts or {}).get(h.id) or h.snippet
        for line in render_snippet(text, query, color=color):
            out.append(f"    {line}")
        out.append("")
    return "\n".join(out) + "\n"
