"""The per-agent SQLite schema (upstream `host/memory-schema.ts`: current table names, in one file per agent,
docs/decisions.md D1).

Migrations are numbered and tracked in ``PRAGMA user_version``. The FTS tables depend on the
configured tokenizer and the ``vec0`` table on the embedding dimensions, so they are created by
:func:`ensure_fts` and :func:`ensure_vec_table` rather than by a fixed migration.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import apsw

from host_facades.db.sqlite_read import newer_schema_message
from memory_core.errors import IndexNewer

META_KEY = "memory_index_meta_v1"
VECTOR_REBUILD_KEY = "memory_vector_rebuild_v1"
FTS_TOKENIZERS = {"unicode61": "unicode61", "trigram": "trigram case_sensitive 0"}

MIGRATIONS: list[str] = [
    # 1: base tables
    """
    CREATE TABLE IF NOT EXISTS memory_index_meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    ) STRICT;
    CREATE TABLE IF NOT EXISTS memory_index_sources (
        id INTEGER PRIMARY KEY,
        path TEXT NOT NULL,
        source TEXT NOT NULL DEFAULT 'memory',
        hash TEXT NOT NULL,
        mtime REAL,
        size INTEGER,
        UNIQUE(path, source)
    ) STRICT;
    CREATE INDEX IF NOT EXISTS idx_memory_index_sources_source ON memory_index_sources(source);
    CREATE TABLE IF NOT EXISTS memory_index_chunks (
        chunk_rowid INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        path TEXT NOT NULL,
        source TEXT NOT NULL DEFAULT 'memory',
        start_line INTEGER NOT NULL,
        end_line INTEGER NOT NULL,
        hash TEXT NOT NULL,
        model TEXT NOT NULL,
        text TEXT NOT NULL,
        embedding BLOB NOT NULL DEFAULT x'',
        updated_at INTEGER NOT NULL
    ) STRICT;
    CREATE INDEX IF NOT EXISTS idx_memory_index_chunks_path_source ON memory_index_chunks(path, source);
    CREATE INDEX IF NOT EXISTS idx_memory_index_chunks_source ON memory_index_chunks(source);
    CREATE TABLE IF NOT EXISTS memory_index_chunk_recall_metadata (
        chunk_id TEXT PRIMARY KEY REFERENCES memory_index_chunks(id) ON DELETE CASCADE,
        importance INTEGER CHECK (importance IS NULL OR (importance BETWEEN 1 AND 10)),
        triggers TEXT,
        project_key TEXT
    ) STRICT;
    CREATE TABLE IF NOT EXISTS memory_index_chunk_provenance (
        chunk_id TEXT PRIMARY KEY REFERENCES memory_index_chunks(id) ON DELETE CASCADE,
        origin_class TEXT NOT NULL DEFAULT 'untrusted'
            CHECK (origin_class IN ('owner', 'agent', 'untrusted', 'system')),
        session_kind TEXT NOT NULL DEFAULT 'unknown'
            CHECK (session_kind IN ('interactive', 'cron', 'heartbeat', 'subagent', 'unknown')),
        observed_at INTEGER,
        supersedes_key TEXT
    ) STRICT;
    CREATE TABLE IF NOT EXISTS memory_index_state (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        revision INTEGER NOT NULL
    ) STRICT;
    INSERT OR IGNORE INTO memory_index_state(id, revision) VALUES (1, 0);
    CREATE TABLE IF NOT EXISTS memory_embedding_cache (
        provider TEXT NOT NULL,
        model TEXT NOT NULL,
        provider_key TEXT NOT NULL,
        hash TEXT NOT NULL,
        embedding BLOB NOT NULL,
        dims INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (provider, model, provider_key, hash)
    ) STRICT;
    CREATE INDEX IF NOT EXISTS idx_memory_embedding_cache_updated_at ON memory_embedding_cache(updated_at);
    CREATE TABLE IF NOT EXISTS memory_index_forgotten (
        source TEXT NOT NULL,
        path TEXT NOT NULL,
        forgotten_at INTEGER NOT NULL,
        PRIMARY KEY (source, path)
    ) STRICT;
    CREATE TRIGGER IF NOT EXISTS memory_index_sources_rev_ins AFTER INSERT ON memory_index_sources
        BEGIN UPDATE memory_index_state SET revision = revision + 1 WHERE id = 1; END;
    CREATE TRIGGER IF NOT EXISTS memory_index_sources_rev_upd AFTER UPDATE ON memory_index_sources
        BEGIN UPDATE memory_index_state SET revision = revision + 1 WHERE id = 1; END;
    CREATE TRIGGER IF NOT EXISTS memory_index_sources_rev_del AFTER DELETE ON memory_index_sources
        BEGIN UPDATE memory_index_state SET revision = revision + 1 WHERE id = 1; END;
    CREATE TRIGGER IF NOT EXISTS memory_index_chunks_rev_del AFTER DELETE ON memory_index_chunks
        BEGIN UPDATE memory_index_state SET revision = revision + 1 WHERE id = 1; END;
    CREATE TRIGGER IF NOT EXISTS memory_index_chunks_rev_ins AFTER INSERT ON memory_index_chunks
        BEGIN UPDATE memory_index_state SET revision = revision + 1 WHERE id = 1; END;
    """,
    # 2: files the last sync covering them skipped (binary, not UTF-8, too large, unreadable), with
    # the stat they were skipped under, so freshness does not see them as changed on every check
    """
    CREATE TABLE IF NOT EXISTS memory_index_skipped (
        source TEXT NOT NULL,
        path TEXT NOT NULL,
        mtime REAL,
        size INTEGER,
        code TEXT NOT NULL,
        PRIMARY KEY (source, path)
    ) STRICT;
    """,
    # 3: the passage vectors of chunks with several passages (host_facades.chunking.pipeline.split_passages);
    # a chunk's vector score is the best of its own vector and these. An index written before this
    # migration has none until `memory-core index --force`, and searches exactly as before.
    """
    CREATE TABLE IF NOT EXISTS memory_index_passage_vectors (
        chunk_id TEXT NOT NULL REFERENCES memory_index_chunks(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        embedding BLOB NOT NULL,
        PRIMARY KEY (chunk_id, seq)
    ) STRICT;
    """,
    # 4: passage vectors stored compact: ``scale`` set means ``embedding`` holds one int8 code per
    # dimension (host_facades.db.vectors.encode_int8); NULL is a float32 BLOB written before this step.
    # A re-index finds the passage vectors it can reuse by chunk hash (EmbeddingCache.passages_of).
    """
    ALTER TABLE memory_index_passage_vectors ADD COLUMN scale REAL;
    CREATE INDEX IF NOT EXISTS idx_memory_index_chunks_hash ON memory_index_chunks(hash);
    """,
    # 5: passage rows keyed by their chunk's rowid: the 64-character chunk id was stored in each row
    # and again in the primary-key index. A rowid table, not WITHOUT ROWID: a row holds an int8
    # vector (1.5 KB at 1536 dims), past what a WITHOUT ROWID leaf keeps on a 4 KiB page (~1 KB;
    # the rest would take an overflow page a row). Readers take either layout
    # (host_facades.retrieval.vector_state.passage_join).
    """
    CREATE TABLE memory_index_passage_vectors_v5 (
        chunk_rowid INTEGER NOT NULL REFERENCES memory_index_chunks(chunk_rowid) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        embedding BLOB NOT NULL,
        scale REAL,
        PRIMARY KEY (chunk_rowid, seq)
    ) STRICT;
    INSERT INTO memory_index_passage_vectors_v5(chunk_rowid, seq, embedding, scale)
        SELECT c.chunk_rowid, p.seq, p.embedding, p.scale FROM memory_index_passage_vectors p
        JOIN memory_index_chunks c ON c.id = p.chunk_id;
    DROP TABLE memory_index_passage_vectors;
    ALTER TABLE memory_index_passage_vectors_v5 RENAME TO memory_index_passage_vectors;
    """,
]

# FTS rows are keyed by rowid = chunk_rowid (chunks) and rowid = sources.id (paths) and kept in
# step by triggers, so every writer path maintains them without extra code. The chunk FTS table is
# external-content: its columns are read from the chunk row of that rowid, so the text is stored
# once (an index created before this keeps its own copy, and its plain delete trigger, until
# `memory-core index --force` rebuilds it); its delete trigger hands FTS5 the values it indexed.
_FTS_SQL = """
CREATE VIRTUAL TABLE IF NOT EXISTS memory_index_chunks_fts USING fts5(
    text, id UNINDEXED, path UNINDEXED, source UNINDEXED, model UNINDEXED,
    start_line UNINDEXED, end_line UNINDEXED, tokenize='{tok}',
    content='memory_index_chunks', content_rowid='chunk_rowid'
);
CREATE VIRTUAL TABLE IF NOT EXISTS memory_index_paths_fts USING fts5(
    path, source UNINDEXED, tokenize='{tok}'
);
CREATE TRIGGER IF NOT EXISTS memory_index_chunks_fts_ins AFTER INSERT ON memory_index_chunks BEGIN
    INSERT INTO memory_index_chunks_fts(rowid, text, id, path, source, model, start_line, end_line)
    VALUES (new.chunk_rowid, new.text, new.id, new.path, new.source, new.model, new.start_line, new.end_line);
END;
CREATE TRIGGER IF NOT EXISTS memory_index_chunks_fts_del AFTER DELETE ON memory_index_chunks BEGIN
    INSERT INTO memory_index_chunks_fts(memory_index_chunks_fts, rowid, text, id, path, source, model,
        start_line, end_line)
    VALUES ('delete', old.chunk_rowid, old.text, old.id, old.path, old.source, old.model, old.start_line,
        old.end_line);
END;
CREATE TRIGGER IF NOT EXISTS memory_index_paths_fts_ins AFTER INSERT ON memory_index_sources BEGIN
    INSERT INTO memory_index_paths_fts(rowid, path, source) VALUES (new.id, new.path, new.source);
END;
CREATE TRIGGER IF NOT EXISTS memory_index_paths_fts_upd AFTER UPDATE OF path, source ON memory_index_sources BEGIN
    DELETE FROM memory_index_paths_fts WHERE rowid = old.id;
    INSERT INTO memory_index_paths_fts(rowid, path, source) VALUES (new.id, new.path, new.source);
END;
CREATE TRIGGER IF NOT EXISTS memory_index_paths_fts_del AFTER DELETE ON memory_index_sources BEGIN
    DELETE FROM memory_index_paths_fts WHERE rowid = old.id;
END;
"""


# The write-ahead log is folded into the file once it holds this many bytes (SQLite's default, 1000
# pages, was 4 MB at 4 KiB pages but is 16 MB at the 16 KiB pages of new index files); a log that a
# long transaction grew past it is cut back to it at the next checkpoint.
WAL_CHECKPOINT_BYTES = 4_096_000


WRITER_BUSY_TIMEOUT_MS = 5000


def configure_connection(conn: apsw.Connection, *, busy_timeout_ms: int = WRITER_BUSY_TIMEOUT_MS) -> None:
    """Pragmas every writer connection uses: WAL (checkpointed by bytes), foreign keys, busy timeout."""
    conn.set_busy_timeout(busy_timeout_ms)
    conn.execute("PRAGMA journal_mode=WAL")
    page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    conn.execute(f"PRAGMA wal_autocheckpoint={max(1, WAL_CHECKPOINT_BYTES // page_size)}")
    conn.execute(f"PRAGMA journal_size_limit={WAL_CHECKPOINT_BYTES}")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")


@contextlib.contextmanager
def write_tx(conn: apsw.Connection) -> Iterator[None]:
    """One write transaction on a writer connection.

    At the top level it is ``BEGIN IMMEDIATE``: the write lock is taken before the first read, so
    a writer in another process (a watcher's sync next to `memory-core index`) makes it wait up to
    the busy timeout. A deferred transaction that reads first fails at once with "database is
    locked" when it tries to write. Inside an open transaction (``IndexWriter.bulk``) it is a
    savepoint, so a failing unit still rolls back alone.
    """
    if not conn.get_autocommit():
        with conn:
            yield
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        with contextlib.suppress(apsw.Error):
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def migrate(conn: apsw.Connection) -> int:
    """Apply pending numbered migrations; returns the schema version now in force. Each step
    re-reads the version under the write lock: another process may have applied it meanwhile."""
    version = start = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > len(MIGRATIONS):  # written by a newer memory-core: its tables are not ours to change
        raise IndexNewer(newer_schema_message(conn.filename or ":memory:", version))
    for number, sql in enumerate(MIGRATIONS, start=1):
        if number <= version:
            continue
        with write_tx(conn):
            if int(conn.execute("PRAGMA user_version").fetchone()[0]) < number:
                conn.execute(sql)
                conn.execute(f"PRAGMA user_version={number}")
        version = number
    if start and version > start:  # a table a step rebuilt left its old pages free
        release_free_pages(conn)
    return version


def create_schema(conn: apsw.Connection, tokenizer: str = "unicode61") -> bool:
    """Create the whole schema of a database that has none yet (``user_version`` 0): every migration
    and the FTS tables in ONE write transaction, the same tables :func:`migrate` and
    :func:`ensure_fts` create step by step. False (nothing done) when it has a schema already or
    the one transaction failed (FTS5 missing, say): those two then do it as usual."""
    if tokenizer not in FTS_TOKENIZERS or int(conn.execute("PRAGMA user_version").fetchone()[0]) != 0:
        return False
    try:
        # a new agent's index: one commit and one schema reload instead of one per step (a server
        # opening thousands of new agents pays them for each)
        with write_tx(conn):
            if int(conn.execute("PRAGMA user_version").fetchone()[0]) == 0:  # another process may have
                for sql in MIGRATIONS:
                    conn.execute(sql)
                conn.execute(f"PRAGMA user_version={len(MIGRATIONS)}")
                conn.execute(_FTS_SQL.format(tok=FTS_TOKENIZERS[tokenizer]))
    except apsw.Error:
        return False
    return True


_IMAGES: dict[tuple[str, int], bytes] = {}
_images_lock = threading.Lock()


# before WAL mode and the first table, so only a new file gets them: free pages go back to the file
# system, and the page size is the file's for good. An index of embedded chunks gets 16 KiB pages,
# which hold a chunk row (its text and float32 vector, ~3 KB) with little left over, where 4 KiB
# pages held one; a keyword-only index gets 4 KiB pages: its rows are text alone, and every table
# and index of the schema takes at least a page (a 5-note agent's file is 156 KB, not 573 KB)
PAGE_SIZE_VECTORS = 16384
PAGE_SIZE_KEYWORD = 4096


def new_file_pragmas(page_size: int = PAGE_SIZE_VECTORS) -> tuple[str, ...]:
    """The settings a new index file is created with (``page_size``: see above)."""
    return (f"PRAGMA page_size={int(page_size)}", "PRAGMA auto_vacuum=INCREMENTAL")


def new_file_image(tokenizer: str = "unicode61", page_size: int = PAGE_SIZE_VECTORS) -> bytes | None:
    """The bytes of a new index file: the whole schema (:func:`create_schema`) and WAL mode in its
    header, built once per process, tokenizer and page size; None for an unknown tokenizer or no FTS5. Written
    as a new agent's file, it spares the file's switch to WAL mode (a rollback journal and four
    fsyncs) and the schema's creation (CREATE statements, each reloading the schema)."""
    with _images_lock:
        image = _IMAGES.get((tokenizer, page_size))
        if image is None:
            conn = apsw.Connection(":memory:")
            try:
                for pragma in new_file_pragmas(page_size):
                    conn.execute(pragma)
                if not create_schema(conn, tokenizer):
                    return None
                data = bytearray(conn.serialize("main"))
            finally:
                conn.close()
            data[18:20] = b"\x02\x02"  # file format write/read version 2: WAL (sqlite.org/fileformat.html)
            image = _IMAGES[(tokenizer, page_size)] = bytes(data)
        return image


def fts_tokenizer_in_db(conn: apsw.Connection) -> str | None:
    """The tokenizer the FTS body table was created with, or None when it does not exist."""
    row = conn.execute(
        "SELECT sql FROM sqlite_master WHERE name = 'memory_index_chunks_fts'"
    ).fetchone()
    if row is None:
        return None
    return "trigram" if "trigram" in row[0] else "unicode61"


def ensure_fts(conn: apsw.Connection, tokenizer: str = "unicode61") -> tuple[bool, str | None]:
    """Create (or, on a tokenizer change, recreate and refill) the FTS tables.

    Returns ``(available, error)``; an FTS failure is not fatal (upstream `host/memory-schema.ts`).
    """
    if tokenizer not in FTS_TOKENIZERS:
        return False, f"unknown FTS tokenizer {tokenizer!r}; use 'unicode61' or 'trigram'"
    try:
        with write_tx(conn):  # read under the write lock: two first opens must not both refill
            current = fts_tokenizer_in_db(conn)
            if current is not None and current != tokenizer:
                drop_fts(conn)
                current = None
            conn.execute(_FTS_SQL.format(tok=FTS_TOKENIZERS[tokenizer]))
            if current is None:
                conn.execute(
                    "INSERT INTO memory_index_chunks_fts(rowid, text, id, path, source, model, start_line, end_line)"
                    " SELECT chunk_rowid, text, id, path, source, model, start_line, end_line FROM memory_index_chunks"
                )
                conn.execute(
                    "INSERT INTO memory_index_paths_fts(rowid, path, source) SELECT id, path, source FROM memory_index_sources"
                )
        return True, None
    except apsw.Error as exc:
        return False, f"FTS5 unavailable: {exc}"


def drop_fts(conn: apsw.Connection) -> None:
    """Drop both FTS tables and their triggers (hybrid disabled, or a tokenizer change)."""
    for trig in (
        "memory_index_chunks_fts_ins", "memory_index_chunks_fts_del", "memory_index_paths_fts_ins",
        "memory_index_paths_fts_upd", "memory_index_paths_fts_del",
    ):
        conn.execute(f"DROP TRIGGER IF EXISTS {trig}")
    conn.execute("DROP TABLE IF EXISTS memory_index_chunks_fts")
    conn.execute("DROP TABLE IF EXISTS memory_index_paths_fts")


def vec_table_dims(conn: apsw.Connection) -> int | None:
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'memory_index_chunks_vec'").fetchone()
    if row is None:
        return None
    import re

    m = re.search(r"float\[(\d+)\]", row[0], re.IGNORECASE)
    return int(m.group(1)) if m else None


def ensure_vec_table(conn: apsw.Connection, dims: int) -> None:
    """Create the sqlite-vec table with the cosine metric (D6); recreate it when dims change.

    The caller must have loaded sqlite-vec on ``conn``. Rows are refilled from canonical vectors.
    """
    current = vec_table_dims(conn)
    if current == dims:
        return
    with write_tx(conn):
        if current is not None:
            conn.execute("DROP TABLE IF EXISTS memory_index_chunks_vec")
        conn.execute(
            f"CREATE VIRTUAL TABLE memory_index_chunks_vec USING vec0("
            f"id TEXT PRIMARY KEY, embedding float[{int(dims)}] distance_metric=cosine)"
        )
        conn.execute(
            "INSERT INTO memory_index_chunks_vec(id, embedding) SELECT id, embedding FROM memory_index_chunks"
            " WHERE length(embedding) = ?",
            (int(dims) * 4,),
        )


def release_free_pages(conn: apsw.Connection) -> None:
    """Give the file's free pages back to the file system, on a database created with incremental
    auto-vacuum (older ones keep their free pages for later writes)."""
    if int(conn.execute("PRAGMA auto_vacuum").fetchone()[0]) == 2:
        conn.execute("PRAGMA incremental_vacuum").fetchall()


def read_revision(conn: apsw.Connection) -> int:
    row = conn.execute("SELECT revision FROM memory_index_state WHERE id = 1").fetchone()
    return int(row[0]) if row else 0
