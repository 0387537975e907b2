"""How a :class:`~memory_core.freshness.Freshness` scheduler is bound to a ``MemoryCore``: what it
lists (the sources a sync enumerates), what the index holds (read-only connections, never the
writer's), how it syncs (``core.sync``) and what pauses it (the index identity).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from memory_core.freshness.settings import FreshnessSettings
from memory_core.watcher import WatchTargets


def freshness_for_core(cls: Any, core: Any, settings: Any = None) -> Any:
    """A scheduler over a :class:`memory_core.core.MemoryCore` (its sync, writer and sources)."""
    from memory_core import sources as src
    from memory_core.store.access import index_errors

    config = core.config
    workspace = os.path.abspath(core.workspace)
    with_sessions = "sessions" in (config.sources or [])
    sessions_dir = _core_sessions_dir(core) if with_sessions else None
    extra = list(config.extra_paths or [])
    extra_raw = [e if isinstance(e, str) else {"path": e.path, "pattern": e.pattern} for e in extra]

    def list_fn() -> tuple[list[str], list[str]]:
        mem = [os.path.abspath(p) for p in src.list_memory_files(workspace, extra_raw)]
        ses = [os.path.abspath(p) for p in src.list_session_files(sessions_dir)] if sessions_dir else []
        return mem, ses

    def indexed_fn() -> dict[str, tuple[float | None, int | None]]:
        out: dict[str, tuple[float | None, int | None]] = {}
        with index_errors(core.db_path):
            rows = _read_index_rows(core, "sources")
        for source, rel, mtime, size in rows:
            out[_abs_for(rel, source, workspace, sessions_dir)] = (mtime, size)
        return out

    def index_state_fn() -> tuple[dict, list[str], dict]:
        """(indexed, forgotten, skipped) through one read-only connection (a reconcile's three reads),
        or those read before while the file is unchanged since (``MemoryCore.catch_up_rows``; for
        the startup catch-up of an agent a server opened, what a worker read just before)."""
        with index_errors(core.db_path):
            sources, forgotten, skipped = core.catch_up_rows(lambda: _read_index_rows(core, "all"))
        return ({_abs_for(rel, src, workspace, sessions_dir): (mtime, size) for src, rel, mtime, size in sources},
                [_abs_for(rel, src, workspace, sessions_dir) for src, rel in forgotten],
                {_abs_for(rel, src, workspace, sessions_dir): (mtime, size) for src, rel, mtime, size in skipped})

    def forgotten_fn() -> list[str]:
        with index_errors(core.db_path):
            rows = _read_index_rows(core, "forgotten")
        return [_abs_for(rel, source, workspace, sessions_dir) for source, rel in rows]

    def skipped_fn() -> dict[str, tuple[float | None, int | None]]:
        with index_errors(core.db_path):
            rows = _read_index_rows(core, "skipped")
        return {_abs_for(rel, source, workspace, sessions_dir): (mtime, size)
                for source, rel, mtime, size in rows}

    def sync_fn(paths: Sequence[str] | None, reason: str, force: bool) -> Any:
        rel = None if paths is None else sorted({_rel_for(p, workspace, sessions_dir) for p in paths})
        return core.sync(reason=reason, force=force, paths=rel)

    def paused_fn() -> str | None:
        try:
            state = core.identity_state()
        except Exception:  # noqa: BLE001 - unreadable meta (e.g. mid-swap) is not a pause; search reports it
            return None
        if state.get("state") == "mismatch":
            changed = ", ".join(state.get("mismatch") or []) or "settings"
            return f"the index was built with different settings ({changed} changed); search is paused"
        return None

    return cls(
        sync_fn=sync_fn,
        indexed_fn=indexed_fn,
        list_fn=list_fn,
        targets=WatchTargets.build(workspace, extra_raw, sessions_dir),
        settings=settings or FreshnessSettings.from_config(config),
        agent_id=core.agent_id,
        paused_fn=paused_fn,
        forgotten_fn=forgotten_fn,
        skipped_fn=skipped_fn,
        index_state_fn=index_state_fn,
        action_command=f"memory-core index --agent {core.agent_id}",
        abs_fn=lambda rel: _abs_for(rel, "sessions" if rel.startswith("sessions/") else "memory",
                                    workspace, sessions_dir),
    )


def _abs_for(rel: str, source: str, workspace: str, sessions_dir: str | None) -> str:
    if source == "sessions" and sessions_dir:
        return os.path.join(sessions_dir, os.path.basename(rel))
    return os.path.normpath(os.path.join(workspace, rel))


def _rel_for(path: str, workspace: str, sessions_dir: str | None) -> str:
    """The indexed path of an absolute source path (``sessions/<name>`` for transcripts)."""
    if sessions_dir and os.path.dirname(path) == sessions_dir.rstrip(os.sep):
        return "sessions/" + os.path.basename(path)
    from memory_core.sources import relative_source_path

    return relative_source_path(workspace, path)


def _read_index_rows(core: Any, what: str) -> list:
    """Source rows or skipped files (source, path, mtime, size), tombstones (source, path), or with
    ``"all"`` the three lists, through the owner's read-only connection (``core.reader``: kept open
    with the agent, reopened after a file swap): never the writer's."""

    from host_facades.db.sqlite_read import index_rows

    def read(conn: Any) -> list:
        if what == "all":
            return [index_rows(conn, "sources"), index_rows(conn, "forgotten"), index_rows(conn, "skipped")]
        return index_rows(conn, what)

    try:
        return core.reader.run(read)
    except FileNotFoundError:  # never indexed
        return [[], [], []] if what == "all" else []


def _core_sessions_dir(core: Any) -> str | None:
    from memory_core.indexer import resolve_sessions_dir

    return resolve_sessions_dir(core.config, core.workspace)
