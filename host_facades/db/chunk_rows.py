"""Chunk rows with their recall metadata, provenance and source mtime: the one reader.

Every reader of a chunk's stored facts goes through :func:`read_chunks` (by id: a search's
candidates, the worker's ``metadata`` op, the provider's ``get``) or :func:`memory_candidates`
(the provider's trigger / project candidates): one SELECT, one row shape (:data:`CHUNK_FIELDS`).
The caller owns the read transaction; chunks that no longer exist are simply absent.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

CHUNK_FIELDS = (
    "id", "path", "source", "start_line", "end_line", "text", "model", "hash", "updated_at",
    "importance", "triggers", "project_key", "origin_class", "session_kind", "observed_at",
    "supersedes_key", "source_mtime",
)
_SELECT = (
    "SELECT c.id, c.path, c.source, c.start_line, c.end_line, {text}, c.model, c.hash, c.updated_at,"
    " r.importance, r.triggers, r.project_key, p.origin_class, p.session_kind, p.observed_at,"
    " p.supersedes_key, s.mtime"
    " FROM memory_index_chunks c"
    " LEFT JOIN memory_index_chunk_recall_metadata r ON r.chunk_id = c.id"
    " LEFT JOIN memory_index_chunk_provenance p ON p.chunk_id = c.id"
    " LEFT JOIN memory_index_sources s ON s.path = c.path AND s.source = c.source"
)
_BATCH = 500
_CANDIDATE_COLUMNS = {"trigger": "r.triggers", "project": "r.project_key"}


def read_chunks(conn: Any, ids: Sequence[str], *, text: bool = True) -> dict[str, dict[str, Any]]:
    """``{id: row}`` (keys :data:`CHUNK_FIELDS`) for the chunks of ``ids`` that exist; ``text=False``
    leaves the chunk text out (``None``): a search needs only the metadata."""
    sql = _SELECT.format(text="c.text" if text else "NULL") + " WHERE c.id IN ({marks})"
    unique = list(dict.fromkeys(ids))
    out: dict[str, dict[str, Any]] = {}
    for start in range(0, len(unique), _BATCH):
        batch = unique[start:start + _BATCH]
        for row in conn.execute(sql.format(marks=",".join("?" * len(batch))), batch):
            out[row[0]] = dict(zip(CHUNK_FIELDS, row))
    return out


def memory_candidates(conn: Any, kind: str) -> list[dict[str, Any]]:
    """Memory chunks with triggers (``kind="trigger"``) or a project key (``"project"``), by
    importance (highest first) then id."""
    column = _CANDIDATE_COLUMNS[kind]
    sql = (_SELECT.format(text="c.text") + f" WHERE c.source = 'memory' AND {column} IS NOT NULL"
           f" AND trim({column}) NOT IN ('', '[]') ORDER BY coalesce(r.importance, 0) DESC, c.id")
    return [dict(zip(CHUNK_FIELDS, row)) for row in conn.execute(sql)]


def provenance_of(row: dict[str, Any]) -> dict[str, Any] | None:
    """A row's provenance (``origin_class``, ``session_kind``, ``observed_at``, and
    ``supersedes_key`` when set), None for a chunk without one."""
    origin = row.get("origin_class")
    if origin is None:
        return None
    out = {"origin_class": origin, "session_kind": row.get("session_kind"), "observed_at": row.get("observed_at")}
    if row.get("supersedes_key") is not None:
        out["supersedes_key"] = row["supersedes_key"]
    return out


def has_triggers(raw: Any) -> bool:
    """Whether a stored triggers value names any (the rule :func:`memory_candidates`' SQL applies)."""
    return isinstance(raw, str) and raw.strip() not in ("", "[]")


def triggers_text(raw: Any) -> str | None:
    """A chunk's triggers as one display string (``"a; b"``), None when it has none: the one trigger
    normaliser. Stored triggers are JSON array text; a legacy manager may hand a list or plain text."""
    if raw is None:
        return None
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            return raw.strip() or None
        raw = parsed
    if isinstance(raw, list):
        items = [str(t).strip() for t in raw if str(t).strip()]
        return "; ".join(items) or None
    return str(raw).strip() or None
