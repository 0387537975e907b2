"""Search orchestration (upstream `memory/manager.ts`) on the owner side.

The search itself (retrievers, recall metadata, ranking, selection on one read snapshot) is ONE
function, :func:`host_facades.search.run.run_search`, which :class:`SearchEngine` calls either
in-process on its cached reader or, with a ``retriever`` (workers/retriever.py), as one worker
task on one leased generation: pooled and in-process results are identical by construction.
Both paths take one frozen :class:`~host_facades.search.edge.SearchRequest` and answer one
:class:`~host_facades.search.edge.SearchReply`. The owner does only trim/validation, the identity
check, the query embedding (for every surface), candidates = min(200, max(1, floor(maxResults x
multiplier))), and the one :class:`~memory_core.search.types.SearchResults` of the reply (its
``SearchHit`` objects, revision and, with ``details``, what ``--explain`` shows).

:func:`rank_results` is the pure ranking step on its own (tests).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import apsw
import numpy as np

from host_facades.ranking import rank as ranking

from host_facades.retrieval import fts_query
from host_facades.search.hit import hit_row
from host_facades.search.edge import SearchReply, SearchRequest, frozen_new
from host_facades.search.run import run_search
from host_facades.db.sqlite_read import read_snapshot
from host_facades.retrieval.vector_cache import process_state
from memory_core.config import MemoryCoreConfig
from memory_core.errors import IndexPaused, InvalidRequest, ProviderUnavailable
from memory_core.search.types import SearchHit, SearchResults, hits_from_reply
from memory_core.store.access import index_errors, raise_index_error
from memory_core.store.reader import CachedReader
from memory_core.validation import search_numbers
from workers.steps import Steps, drive

MAX_CANDIDATES = 200
# the keyword stage's ms in a worker while the owner embedded the query (an explain param, not a
# stage: it is off the search's critical path; what the search waited for it is ``keyword_wait``)
OVERLAPPED = "overlapped_ms"
VALID_SOURCES = ("memory", "sessions")


# ---------------------------------------------------------------------------------------------
# pure ranking
# ---------------------------------------------------------------------------------------------


@dataclass
class SearchDetails:
    """Hits plus what ``--explain`` shows: queries, per-retriever candidates, score parts.
    :meth:`to_dict` is the ``memory-core search --explain --json`` data; ``staleness`` (not part of
    it) is the search's staleness report when it came through :class:`~memory_core.core.MemoryCore`."""

    hits: list[SearchHit]
    mode: str                                   # "hybrid" | "keyword" | "vector" | "empty"
    params: dict[str, Any] = field(default_factory=dict)
    keyword: dict[str, Any] | None = None
    vector: Sequence[dict[str, Any]] | None = None
    ranked: Sequence[dict[str, Any]] = ()
    revision: int | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    fts_plan: dict[str, Any] | None = None      # host_facades.retrieval.fts_query.explain_fts (``explain`` only)
    staleness: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode, "params": self.params, "revision": self.revision,
            "fts": None if self.keyword is None else {k: v for k, v in self.keyword.items() if k != "hits"},
            "candidates": {
                "keyword": [] if self.keyword is None else [
                    {"id": h["id"], "path": h["path"], "lines": [h["start_line"], h["end_line"]],
                     "text_score": h["text_score"], "score": h["score"], "path_score": h["path_score"],
                     "exact": h["exact"]} for h in self.keyword["hits"]],
                "vector": [] if self.vector is None else [
                    {"id": h["id"], "path": h["path"], "lines": [h["start_line"], h["end_line"]],
                     "vector_score": h["vector_score"]} for h in self.vector],
            },
            "ranked": list(self.ranked),
            "results": [h.to_dict() for h in self.hits],
            "timings_ms": self.timings_ms,
            "fts_plan": self.fts_plan,
        }


def rank_results(
    *,
    mode: str,
    keyword_hits: Sequence[dict[str, Any]] | None,
    vector_hits: Sequence[dict[str, Any]] | None,
    metadata: dict[str, dict[str, Any]],
    opts: ranking.RankingOptions,
    max_results: int,
    min_score: float,
) -> tuple[list[SearchHit], list[ranking.Candidate]]:
    """Merge, adjust, order and select (upstream `memory/manager.ts`, `memory/hybrid.ts`): ``(hits, ordered
    candidates)``."""
    selected, ordered, vector_mode = ranking.rank_and_select(
        mode=mode, keyword_hits=keyword_hits, vector_hits=vector_hits, metadata=metadata, opts=opts,
        max_results=max_results, min_score=min_score)
    rows = tuple(hit_row(c, vector_mode=vector_mode) for c in selected)
    return hits_from_reply(SearchReply(mode=mode, hits=rows)), ordered


