"""The single writer of a per-agent index database (upstream `memory/manager-sync-ops.ts`).

:class:`IndexWriter` owns the one read-write connection (:class:`memory_core.store.connection.WriterConnection`:
opening, reopening after a swap, the lock, bulk commits). Every mutation of the index goes through
it: per-source atomic replace (one transaction per source; the rows themselves are
:mod:`memory_core.store.source_rows`), hash-guarded delete, session forget tombstones and index
meta. Its embedding cache (:attr:`IndexWriter.cache`, :mod:`memory_core.store.cache`) writes through
the same connection and lock.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Sequence
from typing import Any

import apsw
import numpy as np

from memory_core.store import schema
from memory_core.store import source_rows as rows_of
from memory_core.store.cache import EmbeddingCache
from memory_core.store.connection import OPEN_ATTEMPTS, WriterConnection
from memory_core.store.connection import serialized_method as _serialized

FTS_ONLY_MODEL = "fts-only"
LAST_SYNC_KEY = "memory_index_last_sync_v1"

__all__ = ["FTS_ONLY_MODEL", "LAST_SYNC_KEY", "OPEN_ATTEMPTS", "IndexWriter"]


def _now_ms() -> int:
    return int(time.time() * 1000)


class IndexWriter(WriterConnection):
    """Owns the read-write connection; all index writes go through it.

    ``replace_source`` runs in one transaction per source: a failure leaves that source's old rows
    exactly as they were, and sources published before it stay published.
    """

    def __init__(
        self,
        db_path: str,
        *,
        fts_tokenizer: str = "unicode61",
        vector_enabled: bool = True,
        extension_path: str | None = None,
        cache_enabled: bool = True,
        cache_max_entries: int | None = None,
        durable: bool = True,
        page_size: int = schema.PAGE_SIZE_VECTORS,
    ) -> None:
        super().__init__(db_path, fts_tokenizer=fts_tokenizer, vector_enabled=vector_enabled,
                         extension_path=extension_path, durable=durable, page_size=page_size)
        self.cache = EmbeddingCache(self, enabled=cache_enabled, max_entries=cache_max_entries)
        self._open()

    def __enter__(self) -> IndexWriter:
        return self

    # ------------------------------------------------------------------ facts
    @property
    @_serialized
    def revision(self) -> int:
        return schema.read_revision(self._c())

    @property
    @_serialized
    def vec_dims(self) -> int | None:
        if not self.vector_available:
            return None
        return schema.vec_table_dims(self._c())

    @_serialized
    def indexed_hashes(self, source: str) -> dict[str, str]:
        rows = self._c().execute("SELECT path, hash FROM memory_index_sources WHERE source = ?", (source,))
        return {p: h for p, h in rows}

    @_serialized
    def indexed_stats(self, source: str) -> dict[str, tuple[float | None, int | None, str]]:
        rows = self._c().execute(
            "SELECT path, mtime, size, hash FROM memory_index_sources WHERE source = ?", (source,)
        )
        return {p: (m, s, h) for p, m, s, h in rows}

    @_serialized
    def counts(self) -> dict[str, Any]:
        """Files and chunks per source, and whether any chunk carries a semantic vector."""
        conn = self._c()
        files = dict(conn.execute("SELECT source, count(*) FROM memory_index_sources GROUP BY source"))
        chunks = dict(conn.execute("SELECT source, count(*) FROM memory_index_chunks GROUP BY source"))
        return {
            "files": sum(files.values()),
            "chunks": sum(chunks.values()),
            "files_by_source": files,
            "chunks_by_source": chunks,
            "has_indexed_chunks": bool(chunks),
            "has_semantic_chunks": self.has_semantic_chunks(),
        }

    @_serialized
    def optimize_fts(self) -> None:
        """Merge each FTS5 index into one b-tree (FTS5 ``optimize``). A sync writes one b-tree per
        source and FTS5 merges only groups of four, so a freshly built index is left with a dozen or
        more, and every MATCH looks each term up in each of them: a long query's statements took
        5-7x longer than over one b-tree. Same rows, same bm25 ranks; readers keep their snapshot."""
        if not self.fts_available:
            return
        conn = self._c()
        with schema.write_tx(conn):
            for table in ("memory_index_chunks_fts", "memory_index_paths_fts"):
                conn.execute(f"INSERT INTO {table}({table}) VALUES('optimize')")

    @_serialized
    def has_semantic_chunks(self) -> bool:
        row = self._c().execute(
            "SELECT 1 FROM memory_index_chunks WHERE model != ? LIMIT 1", (FTS_ONLY_MODEL,)
        ).fetchone()
        return row is not None

    # ------------------------------------------------------------------ meta
    def read_meta(self) -> dict | None:
        value = self.get_meta_value(schema.META_KEY)
        if value is None:
            return None
        try:
            meta = json.loads(value)
        except ValueError:
            return None
        return meta if isinstance(meta, dict) else None

    def write_meta(self, meta: dict) -> None:
        self.set_meta_value(schema.META_KEY, json.dumps(meta, sort_keys=True))

    @_serialized
    def get_meta_value(self, key: str) -> str | None:
        row = self._c().execute("SELECT value FROM memory_index_meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    @_serialized
    def set_meta_value(self, key: str, value: str | None) -> None:
        conn = self._c()
        with schema.write_tx(conn):
            if value is None:
                conn.execute("DELETE FROM memory_index_meta WHERE key = ?", (key,))
            else:
                conn.execute(
                    "INSERT INTO memory_index_meta(key, value) VALUES (?, ?)"
                    " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    (key, value),
                )

    # ------------------------------------------------------------------ publication
    @_serialized
    def is_forgotten(self, path: str, source: str = "sessions") -> bool:
        row = self._c().execute(
            "SELECT 1 FROM memory_index_forgotten WHERE source = ? AND path = ?", (source, path)
        ).fetchone()
        return row is not None

    @_serialized
    def replace_source(
        self,
        entry: Any,
        chunks: Sequence[Any],
        embeddings: np.ndarray | None,
        model: str,
        passages: Sequence[np.ndarray | None] | None = None,
    ) -> str:
        """Replace every row of ``(entry.path, entry.source)`` with ``chunks`` in one transaction.

        Returns ``"published"``, or ``"forgotten"`` (nothing written) for a tombstoned session.
        ``embeddings`` is ``(len(chunks), dims)`` float32 or None for keyword-only (``model`` is
        then normally ``"fts-only"``). ``passages`` has, per chunk, the ``(passages, dims)`` vectors
        of its passages (``host_facades.chunking.pipeline.split_passages``) or None for a one-passage chunk.
        """
        conn = self._c()
        path, source = entry.path, entry.source
        if embeddings is not None:
            embeddings = np.asarray(embeddings, dtype=np.float32)
            if embeddings.ndim != 2 or embeddings.shape[0] != len(chunks):
                raise ValueError(
                    f"embeddings shape {embeddings.shape} does not match {len(chunks)} chunks for {path}"
                )
        rows = rows_of.build_rows(path, source, chunks, embeddings, model or FTS_ONLY_MODEL, passages, _now_ms())
        with schema.write_tx(conn):
            if source == "sessions" and self.is_forgotten(path, source):
                return "forgotten"
            self._delete_rows(conn, path, source)
            rows_of.insert_rows(conn, path, source, rows, vector_available=self.vector_available)
            rows_of.upsert_source(conn, path, source, entry.hash, float(entry.mtime_ms), int(entry.size))
        self._after_source_write()
        return "published"

    def _delete_rows(self, conn: apsw.Connection, path: str, source: str) -> int:
        """Delete a source's vec, chunk (FTS, recall and provenance follow) rows; not its sources row.
        Their vectors stay in the embedding cache (EmbeddingCache.keep_deleted)."""
        self.cache.keep_deleted(conn, path, source)
        return rows_of.delete_rows(conn, path, source, vector_available=self.vector_available)

    @_serialized
    def delete_source(self, path: str, source: str) -> int:
        """Delete every row of ``(path, source)``; returns the number of chunks removed."""
        conn = self._c()
        with schema.write_tx(conn):
            n = self._delete_rows(conn, path, source)
            conn.execute("DELETE FROM memory_index_sources WHERE path = ? AND source = ?", (path, source))
        return n

    @_serialized
    def refresh_source_stats(self, rows: Sequence[tuple[str, str, str, float, int]]) -> int:
        """Record a new mtime/size for sources whose content did not change: ``rows`` of
        ``(path, source, hash, mtime_ms, size)``; a row is updated only while its indexed hash is
        still ``hash``. Without this, a touched or re-checked-out file looks changed to every
        freshness reconcile although each sync finds its content the same. Returns rows updated."""
        if not rows:
            return 0
        conn = self._c()
        updated = 0
        with schema.write_tx(conn):
            for path, source, h, mtime, size in rows:
                conn.execute(
                    "UPDATE memory_index_sources SET mtime = ?, size = ? WHERE path = ? AND source = ? AND hash = ?",
                    (mtime, size, path, source, h),
                )
                updated += conn.changes()
        return updated

    @_serialized
    def record_skipped(
        self,
        rows: Sequence[tuple[str, str, float, int, str]],
        *,
        covered: Iterable[tuple[str, str]] | None = None,
    ) -> None:
        """Record the files a sync skipped: ``rows`` of ``(source, path, mtime_ms, size, code)``.

        Earlier records of the ``covered`` ``(source, path)`` pairs (None: every record) are dropped
        first, so a file that became readable, or vanished, stops being listed as skipped."""
        conn = self._c()
        with schema.write_tx(conn):
            if covered is None:
                conn.execute("DELETE FROM memory_index_skipped")
            else:
                conn.executemany("DELETE FROM memory_index_skipped WHERE source = ? AND path = ?", list(covered))
            conn.executemany(
                "INSERT OR REPLACE INTO memory_index_skipped(source, path, mtime, size, code) VALUES (?,?,?,?,?)",
                list(rows),
            )

    @_serialized
    def delete_if_current(self, path: str, source: str, expected_hash: str) -> bool:
        """Delete ``(path, source)`` only when its indexed hash still equals ``expected_hash``."""
        conn = self._c()
        with schema.write_tx(conn):
            row = conn.execute(
                "SELECT hash FROM memory_index_sources WHERE path = ? AND source = ?", (path, source)
            ).fetchone()
            if row is None or row[0] != expected_hash:
                return False
            self._delete_rows(conn, path, source)
            conn.execute("DELETE FROM memory_index_sources WHERE path = ? AND source = ?", (path, source))
        return True

    @_serialized
    def forget_session(self, path: str) -> int:
        """Tombstone a session transcript and delete its rows; returns the number of chunks removed."""
        conn = self._c()
        with schema.write_tx(conn):
            conn.execute(
                "INSERT INTO memory_index_forgotten(source, path, forgotten_at) VALUES ('sessions', ?, ?)"
                " ON CONFLICT(source, path) DO UPDATE SET forgotten_at = excluded.forgotten_at",
                (path, _now_ms()),
            )
            n = self._delete_rows(conn, path, "sessions")
            conn.execute("DELETE FROM memory_index_sources WHERE path = ? AND source = 'sessions'", (path,))
        return n

    @_serialized
    def is_indexed(self, path: str, source: str) -> bool:
        row = self._c().execute(
            "SELECT 1 FROM memory_index_sources WHERE source = ? AND path = ?", (source, path)
        ).fetchone()
        return row is not None

    @_serialized
    def forgotten_paths(self) -> list[tuple[str, str, int]]:
        return [tuple(r) for r in self._c().execute(
            "SELECT source, path, forgotten_at FROM memory_index_forgotten ORDER BY source, path"
        )]

    # ------------------------------------------------------------------ seeding a rebuild
    @_serialized
    def seed_from(self, other_db_path: str) -> int:
        """Copy the forget tombstones and the embedding cache of another index database into this one.

        Used by the atomic reindex so forgotten sessions stay forgotten and unchanged text is not
        re-embedded. Returns the number of cache rows copied; a missing or unreadable file copies nothing.
        """
        if not os.path.exists(other_db_path):
            return 0
        try:
            src = apsw.Connection(other_db_path, flags=apsw.SQLITE_OPEN_READONLY)
        except apsw.Error:
            return 0
        conn = self._c()
        try:
            src.set_busy_timeout(5000)
            names = {r[0] for r in src.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "memory_index_forgotten" in names:
                rows = list(src.execute("SELECT source, path, forgotten_at FROM memory_index_forgotten"))
                with schema.write_tx(conn):
                    conn.executemany(
                        "INSERT OR IGNORE INTO memory_index_forgotten(source, path, forgotten_at) VALUES (?,?,?)", rows
                    )
            self.cache.seed_path = other_db_path  # its passage vectors (EmbeddingCache.passages_of)
            if "memory_embedding_cache" in names:
                return self.cache.copy_from(src)
        except apsw.Error:
            pass
        finally:
            src.close()
        return 0

    @_serialized
    def copy_source_from(self, other_db_path: str, path: str, source: str, *, model: str) -> bool:
        """Carry one source's rows over from another index database (a full rebuild keeps a file that
        could not be read this time). Only rows embedded with ``model`` are copied; the sources row
        gets hash ``''`` so the next sync re-indexes the file once it is readable. Returns True if copied.
        """
        try:
            src = apsw.Connection(other_db_path, flags=apsw.SQLITE_OPEN_READONLY)
        except apsw.Error:
            return False
        try:
            src.set_busy_timeout(5000)
            found = rows_of.read_rows(src, path, source, model=model)
        except apsw.Error:
            return False
        finally:
            src.close()
        if found is None:
            return False
        rows, mtime, size = found
        conn = self._c()
        with schema.write_tx(conn):
            self._delete_rows(conn, path, source)
            rows_of.insert_rows(conn, path, source, rows, vector_available=self.vector_available)
            rows_of.upsert_source(conn, path, source, "", mtime, size)  # '': re-indexed once readable
        return True

    @_serialized
    def integrity_check(self, *, quick: bool = False) -> str:
        pragma = "quick_check" if quick else "integrity_check"
        return str(self._c().execute(f"PRAGMA {pragma}").fetchone()[0])
