"""Search result types: the public frozen :class:`SearchHit` (and, re-exported, the internal :class:`Candidate`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

# the internal Candidate and citation_for live with the pure ranking code (host_facades.ranking) so workers
# can rank; re-exported here
from host_facades.ranking import Candidate, citation_for  # noqa: F401


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

    def to_dict(self) -> dict[str, Any]:
        """camelCase wire form (upstream ``MemorySearchResult``), None fields omitted."""
        data = asdict(self)
        out: dict[str, Any] = {}
        names = {"start_line": "startLine", "end_line": "endLine", "vector_score": "vectorScore",
                 "text_score": "textScore", "project_key": "projectKey", "source_mtime": "sourceMtime"}
        for key, value in data.items():
            if value is None:
                continue
            if key == "provenance":
                value = {{"origin_class": "originClass", "session_kind": "sessionKind", "observed_at": "observedAt",
                          "supersedes_key": "supersedesKey"}.get(k, k): v for k, v in value.items()}
            out[names.get(key, key)] = value
        return out


def hit_from_row(row: Sequence[Any]) -> SearchHit:
    """A :class:`SearchHit` from ``host_facades.ranking.Candidate.hit_row`` (citation derived here)."""
    (cid, path, start, end, score, snippet, source, vscore, tscore, importance, triggers, project_key,
     provenance, mtime) = row
    return SearchHit(cid, path, start, end, score, snippet, source, vscore, tscore, citation_for(path, start, end),
                     importance, triggers, project_key, provenance, mtime)
