"""One source's rows in the index tables: building them from prepared chunks, inserting them
(chunks, recall metadata, provenance, passage vectors, the sqlite-vec table), deleting them, and
reading them from another index file. Functions over a connection the caller holds inside its
write transaction (:class:`memory_core.store.writer.IndexWriter` serialises them)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import apsw
import numpy as np

from host_facades.chunking.pipeline import chunk_id
from host_facades.db.vectors import encode_int8, encode_vector
from host_facades.retrieval.vector_state import passage_join
from memory_core.store import schema


@dataclass
class SourceRows:
    """The rows of one source, one list per table (``vectors``: ``(id, blob)`` for sqlite-vec;
    ``dims``: their width, None without vectors)."""

    chunks: list[tuple] = field(default_factory=list)
    recall: list[tuple] = field(default_factory=list)
    provenance: list[tuple] = field(default_factory=list)
    vectors: list[tuple] = field(default_factory=list)
    passages: list[tuple] = field(default_factory=list)  # (chunk id, seq, int8 codes, scale)
    dims: int | None = None


def build_rows(path: str, source: str, chunks: Sequence[Any], embeddings: np.ndarray | None, model: str,
               passages: Sequence[np.ndarray | None] | None, now: int) -> SourceRows:
    """The rows of ``chunks`` (identical text at identical lines: one row); ``embeddings`` already
    checked to be ``(len(chunks), dims)`` float32 or None."""
    rows = SourceRows()
    seen: set[str] = set()
    for i, ch in enumerate(chunks):
        cid = chunk_id(source, path, ch.start_line, ch.end_line, ch.hash, model)
        if cid in seen:  # identical text at identical lines: one row is the same content
            continue
        seen.add(cid)
        blob = encode_vector(embeddings[i]) if embeddings is not None else b""
        rows.chunks.append((cid, path, source, ch.start_line, ch.end_line, ch.hash, model, ch.text, blob, now))
        triggers = tuple(getattr(ch, "triggers", ()) or ())
        importance = getattr(ch, "importance", None)
        project_key = getattr(ch, "project_key", None)
        if importance is not None or triggers or project_key is not None:
            rows.recall.append((cid, importance, json.dumps(list(triggers), ensure_ascii=False), project_key))
        rows.provenance.append((
            cid,
            getattr(ch, "origin_class", "untrusted") or "untrusted",
            getattr(ch, "session_kind", "unknown") or "unknown",
            getattr(ch, "observed_at", None),
            getattr(ch, "supersedes_key", None),
        ))
        if blob:
            rows.vectors.append((cid, blob))
            extra = passages[i] if passages is not None else None
            if extra is not None:
                rows.passages += [(cid, seq, *encode_int8(v)) for seq, v in enumerate(np.asarray(extra, np.float32))]
    rows.dims = int(embeddings.shape[1]) if embeddings is not None and embeddings.size else None
    return rows


def insert_rows(conn: apsw.Connection, path: str, source: str, rows: SourceRows, *,
                vector_available: bool) -> None:
    """One source's rows into the index tables, inside the caller's write transaction (its old
    rows are deleted already). Without sqlite-vec the vector table is flagged for a rebuild."""
    if rows.chunks:
        conn.executemany(
            "INSERT INTO memory_index_chunks(id, path, source, start_line, end_line, hash, model,"
            " text, embedding, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?)", rows.chunks)
    if rows.passages:  # keyed by the rowid the chunk row was just given (schema migration 5)
        conn.executemany(
            "INSERT INTO memory_index_passage_vectors(chunk_rowid, seq, embedding, scale)"
            " SELECT chunk_rowid, ?2, ?3, ?4 FROM memory_index_chunks WHERE id = ?1", rows.passages)
    if rows.recall:
        conn.executemany(
            "INSERT INTO memory_index_chunk_recall_metadata(chunk_id, importance, triggers, project_key)"
            " VALUES (?,?,?,?)", rows.recall)
    if rows.provenance:
        conn.executemany(
            "INSERT INTO memory_index_chunk_provenance(chunk_id, origin_class, session_kind,"
            " observed_at, supersedes_key) VALUES (?,?,?,?,?)", rows.provenance)
    dims = rows.dims
    if not rows.vectors or not dims:
        return
    if not vector_available:
        conn.execute(
            "INSERT INTO memory_index_meta(key, value) VALUES (?, '1') ON CONFLICT(key) DO UPDATE SET value = '1'",
            (schema.VECTOR_REBUILD_KEY,))
        return
    if schema.vec_table_dims(conn) != dims:
        schema.ensure_vec_table(conn, dims)
        # ensure_vec_table refilled from canonical vectors, including the rows above
        conn.execute(
            "DELETE FROM memory_index_chunks_vec WHERE id IN"
            " (SELECT id FROM memory_index_chunks WHERE path = ? AND source = ?)", (path, source))
    conn.executemany("INSERT INTO memory_index_chunks_vec(id, embedding) VALUES (?, ?)", rows.vectors)


def upsert_source(conn: apsw.Connection, path: str, source: str, hash_: str, mtime: float, size: int) -> None:
    conn.execute(
        "INSERT INTO memory_index_sources(path, source, hash, mtime, size) VALUES (?,?,?,?,?)"
        " ON CONFLICT(path, source) DO UPDATE SET hash = excluded.hash, mtime = excluded.mtime,"
        " size = excluded.size", (path, source, hash_, mtime, size))


def delete_rows(conn: apsw.Connection, path: str, source: str, *, vector_available: bool) -> int:
    """Delete a source's vec, chunk (FTS, recall and provenance follow) rows; not its sources row."""
    if vector_available and schema.vec_table_dims(conn) is not None:
        conn.execute(
            "DELETE FROM memory_index_chunks_vec WHERE id IN"
            " (SELECT id FROM memory_index_chunks WHERE path = ? AND source = ?)",
            (path, source),
        )
    ids = [r[0] for r in conn.execute(
        "SELECT id FROM memory_index_chunks WHERE path = ? AND source = ?", (path, source)
    )]
    if ids:
        # recall/provenance cascade through foreign keys; explicit deletes keep it independent of PRAGMA state
        conn.executemany("DELETE FROM memory_index_chunk_recall_metadata WHERE chunk_id = ?", [(i,) for i in ids])
        conn.executemany("DELETE FROM memory_index_chunk_provenance WHERE chunk_id = ?", [(i,) for i in ids])
        conn.execute("DELETE FROM memory_index_passage_vectors WHERE chunk_rowid IN"
                     " (SELECT chunk_rowid FROM memory_index_chunks WHERE path = ? AND source = ?)", (path, source))
        conn.execute("DELETE FROM memory_index_chunks WHERE path = ? AND source = ?", (path, source))
    return len(ids)


