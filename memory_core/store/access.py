"""The index file and its folder as typed errors, instead of apsw tracebacks.

A file SQLite cannot read as a database (garbage, a text file, damaged pages) is
:class:`IndexCorrupt`; a file that cannot be opened read-only for another reason is
:class:`IndexUnreadable`; a folder where the index cannot be created or updated is
:class:`StateDirNotWritable`. The writer checks its folder before it opens the file, and the
owner's read and write paths run under :func:`index_errors`.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, cast

import apsw

from host_facades.db.sqlite_read import CORRUPT_ERRORS, DatabaseUnreadable, unreadable
from memory_core.errors import IndexUnreadable, StateDirNotWritable, error_from_data
from memory_core.store.perms import PRIVATE_DIR


def folder_problem(folder: str) -> str | None:
    """Why the index cannot be written in ``folder`` (``"read-only file system"``, ``"permission
    denied"``), or None when it can; a missing folder is judged by the nearest existing parent."""
    existing = os.path.abspath(folder)
    while not os.path.isdir(existing):
        parent = os.path.dirname(existing)
        if parent == existing:
            break
        existing = parent
    if os.access(existing, os.W_OK | os.X_OK):
        return None
    with contextlib.suppress(OSError):
        if os.statvfs(existing).f_flag & os.ST_RDONLY:
            return "read-only file system"
    return "permission denied"


def not_writable(db_path: str, why: str, *, lead: str = "") -> StateDirNotWritable:
    """The error for a state dir that cannot be written; ``lead`` goes in front of the message."""
    folder = os.path.dirname(os.path.abspath(db_path))
    return StateDirNotWritable(
        f"{lead}state dir {folder} is not writable ({why}), so the index {os.path.basename(db_path)} cannot be "
        "created or updated there; make it writable, or set MEMORY_CORE_HOME or stateDir (or store.path) "
        "to a writable folder"
    )


def ensure_writable_dir(db_path: str) -> None:
    """Create the folder of ``db_path`` if needed; :class:`StateDirNotWritable` when it cannot be
    written (the writer needs it for the file, its -wal/-shm and the rebuild's temp file)."""
    folder = os.path.dirname(os.path.abspath(db_path))
    try:
        os.makedirs(folder, mode=PRIVATE_DIR, exist_ok=True)  # only a folder it creates; index tightens the state dir
    except OSError as exc:
        raise not_writable(db_path, (exc.strerror or str(exc)).lower()) from exc
    why = folder_problem(folder)
    if why is not None:
        raise not_writable(db_path, why)


def typed(err: DatabaseUnreadable) -> IndexUnreadable:
    """The memory_core error for a read failure reported by ``host_facades``."""
    return cast(IndexUnreadable, error_from_data(err.to_data()))


class index_errors:  # noqa: N801 - used as ``with index_errors(path):``, like a function
    """Turn SQLite's "not a database"/"malformed" and a failed open in an unwritable folder, raised
    while using ``db_path``, into :class:`IndexCorrupt` / :class:`StateDirNotWritable`. A class,
    not a generator context manager: it costs its callers less (the hottest, ``SearchEngine.search``,
    catches the error itself and calls :func:`raise_index_error`)."""

    __slots__ = ("db_path",)

    def __init__(self, db_path: str) -> None:
        self.db_path = db_path

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc is not None:
            raise_index_error(self.db_path, exc)


def raise_index_error(db_path: str, exc: BaseException) -> None:
    """Raise the typed error of ``exc``, caught while using ``db_path``, as :class:`index_errors`
    does; return when there is none (the caller re-raises ``exc``). For a hot path that catches
    the error itself instead of entering a context manager each time."""
    if isinstance(exc, (DatabaseUnreadable, *CORRUPT_ERRORS)):
        err = unreadable(db_path, exc)
        assert err is not None
        raise typed(err) from exc
    if isinstance(exc, (apsw.CantOpenError, apsw.ReadOnlyError)):
        why = folder_problem(os.path.dirname(os.path.abspath(db_path)))
        if why is not None:
            raise not_writable(db_path, why) from exc
