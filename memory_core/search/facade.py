"""Glue between :class:`memory_core.core.MemoryCore` and search/get (kept here so core.py only delegates)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import apsw

from memory_core.read_file import ReadResult, read_memory_file
from memory_core.search.engine import SearchEngine
from memory_core.search.types import SearchHit
from memory_core.store.access import index_errors


def engine_for(core: Any) -> SearchEngine:
    """The core's SearchEngine (created once): identity check and the empty-index bootstrap sync wired in."""
    engine = getattr(core, "_search_engine", None)
    if engine is not None:
        return engine
    state = {"bootstrapped": False}

    def identity_check() -> list[str] | None:
        ident = core.identity_state()
        return ident["mismatch"] if ident["state"] == "mismatch" else None

    def on_empty_index() -> None:
        # spec §1.3: the first search on an empty index runs one forced synchronous sync
        if state["bootstrapped"]:
            return
        state["bootstrapped"] = True
        core.sync(reason="search", force=True)

    # MemoryCore.search runs core.before_search() (freshness: bootstrap sync of an empty index, dirty
    # sync); without that hook the engine runs the forced bootstrap sync itself.
    has_freshness = callable(getattr(core, "before_search", None))
    from workers.shared import retriever_for  # snapshot reads in the retrieval pool (pool.workers=0: in-process)

    engine = SearchEngine(core.config, core.db_path, core.provider, identity_check=identity_check,
                          on_empty_index=None if has_freshness else on_empty_index, retriever=retriever_for(core))
    core._search_engine = engine
    return engine


def core_search(core: Any, query: str, **kwargs: Any) -> list[SearchHit]:
    return engine_for(core).search(query, **kwargs)


def close_engine(core: Any) -> None:
    engine = getattr(core, "_search_engine", None)
    if engine is not None:
        engine.close()
        core._search_engine = None


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
    engine = engine_for(core)
    return [engine.search(q, **kwargs) for q in queries]
