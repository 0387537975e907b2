"""Glue between :class:`memory_core.core.MemoryCore` and search/get (kept here so core.py only delegates)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import apsw

from memory_core.read_file import ReadResult, read_memory_file
from memory_core.search.types import SearchHit
from memory_core.store.access import index_errors


def _is_indexed_session(db_path: str, rel_path: str) -> bool:
    from host_facades.sqlite_read import open_readonly

    if not os.path.exists(db_path):
        return False
    with index_errors(db_path):
        try:
            conn = open_readonly(db_path, load_vec=False)
        except FileNotFoundError:
            return False
    try:
        row = conn.execute("SELECT 1 FROM memory_index_sources WHERE path = ? AND source = 'sessions'",
                           (rel_path,)).fetchone()
        return row is not None
    except apsw.SQLError:
        return False
    finally:
        conn.close()


def core_get(core: Any, path: str, *, from_: int | None = None, lines: int | None = None,
             max_chars: int | None = None) -> ReadResult:
    from memory_core.indexer import resolve_sessions_dir

    cfg = core.config
    sessions_dir = resolve_sessions_dir(cfg, core.workspace) if "sessions" in cfg.sources else None
    return read_memory_file(
        core.workspace, path, from_=from_, lines=lines, extra_paths=list(cfg.extra_paths), max_chars=max_chars,
        sessions_dir=sessions_dir, is_indexed_session=lambda p: _is_indexed_session(core.db_path, p),
    )


def search_many(core: Any, queries: Sequence[str], **kwargs: Any) -> list[list[SearchHit]]:
    engine = core.search_engine
    return [engine.search(q, **kwargs) for q in queries]
