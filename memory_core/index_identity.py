"""The identity side of an index owner: what the stored index was built with (its meta, read on the
owner's read-only connection, never the writer's), whether the configuration still matches it, and
the workspace the index records. ``IndexOwner`` (``memory_core/index_owner.py``) inherits it."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import apsw

from memory_core.errors import IndexPaused, MemoryCoreError, WorkspaceMismatch
from memory_core.store import schema
from memory_core.store.access import index_errors
from memory_core.store.identity import identity_mismatch, index_identity, paused_message
from memory_core.store.workspace import WORKSPACE_KEY, check_workspace
from memory_core.store.writer import FTS_ONLY_MODEL


def file_stamp(db_path: str) -> tuple[int, ...] | None:
    """What changes whenever the index file's content may have: the file's identity, size and
    mtime, and its write-ahead log's size and mtime (every commit of any process writes the log; a
    checkpoint writes the file). None when there is no file. Readers change neither."""
    try:
        st = os.stat(db_path)
    except OSError:
        return None
    try:
        wal = os.stat(db_path + "-wal")
        log = (wal.st_size, wal.st_mtime_ns)
    except OSError:
        log = (-1, -1)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, *log)


OPEN_META_KEYS = (WORKSPACE_KEY, schema.META_KEY)  # the meta an owner's open checks (workspace, identity)
CATCH_UP_ROWS_KEPT = 512  # an open agent keeps the rows of its last reconcile when it has at most this many


@dataclass(frozen=True)
class OpenState:
    """What a worker read for an owner being opened (the ``agent_state`` task, ``workers/tasks.py``)
    while the index file's :func:`file_stamp` was ``stamp``: meta values and the rows of the startup
    catch-up (``(source, path, mtime, size)`` sources and skipped files, ``(source, path)`` tombstones).
    The owner keeps one too, for its next reconcile, when :meth:`few`."""

    stamp: tuple[int, ...]
    meta: dict[str, str | None]
    sources: list[tuple]
    forgotten: list[tuple]
    skipped: list[tuple]

    def few(self) -> bool:
        """Few enough rows to keep in memory while the agent is open (:data:`CATCH_UP_ROWS_KEPT`)."""
        return len(self.sources) + len(self.forgotten) + len(self.skipped) <= CATCH_UP_ROWS_KEPT


class IndexIdentity:
    """Identity reads and checks over ``self.meta_reader`` (a read-only ``CachedReader``); the class
    that mixes it in sets ``config``, ``workspace``, ``db_path``, ``agent_id``, ``repoint``,
    ``_provider`` / ``provider``, ``_identity_memo`` and ``_meta_seen``.

    ``_meta_seen`` is ``(file_stamp, {key: value})``: meta values a worker read for this owner
    (:meth:`seed_meta`, when a server opens the agent), answered without opening the owner's own
    connection while the file's stamp is the one they were read under."""

    config: Any
    workspace: str
    db_path: str
    agent_id: str
    repoint: bool
    meta_reader: Any
    provider: Any  # the owner's property: the embedding provider, created on first use
    _provider: Any
    _identity_memo: tuple[Any, ...] | None
    _meta_seen: tuple[tuple[int, ...], dict[str, str | None]] | None

    def identity_mismatch(self) -> str | None:
        """The paused search's message (what differs, both ways out), None when the index may be
        searched (the engine's check)."""
        ident = self.identity_state()
        return ident["message"] if ident["state"] == "mismatch" else None

    # ------------------------------------------------------------------ identity
    def _check_workspace(self) -> None:
        """Refuse an index built from another workspace (:class:`WorkspaceMismatch`) unless ``repoint``
        or the index holds no file (say, a first search ran in a folder without notes): it has nothing
        a sync of this workspace could prune, so it follows this workspace."""
        if self.repoint or not os.path.exists(self.db_path):
            return
        try:
            recorded = self.read_meta_value(WORKSPACE_KEY)
            check_workspace(recorded, self.workspace, self.agent_id)
        except WorkspaceMismatch:
            if self._holds_files():
                raise
        except (MemoryCoreError, apsw.Error, OSError):
            return  # an unreadable index is reported by the command that uses it

    def _holds_files(self) -> bool:
        """Whether the index has any source file (True when that cannot be read: refuse, keep it)."""

        def read(conn: apsw.Connection) -> bool:
            try:
                return conn.execute("SELECT 1 FROM memory_index_sources LIMIT 1").fetchone() is not None
            except apsw.SQLError:
                return False  # schema not created yet
        try:
            return bool(self.meta_reader.run(read))
        except FileNotFoundError:
            return False
        except (apsw.Error, OSError):
            return True

    def expected_identity(self, dims: int | None = None) -> dict[str, Any]:
        ident = index_identity(self.config, self.provider)
        if dims is not None:
            ident["vectorDims"] = dims
        return ident

    def seed_meta(self, stamp: tuple[int, ...], meta: dict[str, str | None]) -> None:
        """Meta values read elsewhere (a worker) while the file's :func:`file_stamp` was ``stamp``."""
        self._meta_seen = (stamp, dict(meta))

    def read_meta_value(self, key: str) -> str | None:
        """One ``memory_index_meta`` value through the owner's read-only connection (never the
        writer's: a read must not race the writer's reopen after a swap); None when absent. A value
        :meth:`seed_meta` gave or a read here found is answered while the file's stamp is unchanged
        (no open, no read: a server of thousands of agents holds few connections, and every search
        asks).

        The stamp's mtimes have the kernel's clock granularity: another process's write of the
        meta within the same tick as the seeding read is not seen until the next write; the
        owner's own writes drop the seeded values (``IndexOwner._run_exclusive``)."""
        seen = self._meta_seen
        stamp = file_stamp(self.db_path)
        if seen is not None and seen[0] != stamp:
            seen = self._meta_seen = None
        if seen is not None and key in seen[1]:
            return seen[1][key]

        def read(conn: apsw.Connection) -> str | None:
            try:
                row = conn.execute("SELECT value FROM memory_index_meta WHERE key = ?", (key,)).fetchone()
            except apsw.SQLError:
                return None  # schema not created yet
            return None if row is None else str(row[0])

        try:
            value = self.meta_reader.run(read)
        except FileNotFoundError:
            return None
        if stamp is not None:  # kept like a seeded value (stamp taken before the read: a write since changes it)
            self._meta_seen = (stamp, {**(seen[1] if seen is not None else {}), key: value})
        return value

    def identity_state(self) -> dict[str, Any]:
        """``{"state": "empty"|"ok"|"mismatch", "mismatch": [keys]}`` for the stored index meta; a
        mismatch also has ``message``, the paused search's error (what differs, both ways out)."""
        with index_errors(self.db_path):
            raw = self.read_meta_value(schema.META_KEY)
        # every search asks (freshness and the engine): the comparison is kept while the stored meta,
        # the config and the provider (and its dims, which some learn late) are the same
        provider = self._provider
        key = (raw, getattr(provider, "dims", None), getattr(provider, "provider_key", None))  # a fallback switches it
        memo = self._identity_memo
        if memo is not None and memo[0] == key and memo[1] is self.config and memo[2] is provider:
            return _identity_dict(*memo[3])
        meta = loads_meta(raw)
        if not isinstance(meta, dict):
            return {"state": "empty", "mismatch": []}
        current = self.provider  # created now if it was not yet (expected_identity needs it)
        expected = self.expected_identity()
        diff = identity_mismatch(meta, expected)
        state = "mismatch" if diff else "ok"
        message = paused_message(meta, expected, diff) if diff else None
        if self._provider is current:  # kept under the provider it was compared with
            key = (raw, getattr(current, "dims", None), getattr(current, "provider_key", None))
            self._identity_memo = (key, self.config, current, (state, tuple(diff), message))
        return _identity_dict(state, diff, message)

    def check_identity(self) -> dict[str, Any]:
        """Raise :class:`IndexPaused` when the index was built with other settings (upstream
        `memory/manager.ts`)."""
        state = self.identity_state()
        if state["state"] == "mismatch":
            raise IndexPaused(state["message"])
        return state

    def _assert_no_downgrade(self, meta: dict | None, provider: Any | None) -> None:
        """Never rebuild a semantic index as keyword-only without an explicit --force (upstream
        `memory/manager-sync-ops.ts`)."""
        if provider is not None or meta is None:
            return
        if meta.get("provider", "none") != "none" or meta.get("model", FTS_ONLY_MODEL) != FTS_ONLY_MODEL:
            raise IndexPaused(
                f"refusing to rebuild the semantic index ({meta.get('provider')}/{meta.get('model')}) as "
                "keyword-only: no embedding provider is configured now. Set "
                f"`provider = {json.dumps(meta.get('provider'))}` in the config to keep it, or run "
                "`memory-core index --force` to rebuild keyword-only and drop the vectors"
            )


def _identity_dict(state: str, diff: Sequence[str], message: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"state": state, "mismatch": list(diff)}
    if message is not None:
        out["message"] = message
    return out


def loads_meta(value: str | None) -> Any:
    """A JSON meta value as stored (``memory_index_meta``), None when absent or not JSON."""
    if not value:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return None
