"""The single writer of a per-agent index database (upstream `memory/manager-sync-ops.ts`).

:class:`IndexWriter` owns the one read-write connection. Every mutation of the index goes through
it: per-source atomic replace (one transaction per source), hash-guarded delete, session forget
tombstones and index meta. Its embedding cache (:attr:`IndexWriter.cache`, :mod:`memory_core.store.cache`)
writes through the same connection and lock.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import apsw
import numpy as np

from host_facades.chunking.pipeline import chunk_id
from host_facades.db.sqlite_ext import load_sqlite_vec
from host_facades.db.sqlite_read import open_readonly
from host_facades.retrieval.vector_state import has_passage_table
from host_facades.db.vectors import encode_int8, encode_vector
from memory_core.errors import IndexBusy
from memory_core.store import schema
from memory_core.store.access import ensure_writable_dir, index_errors
from memory_core.store.cache import EmbeddingCache
from memory_core.store.perms import create_private_file

FTS_ONLY_MODEL = "fts-only"
LAST_SYNC_KEY = "memory_index_last_sync_v1"
OPEN_ATTEMPTS = 20  # opens raced by another process's file swap before giving up (IndexBusy)
T = TypeVar("T")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _serialized(method):
    """Run a write method under the writer's lock: one connection shared by threads must not let one
    thread's statements land inside another thread's open transaction or savepoint."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        return self.serialized(method, self, *args, **kwargs)

    return wrapper