def read_rows(src: apsw.Connection, path: str, source: str, *, model: str) -> tuple[SourceRows, float, int] | None:
    """One source's rows and its ``(mtime, size)`` as another index file holds them, or None when it
    has no sources row or a chunk embedded with another model than ``model``. Vector rows of one
    width only (the first row's)."""
    chunks = [tuple(r) for r in src.execute(
        "SELECT id, path, source, start_line, end_line, hash, model, text, embedding, updated_at"
        " FROM memory_index_chunks WHERE path = ? AND source = ?", (path, source))]
    row = src.execute("SELECT mtime, size FROM memory_index_sources WHERE path = ? AND source = ?",
                      (path, source)).fetchone()
    if row is None or any(c[6] != model for c in chunks):
        return None
    ids = [(c[0],) for c in chunks]
    recall = [tuple(r) for i in ids for r in src.execute(
        "SELECT chunk_id, importance, triggers, project_key FROM memory_index_chunk_recall_metadata"
        " WHERE chunk_id = ?", i)]
    prov = [tuple(r) for i in ids for r in src.execute(
        "SELECT chunk_id, origin_class, session_kind, observed_at, supersedes_key"
        " FROM memory_index_chunk_provenance WHERE chunk_id = ?", i)]
    layout = passage_join(src)  # ``src`` may be an index from before schema migration 4 or 5
    passage_rows = [tuple(r) for i in ids for r in src.execute(
        f"SELECT c.id, p.seq, p.embedding, {layout[1]} FROM memory_index_chunks c"
        f" JOIN memory_index_passage_vectors p ON {layout[0]} WHERE c.id = ? ORDER BY p.seq", i)
    ] if layout is not None else []
    vec_rows = [(c[0], c[8]) for c in chunks if c[8]]
    dims = len(vec_rows[0][1]) // 4 if vec_rows else None
    vec_rows = [v for v in vec_rows if len(v[1]) == dims * 4]  # one width: the first row's
    rows = SourceRows(chunks=chunks, recall=recall, provenance=prov, vectors=vec_rows, passages=passage_rows,
                      dims=dims)
    return rows, row[0], row[1]
