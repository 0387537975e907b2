"""``MemoryCore``: the owner of one agent's index; its verbs match the CLI.

Every surface (CLI, library, gateway v1 and v2, ``memory.get``, MCP, ``watch``) goes through this
object, and it owns everything with state: the configuration, the embedding provider, the single
:class:`IndexWriter`, the freshness scheduler, the search engine (and its pooled retriever) and a
read-only connection for identity reads. Nothing else attaches state to it.

One writer: every write runs on the writer's one connection under the writer's lock
(``IndexWriter._wlock``), reads never use it. A lock rather than a writer thread because the
writes already come from few places (the freshness thread, a CLI run, ``forget``) and each must
report its own error to its caller; a thread would add a queue and a second error path for the
same serialisation. ``sync`` runs one pass at a time (concurrent callers join the running one); a
full reindex (``--force``, first index, or an identity change on a CLI ``index`` run) builds a
temp database and swaps it in.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import apsw

from memory_core.config import MemoryCoreConfig, load_config
from memory_core.errors import (
    IndexCorrupt,
    IndexPaused,
    MemoryCoreError,
    ReferenceNotFound,
    WorkspaceError,
    reason_of,
)
from memory_core.indexer import (
    IndexSummary,
    ProgressFn,
    record_last_sync,
    resolve_sessions_dir,
    run_sync,
)
from memory_core.store import schema
from memory_core.store.access import folder_problem, index_errors, not_writable
from memory_core.store.identity import identity_mismatch, index_identity
from memory_core.store.perms import loose_files, tighten
from memory_core.store.reindex import atomic_reindex, reindex_lock, set_aside, sweep_dead_temp_files
from memory_core.store.workspace import WORKSPACE_KEY, check_workspace, record_workspace
from memory_core.store.writer import FTS_ONLY_MODEL, LAST_SYNC_KEY, IndexWriter
from memory_core.search.types import SearchResults
from memory_core.session_keys import session_index_path
from memory_core.validation import check_search

_UNSET: Any = object()


class MemoryCore:
    """One agent's memory index: ``index``, ``sync``, ``status``, ``forget_session``, ``close``."""

    def __init__(
        self,
        workspace: str | None = None,
        *,
        agent_id: str | None = None,
        config: MemoryCoreConfig | None = None,
        config_path: str | None = None,
        embedding_provider: Any = _UNSET,
        pool: bool | None = None,
        repoint: bool = False,
    ) -> None:
        # agent_id None: the configuration's agentId (default "main"); a given one wins over it
        # pool: the one switch for the worker pools (None: config ``pool.workers``; False: in-process)
        # repoint: accept a workspace other than the one the index records (``index --repoint``)
        cfg = config if config is not None else load_config(config_path)
        if agent_id and agent_id != cfg.agent_id:
            cfg = cfg.for_agent(agent_id)
        if pool is False and cfg.pool.workers != 0:
            cfg = cfg.model_copy(update={"pool": cfg.pool.model_copy(update={"workers": 0})})
        ws = workspace or cfg.workspace or os.getcwd()
        ws = os.path.abspath(os.path.expanduser(ws))
        if not os.path.isdir(ws):
            raise WorkspaceError(
                f"workspace {ws} does not exist or is not a folder; pass --workspace PATH "
                "(or set `workspace` in the config)"
            )
        if cfg.workspace != ws:
            cfg = cfg.model_copy(update={"workspace": ws})
        self.config = cfg
        self.workspace = ws
        self.agent_id = cfg.agent_id
        self.db_path = cfg.db_path(self.agent_id)
        self.repoint = repoint
        self._provider = embedding_provider
        self._provider_error: MemoryCoreError | None = None
        self._writer: IndexWriter | None = None
        self._lock = threading.RLock()  # guards the writer slot, the owned parts and the running-sync slot
        self._running: Future[IndexSummary] | None = None
        self._closed = False
        self._readable_ident: tuple[int, int] | None = None  # the file check_readable last opened
        self._freshness: Any = None
        self._engine: Any = None
        self._fallback_engine: Any = None
        self._retriever: Any = _UNSET
        self._cursor_pins: Any = None
        self._identity_memo: tuple[Any, ...] | None = None  # identity_state's last comparison
        from memory_core.store.reader import CachedReader

        self._meta_reader = CachedReader(self.db_path, load_vec=False)  # identity reads, never the writer's
        self._check_workspace()

    # ------------------------------------------------------------------ provider and writer
    @property
    def provider(self) -> Any | None:
        """The embedding provider (None = keyword-only); an unavailable explicit one raises (D4)."""
        if self._provider is _UNSET:
            from memory_core.embeddings import create_embedding_provider

            self._provider = create_embedding_provider(self.config)
        return self._provider

    def _writer_options(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "fts_tokenizer": cfg.store.fts.tokenizer,
            "vector_enabled": cfg.store.vector.enabled and cfg.provider != "none",
            "extension_path": cfg.store.vector.extension_path,
            "cache_enabled": cfg.cache.enabled,
            "cache_max_entries": cfg.cache.max_entries,
        }

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def dirty(self) -> bool:
        """Whether freshness knows of changes the index does not hold yet (watcher, session deltas)."""
        fresh = self._freshness
        return fresh is not None and fresh.is_dirty()

    def _check_open(self) -> None:
        if self._closed:
            raise MemoryCoreError("this MemoryCore is closed; open a new one (MemoryCore(...)) to use the index")

    @property
    def writer(self) -> IndexWriter:
        with self._lock:
            self._check_open()
            if self._writer is None:
                self._writer = self._open_writer()
            return self._writer

    def _open_writer(self) -> IndexWriter:
        # any writer start removes what killed rebuilds left behind (their process is gone)
        sweep_dead_temp_files(self.db_path)
        writer = IndexWriter(self.db_path, **self._writer_options())
        writer.on_reopen = self._index_replaced
        return writer

    def _index_replaced(self) -> None:
        """The writer found the file replaced by another process (its ``index --force``): what this
        process published to the old file may be missing, so freshness re-checks every file."""
        fresh = self._freshness
        if fresh is not None:
            fresh.invalidate("the index file was replaced by another process")

    def notice_swap(self) -> None:
        """Cheap (one stat): reopen the writer now when another process swapped the file."""
        writer = self._writer
        if writer is not None and writer.replaced():
            writer.check_swapped()

    def _close_writer(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def close(self) -> None:
        for engine in (self._engine, self._fallback_engine):  # the search reader connections
            if engine is not None:
                engine.close()
        fresh = self._freshness
        if fresh is not None:  # stop the watcher and wait for a running sync before closing the writer
            fresh.close()
        self._meta_reader.close()
        with self._lock:
            self._close_writer()
            self._closed = True

    def __enter__(self) -> MemoryCore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ identity
    def _check_workspace(self) -> None:
        """Refuse an index built from another workspace (:class:`WorkspaceMismatch`) unless ``repoint``."""
        if self.repoint or not os.path.exists(self.db_path):
            return
        try:
            recorded = self.read_meta_value(WORKSPACE_KEY)
        except (MemoryCoreError, apsw.Error, OSError):
            return  # an unreadable index is reported by the command that uses it
        check_workspace(recorded, self.workspace, self.agent_id)

    def expected_identity(self, dims: int | None = None) -> dict[str, Any]:
        ident = index_identity(self.config, self.provider)
        if dims is not None:
            ident["vectorDims"] = dims
        return ident

    def read_meta_value(self, key: str) -> str | None:
        """One ``memory_index_meta`` value through the owner's read-only connection (never the
        writer's: a read must not race the writer's reopen after a swap); None when absent."""

        def read(conn: apsw.Connection) -> str | None:
            try:
                row = conn.execute("SELECT value FROM memory_index_meta WHERE key = ?", (key,)).fetchone()
            except apsw.SQLError:
                return None  # schema not created yet
            return None if row is None else str(row[0])

        try:
            return self._meta_reader.run(read)
        except FileNotFoundError:
            return None

    def identity_state(self) -> dict[str, Any]:
        """``{"state": "empty"|"ok"|"mismatch", "mismatch": [keys]}`` for the stored index meta."""
        with index_errors(self.db_path):
            raw = self.read_meta_value(schema.META_KEY)
        # every search asks (freshness and the engine): the comparison is kept while the stored meta,
        # the config and the provider (and its dims, which some learn late) are the same
        provider = self._provider
        key = (raw, getattr(provider, "dims", None))
        memo = self._identity_memo
        if memo is not None and memo[0] == key and memo[1] is self.config and memo[2] is provider:
            state, diff = memo[3]
            return {"state": state, "mismatch": list(diff)}
        meta = _loads(raw)
        if not isinstance(meta, dict):
            return {"state": "empty", "mismatch": []}
        diff = identity_mismatch(meta, self.expected_identity())
        state = "mismatch" if diff else "ok"
        if self._provider is provider:  # expected_identity may have created the provider just now
            self._identity_memo = (key, self.config, provider, (state, tuple(diff)))
        return {"state": state, "mismatch": diff}

    def check_identity(self) -> dict[str, Any]:
        """Raise :class:`IndexPaused` when the index was built with other settings (spec §6.1 step 7)."""
        state = self.identity_state()
        if state["state"] == "mismatch":
            raise IndexPaused(
                "memory search paused: the index was built with different settings "
                f"({', '.join(state['mismatch'])} changed); run `memory-core index --force`"
            )
        return state

    def _assert_no_downgrade(self, meta: dict | None, provider: Any | None) -> None:
        """Never rebuild a semantic index as keyword-only without an explicit --force (spec §7.4)."""
        if provider is not None or meta is None:
            return
        if meta.get("provider", "none") != "none" or meta.get("model", FTS_ONLY_MODEL) != FTS_ONLY_MODEL:
            raise IndexPaused(
                f"refusing to rebuild the semantic index ({meta.get('provider')}/{meta.get('model')}) as "
                "keyword-only: no embedding provider is configured now. Configure the provider again, or run "
                "`memory-core index --force` to rebuild keyword-only and drop the vectors"
            )

    # ------------------------------------------------------------------ sync
    def index(self, *, force: bool = False, progress: ProgressFn | None = None) -> IndexSummary:
        """The CLI ``index`` verb: incremental, or a full atomic rebuild on force / first run / identity change.

        ``force`` also repairs an index file that is not a readable database (:class:`IndexCorrupt`):
        the file is moved aside (``IndexSummary.moved_aside``) and the index rebuilt from scratch.
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

    def _run_exclusive(self, **kw: Any) -> IndexSummary:
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
            with self._lock:
                self._running = None

    def _do_sync(self, *, reason: str, force: bool, paths: Sequence[str] | None,
                 progress: ProgressFn | None, rebuild_on_mismatch: bool, repair: bool) -> IndexSummary:
        provider = self.provider
        if force and repair:  # a full rebuild that does not need the live index to be readable
            return self._full_reindex(reason=reason, provider=provider, progress=progress, repair=True)
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
                raise IndexPaused(
                    "memory index paused: the index was built with different settings "
                    f"({', '.join(mismatch)} changed); run `memory-core index --force`"
                )
            full = True
        else:
            full = False
        if full and not force:
            self._assert_no_downgrade(meta, provider)
        if full and meta is None and not force and writer.counts()["files"] == 0:
            return self._first_index(writer, reason=reason, provider=provider, progress=progress)
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
            record_workspace(writer, self.workspace)
            record_last_sync(writer, summary)
            return summary
        return self._full_reindex(reason=reason, provider=provider, progress=progress)

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
        dims = writer.vec_dims
        if dims is None and provider is not None:
            dims = getattr(provider, "dims", None)
        writer.write_meta(self.expected_identity(dims=dims) if provider is not None
                          else index_identity(self.config, None))
        record_workspace(writer, self.workspace)
        summary.full = True  # every file was read: the same summary as a rebuild's
        record_last_sync(writer, summary)
        summary.revision = writer.revision
        return summary

    def _full_reindex(self, *, reason: str, provider: Any | None, progress: ProgressFn | None,
                      repair: bool = False) -> IndexSummary:
        moved_aside = None
        try:
            with index_errors(self.db_path):
                if repair and self._writer is None:
                    self._probe_readonly()  # before a read-write open touches the file or its -wal/-shm
                live = self.writer
                previous = {s: live.indexed_hashes(s) for s in self.config.sources}
        except IndexCorrupt:
            if not repair:
                raise
            moved_aside = self._set_aside_unreadable()
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
            dims = temp.vec_dims
            if dims is None and provider is not None:
                dims = getattr(provider, "dims", None)
            temp.write_meta(self.expected_identity(dims=dims) if provider is not None
                            else index_identity(self.config, None))
            record_workspace(temp, self.workspace)
            record_last_sync(temp, summary)
            return summary

        def reopen() -> None:
            self._writer = self._open_writer()

        try:
            summary = atomic_reindex(self.db_path, build, writer_options=self._writer_options(),
                                     before_swap=self._close_writer, after_swap=reopen)
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

    def _probe_readonly(self) -> None:
        """Read what a rebuild reads from the live index (meta, source rows) on a read-only connection;
        raises what reading an unreadable file raises."""
        from host_facades.sqlite_read import open_readonly

        try:
            conn = open_readonly(self.db_path, load_vec=False)
        except FileNotFoundError:
            return
        try:
            for sql in ("SELECT key, value FROM memory_index_meta", "SELECT path, source, hash FROM memory_index_sources"):
                with contextlib.suppress(apsw.SQLError):  # a table not created yet
                    for _row in conn.execute(sql):
                        pass
        finally:
            conn.close()

    def _set_aside_unreadable(self) -> str:
        """Move the unreadable index file (and its -wal/-shm) aside for a rebuild from scratch."""
        with self._lock:
            self._close_writer()
        for engine in (self._engine, self._fallback_engine):
            if engine is not None:
                engine.close()  # its cached reader must not keep the old file open
        self._meta_reader.close()
        with reindex_lock(self.db_path):
            return set_aside(self.db_path)

    # ------------------------------------------------------------------ forget
    def forget_session(self, key: str, *, force: bool = False) -> int:
        """Tombstone a session transcript (``sessions/<file>.jsonl`` or its basename) and drop its rows.

        A memory file is refused (:class:`ForgetRefused`): its entries are removed by editing the file.
        A key that names nothing indexed, no tombstone and no transcript on disk is most likely a
        typo: :class:`ReferenceNotFound`, and no tombstone, unless ``force`` (forget it in advance)."""
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
        if self._freshness is not None:
            self._freshness.forget_path(path)  # stop tracking the transcript's appends
        return removed

    # ------------------------------------------------------------------ freshness (memory_core/freshness/)
    @property
    def freshness(self) -> Any:
        """The per-agent sync scheduler, created on first use; :meth:`serve_freshness` starts the
        watcher, interval and startup catch-up (``serve``/``mcp``/``watch``)."""
        with self._lock:
            if self._freshness is None:
                from memory_core.freshness import Freshness

                self._freshness = Freshness.for_core(self)
            return self._freshness

    def serve_freshness(self, settings: Any = None, **overrides: Any) -> Any:
        """Keep this index fresh while serving: the scheduler thread, the watcher (``sync.watch``),
        the interval and the startup catch-up. ``settings``/``overrides``: a
        :class:`~memory_core.freshness.FreshnessSettings` or its fields (replacing the config's)."""
        with self._lock:
            if self._freshness is None or settings is not None or overrides:
                from memory_core.freshness import Freshness, FreshnessSettings

                if self._freshness is not None:
                    self._freshness.close()
                settings = settings or FreshnessSettings.from_config(self.config, **overrides)
                self._freshness = Freshness.for_core(self, settings)
            fresh = self._freshness
        return fresh.start()

    def before_search(self) -> dict[str, Any] | None:
        """Run before every search: notice a file swapped by another process, the bounded reconcile,
        bootstrap an empty index, background sync when dirty. Returns upstream's ``{stale, warning,
        action}`` or None (each search hands it back with its own result).

        An index file that cannot be read raises :class:`IndexCorrupt`/:class:`IndexUnreadable` first;
        with no index yet and a state dir that cannot be written, :class:`StateDirNotWritable`."""
        self.check_readable()
        self.notice_swap()
        return self.freshness.before_search()

    def answer_staleness(self, stale: dict[str, Any] | None, query: str, hits: Sequence[Any]) -> dict[str, Any] | None:
        """One answer's staleness from the index's (``stale``, from :meth:`before_search`): stale only
        when a hit's file or a file holding a query term is behind (memory_core/freshness/report.py)."""
        fresh = self._freshness
        if stale is None or fresh is None:
            return stale
        return fresh.answer_staleness(stale, query, [h.path for h in hits])

    @property
    def reader(self) -> Any:
        """The owner's read-only :class:`~memory_core.store.reader.CachedReader` (identity and point
        reads; reopened after a file swap). Never the writer's connection."""
        return self._meta_reader

    @property
    def last_sync_error(self) -> str | None:
        """Why the last background sync failed, or which files it could not publish (retried); None
        when it worked or nothing runs in the background."""
        fresh = self._freshness
        if fresh is None:
            return None
        if fresh.last_sync_error:
            return fresh.last_sync_error
        problems = fresh.snapshot()["problems"]
        return f"{len(problems)} file(s) could not be indexed (retrying)" if problems else None

    @property
    def retriever(self) -> Any:
        """The pooled retriever of this index (None: searches read in-process, ``pool.workers = 0``)."""
        with self._lock:
            if self._retriever is _UNSET:
                from workers.shared import make_retriever

                self._retriever = make_retriever(self.config, self.db_path)
            return self._retriever

    @property
    def cursor_pins(self) -> Any:
        """Pagination-cursor pins sharing the retriever's generation leases (TTL ``pool.cursor_ttl_s``)."""
        with self._lock:
            if self._cursor_pins is None:
                from memory_core.generations import CursorPins, GenerationLeases

                retriever = self.retriever
                leases = retriever.leases if retriever is not None else GenerationLeases()
                self._cursor_pins = CursorPins(leases, ttl_s=self.config.pool.cursor_ttl_s)
            return self._cursor_pins

    @property
    def search_engine(self) -> Any:
        """The one :class:`~memory_core.search.engine.SearchEngine` of this index (created once): its
        identity check reads through the owner, its snapshot reads go through :attr:`retriever`."""
        with self._lock:
            if self._engine is None:
                from memory_core.search.engine import SearchEngine

                try:
                    provider = self.provider
                except MemoryCoreError:
                    provider = None  # the engine fails closed for a configured provider that is missing
                self._engine = SearchEngine(self.config, self.db_path, provider,
                                            identity_check=self._identity_mismatch, retriever=self.retriever)
            return self._engine

    @property
    def fallback_engine(self) -> Any:
        """A keyword-only, in-process engine of this index for a deadline's fallback answer: it never
        waits on :attr:`search_engine`, which the late search may hold."""
        with self._lock:
            if self._fallback_engine is None:
                from memory_core.search.engine import SearchEngine

                self._fallback_engine = SearchEngine(self.config, self.db_path, None,
                                                     identity_check=self._identity_mismatch)
            return self._fallback_engine

    def _identity_mismatch(self) -> list[str] | None:
        ident = self.identity_state()
        return ident["mismatch"] if ident["state"] == "mismatch" else None

    def search_with_details(self, query: str, **kwargs: Any) -> Any:
        """:meth:`before_search` then the engine's detailed search (the provider runtime's v2
        search): its :class:`~memory_core.search.engine.SearchDetails`, with the search's ``staleness``."""
        self._check_open()
        with index_errors(self.db_path):
            stale = self.before_search() if isinstance(query, str) and query.strip() else None
            details = self.search_engine.search_with_details(query, **kwargs)
            details.staleness = self.answer_staleness(stale, query, details.hits)
            return details

    def check_readable(self) -> None:
        """Raise the typed error when the index cannot be searched at all: the file is no readable
        database, or there is none and none can be built (the state dir is not writable)."""
        from host_facades.sqlite_read import open_readonly
        from memory_core.store.reader import file_ident

        ident = file_ident(self.db_path)
        if ident is None:
            why = folder_problem(os.path.dirname(self.db_path))
            if why is not None:
                raise not_writable(self.db_path, why, lead="nothing is indexed yet (run `memory-core index`), but the ")
            return
        if ident == self._readable_ident:
            return  # this file opened fine before (a damaged page found later still raises IndexCorrupt)
        with index_errors(self.db_path):
            try:
                open_readonly(self.db_path, load_vec=False).close()
            except FileNotFoundError:
                return
        self._readable_ident = ident

    # ------------------------------------------------------------------ search / get (memory_core/search/)
    def search(self, query: str, *, max_results: int | None = None, min_score: float | None = None,
               sources: Sequence[str] | None = None, lexical_only: bool = False,
               active_project_keys: Sequence[str] | None = None, query_vector: Any = None) -> SearchResults:
        """Search the index (spec §6): runs ``before_search`` (bootstrap/dirty sync), then the
        SearchEngine. The hits come back as a list that also carries this search's ``staleness``."""
        self._check_open()
        check_search(self.config, query, max_results, min_score)  # before any sync or search work
        with index_errors(self.db_path):
            stale = None
            if isinstance(query, str) and query.strip():  # the engine rejects a query that is no string
                stale = self.before_search()
            hits = self.search_engine.search(
                query, max_results=max_results, min_score=min_score, sources=sources, lexical_only=lexical_only,
                active_project_keys=active_project_keys, query_vector=query_vector)
            return SearchResults(hits, self.answer_staleness(stale, query, hits))

    def explain(self, query: str, *, max_results: int | None = None, min_score: float | None = None,
                sources: Sequence[str] | None = None, lexical_only: bool = False,
                active_project_keys: Sequence[str] | None = None, query_vector: Any = None) -> Any:
        """The explain twin of :meth:`search` (same arguments, same search): its
        :class:`~memory_core.search.engine.SearchDetails`, with the hits, the FTS plan, the candidates
        per retriever, each candidate's score parts and the search's ``staleness``; ``.to_dict()`` is
        what ``memory-core search --explain --json`` prints."""
        self._check_open()
        check_search(self.config, query, max_results, min_score)  # before any sync or search work
        with index_errors(self.db_path):
            stale = self.before_search() if isinstance(query, str) and query.strip() else None
            details = self.search_engine.explain(
                query, max_results=max_results, min_score=min_score, sources=sources, lexical_only=lexical_only,
                active_project_keys=active_project_keys, query_vector=query_vector)
            details.staleness = self.answer_staleness(stale, query, details.hits)
            return details

    def get(self, path: str, *, from_: int | None = None, lines: int | None = None,
            max_chars: int | None = None) -> Any:
        """Read lines of an indexed memory file (spec §9.2); returns a ``ReadResult``."""
        from memory_core.read_file import read_memory_file
        from memory_core.store.files import is_indexed_session

        self._check_open()
        cfg = self.config
        with index_errors(self.db_path):
            sessions_dir = resolve_sessions_dir(cfg, self.workspace) if "sessions" in cfg.sources else None
            return read_memory_file(
                self.workspace, path, from_=from_, lines=lines, extra_paths=list(cfg.extra_paths),
                max_chars=max_chars, sessions_dir=sessions_dir,
                is_indexed_session=lambda p: is_indexed_session(self.db_path, p))

    def files(self, *, sources: Sequence[str] | None = None) -> list[Any]:
        """The indexed files (``memory-core files``): a list of ``IndexedFile``, by source then path."""
        from memory_core.store.files import list_indexed_files

        self._check_open()
        with index_errors(self.db_path):
            return list_indexed_files(self.db_path, list(sources) if sources else None)

    # ------------------------------------------------------------------ status
    def _dirty_for_status(self) -> bool:
        """Whether the index is behind its files. Without a running watcher (a one-shot CLI
        process) only a reconcile can tell: it stats the sources and marks what changed, without
        starting a sync (transcripts are compared by stat here, not by the delta thresholds)."""
        fresh = self.freshness
        if os.path.exists(self.db_path) and not fresh.watching():
            fresh.reconcile(sessions_by_delta=False, reason="status", strict=True)
        return fresh.is_dirty()

    def status(self, *, deep: bool = False) -> dict[str, Any]:
        """Index facts for ``memory-core status`` (no secrets); :class:`IndexCorrupt` when the file
        is not a readable database."""
        self._check_open()
        with index_errors(self.db_path):
            return self._status(deep=deep)

    def _status(self, *, deep: bool) -> dict[str, Any]:
        cfg = self.config
        out: dict[str, Any] = {
            "agent": self.agent_id,
            "workspace": self.workspace,
            "db_path": self.db_path,
            "db_exists": os.path.exists(self.db_path),
            "sources": list(cfg.sources),
            "extra_paths": [p if isinstance(p, str) else p.model_dump(exclude_none=True) for p in cfg.extra_paths],
            "sessions_dir": resolve_sessions_dir(cfg, self.workspace) if "sessions" in cfg.sources else None,
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
            "dirty": self._dirty_for_status(),
            "last_sync": None,
            "identity": None,
            "state_dir_problem": folder_problem(os.path.dirname(self.db_path)),
            # index paths other users can read (`index` makes them private)
            "loose_permissions": loose_files(self.db_path, state_dir_owned=not cfg.store.path),
        }
        if out["db_exists"]:
            out["db_bytes"] = os.path.getsize(self.db_path)
            wal = self.db_path + "-wal"
            out["wal_bytes"] = os.path.getsize(wal) if os.path.exists(wal) else 0
            self._status_from_db(out, deep=deep)
        try:
            out["identity"] = self.identity_state()
        except MemoryCoreError as exc:
            out["identity"] = {"state": "unknown", "error": exc.message}
        if deep:
            out["provider_check"] = self._provider_check()
        fresh = self._freshness
        if fresh is not None:
            out["freshness"] = fresh.status()
            out["dirty"] = bool(out["dirty"] or out["freshness"]["dirty"])
            out["problems"] = out["freshness"]["problems"]
        return out

    def _status_from_db(self, out: dict[str, Any], *, deep: bool) -> None:
        from host_facades.sqlite_ext import load_sqlite_vec
        from host_facades.sqlite_read import CORRUPT_ERRORS, open_readonly

        try:
            conn = open_readonly(self.db_path, load_vec=False)
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
            meta = _loads(meta_rows.get(schema.META_KEY))
            if meta:
                out["model"] = meta.get("model")
                out["dims"] = meta.get("vectorDims")
                out["indexed_provider"] = meta.get("provider")
            out["last_sync"] = _loads(meta_rows.get(LAST_SYNC_KEY))
            out["vector"]["rebuild_required"] = meta_rows.get(schema.VECTOR_REBUILD_KEY) == "1"
            tok = schema.fts_tokenizer_in_db(conn)
            out["fts"]["available"] = tok is not None
            if tok is not None:
                out["fts"]["tokenizer"] = tok
            if out["vector"]["enabled"]:
                ok, version, error = load_sqlite_vec(conn, self.config.store.vector.extension_path)
                out["vector"].update(available=ok, sqlite_vec_version=version, error=error)
                out["vector"]["dims"] = schema.vec_table_dims(conn)
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
            out["error"] = f"cannot read {self.db_path}: {exc}"
        finally:
            conn.close()

    def _provider_check(self) -> dict[str, Any]:
        try:
            provider = self.provider
        except MemoryCoreError as exc:
            return {"available": False, "error": exc.message}
        if provider is None:  # nothing to check, and nothing to call available: search is keyword-only
            reason = f"no embedding provider (provider = {self.config.provider!r}); search is keyword-only"
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


def _loads(value: str | None) -> Any:
    if not value:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return None
