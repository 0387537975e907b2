"""The index owner: the one writer of an agent's index and every write through it.

One writer: every write runs on the writer's one connection under the writer's lock
(``IndexWriter._wlock``), reads never use it. A lock rather than a writer thread because the
writes already come from few places (the freshness thread, a CLI run, ``forget``) and each must
report its own error to its caller; a thread would add a queue and a second error path for the
same serialisation. ``sync`` runs one pass at a time (concurrent callers join the running one); a
full reindex (``--force``, first index, or an identity change on a CLI ``index`` run) builds a
temp database and swaps it in. The owner also holds the embedding provider (the identity of an
index names it) and a read-only connection for identity reads.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import apsw

from memory_core.config import MemoryCoreConfig
from memory_core.errors import (ConfigError, IndexCorrupt, IndexNewer, IndexPaused, MemoryCoreError, ReferenceNotFound,
                                reason_of)
from memory_core.index_identity import OPEN_META_KEYS, IndexIdentity, OpenState, file_stamp
from memory_core.open_agents import HELD
from memory_core.indexer import IndexSummary, ProgressFn, record_last_sync, resolve_sessions_dir, run_sync
from memory_core.session_keys import session_index_path
from memory_core.store import schema
from memory_core.store.access import folder_problem, index_errors, not_writable
from memory_core.store.identity import identity_mismatch, index_identity, paused_message, settings_change
from memory_core.store.perms import tighten
from memory_core.store.reader import CachedReader
from memory_core.store.reindex import atomic_reindex, reindex_lock, set_aside, sweep_dead_temp_files
from memory_core.store.workspace import record_workspace
from memory_core.store.writer import IndexWriter


UNSET: Any = object()


def config_problem(config: MemoryCoreConfig, embedding_provider: Any = UNSET) -> ConfigError | None:
    """The configuration error every command reports (exit 2), or None: an embedding provider (or
    fallback) name that is not registered. A provider given as an object is not checked."""
    if embedding_provider is not UNSET:
        return None
    from memory_core.embeddings.registry import check_provider_name

    try:
        check_provider_name(config)
    except ConfigError as exc:
        return exc
    return None


def probe_readonly(db_path: str) -> None:
    """Read what a rebuild reads from the live index at ``db_path`` (meta, source rows, after the
    first row of every table and index) on a read-only connection; raises what reading an
    unreadable file raises."""
    from host_facades.db.sqlite_read import open_readonly

    try:
        conn = open_readonly(db_path, load_vec=False, check_pages=True)
    except FileNotFoundError:
        return
    try:
        for sql in ("SELECT key, value FROM memory_index_meta", "SELECT path, source, hash FROM memory_index_sources"):
            with contextlib.suppress(apsw.SQLError):  # a table not created yet
                for _row in conn.execute(sql):
                    pass
    finally:
        conn.close()


def writer_options(cfg: MemoryCoreConfig) -> dict[str, Any]:
    """The :class:`IndexWriter` options of an agent's config."""
    return {
        "fts_tokenizer": cfg.store.fts.tokenizer,
        # the sqlite-vec table is one more float32 copy of every chunk vector: kept only for the
        # backend that searches it (the others search the chunk vectors themselves)
        "vector_enabled": (cfg.store.vector.enabled and cfg.provider != "none"
                           and cfg.store.vector.backend == "sqlite-vec"),
        "extension_path": cfg.store.vector.extension_path,
        "cache_enabled": cfg.cache.enabled,
        "cache_max_entries": cfg.cache.max_entries,
        # a new file's page size: large for rows that carry a vector, small for text alone
        "page_size": schema.PAGE_SIZE_KEYWORD if cfg.provider == "none" else schema.PAGE_SIZE_VECTORS,
    }


RELEASE_CHECKPOINT_BYTES = 1 << 20  # a writer closed for the connection cap checkpoints a larger log only
# A sync that leaves more than this in the write-ahead log folds it into the file (IndexWriter.fold_log):
# each first open of the file rebuilds its log index by reading the whole log (0.2 ms per 400 KB),
# which a restarted server of thousands of agents, and a worker's reader of an agent it has no
# connection to, pays per agent; 10,000 idle agents would also keep GBs of log on disk.
FOLD_LOG_BYTES = 64 * 1024


