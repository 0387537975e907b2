"""Search result types: the public frozen :class:`SearchHit` and the internal :class:`Candidate`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


def citation_for(path: str, start_line: int, end_line: int) -> str:
    """``path#Lx`` when the range is one line, else ``path#Lx-Ly`` (spec §9.1)."""
    if start_line == end_line:
        return f"{path}#L{start_line}"
    return f"{path}#L{start_line}-L{end_line}"


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


@dataclass
class Candidate:
    """A merged candidate during ranking (internal; never returned)."""

    id: str
    path: str
    source: str
    start_line: int
    end_line: int
    snippet: str
    vector_score: float = 0.0
    text_score: float = 0.0
    ranking_score: float = 0.0   # boosted lexical score (§4.4)
    path_score: float = 0.0
    exact: int = 0               # exact-path specificity 0..3
    has_body_match: bool = False
    in_vector: bool = False
    in_keyword: bool = False
    vector_rank: int | None = None   # 1-based, for RRF
    keyword_rank: int | None = None
    content_score: float = 0.0
    lexical_rank: float = 0.0
    rank_score: float = 0.0      # internal ranking score (after decay / multipliers)
    score: float = 0.0           # public score
    decay: float = 1.0
    importance_mult: float = 1.0
    project_mult: float = 1.0
    importance: int | None = None
    triggers: str | None = None
    project_key: str | None = None
    provenance: dict[str, Any] | None = None
    source_mtime: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.source}:{self.path}:{self.start_line}:{self.end_line}"

    def to_hit(self, *, vector_mode: bool) -> SearchHit:
        return SearchHit(
            id=self.id, path=self.path, start_line=self.start_line, end_line=self.end_line,
            score=float(self.score), snippet=self.snippet, source=self.source,
            vector_score=float(self.vector_score) if vector_mode else None,
            text_score=float(self.text_score),
            citation=citation_for(self.path, self.start_line, self.end_line),
            importance=self.importance, triggers=self.triggers, project_key=self.project_key,
            provenance=self.provenance, source_mtime=self.source_mtime,
        )

    def parts(self) -> dict[str, Any]:
        """Score parts for ``--explain``."""
        return {
            "id": self.id, "citation": citation_for(self.path, self.start_line, self.end_line),
            "vector_score": self.vector_score, "text_score": self.text_score,
            "ranking_score": self.ranking_score, "path_score": self.path_score, "exact": self.exact,
            "has_body_match": self.has_body_match, "vector_rank": self.vector_rank,
            "keyword_rank": self.keyword_rank, "content_score": self.content_score,
            "lexical_rank": self.lexical_rank, "decay": self.decay, "importance_mult": self.importance_mult,
            "project_mult": self.project_mult, "rank_score": self.rank_score, "score": self.score,
        }