# ---------------------------------------------------------------------------------------------
# The owner-side engine
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Settings:
    """What a search reads from the configuration (``SearchEngine._settings``); the defaults live
    in the config models (memory_core/config.py)."""

    max_results: Any
    min_score: Any
    sources: tuple[str, ...]
    provider: str
    hybrid_enabled: bool
    candidate_multiplier: float
    backend: str
    ranking: ranking.RankingOptions  # without this search's now_ms / active_project_keys
    # (max_results, min_score) validated, when the configured defaults are valid (else None)
    defaults: tuple[int, float] | None = None
    default_candidates: int = 0  # candidate_count of the default max_results (with ``defaults``)


def _settings_of(c: MemoryCoreConfig) -> _Settings:
    q = c.query
    h = q.hybrid
    try:
        defaults: tuple[int, float] | None = search_numbers(q.max_results, q.min_score)
    except InvalidRequest:
        defaults = None  # reported by every search that relies on them (_validate_numbers)
    multiplier = float(h.candidate_multiplier)
    return _Settings(
        max_results=q.max_results, min_score=q.min_score, defaults=defaults,
        default_candidates=candidate_count(defaults[0], multiplier) if defaults is not None else 0,
        sources=tuple(c.sources) or ("memory",), provider=str(c.provider), hybrid_enabled=bool(h.enabled),
        candidate_multiplier=multiplier, backend=str(c.store.vector.backend),
        ranking=ranking.RankingOptions(
            vector_weight=float(h.vector_weight), text_weight=float(h.text_weight), fusion=str(h.fusion),
            rrf_k=int(h.rrf_k), mmr_enabled=bool(h.mmr.enabled), mmr_lambda=float(h.mmr.lambda_),
            decay_enabled=bool(h.temporal_decay.enabled), half_life_days=float(h.temporal_decay.half_life_days)),
    )


def account(timings: dict[str, float], total_ms: float) -> dict[str, float]:
    """Close ``timings`` (stage -> ms) so that every millisecond is named: ``remainder`` is what no
    stage measured (Python between the stages, the snapshot's BEGIN/COMMIT), ``total`` their sum."""
    timings.pop("total", None)
    timings.pop("remainder", None)
    timings["remainder"] = max(0.0, total_ms - sum(timings.values()))
    timings["total"] = total_ms
    return timings


def candidate_count(max_results: int, multiplier: float) -> int:
    """``min(200, max(1, floor(maxResults x candidateMultiplier)))`` (upstream `memory/manager.ts`)."""
    return min(MAX_CANDIDATES, max(1, math.floor(max_results * multiplier)))


def _checked_numbers(max_results: Any, min_score: Any, default_results: Any,
                     default_score: Any) -> tuple[int, float]:
    """``(max_results, min_score)`` of one search (the defaults when None), validated."""
    return search_numbers(max_results if max_results is not None else default_results,
                          min_score if min_score is not None else default_score)


