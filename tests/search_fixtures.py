"""Search test fixtures: a real SQLite index built with the store schema, and a fake embedder."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any

import apsw
import numpy as np

from host_facades.db.sqlite_ext import load_sqlite_vec
from host_facades.db.vectors import encode_vector
from memory_core.store import schema


class FakeEmbedder:
    """Deterministic bag-of-words embedder: each lowercased word hashes to one signed dimension."""

    id = "fake"
    provider_key = "fake-key"
    max_input_bytes = 8192

    def __init__(self, dims: int = 64, model: str = "fake-model") -> None:
        self.dims = dims
        self.model = model
        self.calls = 0

    def vector(self, text: str) -> np.ndarray:
        v = np.zeros(self.dims, dtype=np.float32)
        for word in re.findall(r"\w+", text.lower()):
            h = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
            v[h % self.dims] += 1.0 if (h >> 32) & 1 else -1.0
        n = np.linalg.norm(v)
        return v / n if n > 0 else v

    def embed_batch(self, texts) -> np.ndarray:
        self.calls += 1
        return np.vstack([self.vector(t) for t in texts]) if texts else np.zeros((0, self.dims), np.float32)


def open_db(path: str, *, tokenizer: str = "unicode61", dims: int | None = None) -> apsw.Connection:
    conn = apsw.Connection(str(path))
    schema.configure_connection(conn)
    schema.migrate(conn)
    ok, err = schema.ensure_fts(conn, tokenizer)
    assert ok, err
    if dims:
        assert load_sqlite_vec(conn)[0]
        schema.ensure_vec_table(conn, dims)
    return conn


def add_chunk(
    conn: apsw.Connection,
    *,
    id: str,
    path: str,
    text: str,
    source: str = "memory",
    start_line: int = 1,
    end_line: int | None = None,
    model: str = "fts-only",
    vector: Any = None,
    importance: int | None = None,
    project_key: str | None = None,
    mtime_ms: float | None = 0.0,
    vec_table: bool = True,
) -> None:
    """Insert one chunk (FTS via triggers), its sources row, metadata and vec0 row."""
    end = end_line if end_line is not None else start_line + max(0, text.count("\n"))
    blob = encode_vector(vector) if vector is not None else b""
    with conn:
        conn.execute(
            "INSERT INTO memory_index_sources(path, source, hash, mtime, size) VALUES (?,?,?,?,?)"
            " ON CONFLICT(path, source) DO NOTHING",
            (path, source, "h-" + path, mtime_ms, len(text)),
        )
        conn.execute(
            "INSERT INTO memory_index_chunks(id, path, source, start_line, end_line, hash, model, text, embedding,"
            " updated_at) VALUES (?,?,?,?,?,?,?,?,?,0)",
            (id, path, source, start_line, end, "c-" + id, model, text, blob),
        )
        if importance is not None or project_key is not None:
            conn.execute(
                "INSERT INTO memory_index_chunk_recall_metadata(chunk_id, importance, triggers, project_key)"
                " VALUES (?,?,?,?)", (id, importance, "[]", project_key))
        if blob and vec_table and schema.vec_table_dims(conn):
            conn.execute("INSERT INTO memory_index_chunks_vec(id, embedding) VALUES (?,?)", (id, blob))


def build_index(path: str, docs: Iterable[dict[str, Any]], *, tokenizer: str = "unicode61",
                embedder: FakeEmbedder | None = None) -> str:
    """Write ``docs`` (dicts of add_chunk kwargs; ``id`` defaults to path:start) into a fresh index."""
    conn = open_db(path, tokenizer=tokenizer, dims=embedder.dims if embedder else None)
    for doc in docs:
        doc = dict(doc)
        doc.setdefault("id", f"{doc['path']}:{doc.get('start_line', 1)}")
        if embedder is not None and "vector" not in doc:
            doc["vector"] = embedder.vector(doc["text"])
            doc.setdefault("model", embedder.model)
        add_chunk(conn, **doc)
    conn.close()
    return str(path)
