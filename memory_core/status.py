"""The status reader: what ``memory-core status`` (``MemoryCore.status``) reports of one index,
read on a read-only connection of its own (never the writer's)."""

from __future__ import annotations

import contextlib
import os
from typing import Any

import apsw

from memory_core.errors import MemoryCoreError, WorkspaceError
from memory_core.index_identity import loads_meta
from memory_core.indexer import resolve_sessions_dir
from memory_core.store import schema
from memory_core.store.access import folder_problem
from memory_core.store.perms import loose_files
from memory_core.store.writer import FTS_ONLY_MODEL, LAST_SYNC_KEY


def _dirty(core: Any) -> bool:
    """Whether the index is behind its files. Without a running watcher (a one-shot CLI
    process) only a reconcile can tell: it stats the sources and marks what changed, without
    starting a sync (transcripts are compared by stat here, not by the delta thresholds)."""
    fresh = core.freshness
    if os.path.exists(core.db_path) and not fresh.watching():
        fresh.reconcile(sessions_by_delta=False, reason="status", strict=True)
    return fresh.is_dirty()


def source_file_count(cfg: Any, workspace: str) -> int:
    """How many source files ``workspace`` has now (memory files, and transcripts when sessions are a
    source): 0 means a search has nothing to find there, whatever the query."""
    from memory_core import sources as src

    count = 0
    if "memory" in cfg.sources:
        count += len(src.list_memory_files(workspace, cfg.extra_paths))
    if "sessions" in cfg.sources:
        with contextlib.suppress(OSError):
            count += len(src.list_session_files(resolve_sessions_dir(cfg, workspace)))
    return count


def skipped_files(cfg: Any, workspace: str) -> list[dict[str, str]]:
    """The files under ``memory/`` that are not indexed for not being Markdown, as problems."""
    from memory_core.sources import not_markdown_files

    if "memory" not in cfg.sources:
        return []
    try:
        paths = not_markdown_files(workspace)
    except WorkspaceError:
        return []
    return [{"path": p, "code": "not_markdown", "message": "not Markdown (only .md files are indexed)"}
            for p in paths]


def index_status(core: Any, *, deep: bool) -> dict[str, Any]:
    """The facts ``memory-core status`` prints for ``core`` (a :class:`~memory_core.core.MemoryCore`);
    the caller maps index errors (``index_errors``)."""
    cfg = core.config
    out: dict[str, Any] = {
        "agent": core.agent_id,
        "workspace": core.workspace,
        "db_path": core.db_path,
        "db_exists": os.path.exists(core.db_path),
        "sources": list(cfg.sources),
        "extra_paths": [p if isinstance(p, str) else p.model_dump(exclude_none=True) for p in cfg.extra_paths],
        "sessions_dir": resolve_sessions_dir(cfg, core.workspace) if "sessions" in cfg.sources else None,
        "files": 0,
        "chunks": 0,
        "files_by_source": {},
        "chunks_by_source": {},
        "provider": cfg.provider,
        "model": None,
        "dims": None,
        "fts": {"available": False, "tokenizer": cfg.store.fts.tokenizer, "error": None},
        "vector": {
            "enabled": bool(cfg.store.vector.enabled and cfg.provider != "none"),
            "available": False,
            "sqlite_vec_version": None,
            "backend": cfg.store.vector.backend,
            "error": None,
            "dims": None,
        },
        "cache": {"enabled": cfg.cache.enabled, "entries": 0, "max_entries": cfg.cache.max_entries},
        "revision": 0,
        "dirty": _dirty(core),
        "last_sync": None,
        "identity": None,
        "state_dir_problem": folder_problem(os.path.dirname(core.db_path)),
        # index paths other users can read (`index` makes them private)
        "loose_permissions": loose_files(core.db_path, state_dir_owned=not cfg.store.path),
        # files in memory/ that are skipped without a sync problem (not Markdown)
        "skipped_files": skipped_files(cfg, core.workspace),
    }
    if out["db_exists"]:
        out["db_bytes"] = os.path.getsize(core.db_path)
        wal = core.db_path + "-wal"
        out["wal_bytes"] = os.path.getsize(wal) if os.path.exists(wal) else 0
        _from_db(core, out, deep=deep)
    try:
        out["identity"] = core.identity_state()
    except MemoryCoreError as exc:
        out["identity"] = {"state": "unknown", "error": exc.message}
    if deep:
        out["provider_check"] = _provider_check(core)
    out["freshness"] = core.freshness.status()  # the scheduler _dirty asked
    out["dirty"] = bool(out["dirty"] or out["freshness"]["dirty"])
    out["problems"] = out["freshness"]["problems"]
    return out