class IndexWriter:
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
    ) -> None:
        self.db_path = os.path.abspath(db_path)
        self.fts_tokenizer = fts_tokenizer
        self.vector_enabled = vector_enabled
        self.extension_path = extension_path
        self.durable = durable
        self._bulk: list[int] | None = None
        self._wlock = threading.RLock()
        self.vector_available = False
        self.vector_version: str | None = None
        self.vector_error: str | None = None
        self.fts_available = False
        self.fts_error: str | None = None
        self.conn: apsw.Connection | None = None
        self._inode: tuple[int, int] | None = None
        # reopened after a swap by another process: what this writer published to the old file may
        # be missing from the new one (the owner's freshness re-checks everything then)
        self.reopens = 0
        self.on_reopen: Any = None
        self.cache = EmbeddingCache(self, enabled=cache_enabled, max_entries=cache_max_entries)
        self._open()

    def serialized(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` under the writer's lock, run once more when another process
        swapped the file in during the call (SQLITE_READONLY_DBMOVED: its transaction rolled back)."""
        with self._wlock:
            try:
                return fn(*args, **kwargs)
            except apsw.ReadOnlyError:
                if self._bulk is not None or self.conn is None or self._file_identity() == self._inode:
                    raise
                return fn(*args, **kwargs)

    def connection(self) -> apsw.Connection:
        """The read-write connection; use it only inside :meth:`serialized`."""
        return self._c()

    # ------------------------------------------------------------------ connection
    def _open(self) -> None:
        """Open (or create) the file; :class:`StateDirNotWritable` when its folder cannot be written,
        :class:`IndexCorrupt` when the file is not a readable database."""
        ensure_writable_dir(self.db_path)
        for attempt in range(OPEN_ATTEMPTS):
            if attempt:
                time.sleep(min(0.05, 0.002 * 2 ** attempt))  # let the other process finish its rename
            ident = self._file_identity()
            try:
                conn = self._connect()
            except apsw.ReadOnlyError:
                # the file was swapped while opening it (SQLITE_READONLY_DBMOVED; an inode number
                # can come back, so the identity alone cannot tell): open the file there now
                if attempt == OPEN_ATTEMPTS - 1:
                    raise
                continue
            after = self._file_identity()
            if after == ident or ident is None:  # unchanged, or this open created the file
                break
            conn.close()  # swapped while opening: the identity must name the file conn has open
        else:
            raise IndexBusy(f"the index file {self.db_path} kept being replaced while opening it; retry")
        self.conn = conn
        self._inode = after

    def _connect(self) -> apsw.Connection:
        with index_errors(self.db_path):
            if os.path.exists(self.db_path):
                # read the header without write access first: a read-write open of a file that is no
                # database may already remove its -wal/-shm, which `index --force` keeps with it
                with contextlib.suppress(FileNotFoundError):
                    open_readonly(self.db_path, load_vec=False).close()
            else:
                create_private_file(self.db_path)  # 0600 whatever the umask; -wal/-shm get its mode
            conn = apsw.Connection(self.db_path)
            try:
                schema.configure_connection(conn)
                if not self.durable:  # a throw-away build file: fsynced once before it is swapped in
                    conn.execute("PRAGMA synchronous=OFF")
                schema.migrate(conn)
                self.fts_available, self.fts_error = schema.ensure_fts(conn, self.fts_tokenizer)
                # sqlite-vec is also loaded when vectors are off but a vec0 table exists, so deletes can
                # keep it in step (a keyword-only session must not leave orphaned vector rows behind)
                if self.vector_enabled or schema.vec_table_dims(conn) is not None:
                    ok, version, error = load_sqlite_vec(conn, self.extension_path)
                    self.vector_available, self.vector_version, self.vector_error = ok, version, error
                else:
                    self.vector_available, self.vector_version, self.vector_error = False, None, None
            except BaseException:
                conn.close()
                raise
        return conn

    def _file_identity(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.db_path)
        except FileNotFoundError:
            return None
        return (st.st_dev, st.st_ino)

    def _c(self) -> apsw.Connection:
        """The connection, reopened first when the file was swapped underneath (another process's
        atomic reindex). Callers hold ``_wlock`` for the whole use of the connection: the reopen
        closes the old one, which must never happen under another thread's statement."""
        if self.conn is None:
            raise RuntimeError("IndexWriter is closed")
        if self._bulk is None and self._file_identity() != self._inode:
            self.conn.close()
            self.conn = None
            self._open()
            self.reopens += 1
            if self.on_reopen is not None:
                self.on_reopen()
        assert self.conn is not None
        return self.conn

    def replaced(self) -> bool:
        """Another process renamed a new file over the one this writer has open (one stat)."""
        return self.conn is not None and self._file_identity() != self._inode

    @_serialized
    def check_swapped(self) -> bool:
        """Reopen now when the file was replaced by another process; True when it was."""
        before = self.reopens
        if self.conn is not None:
            self._c()
        return self.reopens != before

    @_serialized
    def close(self, *, checkpoint: bool = True) -> None:
        if self.conn is None:
            return
        try:
            if checkpoint and self._file_identity() == self._inode:
                self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except apsw.Error:
            pass
        finally:
            self.conn.close()
            self.conn = None

    def __enter__(self) -> IndexWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def bulk(self, every: int = 500) -> Iterator[None]:
        """Group many per-source replaces into fewer commits (used while building a temp database).

        Each ``replace_source`` still runs in its own savepoint, so a failing source rolls back
        alone; the outer transaction commits every ``every`` sources and at the end.
        """
        with self._wlock:
            conn = self._c()
            conn.execute("BEGIN IMMEDIATE")
            self._bulk = [0, max(1, every)]
            try:
                yield
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(apsw.Error):
                    conn.execute("ROLLBACK")
                raise
            finally:
                self._bulk = None

    def _after_source_write(self) -> None:
        if self._bulk is None or self.conn is None:
            return
        self._bulk[0] += 1
        if self._bulk[0] >= self._bulk[1]:
            self.conn.execute("COMMIT")
            self.conn.execute("BEGIN IMMEDIATE")
            self._bulk[0] = 0

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
        model = model or FTS_ONLY_MODEL
        now = _now_ms()
        chunk_rows: list[tuple] = []
        recall_rows: list[tuple] = []
        prov_rows: list[tuple] = []
        vec_rows: list[tuple] = []
        passage_rows: list[tuple] = []
        seen: set[str] = set()
        for i, ch in enumerate(chunks):
            cid = chunk_id(source, path, ch.start_line, ch.end_line, ch.hash, model)
            if cid in seen:  # identical text at identical lines: one row is the same content
                continue
            seen.add(cid)
            blob = encode_vector(embeddings[i]) if embeddings is not None else b""
            chunk_rows.append((cid, path, source, ch.start_line, ch.end_line, ch.hash, model, ch.text, blob, now))
            triggers = tuple(getattr(ch, "triggers", ()) or ())
            importance = getattr(ch, "importance", None)
            project_key = getattr(ch, "project_key", None)
            if importance is not None or triggers or project_key is not None:
                recall_rows.append((cid, importance, json.dumps(list(triggers), ensure_ascii=False), project_key))
            prov_rows.append((
                cid,
                getattr(ch, "origin_class", "untrusted") or "untrusted",
                getattr(ch, "session_kind", "unknown") or "unknown",
                getattr(ch, "observed_at", None),
                getattr(ch, "supersedes_key", None),
            ))
            if blob:
                vec_rows.append((cid, blob))
                extra = passages[i] if passages is not None else None
                if extra is not None:
                    passage_rows += [(cid, seq, *encode_int8(v)) for seq, v in enumerate(np.asarray(extra, np.float32))]
        dims = int(embeddings.shape[1]) if embeddings is not None and embeddings.size else None

        with schema.write_tx(conn):
            if source == "sessions" and self.is_forgotten(path, source):
                return "forgotten"
            self._delete_rows(conn, path, source)
            self._insert_rows(conn, path, source, chunks=chunk_rows, recall=recall_rows, provenance=prov_rows,
                              passages=passage_rows, vectors=vec_rows, dims=dims)
            self._upsert_source(conn, path, source, entry.hash, float(entry.mtime_ms), int(entry.size))
        self._after_source_write()
        return "published"

    def _insert_rows(self, conn: apsw.Connection, path: str, source: str, *, chunks: Sequence[tuple],
                     recall: Sequence[tuple], provenance: Sequence[tuple], passages: Sequence[tuple],
                     vectors: Sequence[tuple], dims: int | None) -> None:
        """One source's rows into the index tables, inside the caller's write transaction (its old
        rows are deleted already). Without sqlite-vec the vector table is flagged for a rebuild."""
        if chunks:
            conn.executemany(
                "INSERT INTO memory_index_chunks(id, path, source, start_line, end_line, hash, model,"
                " text, embedding, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?)", chunks)
        if passages:
            conn.executemany(
                "INSERT INTO memory_index_passage_vectors(chunk_id, seq, embedding, scale) VALUES (?,?,?,?)", passages)
        if recall:
            conn.executemany(
                "INSERT INTO memory_index_chunk_recall_metadata(chunk_id, importance, triggers, project_key)"
                " VALUES (?,?,?,?)", recall)
        if provenance:
            conn.executemany(
                "INSERT INTO memory_index_chunk_provenance(chunk_id, origin_class, session_kind,"
                " observed_at, supersedes_key) VALUES (?,?,?,?,?)", provenance)
        if not vectors or not dims:
            return
        if not self.vector_available:
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
        conn.executemany("INSERT INTO memory_index_chunks_vec(id, embedding) VALUES (?, ?)", vectors)

    @staticmethod
    def _upsert_source(conn: apsw.Connection, path: str, source: str, hash_: str, mtime: float, size: int) -> None:
        conn.execute(
            "INSERT INTO memory_index_sources(path, source, hash, mtime, size) VALUES (?,?,?,?,?)"
            " ON CONFLICT(path, source) DO UPDATE SET hash = excluded.hash, mtime = excluded.mtime,"
            " size = excluded.size", (path, source, hash_, mtime, size))

    def _delete_rows(self, conn: apsw.Connection, path: str, source: str) -> int:
        """Delete a source's vec, chunk (FTS, recall and provenance follow) rows; not its sources row."""
        if self._has_vec_table(conn):
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
            conn.executemany("DELETE FROM memory_index_passage_vectors WHERE chunk_id = ?", [(i,) for i in ids])
            conn.execute("DELETE FROM memory_index_chunks WHERE path = ? AND source = ?", (path, source))
        return len(ids)

    def _has_vec_table(self, conn: apsw.Connection) -> bool:
        if not self.vector_available:
            return False
        return schema.vec_table_dims(conn) is not None

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
            chunks = [tuple(r) for r in src.execute(
                "SELECT id, path, source, start_line, end_line, hash, model, text, embedding, updated_at"
                " FROM memory_index_chunks WHERE path = ? AND source = ?", (path, source))]
            row = src.execute("SELECT mtime, size FROM memory_index_sources WHERE path = ? AND source = ?",
                              (path, source)).fetchone()
            if row is None or any(c[6] != model for c in chunks):
                return False
            ids = [(c[0],) for c in chunks]
            recall = [tuple(r) for i in ids for r in src.execute(
                "SELECT chunk_id, importance, triggers, project_key FROM memory_index_chunk_recall_metadata"
                " WHERE chunk_id = ?", i)]
            prov = [tuple(r) for i in ids for r in src.execute(
                "SELECT chunk_id, origin_class, session_kind, observed_at, supersedes_key"
                " FROM memory_index_chunk_provenance WHERE chunk_id = ?", i)]
            scale = "scale" if has_passage_table(src) and any(
                r[1] == "scale" for r in src.execute("PRAGMA table_info(memory_index_passage_vectors)")) else "NULL"
            passage_rows = [tuple(r) for i in ids for r in src.execute(
                f"SELECT chunk_id, seq, embedding, {scale} FROM memory_index_passage_vectors WHERE chunk_id = ?", i)
            ] if has_passage_table(src) else []
        except apsw.Error:
            return False
        finally:
            src.close()
        conn = self._c()
        with schema.write_tx(conn):
            self._delete_rows(conn, path, source)
            vec_rows = [(c[0], c[8]) for c in chunks if c[8]]
            dims = len(vec_rows[0][1]) // 4 if vec_rows else None
            vec_rows = [v for v in vec_rows if len(v[1]) == dims * 4]  # one width: the first row's
            self._insert_rows(conn, path, source, chunks=chunks, recall=recall, provenance=prov, passages=passage_rows,
                              vectors=vec_rows, dims=dims)
            self._upsert_source(conn, path, source, "", row[0], row[1])  # '': re-indexed once readable
        return True

    @_serialized
    def integrity_check(self, *, quick: bool = False) -> str:
        pragma = "quick_check" if quick else "integrity_check"
        return str(self._c().execute(f"PRAGMA {pragma}").fetchone()[0])
