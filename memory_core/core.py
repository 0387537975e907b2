"""``MemoryCore``: one agent's index as a thin set of verbs that match the CLI.

Every surface (CLI, library, gateway v1 and v2, ``memory.get``, MCP, ``watch``) goes through this
object. It delegates: writes, syncs, ``forget`` and the identity checks to the index owner
(``memory_core/index_owner.py``: the one writer), searches to the search service
(``memory_core/search/service.py``: the retriever and the engine), ``status`` to the status reader
(``memory_core/status.py``), and keeps the freshness scheduler (``memory_core/freshness/``), which
calls back into its verbs.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from memory_core.config import MemoryCoreConfig, load_config
from memory_core.errors import WorkspaceError
from memory_core.index_owner import UNSET, IndexOwner, config_problem
from memory_core.indexer import IndexSummary, ProgressFn, resolve_sessions_dir
from memory_core.search.service import SearchService
from memory_core.search.types import SearchResults
from memory_core.store.access import index_errors
from memory_core.store.writer import IndexWriter
from memory_core.validation import check_search


class MemoryCore:
    """One agent's memory index: ``index``, ``sync``, ``search``, ``get``, ``status``, ``forget_session``."""

    def __init__(
        self,
        workspace: str | None = None,
        *,
        agent_id: str | None = None,
        config: MemoryCoreConfig | None = None,
        config_path: str | None = None,
        embedding_provider: Any = UNSET,
        pool: bool | None = None,
        repoint: bool = False,
        check_config: bool = True,
        prefetch: bool = False,
        first_search: tuple | None = None,
    ) -> None:
        # agent_id None: the configuration's agentId (default "main"); a given one wins over it
        # pool: the one switch for the worker pools (None: config ``pool.workers``; False: in-process)
        # repoint: accept a workspace other than the one the index records (``index --repoint``)
        # check_config: raise a configuration error (an unknown provider) now; False keeps it for
        # ``config_error`` (``status`` reports it beside what the index holds)
        # prefetch: read what opening needs in a retrieval worker (a server's agents; see below);
        # first_search: (query, max_results, min_score) of the request opening it, answered by the
        # same worker task (SearchService.read_open_state)
        cfg = config if config is not None else load_config(config_path)
        if agent_id and agent_id != cfg.agent_id:
            cfg = cfg.for_agent(agent_id)
        if pool is False and cfg.pool.workers != 0:
            cfg = cfg.model_copy(update={"pool": cfg.pool.model_copy(update={"workers": 0})})
        ws = os.path.abspath(os.path.expanduser(workspace or cfg.workspace or os.getcwd()))
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
        # the configuration error every command reports (exit 2), or None (``index_owner.config_problem``)
        self.config_error = config_problem(cfg, embedding_provider)
        if check_config and self.config_error is not None:
            raise self.config_error
        self._lock = threading.RLock()  # guards the freshness slot
        self._freshness: Any = None
        self._search = SearchService(cfg, self.db_path, provider=lambda: self.provider,
                                     identity_mismatch=lambda: self._owner.identity_mismatch())
        # prefetch (a server opening the agent): the open-time reads (workspace, identity, the rows of
        # the startup catch-up) run in a retrieval worker, which keeps the connection for the search
        # that follows; this process then opens no connection for an agent whose index is current
        self._owner = IndexOwner(cfg, ws, self.db_path, embedding_provider=embedding_provider, repoint=repoint,
                                 on_replaced=self._index_replaced, close_readers=self._search.close,
                                 check_workspace=not prefetch)
        if prefetch:
            self._owner.open_with(self._search.read_open_state(first_search))

    # ------------------------------------------------------------------ the parts it delegates to
    @property
    def provider(self) -> Any | None:
        """The embedding provider (None = keyword-only); an unavailable explicit one raises."""
        return self._owner.provider

    @property
    def writer(self) -> IndexWriter:
        """The one writer (``IndexOwner.writer``)."""
        return self._owner.writer

    @property
    def reader(self) -> Any:
        """The owner's read-only :class:`~memory_core.store.reader.CachedReader` (identity and point
        reads; reopened after a file swap). Never the writer's connection."""
        return self._owner.meta_reader

    @property
    def retriever(self) -> Any:
        """The pooled retriever of this index (None: searches read in-process, ``pool.workers = 0``)."""
        return self._search.retriever

    @property
    def search_engine(self) -> Any:
        """The one :class:`~memory_core.search.engine.SearchEngine` of this index."""
        return self._search.engine

    @property
    def closed(self) -> bool:
        return self._owner.closed

    @property
    def dirty(self) -> bool:
        """Whether freshness knows of changes the index does not hold yet (watcher, session deltas)."""
        fresh = self._freshness
        return fresh is not None and fresh.is_dirty()

    def _check_open(self) -> None:
        self._owner.check_open()

    def catch_up_rows(self, read: Callable[[], list]) -> tuple[list, list, list]:
        """A reconcile's index rows (``IndexOwner.catch_up_rows``: kept while the file is unchanged)."""
        return self._owner.catch_up_rows(read)

    def _index_replaced(self) -> None:
        """The writer found the file replaced by another process (its ``index --force``): what this
        process published to the old file may be missing, so freshness re-checks every file."""
        fresh = self._freshness
        if fresh is not None:
            fresh.invalidate("the index file was replaced by another process")

    def close(self) -> None:
        self._search.close()  # the search reader connections
        fresh = self._freshness
        if fresh is not None:  # stop the watcher and wait for a running sync before closing the writer
            fresh.close()
        self._owner.close()

    def __enter__(self) -> MemoryCore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def identity_state(self) -> dict[str, Any]:
        """``{"state": "empty"|"ok"|"mismatch", "mismatch": [keys]}`` for the stored index meta."""
        return self._owner.identity_state()

    def check_identity(self) -> dict[str, Any]:
        """Raise :class:`~memory_core.errors.IndexPaused` when the index was built with other settings."""
        return self._owner.check_identity()

    # ------------------------------------------------------------------ index, sync, forget
    def index(self, *, force: bool = False, progress: ProgressFn | None = None) -> IndexSummary:
        """The CLI ``index`` verb: incremental, or a full atomic rebuild on force / first run / identity
        change (``IndexOwner.index``; ``force`` also repairs an unreadable index file)."""
        return self._owner.index(force=force, progress=progress)

    def sync(self, *, reason: str = "manual", force: bool = False, paths: Sequence[str] | None = None,
             progress: ProgressFn | None = None) -> IndexSummary:
        """Incremental sync (one at a time; a concurrent caller waits for and returns the running one).
        An identity mismatch raises IndexPaused unless ``force``; ``paths`` restricts to those files."""
        return self._owner.sync(reason=reason, force=force, paths=paths, progress=progress)

    def import_embeddings(self, path: str) -> Any:
        """The CLI ``import-embeddings`` verb: seed the embedding cache from an OpenClaw index at
        ``path`` (same provider and model, matched by chunk hash; ``memory_core/store/openclaw_import.py``)."""
        return self._owner.import_embeddings(path)

    def forget_session(self, key: str, *, force: bool = False) -> int:
        """Tombstone a session transcript and drop its rows (``IndexOwner.forget_session``): the
        number of chunks removed."""
        path, removed = self._owner.forget_session(key, force=force)
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
        action}`` or None (each search hands it back with its own result). An unreadable index file
        raises first (``IndexOwner.check_readable``)."""
        self._owner.check_readable()
        self._owner.notice_swap()
        return self.freshness.before_search()

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

    # ------------------------------------------------------------------ search, get, files, status
    def search(self, query: str, *, max_results: int | None = None, min_score: float | None = None,
               sources: Sequence[str] | None = None, lexical_only: bool = False,
               active_project_keys: Sequence[str] | None = None, query_vector: Any = None,
               details: bool = False, candidates_for: int | None = None, on_embedding: Any = None,
               sync_if_empty: bool = False, keyword_fallback: bool = False) -> SearchResults:
        """The one search verb of every surface: :meth:`before_search`, then the engine (it validates
        the limits and embeds the query; ``on_embedding``: ``SearchEngine.search``). The
        :class:`SearchResults` carry the hits, the revision, this search's ``staleness`` and, with
        ``details``, what ``--explain`` shows. ``sync_if_empty``: no hits run one sync and the search
        again (upstream's tool). ``keyword_fallback``: a deadline's answer, keyword-only on an
        in-process engine that never waits on a search in flight, without the freshness step."""
        self._check_open()
        check_search(self.config, query, max_results, min_score)  # before any sync or search work
        return self._search.search(
            query, before_search=self.before_search, answer_staleness=lambda stale, q, hits: answer_staleness(self._freshness, stale, q, hits),
            sync=lambda: self.sync(reason="search"),
            sync_if_empty=sync_if_empty, keyword_fallback=keyword_fallback, max_results=max_results,
            min_score=min_score, sources=sources, lexical_only=lexical_only, active_project_keys=active_project_keys,
            query_vector=query_vector, details=details, candidates_for=candidates_for, on_embedding=on_embedding)

    def searches_on_loop(self) -> bool:
        """Whether :meth:`search_async` may run on an event loop now: the search is keyword-only (no
        provider: no query to embed), its one worker task goes to a worker pool (the loop awaits the reply) and
        the freshness step only reads state (:meth:`Freshness.before_search_is_cheap`). Otherwise a
        caller on a loop runs :meth:`search` in a thread."""
        fresh = self._freshness
        if fresh is None or self.closed or self.config.provider != "none":
            return False
        pool = getattr(self.retriever, "pool", None)
        return callable(getattr(pool, "run_async", None)) and fresh.before_search_is_cheap()

    async def search_async(self, query: str, *, max_results: int | None = None,
                           min_score: float | None = None) -> SearchResults:
        """:meth:`search` on the running event loop, which awaits the search's worker task instead of
        a thread waiting for it (the owner's steps before and after it run on the loop); only while
        :meth:`searches_on_loop` holds."""
        from workers.steps import drive_async

        return await drive_async(self.search_steps(query, max_results=max_results, min_score=min_score),
                                 self.retriever.pool)

    def search_steps(self, query: str, *, max_results: int | None = None, min_score: float | None = None,
                     **kwargs: Any) -> Any:
        """:meth:`search` (without ``sync_if_empty`` and ``keyword_fallback``) as steps
        (``workers/steps.py``): a pooled search yields its one worker task."""
        self._check_open()
        check_search(self.config, query, max_results, min_score)
        return (yield from self._search.search_steps(
            query, self.before_search,
            lambda stale, q, hits: answer_staleness(self._freshness, stale, q, hits),
            {"max_results": max_results, "min_score": min_score, **kwargs}))

    def explain(self, query: str, **kwargs: Any) -> Any:
        """:meth:`search` with ``details`` on (same arguments): its
        :class:`~memory_core.search.engine.SearchDetails`; ``.to_dict()`` is what ``memory-core search
        --explain --json`` prints."""
        return self.search(query, details=True, **kwargs).details

    def get(self, path: str, *, from_: int | None = None, lines: int | None = None,
            max_chars: int | None = None) -> Any:
        """Read lines of an indexed memory file (``memory_core/read_file.py``); returns a ``ReadResult``."""
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

    def status(self, *, deep: bool = False) -> dict[str, Any]:
        """Index facts for ``memory-core status`` (no secrets; ``memory_core/status.py``):
        :class:`~memory_core.errors.IndexCorrupt` when the file is not a readable database."""
        from memory_core.status import index_status

        self._check_open()
        with index_errors(self.db_path):
            return index_status(self, deep=deep)


def answer_staleness(fresh: Any, stale: dict[str, Any] | None, query: str, hits: Sequence[Any]) -> dict[str, Any] | None:
    """One answer's staleness from the index's (``stale``, from ``MemoryCore.before_search``): stale
    only when a hit's file or a file holding a query term is behind (memory_core/freshness/report.py)."""
    if stale is None or fresh is None:
        return stale
    return fresh.answer_staleness(stale, query, [h.path for h in hits])