class SearchEngine:
    """Search over one agent database. ``provider`` None means keyword-only (FTS-only) unless the
    configuration names a provider, in which case search fails closed (docs/decisions.md D4).

    Hooks (both optional): ``identity_check()`` returns the paused index's message or a list of
    mismatched identity keys (or raises IndexPaused); ``now_ms()`` is the clock temporal decay uses.
    An empty index answers no hits (the owner's ``before_search`` bootstraps it first).
    """

    def __init__(
        self,
        config: Any = None,
        db_path: str | None = None,
        provider: Any = None,
        *,
        identity_check: Callable[[], Any] | None = None,
        now_ms: Callable[[], float] | None = None,
        retriever: Any = None,
    ) -> None:
        # retriever (workers/retriever.py PooledRetriever): when set, the snapshot reads of a
        # search run in the worker pool on one leased generation; None = in-process reads.
        self.retriever = retriever
        self.config = config if config is not None else MemoryCoreConfig()
        self.db_path = db_path or self.config.db_path()
        self.provider = provider
        self.identity_check = identity_check
        self._now_ms = now_ms  # None: the wall clock (read inline in _request)
        # memory-core's OR probe in the conversational fallback (fts_search.keyword_search_with_fallback);
        # False reproduces upstream's per-keyword probes only (benchmarks compare both).
        self.or_fallback = True
        self._lock = threading.RLock()
        self._settings_cache: tuple[Any, _Settings] | None = None
        self._cached = CachedReader(self.db_path)
        from memory_core.embeddings.query_cache import QueryVectorCache

        self.query_vectors = QueryVectorCache()  # an agent repeats queries: embed each text once a minute

    # -------------------------------------------------------------- settings
    def _settings(self) -> _Settings:
        """The search settings of ``self.config``, read once per config object (the config
        models are treated as immutable: a new config is a new object, e.g. ``model_copy``)."""
        cached = self._settings_cache
        if cached is not None and cached[0] is self.config:
            return cached[1]
        settings = _settings_of(self.config)
        self._settings_cache = (self.config, settings)
        return settings

    @staticmethod
    def _sources(st: _Settings, sources: Sequence[str] | str | None) -> tuple[str, ...]:
        if sources is None:
            return st.sources
        if isinstance(sources, str):
            sources = [s.strip() for s in sources.split(",") if s.strip()]
        bad = [s for s in sources if s not in VALID_SOURCES]
        if bad or not sources:
            raise InvalidRequest(f"unknown source {bad or sources!r}; use 'memory' and/or 'sessions'")
        return tuple(dict.fromkeys(sources))

    # -------------------------------------------------------------- connection
    def _reader(self) -> apsw.Connection | None:
        """One cached read-only connection, reopened when the file was swapped (atomic reindex)."""
        return self._cached.get()

    def _db_id(self) -> str | None:
        """``dev:inode`` of the file the cached reader has open (keys the in-process vector state)."""
        ident = self._cached.ident
        return None if ident is None else f"{ident[0]}:{ident[1]}"

    def close(self) -> None:
        self._cached.close()

    def _has_content(self) -> bool:
        conn = self._reader()
        if conn is None:
            return False
        try:
            return conn.execute("SELECT EXISTS(SELECT 1 FROM memory_index_chunks)").fetchone()[0] == 1
        except apsw.SQLError:
            return False

    # -------------------------------------------------------------- public API
    def search(
        self,
        query: str,
        *,
        max_results: int | None = None,
        min_score: float | None = None,
        sources: Sequence[str] | str | None = None,
        lexical_only: bool = False,
        active_project_keys: Sequence[str] | None = None,
        query_vector: Sequence[float] | None = None,
        details: bool = False,
        candidates_for: int | None = None,
        on_embedding: Callable[[BaseException | None], None] | None = None,
    ) -> SearchResults:
        """The one search verb: its :class:`SearchResults` (no hits for a blank query or an empty
        index). ``details``: also what ``--explain`` shows (``.details``, a :class:`SearchDetails`
        with the FTS plan, the candidates per retriever and each candidate's score parts).
        ``candidates_for`` sizes the candidate pool for that many results instead of ``max_results``
        (the provider's v2 search ranks the candidates of one page and keeps up to ``max_results``
        of them for its cursors). ``on_embedding(error)`` is called once the query was embedded
        (``None``) or failed to be (the error, raised after the hook unless the hook raises its
        own). An index file that is not a readable database raises
        :class:`~memory_core.errors.IndexCorrupt`."""
        return drive(self.search_steps(
            query, max_results=max_results, min_score=min_score, sources=sources, lexical_only=lexical_only,
            active_project_keys=active_project_keys, query_vector=query_vector, details=details,
            candidates_for=candidates_for, on_embedding=on_embedding), self.worker_pool)

    @property
    def worker_pool(self) -> Any:
        """The worker pool this engine's searches run on (None: in-process)."""
        return None if self.retriever is None else self.retriever.pool

    def search_steps(
        self,
        query: str,
        *,
        max_results: int | None = None,
        min_score: float | None = None,
        sources: Sequence[str] | str | None = None,
        lexical_only: bool = False,
        active_project_keys: Sequence[str] | None = None,
        query_vector: Sequence[float] | None = None,
        details: bool = False,
        candidates_for: int | None = None,
        on_embedding: Callable[[BaseException | None], None] | None = None,
    ) -> Steps[SearchResults]:
        """:meth:`search` as steps (``workers/steps.py``): a pooled search yields its one worker
        task; an in-process one yields nothing."""
        try:
            done = yield from self._search(
                query, max_results=max_results, min_score=min_score, sources=sources, lexical_only=lexical_only,
                active_project_keys=active_project_keys, query_vector=query_vector, details=details,
                candidates_for=candidates_for, on_embedding=on_embedding,
            )
        except BaseException as exc:
            raise_index_error(self.db_path, exc)
            raise
        if done is None:
            return SearchResults(details=SearchDetails(hits=[], mode="empty") if details else None)
        req, reply, t0, stages = done
        t_hits = time.perf_counter()
        hits = hits_from_reply(reply)
        stages["hits"] = (time.perf_counter() - t_hits) * 1000
        return SearchResults(hits, mode=reply.mode, revision=reply.revision,
                             details=self._details(req, reply, t0, hits, stages) if details else None)

    def explain(self, query: str, **kwargs: Any) -> SearchDetails:
        """:meth:`search` with ``details`` on (same arguments): its :class:`SearchDetails`."""
        return self.search(query, details=True, **kwargs).details

    def speculative_request(self, query: Any, max_results: Any = None, min_score: Any = None) -> SearchRequest | None:
        """The request a pooled keyword-only :meth:`search` of these arguments sends (its clock
        aside), for a worker to answer ahead of the checks that must pass before it is used
        (``PooledRetriever.stash``); None when the search would not send exactly that (a provider,
        no pool, a blank or invalid query or limits: the search reports those itself)."""
        if self.retriever is None or self.provider is not None or not isinstance(query, str):
            return None
        q = query.strip()
        st = self._settings()
        if not q or not q.isascii() or st.provider != "none":
            return None
        try:
            mr, ms = self._validate_numbers(st, max_results, min_score)
        except Exception:  # noqa: BLE001 - the search raises it
            return None
        return self._request(q, self._sources(st, None), mr, ms, want_vector=False, qvec=None,
                             active_project_keys=None, details=False, probe_content=True, settings=st)

    def _check_identity(self) -> None:
        if self.identity_check is None:
            return
        result = self.identity_check()
        if result is None or result is True:
            return
        if isinstance(result, str):  # the owner's whole message (what differs, both ways out)
            raise IndexPaused(result)
        if result is False or (isinstance(result, (list, tuple, set)) and result):
            raise IndexPaused.settings_changed(result if result is not False else "identity")

    @staticmethod
    def _validate_numbers(st: _Settings, max_results: Any, min_score: Any) -> tuple[int, float]:
        if max_results is None and min_score is None and st.defaults is not None:
            return st.defaults
        return _checked_numbers(max_results, min_score, st.max_results, st.min_score)

    def _request(self, q: str, srcs: tuple[str, ...], mr: int, ms: float, *, want_vector: bool,
                 qvec: np.ndarray | None, active_project_keys: Sequence[str] | None, details: bool,
                 probe_content: bool, candidates_for: int | None = None,
                 settings: _Settings | None = None) -> SearchRequest:
        """The :class:`~host_facades.search.edge.SearchRequest` of one search (``settings``: the
        search's :meth:`_settings`, when it has them already)."""
        st = settings or self._settings()
        now_ms = self._now_ms
        n = candidates_for or mr
        candidates = (st.default_candidates if st.defaults is not None and n == st.defaults[0]
                      else candidate_count(n, st.candidate_multiplier))
        return frozen_new(SearchRequest, {
            "query": q, "candidates": candidates, "max_results": mr,
            "min_score": ms, "sources": srcs, "model": getattr(self.provider, "model", None), "backend": st.backend,
            "or_fallback": self.or_fallback, "want_keyword": st.hybrid_enabled or not want_vector, "qvec": qvec,
            "ranking": st.ranking, "now_ms": time.time() * 1000.0 if now_ms is None else float(now_ms()),
            "active_project_keys": tuple(active_project_keys) if active_project_keys is not None else None,
            "probe_content": probe_content, "details": details})

    def _details(self, req: SearchRequest, reply: SearchReply, t0: float,
                 hits: list[SearchHit], stages: dict[str, float] | None = None) -> SearchDetails:
        """:class:`SearchDetails` from the reply of a search with ``details``, with the FTS plan
        (query, SQL, fallback keywords) of its query (``stages``: the engine's own stage timings in
        ms, before the reply's)."""
        fts_plan = fts_query.explain_fts(req.query, tokenizer=reply.tokenizer, limit=req.candidates,
                                         sources=req.sources)
        params: dict[str, Any] = {"query": req.query, "candidates": req.candidates, "sources": req.sources,
                                  "tokenizer": reply.tokenizer, "model": req.model, "backend": req.backend,
                                  "or_fallback": req.or_fallback}
        if reply.mode == "empty":
            return SearchDetails(hits=[], mode="empty", params=params, revision=reply.revision,
                                 fts_plan=fts_plan)
        params.update(max_results=req.max_results, min_score=req.min_score, fusion=req.ranking.fusion)
        timings = {**(stages or {}), **reply.timings_ms}
        overlapped = timings.pop(OVERLAPPED, None)
        if overlapped is not None:  # the keyword stage ran in a worker while the query was embedded
            params[OVERLAPPED] = overlapped
        account(timings, (time.perf_counter() - t0) * 1000)
        return SearchDetails(hits=hits, mode=reply.mode, params=params, keyword=reply.keyword, vector=reply.vector,
                             ranked=reply.ranked, revision=reply.revision, timings_ms=timings,
                             fts_plan=fts_plan)

    def _search(
        self,
        query: str,
        *,
        max_results: int | None,
        min_score: float | None,
        sources: Sequence[str] | str | None,
        lexical_only: bool,
        active_project_keys: Sequence[str] | None,
        query_vector: Sequence[float] | None,
        details: bool,
        candidates_for: int | None = None,
        on_embedding: Callable[[BaseException | None], None] | None = None,
    ) -> Steps[tuple[SearchRequest, SearchReply, float, dict[str, float]] | None]:
        """``(request, reply, start time, stage timings in ms)`` of one search; None when it has
        nothing to search (a blank query, an empty index)."""
        t_start = time.perf_counter()
        if not isinstance(query, str):
            raise InvalidRequest(f"query must be a string, got {type(query).__name__}")
        q = query.strip()
        if not q.isascii():
            try:
                q.encode("utf-8")
            except UnicodeEncodeError:  # lone surrogates (e.g. undecodable bytes from argv): SQLite takes UTF-8
                q = q.encode("utf-8", "replace").decode("utf-8")
        st = self._settings()
        mr, ms = self._validate_numbers(st, max_results, min_score)
        if candidates_for is not None:
            candidates_for = min(mr, max(1, int(candidates_for)))
        srcs = self._sources(st, sources)
        if not q:
            return None
        provider_name = st.provider
        if self.provider is None and provider_name != "none" and query_vector is None and not lexical_only:
            missing = ProviderUnavailable(
                f"Memory search unavailable: embedding provider {provider_name!r} is configured but not available; "
                "fix the provider settings or set provider = \"none\" for keyword-only search"
            )
            if on_embedding is not None:
                on_embedding(missing)
            raise missing
        want_vector = not lexical_only and (self.provider is not None or query_vector is not None)
        if self.retriever is not None:
            return (yield from self._search_pooled(
                st, q, srcs, mr, ms, want_vector=want_vector, query_vector=query_vector,
                active_project_keys=active_project_keys, details=details, candidates_for=candidates_for,
                on_embedding=on_embedding, t_start=t_start))
        stages: dict[str, float] = {}
        with self._lock:
            t = time.perf_counter()
            stages["prepare"] = (t - t_start) * 1000  # settings, validation, the lock
            if not self._has_content():
                return None
            self._check_identity()
            conn = self._reader()
            assert conn is not None
            t1 = time.perf_counter()
            stages["identity"] = (t1 - t) * 1000  # the content probe, the identity check, the reader
            # embed before opening the read transaction: a slow provider must not pin a generation
            qvec = self._query_vector(q, query_vector, on_embedding) if want_vector else None
            t2 = time.perf_counter()
            stages["embed"] = (t2 - t1) * 1000
            req = self._request(q, srcs, mr, ms, want_vector=want_vector, qvec=qvec,
                                active_project_keys=active_project_keys, details=details, probe_content=False,
                                candidates_for=candidates_for, settings=st)
            db_id = self._db_id()
            with read_snapshot(conn) as revision:
                reply = run_search(conn, req, revision=revision,
                                   vector_state=lambda c, model: process_state(c, model, db_id), db_id=db_id)
            return req, reply, t_start, stages

    def _identity_or_empty(self) -> bool:
        """Pooled searches: the identity check, but (as in-process) an empty index is not paused
        but answers empty (False)."""
        try:
            self._check_identity()
            return True
        except IndexPaused:
            with self._lock:
                if self._has_content():
                    raise
            return False

    def _search_pooled(self, st: _Settings, q: str, srcs: tuple[str, ...], mr: int, ms: float, *, want_vector: bool,
                       query_vector: Sequence[float] | None, active_project_keys: Sequence[str] | None,
                       details: bool, candidates_for: int | None = None,
                       on_embedding: Callable[[BaseException | None], None] | None = None,
                       t_start: float | None = None) -> Steps[tuple[SearchRequest, SearchReply, float, dict[str, float]] | None]:
        """The whole search as ONE worker task (``self.retriever.run_search``) on one generation; the
        content probe runs in the worker, in the same snapshot."""
        t = time.perf_counter()
        t_start = t if t_start is None else t_start
        stages = {"prepare": (t - t_start) * 1000}
        if self.identity_check is not None and not self._identity_or_empty():
            return None
        t1 = time.perf_counter()
        stages["identity"] = (t1 - t) * 1000

        def request(qvec: np.ndarray | None) -> SearchRequest:
            return self._request(q, srcs, mr, ms, want_vector=want_vector, qvec=qvec,
                                 active_project_keys=active_project_keys, details=details, probe_content=True,
                                 candidates_for=candidates_for, settings=st)

        req, ahead = None, None
        # The keyword stage runs in a worker while this thread embeds the query, unless the caller's
        # hook checks something once the query is embedded (the provider runtime: its caller's
        # authority, which must be current before any read of the store) or there is nothing to embed.
        if (want_vector and on_embedding is None and query_vector is None
                and not self.query_vectors.has(self.provider, q)):
            req = request(None)
            if req.want_keyword:
                ahead = self.retriever.submit_keyword(req)
        t_embed = time.perf_counter()
        if ahead is not None:
            stages["dispatch"] = (t_embed - t1) * 1000
        try:
            qvec = self._query_vector(q, query_vector, on_embedding) if want_vector else None
        except BaseException:
            if ahead is not None:
                self.retriever.collect_keyword(ahead)  # ends its lease
            raise
        t2 = time.perf_counter()
        stages["embed"] = (t2 - t_embed) * 1000
        keyword = None
        if ahead is not None:
            # its answer, waiting while a worker runs it; None when no worker had picked it up (withdrawn)
            keyword = self.retriever.collect_keyword(ahead)
            t3 = time.perf_counter()
            stages["keyword_wait"] = (t3 - t2) * 1000
            t2 = t3
        if req is None:
            req = request(qvec)
        elif qvec is not None:
            req = frozen_new(SearchRequest, {**req.__dict__, "qvec": qvec})
        reply = yield from self.retriever.search_steps(req, keyword=keyword)
        # the task's round trip less what the worker measured inside it
        stages["pool"] = max(0.0, (time.perf_counter() - t2) * 1000 - sum(reply.timings_ms.values()))
        if reply.empty_index:
            return None
        if keyword is not None and details and "keyword" not in reply.timings_ms:
            # the task used the keyword stage run ahead: its time overlapped the embedding
            stages[OVERLAPPED] = keyword[4]
        return req, reply, t_start, stages

    def _query_vector(self, q: str, query_vector: Sequence[float] | None,
                      on_embedding: Callable[[BaseException | None], None] | None = None) -> np.ndarray:
        if query_vector is not None:
            return np.asarray(query_vector, dtype=np.float32)
        if on_embedding is None:
            return np.asarray(self._embed_query(q), dtype=np.float32)
        try:
            vector = np.asarray(self._embed_query(q), dtype=np.float32)
        except Exception as exc:
            on_embedding(exc)
            raise
        on_embedding(None)
        return vector

    def _embed_query(self, text: str) -> np.ndarray:
        from memory_core.embeddings.batching import embed_query

        return self.query_vectors.vector(self.provider, text, embed_query)

