"""Opening the index database read-only, for retrieval in the owner and in workers alike.

Readers open it read-only, ``query_only``, in WAL mode with a busy timeout, and hold one connection
for the life of one query, so all reads of a query see one snapshot (generation):
:func:`read_snapshot`. ``SQLITE_IDLE_HANDLE_TTL_S`` is the one idle lifetime for retained SQLite
handles. Imported by workers: standard library and apsw only.
"""

from __future__ import annotations

import contextlib
import os
import time
import urllib.parse
from collections.abc import Iterator

import apsw

from host_facades.db.sqlite_ext import load_sqlite_vec

SQLITE_IDLE_HANDLE_TTL_S = 30 * 60
BUSY_TIMEOUT_MS = 5000
# Readers map the database file (``PRAGMA mmap_size``) instead of copying each page with a pread
# into a private page cache: the pages are the kernel's page cache, shared by every worker. The
# writer does shrink a file in place (incremental auto-vacuum after a sync frees pages, and a WAL
# checkpoint truncates the file to match). Mapped readers stay safe: a reader reads no page past
# the database size of its own snapshot, and a checkpoint truncates the file only once every frame
# is copied back, which no reader of an older snapshot lets happen (SQLite's WAL read locks).
# ``MEMORY_CORE_READ_MMAP_BYTES=0`` turns it off.
READ_MMAP_BYTES = int(os.environ.get("MEMORY_CORE_READ_MMAP_BYTES", str(1 << 30)))


# An index of at most this many bytes is read ahead whole when a connection opens it (one
# ``posix_fadvise(WILLNEED)``, which starts the reads and returns): an open and a search touch most
# pages of a small index (schema, FTS structures, rows), which SQLite reads one or a few at a time.
# A server's random agent of thousands has its file out of memory (the kernel reclaims what was not
# used for a while): 200 such opens-and-searches took 2.24 ms at p50 against 1.56-1.62 ms with the
# hint and 0.62-0.77 ms with the file in memory (5-note indexes of 155 KB). A hint on a file in memory costs
# a few microseconds; larger files are left to SQLite's own reads.
READ_AHEAD_MAX_BYTES = 8 << 20


def read_ahead(db_path: str, size: int) -> None:
    """Have the kernel read ``db_path`` (``size`` bytes) into memory now, when it is small enough
    (:data:`READ_AHEAD_MAX_BYTES`) and the platform has ``posix_fadvise``; a hint, never an error."""
    if size > READ_AHEAD_MAX_BYTES or not hasattr(os, "posix_fadvise"):
        return
    try:
        fd = os.open(db_path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, size, os.POSIX_FADV_WILLNEED)
    except OSError:
        pass
    finally:
        os.close(fd)


# The newest index schema (``PRAGMA user_version``, memory_core.store.schema's numbered migrations)
# this code reads. A file written by a newer memory-core is refused with a clear message instead of
# failing later with a raw SQL error ("no such column"); tests keep it equal to the migrations.
SCHEMA_VERSION = 5

# SQLite's answers for a file that is not (or no longer) a database: garbage, a text file, damaged pages
CORRUPT_ERRORS = (apsw.NotADBError, apsw.CorruptError)


def swap_transient(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a read, is what another process's swap of the file (an atomic
    reindex moves the old -wal/-shm aside and renames a new file over the old) can cause for a moment:
    a short read (SQLITE_IOERR_SHORT_READ) of a log or file that was just moved. A fresh open of the
    file now at the path reads it; a file that is really short fails again."""
    return isinstance(exc, apsw.IOError) and getattr(exc, "extendedresult", None) == apsw.SQLITE_IOERR_SHORT_READ


def wait_out_swap(attempt: int) -> None:
    """Before reading again after :func:`swap_transient` failure number ``attempt`` (0-based): the
    swap's renames finish meanwhile, then a fresh open reads the new file."""
    time.sleep(0.005 * (attempt + 1))


# the memory_core.errors class of each DatabaseUnreadable code (named: workers never import it)
_ERROR_TYPES = {"index_corrupt": "IndexCorrupt", "index_unreadable": "IndexUnreadable", "index_newer": "IndexNewer"}