def _from_db(core: Any, out: dict[str, Any], *, deep: bool) -> None:
    from host_facades.db.sqlite_ext import load_sqlite_vec
    from host_facades.db.sqlite_read import CORRUPT_ERRORS, open_readonly

    try:
        conn = open_readonly(core.db_path, load_vec=False)
    except FileNotFoundError:
        out["db_exists"] = False
        return
    try:
        conn.execute("BEGIN")
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        if "memory_index_sources" not in tables:
            return
        out["files_by_source"] = dict(conn.execute(
            "SELECT source, count(*) FROM memory_index_sources GROUP BY source"))
        out["chunks_by_source"] = dict(conn.execute(
            "SELECT source, count(*) FROM memory_index_chunks GROUP BY source"))
        out["files"] = sum(out["files_by_source"].values())
        out["chunks"] = sum(out["chunks_by_source"].values())
        out["revision"] = schema.read_revision(conn)
        out["cache"]["entries"] = int(conn.execute("SELECT count(*) FROM memory_embedding_cache").fetchone()[0])
        meta_rows = dict(conn.execute("SELECT key, value FROM memory_index_meta"))
        meta = loads_meta(meta_rows.get(schema.META_KEY))
        if meta:
            out["model"] = meta.get("model")
            out["dims"] = meta.get("vectorDims")
            out["indexed_provider"] = meta.get("provider")
        out["last_sync"] = loads_meta(meta_rows.get(LAST_SYNC_KEY))
        out["vector"]["rebuild_required"] = meta_rows.get(schema.VECTOR_REBUILD_KEY) == "1"
        tok = schema.fts_tokenizer_in_db(conn)
        out["fts"]["available"] = tok is not None
        if tok is not None:
            out["fts"]["tokenizer"] = tok
        if out["vector"]["enabled"]:
            ok, version, error = load_sqlite_vec(conn, core.config.store.vector.extension_path)
            out["vector"].update(available=ok, sqlite_vec_version=version, error=error)
            # the sqlite-vec table exists for that backend only; the others search the chunk vectors
            out["vector"]["dims"] = schema.vec_table_dims(conn) or (meta or {}).get("vectorDims")
        if deep:
            out["integrity"] = str(conn.execute("PRAGMA quick_check").fetchone()[0])
            if out["fts"]["available"]:
                fts_rows = int(conn.execute("SELECT count(*) FROM memory_index_chunks_fts").fetchone()[0])
                out["fts"]["rows"] = fts_rows
                out["fts"]["in_step"] = fts_rows == out["chunks"]
            out["semantic_chunks"] = int(conn.execute(
                "SELECT count(*) FROM memory_index_chunks WHERE model != ?", (FTS_ONLY_MODEL,)).fetchone()[0])
        conn.execute("COMMIT")
    except CORRUPT_ERRORS:
        raise  # IndexCorrupt (status runs under index_errors)
    except apsw.Error as exc:
        out["error"] = f"cannot read {core.db_path}: {exc}"
    finally:
        conn.close()


def _provider_check(core: Any) -> dict[str, Any]:
    try:
        provider = core.provider
    except MemoryCoreError as exc:
        return {"available": False, "error": exc.message}
    if provider is None:  # nothing to check, and nothing to call available: search is keyword-only
        reason = f"no embedding provider (provider = {core.config.provider!r}); search is keyword-only"
        return {"available": False, "mode": "fts-only", "reason": reason}
    info = {"available": True, "mode": "semantic", "id": str(provider.id), "model": str(provider.model),
            "dims": getattr(provider, "dims", None)}
    try:
        from memory_core.embeddings import embed_query

        vec = embed_query(provider, "memory-core status probe")
        info["dims"] = int(vec.shape[-1])
    except Exception as exc:  # noqa: BLE001 - status reports, never raises
        info.update(available=False, error=str(exc))
    return info