def state_after_sync(writer: IndexWriter | None, db_path: str) -> OpenState | None:
    """What the identity reads and the next reconcile need after a sync of this process, read
    through its writer's connection while the file's :func:`file_stamp` is the one taken first
    (else, or when the file on disk is not the writer's, None: they read it themselves). A server of
    thousands of agents then opens no reader per agent after every sync. A log the sync left over
    :data:`FOLD_LOG_BYTES` is folded into the file first (:meth:`IndexWriter.fold_log`)."""
    from host_facades.db.sqlite_read import index_rows, meta_values

    if writer is None or writer.conn is None or writer.replaced():
        return None
    with contextlib.suppress(apsw.Error):
        writer.fold_log(FOLD_LOG_BYTES)
    stamp = file_stamp(db_path)
    if stamp is None:
        return None

    def read() -> OpenState:
        conn = writer.connection()
        return OpenState(stamp, meta_values(conn, OPEN_META_KEYS), index_rows(conn, "sources"),
                         index_rows(conn, "forgotten"), index_rows(conn, "skipped"))

    try:
        state = writer.serialized(read)
    except apsw.Error:
        return None
    return state if state.few() and file_stamp(db_path) == stamp else None


class IndexOwner(IndexIdentity):
    """The writer slot, the sync / reindex orchestration and ``forget`` of one index, with the identity
    checks of :class:`~memory_core.index_identity.IndexIdentity` (``MemoryCore`` delegates to it). ``on_replaced()`` runs when another process replaced
    the file; ``close_readers()`` closes the search side's readers before a file is set aside."""

    def __init__(self, config: MemoryCoreConfig, workspace: str, db_path: str, *, embedding_provider: Any = UNSET,
                 repoint: bool = False, on_replaced: Callable[[], None] = lambda: None,
                 close_readers: Callable[[], None] = lambda: None, check_workspace: bool = True) -> None:
        # check_workspace False: the caller checks it with what a worker read (:meth:`open_with`)
        self.config = config
        self.workspace = workspace
        self.db_path = db_path
        self.agent_id = config.agent_id
        self.repoint = repoint
        self._provider = embedding_provider
        self._on_replaced = on_replaced
        self._close_readers = close_readers
        self._writer: IndexWriter | None = None
        self._lock = threading.RLock()  # guards the writer slot and the running-sync slot
        self._running: Future[IndexSummary] | None = None
        self._closed = False
        self._readable_ident: tuple[int, int] | None = None  # the file check_readable last opened
        self._identity_memo: tuple[Any, ...] | None = None  # identity_state's last comparison
        self._meta_seen = None
        self._open_rows: OpenState | None = None
        # identity reads, never the writer's; point reads, so the file is not mapped (a map and unmap
        # per opened agent cost more than the few pages read)
        # the process's LRU of owners holding connections is told of every use
        self.meta_reader = CachedReader(self.db_path, load_vec=False, mmap=False, on_use=lambda: HELD.touch(self))
        if check_workspace:
            self._check_workspace()

    def open_with(self, opened: OpenState | None) -> None:
        """Check the workspace with what a worker read of this index just now (a server opening the
        agent; None: read it here). The identity reads and the startup catch-up then answer from it
        while the file is unchanged, so an agent whose index is current never opens the owner's own
        connection."""
        if opened is not None:
            self.seed_meta(opened.stamp, opened.meta)
            self._readable_ident = (opened.stamp[0], opened.stamp[1])  # a worker read it: a database
            self._open_rows = opened
        self._check_workspace()

    @property
    def provider(self) -> Any | None:
        """The embedding provider (None = keyword-only); an unavailable explicit one raises
        (docs/decisions.md D4)."""
        if self._provider is UNSET:
            from memory_core.embeddings import create_embedding_provider

            self._provider = create_embedding_provider(self.config)
        return self._provider

    @property
    def closed(self) -> bool:
        return self._closed

    def check_open(self) -> None:
        if self._closed:
            raise MemoryCoreError("this MemoryCore is closed; open a new one (MemoryCore(...)) to use the index")

    @property
    def writer(self) -> IndexWriter:
        with self._lock:
            self.check_open()
            if self._writer is None:
                self._writer = self._open_writer()
            HELD.touch(self)
            return self._writer

    def release_connections(self) -> bool:
        """Close the writer and the identity reader unless in use (a sync running, a read, another
        thread holding this owner): ``HeldConnections`` past its cap. They reopen when needed."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._running is not None or not self.meta_reader.try_close():
                return False
            if self._writer is not None:  # a small log stays: a checkpoint changes the stamp (values kept under it)
                self._writer.close(checkpoint=self._writer.log_bytes() > RELEASE_CHECKPOINT_BYTES)
                self._writer = None
            return True
        finally:
            self._lock.release()

    def _open_writer(self) -> IndexWriter:
        # any writer start removes what killed rebuilds left behind (their process is gone)
        sweep_dead_temp_files(self.db_path)
        writer = IndexWriter(self.db_path, **writer_options(self.config))
        writer.on_reopen = self._index_replaced
        return writer

    def _index_replaced(self) -> None:
        """The writer found the file replaced by another process (its ``index --force``): what this
        process published to the old file may be missing, so freshness re-checks every file."""
        self._on_replaced()

    def notice_swap(self) -> None:
        """Cheap (one stat): reopen the writer now when another process swapped the file."""
        writer = self._writer
        if writer is not None and writer.replaced():
            writer.check_swapped()

    def close_writer(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def close(self) -> None:
        HELD.forget(self)
        self.meta_reader.close()
        with self._lock:
            self.close_writer()
            self._closed = True

    # ------------------------------------------------------------------ sync
    def index(self, *, force: bool = False, progress: ProgressFn | None = None) -> IndexSummary:
        """The CLI ``index`` verb: incremental, or a full atomic rebuild on force / first run / identity change.

        ``force`` also repairs an index file that is not a readable database (:class:`IndexCorrupt`)
        or was written by a newer memory-core (:class:`IndexNewer`): the file is moved aside
        (``IndexSummary.moved_aside``) and the index rebuilt from scratch.
        Index files (and the state dir) left readable by other users are made private first."""
        tighten(self.db_path, state_dir_owned=not self.config.store.path)
        return self._run_exclusive(reason="cli", force=force, paths=None, progress=progress, rebuild_on_mismatch=True,
                                   repair=force)

    def sync(
        self,
        *,
        reason: str = "manual",
        force: bool = False,
        paths: Sequence[str] | None = None,
        progress: ProgressFn | None = None,
    ) -> IndexSummary:
        """Incremental sync (one at a time; a concurrent caller waits for and returns the running one).

        An identity mismatch raises IndexPaused unless ``force``; ``paths`` restricts to those files.
        """
        return self._run_exclusive(reason=reason, force=force, paths=paths, progress=progress,
                                   rebuild_on_mismatch=False, repair=False)

    def catch_up_rows(self, read: Callable[[], list]) -> tuple[list, list, list]:
        """The rows a reconcile compares with the files (sources, tombstones, skipped files): those
        read last (here, or by the worker that opened this owner) while the index file is unchanged
        since (:func:`file_stamp`, which every commit changes), else ``read()``'s, kept when few.
        An idle agent's reconciles (health checks, the re-check after a search) then stat the file
        instead of opening a connection."""
        kept, stamp = self._open_rows, file_stamp(self.db_path)
        if kept is not None and kept.stamp == stamp:
            return kept.sources, kept.forgotten, kept.skipped
        sources, forgotten, skipped = read()
        read_now = OpenState(stamp, {}, sources, forgotten, skipped)
        self._open_rows = read_now if stamp and read_now.few() else None
        return sources, forgotten, skipped

    def _run_exclusive(self, **kw: Any) -> IndexSummary:
        self._meta_seen = self._open_rows = None  # this process writes now: read the index itself
        with self._lock:
            running = self._running
            if running is None:
                fut: Future[IndexSummary] = Future()
                self._running = fut
        if running is not None:
            return running.result()
        t0 = time.perf_counter()
        try:
            with index_errors(self.db_path):
                result = self._do_sync(**kw)
            result.seconds = time.perf_counter() - t0
        except BaseException as exc:
            fut.set_exception(exc)
            raise
        else:
            fut.set_result(result)
            return result
        finally:
            self._meta_seen = self._open_rows = None
            with self._lock:
                self._running = None
                after = state_after_sync(self._writer, self.db_path)  # the sync's writer is idle now
            if after is not None:
                self.seed_meta(after.stamp, after.meta)
                self._open_rows = after

    def _do_sync(self, *, reason: str, force: bool, paths: Sequence[str] | None,
                 progress: ProgressFn | None, rebuild_on_mismatch: bool, repair: bool) -> IndexSummary:
        from memory_core.embeddings.fallback import FallbackActivated

        try:
            return self._do_sync_once(reason=reason, force=force, paths=paths, progress=progress,
                                      rebuild_on_mismatch=rebuild_on_mismatch, repair=repair)
        except FallbackActivated:
            # the primary provider failed for good: every vector comes from the fallback now, so the
            # index is rebuilt with it (its identity records the fallback), never mixed
            self._identity_memo = None
            return self._full_reindex(reason=reason, provider=self.provider, progress=progress)

    def _do_sync_once(self, *, reason: str, force: bool, paths: Sequence[str] | None,
                      progress: ProgressFn | None, rebuild_on_mismatch: bool, repair: bool) -> IndexSummary:
        provider = self.provider
        if force and repair:  # a full rebuild that does not need the live index to be readable
            summary = self._full_reindex(reason=reason, provider=provider, progress=progress, repair=True)
            summary.rebuild_reason = "--force"
            return summary
        writer = self.writer
        meta = writer.read_meta()
        expected = index_identity(self.config, provider)
        mismatch = identity_mismatch(meta, expected) if meta is not None else []
        if meta is None:
            # no meta: an initial index, or an interrupted/failed rebuild; an empty db is rebuilt in place
            full = True
        elif force:
            full = True
        elif mismatch:
            if not rebuild_on_mismatch:
                raise IndexPaused(paused_message(meta, expected, mismatch, what="memory index paused"))
            full = True
        else:
            full = False
        if full and not force:
            self._assert_no_downgrade(meta, provider)
        why = None
        if meta is None:
            why = "new index"
        elif force:
            why = "--force"
        elif mismatch:
            why = f"settings changed ({settings_change(meta, expected, mismatch)})"
        if full and meta is None and not force and writer.counts()["files"] == 0:
            summary = self._first_index(writer, reason=reason, provider=provider, progress=progress)
            summary.rebuild_reason = why
            return summary
        if not full:
            try:
                summary = run_sync(writer, self.config, self.workspace, provider, reason=reason,
                                   paths=paths, progress=progress)
            except BaseException as exc:
                with contextlib.suppress(Exception):  # reporting must not mask the real error
                    record_last_sync(writer, None, error=reason_of(exc), reason=reason)
                raise
            dims = writer.vec_dims
            if dims is not None and meta.get("vectorDims") is None:
                writer.write_meta({**meta, "vectorDims": dims})
            writer.cache.settle()  # cached vectors the sync published as chunk rows: kept once
            record_workspace(writer, self.workspace)
            record_last_sync(writer, summary)
            return summary
        summary = self._full_reindex(reason=reason, provider=provider, progress=progress)
        summary.rebuild_reason = why
        return summary

    def _first_index(self, writer: IndexWriter, *, reason: str, provider: Any | None,
                     progress: ProgressFn | None) -> IndexSummary:
        """An agent's first index, built in place by an ordinary sync of every file: there are no
        earlier answers to keep readable meanwhile, and it takes a third of the time of building
        aside and swapping (which a server opening thousands of new agents pays for each). Two
        processes doing it at once publish file by file, as incremental syncs do. Interrupted, it
        leaves rows without meta, which the next sync rebuilds aside."""
        try:
            summary = run_sync(writer, self.config, self.workspace, provider, reason=reason, progress=progress)
        except BaseException as exc:
            with contextlib.suppress(Exception):  # reporting must not mask the real error
                record_last_sync(writer, None, error=reason_of(exc), reason=reason)
            raise
        summary.full = True  # every file was read: the same summary as a rebuild's
        self._publish_built(writer, provider, summary)
        summary.revision = writer.revision
        return summary

    def _publish_built(self, writer: IndexWriter, provider: Any | None, summary: IndexSummary) -> None:
        """What an index built from every file records: its identity (with the vector dims it was
        built with), its workspace and the sync that built it."""
        dims = writer.vec_dims
        if dims is None and provider is not None:
            dims = getattr(provider, "dims", None)
        writer.write_meta(self.expected_identity(dims=dims) if provider is not None
                          else index_identity(self.config, None))
        writer.cache.settle()  # under the identity just recorded: cached vectors now in chunk rows go
        record_workspace(writer, self.workspace)
        record_last_sync(writer, summary)

    def _full_reindex(self, *, reason: str, provider: Any | None, progress: ProgressFn | None,
                      repair: bool = False) -> IndexSummary:
        moved_aside = None
        try:
            with index_errors(self.db_path):
                if repair and self._writer is None:
                    probe_readonly(self.db_path)  # before a read-write open touches the file or its -wal/-shm
                live = self.writer
                previous = {s: live.indexed_hashes(s) for s in self.config.sources}
        except (IndexCorrupt, IndexNewer) as exc:
            if not repair:
                raise
            moved_aside = self._set_aside_unreadable("newer" if isinstance(exc, IndexNewer) else "corrupt")
            previous = {s: {} for s in self.config.sources}

        def build(temp: IndexWriter) -> IndexSummary:
            summary = run_sync(temp, self.config, self.workspace, provider, full=True, reason=reason,
                               previous=previous, progress=progress)
            # a file that could not be read this time keeps its previous rows (and is re-indexed later)
            unreadable = {p["path"] for p in summary.problems if p["code"] != "malformed_jsonl"}
            for source, hashes in previous.items():
                rebuilt = temp.indexed_hashes(source)
                for path in hashes:
                    if path in unreadable and path not in rebuilt:
                        temp.copy_source_from(self.db_path, path, source, model=summary.model)
            if unreadable:
                counts = temp.counts()
                summary.files, summary.chunks = counts["files"], counts["chunks"]
            self._publish_built(temp, provider, summary)
            return summary

        def reopen() -> None:
            self._writer = self._open_writer()

        try:
            summary = atomic_reindex(self.db_path, build, writer_options=writer_options(self.config),
                                     before_swap=self.close_writer, after_swap=reopen)
        except BaseException as exc:
            if self._writer is not None:
                try:
                    record_last_sync(self._writer, None, error=f"full reindex failed: {reason_of(exc)}",
                                     reason=reason)
                except Exception:  # noqa: BLE001 - reporting must not mask the real error
                    pass
            raise
        summary.revision = self.writer.revision
        summary.moved_aside = moved_aside
        return summary

    def _set_aside_unreadable(self, kind: str) -> str:
        """Move the unreadable index file (and its -wal/-shm) aside for a rebuild from scratch;
        ``kind`` (``corrupt`` / ``newer``) names why, in the new name."""
        with self._lock:
            self.close_writer()
        self._close_readers()  # a search's cached reader must not keep the old file open
        self.meta_reader.close()
        with reindex_lock(self.db_path):
            return set_aside(self.db_path, kind=kind)

    # ------------------------------------------------------------------ import, forget
    def import_embeddings(self, path: str) -> Any:
        """Seed the embedding cache from an OpenClaw index at ``path`` (``memory_core/store/openclaw_import.py``)."""
        from memory_core.store.openclaw_import import import_embeddings

        self.check_open()
        with self._lock:
            return import_embeddings(self, path)

    # ------------------------------------------------------------------ forget
    def forget_session(self, key: str, *, force: bool = False) -> tuple[str, int]:
        """Tombstone a session transcript (``sessions/<file>.jsonl`` or its basename) and drop its rows.

        A memory file is refused (:class:`ForgetRefused`): its entries are removed by editing the file.
        A key that names nothing indexed, no tombstone and no transcript on disk is most likely a
        typo: :class:`ReferenceNotFound`, and no tombstone, unless ``force`` (forget it in advance).
        Returns ``(index path, chunks removed)``."""
        session_index_path(key)  # raises ForgetRefused for memory files, InvalidRequest for an empty key
        name = key.strip().replace("\\", "/")
        base = name.rsplit("/", 1)[-1]
        if not base.endswith(".jsonl") and ".jsonl." not in base:
            base += ".jsonl"
        path = f"sessions/{base}"
        with self._lock, index_errors(self.db_path):
            writer = self.writer
            if not force and not writer.is_indexed(path, "sessions") and not writer.is_forgotten(path):
                sessions_dir = resolve_sessions_dir(self.config, self.workspace)
                if not os.path.lexists(os.path.join(sessions_dir, base)):
                    raise ReferenceNotFound(
                        f"no session {path}: nothing is indexed under it and there is no transcript {base} in "
                        f"{sessions_dir} (list the sessions with `ls {sessions_dir}`); pass --force to record "
                        "a tombstone for it anyway"
                    )
            removed = writer.forget_session(path)
        return path, removed

    def check_readable(self) -> None:
        """Raise the typed error when the index cannot be searched at all: the file is no readable
        database, or there is none and none can be built (the state dir is not writable)."""
        from memory_core.store.reader import file_ident

        ident = file_ident(self.db_path)
        if ident is None:
            why = folder_problem(os.path.dirname(self.db_path))
            if why is not None:
                raise not_writable(self.db_path, why, lead="nothing is indexed yet (run `memory-core index`), but the ")
            return
        if ident == self._readable_ident or ident == self.meta_reader.ident:
            # this file opened fine before (a damaged page found later still raises IndexCorrupt),
            # here or on the owner's read-only connection, which has it open
            self._readable_ident = ident
            return
        try:
            # through the owner's read-only connection (kept open, reused by the identity reads), not
            # one more open of the file; it raises IndexCorrupt when the file is no readable database
            self.meta_reader.run(lambda conn: None)
        except FileNotFoundError:
            return
        self._readable_ident = ident