class DatabaseUnreadable(Exception):
    """The database file cannot be read. ``code`` is ``"index_corrupt"`` (not a readable SQLite
    database), ``"index_newer"`` (written by a newer memory-core) or ``"index_unreadable"`` (it cannot
    be opened read-only; the message says why). :meth:`to_data` is the data of the owner's error
    (``IndexCorrupt`` / ``IndexNewer`` / ``IndexUnreadable``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def to_data(self) -> dict[str, str]:
        """``MemoryCoreError.to_data()`` of the owner-side error this failure is."""
        return {"code": self.code, "message": self.message, "type": _ERROR_TYPES[self.code]}


def corrupt_message(db_path: str, exc: BaseException) -> str:
    """The one message for an index file SQLite cannot read as a database."""
    return (f"{db_path} is not a readable memory-core index ({exc}); run `memory-core index --force` to "
            "move it aside and rebuild the index")


def newer_schema_message(db_path: str, version: int) -> str:
    """The one message for an index written by a newer memory-core than this one."""
    return (f"the index {db_path} was written by a newer memory-core (index schema {version}; this one reads "
            f"up to {SCHEMA_VERSION}); upgrade memory-core, or run `memory-core index --force` to rebuild "
            "the index for this version")


def unreadable(db_path: str, exc: BaseException) -> DatabaseUnreadable | None:
    """The :class:`DatabaseUnreadable` an error raised while reading ``db_path`` means, or None."""
    if isinstance(exc, DatabaseUnreadable):
        return exc
    if isinstance(exc, CORRUPT_ERRORS):
        return DatabaseUnreadable("index_corrupt", corrupt_message(db_path, exc))
    return None


def _connect(db_path: str, flags: int, target: str | None = None) -> apsw.Connection:
    """Open ``db_path`` (at ``target``, a URI, when given) and read its header."""
    conn = apsw.Connection(target or db_path, flags=flags)
    try:
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
        # read the header now (opening is lazy): a file that is no database, or a WAL database whose
        # -shm cannot be opened, fails here rather than in the middle of a search; so does one of a
        # newer schema
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise DatabaseUnreadable("index_newer", newer_schema_message(db_path, version))
    except BaseException:
        conn.close()
        raise
    return conn


def _open_in_readonly_folder(db_path: str, exc: apsw.Error) -> apsw.Connection:
    """A WAL database in a folder that cannot hold its ``-shm`` (read-only folder or mount): opened
    ``immutable`` when its write-ahead log holds nothing (nobody can change a file there: a writer
    needs the folder too); otherwise the reason it cannot be read."""
    folder = os.path.dirname(os.path.abspath(db_path))
    if os.access(folder, os.W_OK | os.X_OK):
        raise DatabaseUnreadable("index_unreadable", f"cannot open the index {db_path} read-only ({exc}); "
                                 "check the permissions of the file and its folder") from None
    wal = db_path + "-wal"
    try:
        wal_bytes = os.path.getsize(wal)
    except OSError:
        wal_bytes = 0
    if wal_bytes:
        raise DatabaseUnreadable(
            "index_unreadable",
            f"cannot read the index {db_path}: its write-ahead log {wal} holds changes that need {db_path}-shm, "
            f"which cannot be created because {folder} is not writable; make {folder} writable and run "
            "`memory-core index` once (it folds the log into the index), or copy the index with its -wal to "
            "a writable folder and set MEMORY_CORE_HOME or stateDir there") from None
    uri = "file:" + urllib.parse.quote(os.path.abspath(db_path)) + "?mode=ro&immutable=1"
    return _connect(db_path, apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI, uri)


def read_every_tree(conn: apsw.Connection) -> None:
    """Read the first row of every table and every index of ``conn``'s database: the root page and
    the leftmost leaf of each b-tree. Opening reads only the header and the schema, which can all
    sit on page 1 (16 KiB pages) while the pages after it are damaged; this makes such a file fail
    once, at open, instead of in the middle of a sync. Raises what reading a damaged page raises."""
    conn.execute("BEGIN")  # one read transaction: one snapshot, one lock
    try:
        trees = conn.execute("SELECT type, name, tbl_name FROM sqlite_schema"
                             " WHERE type IN ('table', 'index') AND rootpage > 0").fetchall()
        for kind, name, table in trees:
            if kind == "table":
                conn.execute(f'SELECT 1 FROM "{_ident(name)}" NOT INDEXED LIMIT 1').fetchall()
                continue
            try:  # a scan of the index alone (it covers ``SELECT 1``)
                cur = conn.execute(f'SELECT 1 FROM "{_ident(table)}" INDEXED BY "{_ident(name)}" LIMIT 1')
            except apsw.SQLError:  # a partial index, which no unconditional query may use: not ours
                continue
            cur.fetchall()
    finally:
        conn.execute("COMMIT")


def _ident(name: str) -> str:
    return name.replace('"', '""')


def open_readonly(db_path: str, *, load_vec: bool = True, check_pages: bool = False,
                  mmap: bool = True) -> apsw.Connection:
    """Open ``db_path`` read-only (``query_only``, busy timeout); sqlite-vec loaded when available.
    ``check_pages`` also reads the first row of every table and index (:func:`read_every_tree`), for
    a caller that opens the file once for long (the writer), not for each search. ``mmap`` False:
    pages are read into the connection's cache (for a few point reads, where mapping and unmapping
    the file costs more than it saves).

    Raises FileNotFoundError when there is no file and :class:`DatabaseUnreadable` when it cannot
    be read. A database in a read-only folder is readable too (see ``_open_in_readonly_folder``)."""
    try:
        size = os.stat(db_path).st_size
    except OSError:  # what os.path.exists said False to
        raise FileNotFoundError(f"memory index database not found: {db_path}; run `memory-core index`") from None
    read_ahead(db_path, size)
    try:
        try:
            conn = _connect(db_path, apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
        except (apsw.CantOpenError, apsw.ReadOnlyError) as exc:  # the -shm cannot be created/initialised
            if not os.path.exists(db_path):
                raise FileNotFoundError(
                    f"memory index database not found: {db_path}; run `memory-core index`") from None
            conn = _open_in_readonly_folder(db_path, exc)
        if check_pages:
            try:
                read_every_tree(conn)
            except BaseException:
                conn.close()
                raise
    except CORRUPT_ERRORS as exc:
        raise DatabaseUnreadable("index_corrupt", corrupt_message(db_path, exc)) from None
    conn.execute("PRAGMA query_only=ON")
    if mmap and READ_MMAP_BYTES > 0:
        conn.execute(f"PRAGMA mmap_size={READ_MMAP_BYTES}")
    if load_vec:
        load_sqlite_vec(conn)
    return conn


@contextlib.contextmanager
def read_snapshot(conn: apsw.Connection) -> Iterator[int]:
    """Run reads inside one read transaction; yields the revision (generation) it sees."""
    conn.execute("BEGIN")
    try:
        row = conn.execute("SELECT revision FROM memory_index_state WHERE id = 1").fetchone()
        yield int(row[0]) if row else 0
    finally:
        conn.execute("COMMIT")


# The rows an owner's catch-up compares with the files: indexed sources and skipped files
# ``(source, path, mtime, size)``, tombstones ``(source, path)``.
CATCH_UP_TABLES = {"sources": "SELECT source, path, mtime, size FROM memory_index_sources",
                   "forgotten": "SELECT source, path FROM memory_index_forgotten",
                   "skipped": "SELECT source, path, mtime, size FROM memory_index_skipped"}


def index_rows(conn: apsw.Connection, what: str) -> list[tuple]:
    """The rows of :data:`CATCH_UP_TABLES` ``what``; none when the schema has no such table yet."""
    try:
        return list(conn.execute(CATCH_UP_TABLES[what]))
    except apsw.SQLError:
        return []


def meta_values(conn: apsw.Connection, keys: list[str] | tuple[str, ...]) -> dict[str, str | None]:
    """The ``memory_index_meta`` values of ``keys`` (None: absent, or no meta table yet)."""
    out: dict[str, str | None] = dict.fromkeys(keys)
    try:
        for key, value in conn.execute(
                f"SELECT key, value FROM memory_index_meta WHERE key IN ({','.join('?' * len(keys))})", list(keys)):
            out[key] = None if value is None else str(value)
    except apsw.SQLError:
        pass  # schema not created yet
    return out


def db_identity(db_path: str) -> str:
    """The physical identity ``"dev:inode"`` of the database file (changes when a reindex swaps it)."""
    st = os.stat(db_path)
    return f"{st.st_dev}:{st.st_ino}"
