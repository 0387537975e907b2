"""The read-write connection of a per-agent index database: opening it (retried while another
process swaps the file in), reopening it after such a swap, the lock that serialises its users, and
bulk commits. :class:`memory_core.store.writer.IndexWriter` builds its writes on it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import apsw

from host_facades.db.sqlite_ext import load_sqlite_vec
from host_facades.db.sqlite_read import open_readonly
from memory_core.errors import IndexBusy
from memory_core.store import schema
from memory_core.store.access import ensure_writable_dir, index_errors
from memory_core.store.perms import PRIVATE_FILE, create_private_file

OPEN_ATTEMPTS = 20  # opens raced by another process's file swap before giving up (IndexBusy)
T = TypeVar("T")


def create_from_image(db_path: str, image: bytes | None) -> bool:
    """Create ``db_path`` (mode 0600) holding ``image`` (``schema.new_file_image``): written and
    fsynced under a temp name, then linked in, so no process ever opens it half written and an
    existing file is never replaced. False when there is no image or the file could not be made so
    (the caller creates it empty, as before); True also when another process created it first."""
    if image is None:
        return False
    temp = f"{db_path}.tmp-{os.getpid()}-{uuid.uuid4().hex}"  # swept like a dead rebuild's if we die here
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
        try:
            view = memoryview(image)
            while view:
                view = view[os.write(fd, view):]
            os.fdatasync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temp, db_path)
        except FileExistsError:
            pass
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temp)
    return True


def serialized_method(method):
    """Run a write method under the writer's lock: one connection shared by threads must not let one
    thread's statements land inside another thread's open transaction or savepoint."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        return self.serialized(method, self, *args, **kwargs)

    return wrapper


class WriterConnection:
    """The one read-write connection of an index file, reopened when another process swapped the
    file underneath; every use of it runs under :meth:`serialized`."""

    def __init__(
        self,
        db_path: str,
        *,
        fts_tokenizer: str = "unicode61",
        vector_enabled: bool = True,
        extension_path: str | None = None,
        durable: bool = True,
        page_size: int = schema.PAGE_SIZE_VECTORS,
    ) -> None:
        # page_size: a new file's (an existing one keeps its own)
        self.db_path = os.path.abspath(db_path)
        self.page_size = page_size
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
            created = False  # an empty file, which gets the image's settings here
            if os.path.exists(self.db_path):
                # read the file without write access first: a read-write open of a file that is no
                # database may already remove its -wal/-shm, which `index --force` keeps with it. The
                # header and schema can all be on page 1, so the first row of every table and index
                # is read too: damaged pages after it fail here, not in the first sync
                with contextlib.suppress(FileNotFoundError):
                    open_readonly(self.db_path, load_vec=False, check_pages=True).close()
            elif not create_from_image(self.db_path, schema.new_file_image(self.fts_tokenizer, self.page_size)):
                create_private_file(self.db_path)  # 0600 whatever the umask; -wal/-shm get its mode
                created = True
            conn = apsw.Connection(self.db_path)
            try:
                if created:
                    for pragma in schema.new_file_pragmas(self.page_size):
                        conn.execute(pragma)
                schema.configure_connection(conn)
                if not self.durable:  # a throw-away build file: fsynced once before it is swapped in
                    conn.execute("PRAGMA synchronous=OFF")
                schema.create_schema(conn, self.fts_tokenizer)  # a new file: its whole schema at once
                schema.migrate(conn)
                self.fts_available, self.fts_error = schema.ensure_fts(conn, self.fts_tokenizer)
                # sqlite-vec is also loaded when vectors are off but a vec0 table exists, so deletes can
                # keep it in step (a keyword-only session must not leave orphaned vector rows behind)
                if self.vector_enabled or schema.vec_table_dims(conn) is not None:
                    ok, version, error = load_sqlite_vec(conn, self.extension_path)
                    self.vector_available, self.vector_version, self.vector_error = ok, version, error
                    if ok and self.vector_enabled:
                        _fill_vec_table(conn)
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

    @serialized_method
    def check_swapped(self) -> bool:
        """Reopen now when the file was replaced by another process; True when it was."""
        before = self.reopens
        if self.conn is not None:
            self._c()
        return self.reopens != before

    def log_bytes(self) -> int:
        """The size of the file's write-ahead log (0 when there is none)."""
        try:
            return os.path.getsize(self.db_path + "-wal")
        except OSError:
            return 0

    @serialized_method
    def fold_log(self, min_bytes: int) -> None:
        """Copy the write-ahead log into the file and empty it (a TRUNCATE checkpoint) when it holds
        more than ``min_bytes``, without waiting: a reader still on an older snapshot makes it stop
        (a later call finishes it). Every later first open of the file (a worker's, a restarted
        server's) then reads no log to rebuild its index, and an agent left idle keeps no log on
        disk."""
        if self.conn is None or self._file_identity() != self._inode or self.log_bytes() <= min_bytes:
            return
        self.conn.set_busy_timeout(0)
        try:
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except apsw.BusyError:
            pass
        finally:
            self.conn.set_busy_timeout(schema.WRITER_BUSY_TIMEOUT_MS)

    @serialized_method
    def close(self, *, checkpoint: bool = True) -> None:
        """Close the connection; ``checkpoint`` False leaves the file and its log exactly as they are
        (no checkpoint, here or by SQLite's close): an idle agent's writer closed for the connection
        cap, whose next sync reopens it, changes nothing another reader would have to re-read."""
        if self.conn is None:
            return
        try:
            if checkpoint and self._file_identity() == self._inode:
                self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            elif not checkpoint:
                self.conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
        except apsw.Error:
            pass
        finally:
            self.conn.close()
            self.conn = None

    def __enter__(self):
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


def _fill_vec_table(conn: apsw.Connection) -> None:
    """Create the sqlite-vec table of an index whose chunks have vectors but no such table (built for
    another vector backend, which keeps no copy there), filled from the chunk vectors."""
    if schema.vec_table_dims(conn) is not None:
        return
    row = conn.execute("SELECT length(embedding) FROM memory_index_chunks WHERE length(embedding) > 0"
                       " LIMIT 1").fetchone()
    if row is not None and int(row[0]) % 4 == 0:
        schema.ensure_vec_table(conn, int(row[0]) // 4)
