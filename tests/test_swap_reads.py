"""Reads while another process swaps the index file in (an atomic reindex): the short read such a
swap can cause for a moment is read again on a fresh handle, by the owner's cached reader and by a
worker's snapshot; any other I/O error is raised at once. The race itself: tests/test_owner_race.py."""

from __future__ import annotations

import apsw
import pytest

from host_facades.db.sqlite_read import swap_transient
from memory_core.store.reader import CachedReader
from tests.search_fixtures import open_db
from workers import tasks


def _io_error(extended: int) -> apsw.IOError:
    exc = apsw.IOError("disk I/O error")
    exc.result, exc.extendedresult = apsw.SQLITE_IOERR, extended
    return exc


@pytest.fixture
def db(tmp_path):
    path = str(tmp_path / "main.sqlite")
    conn = apsw.Connection(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t(v); INSERT INTO t VALUES (7)")
    conn.close()
    return path


def _failing(times: int, extended: int = apsw.SQLITE_IOERR_SHORT_READ, sql: str = "SELECT v FROM t"):
    handles: list[apsw.Connection] = []

    def fn(conn: apsw.Connection) -> int:
        handles.append(conn)
        if len(handles) <= times:
            raise _io_error(extended)
        return conn.execute(sql).fetchone()[0]

    return fn, handles


def test_only_a_short_read_counts_as_a_swap_in_progress():
    assert swap_transient(_io_error(apsw.SQLITE_IOERR_SHORT_READ))
    assert not swap_transient(_io_error(apsw.SQLITE_IOERR_READ))
    assert not swap_transient(apsw.CorruptError("database disk image is malformed"))


def test_the_cached_reader_reads_again_on_a_fresh_handle_after_a_short_read(db):
    reader = CachedReader(db, load_vec=False)
    fn, handles = _failing(2)
    assert reader.run(fn) == 7
    assert len(handles) == 3 and len({id(h) for h in handles}) == 3  # never the handle that failed
    reader.close()


def test_the_cached_reader_raises_a_short_read_that_stays_and_any_other_io_error_at_once(db):
    reader = CachedReader(db, load_vec=False)
    fn, handles = _failing(99)
    with pytest.raises(apsw.IOError):
        reader.run(fn)
    assert len(handles) == 3
    fn, handles = _failing(99, apsw.SQLITE_IOERR_READ)
    with pytest.raises(apsw.IOError):
        reader.run(fn)
    assert len(handles) == 1
    assert reader.run(lambda conn: conn.execute("SELECT v FROM t").fetchone()[0]) == 7  # still usable
    reader.close()


def test_a_worker_snapshot_reads_again_after_a_short_read_and_fails_its_task_on_one_that_stays_or_another_io_error(tmp_path):
    db = str(tmp_path / "index.sqlite")
    open_db(db).close()  # an index's schema (a snapshot reads its revision)
    ctx = tasks.WorkerContext(pool_name="test")
    fn, handles = _failing(1, sql="SELECT count(*) FROM memory_index_chunks")
    assert tasks.on_snapshot(ctx, db, (), lambda conn, db_id, revision: fn(conn), vec=False) == 0
    assert len(handles) == 2
    fn, handles = _failing(99, sql="SELECT count(*) FROM memory_index_chunks")
    with pytest.raises(apsw.IOError):  # a short read that stays is the file's own: its error, not a retry's
        tasks.on_snapshot(ctx, db, (), lambda conn, db_id, revision: fn(conn), vec=False)
    assert len(handles) == 3
    fn, handles = _failing(1, apsw.SQLITE_IOERR_READ, "SELECT count(*) FROM memory_index_chunks")
    with pytest.raises(apsw.IOError):
        tasks.on_snapshot(ctx, db, (), lambda conn, db_id, revision: fn(conn), vec=False)
    assert len(handles) == 1
