"""The embedding cache of an index: vectors keyed by (provider, model, provider key, chunk hash) (upstream
`memory/manager-embedding-ops.ts`).

:class:`EmbeddingCache` is the ``EmbeddingCacheStore`` the indexer embeds through. It lives in the
index database (table ``memory_embedding_cache``) and writes through its :class:`IndexWriter`'s
connection and lock; the atomic reindex seeds a rebuild's cache from the live one (:meth:`copy_from`).

A chunk vector is kept once: the vectors of the chunks an index holds are found in its chunk rows
(under the identity its meta records), so once a sync has published them their cache rows are
dropped (:meth:`settle`). The table keeps what the index does not hold: vectors of chunks that were
edited away or deleted (moved there when their rows go, :meth:`keep_deleted`), of other identities,
and those embedded before their chunks are published.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar

import apsw
import numpy as np

from host_facades.db.vectors import decode_int8, decode_vector, encode_vector
from host_facades.retrieval.vector_state import passage_join
from memory_core.store import schema

T = TypeVar("T")

_IN_BATCH = 500
_COLUMNS = "provider, model, provider_key, hash, embedding, dims, updated_at"


class Writer(Protocol):
    """What the cache needs of :class:`memory_core.store.writer.IndexWriter` (which imports this module)."""

    def serialized(self, fn: Callable[..., T], *args: Any) -> T: ...

    def connection(self) -> apsw.Connection: ...


class EmbeddingCache:
    """Cached vectors of one index database; ``enabled=False`` caches nothing and finds nothing.

    ``max_entries``: after each write the oldest rows (by ``updated_at``) above it are deleted."""

    def __init__(self, writer: Writer, *, enabled: bool = True, max_entries: int | None = None) -> None:
        self._writer = writer
        self.enabled = enabled
        self.max_entries = max_entries
        # the live index a rebuild was seeded from (:meth:`copy_from`): its passage vectors are reusable
        self.seed_path: str | None = None

    def passages_of(self, model: str, chunks: Iterable[tuple[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """Passage vectors a re-index can reuse, per chunk hash: those the index (or the index a
        rebuild was seeded from) stores for a chunk of that hash, ``model`` and the same chunk vector
        (so the same embedding identity). The cache table holds no passage vectors: they are kept once,
        compact, in ``memory_index_passage_vectors``."""
        if not self.enabled:
            return {}
        wanted = {h: encode_vector(np.asarray(v, dtype=np.float32).reshape(-1)) for h, v in chunks}
        if not wanted:
            return {}
        out = self._writer.serialized(self._passages_in, self._writer.connection(), model, wanted)
        if self.seed_path and len(out) < len(wanted):
            try:
                src = apsw.Connection(self.seed_path, flags=apsw.SQLITE_OPEN_READONLY)
            except apsw.Error:
                return out
            try:
                src.set_busy_timeout(5000)
                rest = {h: b for h, b in wanted.items() if h not in out}
                out.update(self._passages_in(src, model, rest))
            except apsw.Error:
                pass
            finally:
                src.close()
        return out

    @staticmethod
    def _passages_in(conn: apsw.Connection, model: str, wanted: dict[str, bytes]) -> dict[str, np.ndarray]:
        layout = passage_join(conn)  # the seed index may be from before schema migration 5
        if layout is None or layout[1] == "NULL":
            return {}  # none, or float32 ones from before schema migration 4: embedded again
        found: dict[tuple[str, str], list[np.ndarray]] = {}
        hashes = list(wanted)
        for i in range(0, len(hashes), _IN_BATCH):
            part = hashes[i:i + _IN_BATCH]
            for h, cid, blob, codes, scale in conn.execute(
                "SELECT c.hash, c.id, c.embedding, p.embedding, p.scale FROM memory_index_chunks c"
                f" JOIN memory_index_passage_vectors p ON {layout[0]}"
                f" WHERE c.model = ? AND c.hash IN ({','.join('?' * len(part))}) AND p.scale IS NOT NULL"
                " ORDER BY c.id, p.seq", (model, *part)):
                if blob == wanted[h]:
                    found.setdefault((h, cid), []).append(decode_int8(codes, scale))
        out: dict[str, np.ndarray] = {}
        for (h, _), rows in found.items():
            out.setdefault(h, np.vstack(rows))
        return out

    def get_many(self, provider: str, model: str, provider_key: str,
                 hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """Cached vectors for ``hashes`` under one provider identity; misses are absent. The chunk
        rows of this index (and of the index a rebuild was seeded from) count as cached when their
        index was built under that identity."""
        if not self.enabled:
            return {}
        wanted = list(dict.fromkeys(hashes))
        ident = (provider, model, provider_key)
        out = self._writer.serialized(self._get_many, provider, model, provider_key, wanted)
        if len(out) < len(wanted):
            out.update(self._writer.serialized(
                _index_vectors, self._writer.connection(), ident, [h for h in wanted if h not in out]))
        if self.seed_path and len(out) < len(wanted):
            with _seed(self.seed_path) as src, contextlib.suppress(apsw.Error):
                if src is not None:
                    out.update(_index_vectors(src, ident, [h for h in wanted if h not in out]))
        return out

    def keep_deleted(self, conn: apsw.Connection, path: str, source: str) -> None:
        """Before the chunk rows of ``(path, source)`` are deleted (inside the caller's write
        transaction): their vectors go to the cache table, under the identity the index was built with,
        so text edited away and back is not embedded again."""
        ident = _identity(conn) if self.enabled else None
        if ident is None:
            return
        now = int(time.time() * 1000)
        conn.execute(
            f"INSERT OR IGNORE INTO memory_embedding_cache({_COLUMNS}) SELECT ?, ?, ?, hash, embedding,"
            " length(embedding) / 4, ? FROM memory_index_chunks WHERE path = ? AND source = ? AND model = ?"
            " AND length(embedding) > 0", (*ident, now, path, source, ident[1]))

    def settle(self) -> int:
        """After a sync published its chunks: keep the vectors of the index a rebuild was seeded from
        that this one does not hold, then drop the cache rows that repeat a chunk vector of this index
        (same identity, hash and bytes), and prune. Returns the cache rows dropped."""
        if not self.enabled:
            return 0
        return self._writer.serialized(self._settle)

    def _settle(self) -> int:
        conn = self._writer.connection()
        ident = _identity(conn)
        if self.seed_path:
            with _seed(self.seed_path) as src, contextlib.suppress(apsw.Error):
                if src is not None:
                    self._keep_seed_vectors(conn, src, ident)
        if ident is None:
            return 0
        with schema.write_tx(conn):
            conn.execute(
                "DELETE FROM memory_embedding_cache WHERE provider = ? AND model = ? AND provider_key = ?"
                " AND EXISTS (SELECT 1 FROM memory_index_chunks c WHERE c.hash = memory_embedding_cache.hash"
                " AND c.model = memory_embedding_cache.model AND c.embedding = memory_embedding_cache.embedding)",
                ident)
            dropped = conn.changes()
        self._prune(self.max_entries)
        if dropped:
            schema.release_free_pages(conn)
        return dropped

    @staticmethod
    def _keep_seed_vectors(conn: apsw.Connection, src: apsw.Connection, ident: tuple[str, str, str] | None) -> None:
        """The chunk vectors of the seed index (under its identity) that this index does not hold,
        into the cache table: what a rebuild leaves out stays reusable, as it was in the old cache."""
        seed_ident = _identity(src)
        if seed_ident is None:
            return
        held = set() if seed_ident != ident else {h for (h,) in conn.execute(
            "SELECT hash FROM memory_index_chunks WHERE model = ? AND length(embedding) > 0", (ident[1],))}
        cur = src.execute("SELECT hash, embedding, max(updated_at) FROM memory_index_chunks WHERE model = ?"
                          " AND length(embedding) > 0 GROUP BY hash", (seed_ident[1],))
        while batch := list(itertools.islice(cur, 2000)):  # bounded memory on a large index
            rows = [(*seed_ident, h, blob, len(blob) // 4, at) for h, blob, at in batch if h not in held]
            if rows:
                with schema.write_tx(conn):
                    conn.executemany(
                        f"INSERT OR IGNORE INTO memory_embedding_cache({_COLUMNS}) VALUES (?,?,?,?,?,?,?)", rows)

    def _get_many(self, provider: str, model: str, provider_key: str,
                  wanted: list[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        conn = self._writer.connection()
        for i in range(0, len(wanted), _IN_BATCH):
            part = wanted[i:i + _IN_BATCH]
            marks = ",".join("?" * len(part))
            for h, blob in conn.execute(
                f"SELECT hash, embedding FROM memory_embedding_cache WHERE provider = ? AND model = ?"
                f" AND provider_key = ? AND hash IN ({marks})",
                (provider, model, provider_key, *part),
            ):
                vec = decode_vector(blob)
                if vec.size:
                    out[h] = vec
        return out

    def put_many(self, provider: str, model: str, provider_key: str, items: dict[str, np.ndarray]) -> None:
        """Upsert vectors with ``updated_at = now``, then prune to ``max_entries``."""
        if not self.enabled or not items:
            return
        now = int(time.time() * 1000)
        rows = []
        for h, vec in items.items():
            v = np.asarray(vec, dtype=np.float32).reshape(-1)
            rows.append((provider, model, provider_key, h, encode_vector(v), int(v.size), now))
        self._writer.serialized(self._put_rows, rows)

    def _put_rows(self, rows: list[tuple]) -> None:
        conn = self._writer.connection()
        with schema.write_tx(conn):
            conn.executemany(
                f"INSERT INTO memory_embedding_cache({_COLUMNS}) VALUES (?,?,?,?,?,?,?)"
                " ON CONFLICT(provider, model, provider_key, hash) DO UPDATE SET"
                " embedding = excluded.embedding, dims = excluded.dims, updated_at = excluded.updated_at",
                rows,
            )
        self._prune(self.max_entries)

    def prune(self, max_entries: int | None = None) -> int:
        """Delete the oldest rows (by ``updated_at``) above ``max_entries`` (default: the cache's
        own limit); returns how many were deleted."""
        return self._writer.serialized(self._prune, self.max_entries if max_entries is None else max_entries)

    def _prune(self, limit: int | None) -> int:
        if limit is None:
            return 0
        conn = self._writer.connection()
        excess = int(conn.execute("SELECT count(*) FROM memory_embedding_cache").fetchone()[0]) - int(limit)
        if excess <= 0:
            return 0
        with schema.write_tx(conn):
            conn.execute(
                "DELETE FROM memory_embedding_cache WHERE rowid IN (SELECT rowid FROM memory_embedding_cache"
                " ORDER BY updated_at ASC, rowid ASC LIMIT ?)",
                (excess,),
            )
        return excess

    def count(self) -> int:
        """Rows in the cache."""
        return self._writer.serialized(self._count)

    def _count(self) -> int:
        return int(self._writer.connection().execute("SELECT count(*) FROM memory_embedding_cache").fetchone()[0])

    def copy_from(self, src: apsw.Connection, *, batch: int = 2000) -> int:
        """Copy the cache rows of another index database (``src``, open read-only) that this one
        lacks, keeping their ``updated_at``; returns how many rows were read. Disabled: none."""
        if not self.enabled:
            return 0
        return self._writer.serialized(self._copy_from, src, batch)

    def _copy_from(self, src: apsw.Connection, batch: int) -> int:
        conn = self._writer.connection()
        cur = src.execute(f"SELECT {_COLUMNS} FROM memory_embedding_cache")
        copied = 0
        while True:
            rows = []
            for row in cur:
                rows.append(row)
                if len(rows) >= batch:
                    break
            if not rows:
                break
            with schema.write_tx(conn):
                conn.executemany(
                    f"INSERT OR IGNORE INTO memory_embedding_cache({_COLUMNS}) VALUES (?,?,?,?,?,?,?)", rows)
            copied += len(rows)
            if len(rows) < batch:
                break
        return copied


def _identity(conn: apsw.Connection) -> tuple[str, str, str] | None:
    """``(provider, model, provider key)`` the index of ``conn`` records it was built with, or None
    (no meta yet, keyword-only, unreadable)."""
    try:
        row = conn.execute("SELECT value FROM memory_index_meta WHERE key = ?", (schema.META_KEY,)).fetchone()
        meta = json.loads(row[0]) if row is not None else None
    except (apsw.Error, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("provider") in (None, "none"):
        return None
    return str(meta["provider"]), str(meta.get("model", "")), str(meta.get("providerKey", ""))


def _index_vectors(conn: apsw.Connection, ident: tuple[str, str, str], hashes: list[str]) -> dict[str, np.ndarray]:
    """The chunk vectors of ``hashes`` the index of ``conn`` holds, when it was built under ``ident``."""
    if not hashes or _identity(conn) != ident:
        return {}
    out: dict[str, np.ndarray] = {}
    for i in range(0, len(hashes), _IN_BATCH):
        part = hashes[i:i + _IN_BATCH]
        for h, blob in conn.execute(
                f"SELECT hash, embedding FROM memory_index_chunks WHERE model = ? AND hash IN"
                f" ({','.join('?' * len(part))}) AND length(embedding) > 0", (ident[1], *part)):
            vec = decode_vector(blob)
            if vec.size:
                out.setdefault(h, vec)
    return out


@contextlib.contextmanager
def _seed(path: str) -> Iterator[apsw.Connection | None]:
    """A read-only connection to the index a rebuild was seeded from, None when it cannot be opened."""
    try:
        src = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
        src.set_busy_timeout(5000)
    except apsw.Error:
        yield None
        return
    try:
        yield src
    finally:
        src.close()
