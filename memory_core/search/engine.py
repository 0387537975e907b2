"""Search orchestration (spec §6.1): retrievers over one read snapshot, then pure ranking.

The code has two layers so the worker pool can split it:

(a) retrievers: :func:`retrieve_keyword`, :func:`retrieve_vector` and :func:`retrieve_metadata`
    take ``(conn, params)`` and return plain data; they only call ``host_facades`` and can run
    in a worker process on a read-only connection;
(b) ranking: :func:`rank_results` turns that plain data into hits; pure, no I/O.

:class:`SearchEngine` wires both on the owner side: trim, identity check, the forced sync on an
empty index, the query embedding, candidates = min(200, max(1, floor(maxResults x multiplier))).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace
from typing import Any

import apsw
import numpy as np

from host_facades import lexical, vector_search
from host_facades.engine_knn import open_readonly, read_snapshot
from memory_core.errors import IndexBusy, IndexPaused, InvalidRequest, ProviderUnavailable
from memory_core.search import ranking
from memory_core.search.types import Candidate, SearchHit

MAX_CANDIDATES = 200
VALID_SOURCES = ("memory", "sessions")


@dataclass(frozen=True)
class SearchParams:
    """Everything a retriever needs; plain values only, so it pickles into a worker."""

    query: str
    candidates: int
    sources: tuple[str, ...] = ("memory",)
    tokenizer: str = "unicode61"
    model: str | None = None
    backend: str = "auto"
    or_fallback: bool = True

    def to_dict(self) -> dict[str, Any]:
        # flat fields of plain values: no deep copy (asdict) on the per-query path
        return {name: getattr(self, name) for name in _PARAM_FIELDS}


_PARAM_FIELDS = tuple(f.name for f in fields(SearchParams))


# ---------------------------------------------------------------------------------------------
# (a) retrievers: (conn, params) -> plain data
# ---------------------------------------------------------------------------------------------


def fts_available(conn: apsw.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'memory_index_chunks_fts'").fetchone() is not None


def fts_tokenizer(conn: apsw.Connection) -> str:
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'memory_index_chunks_fts'").fetchone()
    return "trigram" if row and "trigram" in row[0] else "unicode61"


def retrieve_keyword(conn: apsw.Connection, params: SearchParams) -> dict[str, Any]:
    """Keyword retriever: strict query, path tiers, conversational fallback (§4)."""
    return lexical.keyword_search_with_fallback(
        conn, params.query, limit=params.candidates, sources=list(params.sources), tokenizer=params.tokenizer,
        or_fallback=params.or_fallback,
    )


def retrieve_vector(conn: apsw.Connection, params: SearchParams, query_vector: Sequence[float], *,
                    db_id: str | None = None) -> list[dict[str, Any]]:
    """Vector retriever (§5); an all-zero vector returns []. ``db_id``: identity of conn's file."""
    return vector_search.knn_search(
        conn, np.asarray(query_vector, dtype=np.float32), limit=params.candidates, model=params.model,
        sources=list(params.sources), backend=params.backend, db_id=db_id,
    )


def retrieve_metadata(conn: apsw.Connection, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Recall metadata, read after retrieval in the same snapshot; vanished chunks are absent."""
    return lexical.recall_metadata(conn, ids)


# ---------------------------------------------------------------------------------------------
# (b) pure ranking
# ---------------------------------------------------------------------------------------------


@dataclass
class SearchDetails:
    """Hits plus what ``--explain`` shows: queries, per-retriever candidates, score parts."""

    hits: list[SearchHit]
    mode: str                                   # "hybrid" | "keyword" | "vector" | "empty"
    params: dict[str, Any] = field(default_factory=dict)
    keyword: dict[str, Any] | None = None
    vector: list[dict[str, Any]] | None = None
    ranked: list[dict[str, Any]] = field(default_factory=list)
    revision: int | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)

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
            "ranked": self.ranked,
            "results": [h.to_dict() for h in self.hits],
            "timings_ms": self.timings_ms,
        }


def _attach_metadata(cands: list[Candidate], meta: dict[str, dict[str, Any]]) -> list[Candidate]:
    out = []
    for c in cands:
        m = meta.get(c.id)
        if m is None:
            continue  # the chunk was removed after retrieval (left-join reader omits it)
        imp = m.get("importance")
        c.importance = int(imp) if isinstance(imp, (int, float)) and not isinstance(imp, bool) else None
        trig = m.get("triggers")
        c.triggers = trig.strip() if isinstance(trig, str) and trig.strip() and trig.strip() != "[]" else None
        pk = m.get("project_key")
        c.project_key = pk.strip() if isinstance(pk, str) and pk.strip() else None
        c.provenance = m.get("provenance")
        c.source_mtime = m.get("source_mtime")
        out.append(c)
    return out


def rank_results(
    *,
    mode: str,
    keyword_hits: Sequence[dict[str, Any]] | None,
    vector_hits: Sequence[dict[str, Any]] | None,
    metadata: dict[str, dict[str, Any]],
    opts: ranking.RankingOptions,
    max_results: int,
    min_score: float,
) -> tuple[list[SearchHit], list[Candidate]]:
    """Merge, adjust, order and select (§6.1 steps 10-11, §6.2-6.6)."""
    kw = list(keyword_hits or [])
    vec = list(vector_hits or [])
    if mode == "keyword":
        cands = _attach_metadata(ranking.union_candidates([], kw), metadata)
        ordered = ranking.rank_keyword_only(cands, opts)
        selected = ranking.select_scored(ordered, max_results=max_results, min_score=min_score, relaxed_min=0.0)
        return [c.to_hit(vector_mode=False) for c in selected], ordered
    if mode == "vector":
        cands = _attach_metadata(ranking.union_candidates(vec, []), metadata)
        ordered = ranking.rank_vector_only(cands)
        selected = [c for c in ordered if c.score >= min_score][:max_results]
        return [c.to_hit(vector_mode=True) for c in selected], ordered
    cands = _attach_metadata(ranking.union_candidates(vec, kw), metadata)
    ordered = ranking.rank_hybrid(cands, opts, lists=2)
    keyword_keys = {c.key for c in ordered if c.in_keyword}
    selected = ranking.select_hybrid(ordered, max_results=max_results, min_score=min_score, keyword_keys=keyword_keys)
    return [c.to_hit(vector_mode=True) for c in selected], ordered


# ---------------------------------------------------------------------------------------------
# The owner-side engine
# ---------------------------------------------------------------------------------------------


def _get(obj: Any, path: str, default: Any) -> Any:
    cur = obj
    for part in path.split("."):
        if cur is None:
            return default
        cur = getattr(cur, part, None)
    return default if cur is None else cur


def candidate_count(max_results: int, multiplier: float) -> int:
    """``min(200, max(1, floor(maxResults x candidateMultiplier)))`` (§6.1 step 9)."""
    return min(MAX_CANDIDATES, max(1, math.floor(max_results * multiplier)))


class SearchEngine:
    """Search over one agent database. ``provider`` None means keyword-only (FTS-only) unless the
    configuration names a provider, in which case search fails closed (D4).

    Hooks (all optional): ``identity_check()`` returns a list of mismatched identity keys (or
    raises IndexPaused); ``on_empty_index()`` runs the forced sync when the index has no chunks;
    ``now_ms()`` is the clock temporal decay uses.
    """

    def __init__(
        self,
        config: Any = None,
        db_path: str | None = None,
        provider: Any = None,
        *,
        identity_check: Callable[[], Any] | None = None,
        on_empty_index: Callable[[], Any] | None = None,
        now_ms: Callable[[], float] | None = None,
        retriever: Any = None,
    ) -> None:
        # retriever (H7, workers/retriever.py PooledRetriever): when set, the snapshot reads of a
        # search run in the worker pool on one leased generation; None = in-process reads.
        self.retriever = retriever
        if config is None:
            from memory_core.config import MemoryCoreConfig

            config = MemoryCoreConfig()
        self.config = config
        self.db_path = db_path or config.db_path()
        self.provider = provider
        self.identity_check = identity_check
        self.on_empty_index = on_empty_index
        self._now_ms = now_ms or (lambda: time.time() * 1000.0)
        # memory-core's OR probe in the conversational fallback (lexical.keyword_search_with_fallback);
        # False reproduces upstream's per-keyword probes only (benchmarks compare both).
        self.or_fallback = True
        # optional: faiss/numpy KNN on a thread next to the keyword SQL. Off by default: on 2 busy cores it
        # doubled CPU per query (21 -> 59 ms at 100k chunks) and raised p50 (21 -> 32 ms)
        self.parallel_vector = os.environ.get("MEMORY_CORE_PARALLEL_KNN", "0") == "1"
        self._lock = threading.RLock()
        self._pool: ThreadPoolExecutor | None = None
        self._conn: apsw.Connection | None = None
        self._conn_ident: tuple[int, int] | None = None

    # -------------------------------------------------------------- settings
    def _ranking_options(self, active_project_keys: Sequence[str] | None) -> ranking.RankingOptions:
        c = self.config
        return ranking.RankingOptions(
            vector_weight=float(_get(c, "query.hybrid.vector_weight", 0.7)),
            text_weight=float(_get(c, "query.hybrid.text_weight", 0.3)),
            fusion=str(_get(c, "query.hybrid.fusion", "weighted")),
            rrf_k=int(_get(c, "query.hybrid.rrf_k", 60)),
            mmr_enabled=bool(_get(c, "query.hybrid.mmr.enabled", True)),
            mmr_lambda=float(_get(c, "query.hybrid.mmr.lambda_", 0.7)),
            decay_enabled=bool(_get(c, "query.hybrid.temporal_decay.enabled", True)),
            half_life_days=float(_get(c, "query.hybrid.temporal_decay.half_life_days", 30)),
            now_ms=float(self._now_ms()),
            active_project_keys=tuple(active_project_keys) if active_project_keys is not None else None,
        )

    def _sources(self, sources: Sequence[str] | str | None) -> tuple[str, ...]:
        if sources is None:
            configured = _get(self.config, "sources", ["memory"])
            return tuple(configured) or ("memory",)
        if isinstance(sources, str):
            sources = [s.strip() for s in sources.split(",") if s.strip()]
        bad = [s for s in sources if s not in VALID_SOURCES]
        if bad or not sources:
            raise InvalidRequest(f"unknown source {bad or sources!r}; use 'memory' and/or 'sessions'")
        return tuple(dict.fromkeys(sources))

    # -------------------------------------------------------------- connection
    def _file_ident(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.db_path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def _reader(self) -> apsw.Connection | None:
        """One cached read-only connection, reopened when the file was swapped (atomic reindex)."""
        ident = self._file_ident()
        if ident is None:
            self.close()
            return None
        if self._conn is None or ident != self._conn_ident:
            self.close()
            conn = None
            for _attempt in range(3):
                conn = open_readonly(self.db_path)
                after = self._file_ident()
                if after == ident:
                    break
                conn.close()  # swapped while opening: the identity must name the file conn has open
                conn, ident = None, after
                if ident is None:
                    return None
            if conn is None:
                raise IndexBusy(f"the index file {self.db_path} kept being replaced while opening it; search again")
            self._conn = conn
            self._conn_ident = ident
        return self._conn

    def _db_id(self) -> str | None:
        """``dev:inode`` of the file the cached reader has open (keys the in-process vector state)."""
        return None if self._conn_ident is None else f"{self._conn_ident[0]}:{self._conn_ident[1]}"

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memory-core-knn")
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None
                self._conn_ident = None

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
    ) -> list[SearchHit]:
        """Search the index; ``[]`` for an empty query (spec §6.1)."""
        return self.search_with_details(
            query, max_results=max_results, min_score=min_score, sources=sources, lexical_only=lexical_only,
            active_project_keys=active_project_keys, query_vector=query_vector,
        ).hits

    def explain(self, query: str, **kwargs: Any) -> dict[str, Any]:
        """The FTS query and SQL, candidates per retriever and the score parts of every candidate."""
        details = self.search_with_details(query, **kwargs)
        out = details.to_dict()
        p = details.params
        out["fts_plan"] = lexical.explain_fts(
            str(p.get("query", "")), tokenizer=str(p.get("tokenizer", "unicode61")),
            limit=int(p.get("candidates", 24)), sources=p.get("sources"),
        ) if p.get("query") else None
        return out

    def _check_identity(self) -> None:
        if self.identity_check is None:
            return
        result = self.identity_check()
        if result is None or result is True:
            return
        if result is False or (isinstance(result, (list, tuple, set)) and result):
            keys = ", ".join(map(str, result)) if isinstance(result, (list, tuple, set)) else "identity"
            raise IndexPaused(
                f"memory search paused: the index was built with different settings ({keys}); "
                "run `memory-core index --force`"
            )

    def _validate_numbers(self, max_results: Any, min_score: Any) -> tuple[int, float]:
        mr = max_results if max_results is not None else int(_get(self.config, "query.max_results", 6))
        ms = min_score if min_score is not None else float(_get(self.config, "query.min_score", 0.35))
        if isinstance(mr, bool) or not isinstance(mr, (int, float)) or not math.isfinite(mr) or int(mr) < 1:
            raise InvalidRequest(f"max_results must be an integer >= 1, got {max_results!r}")
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not math.isfinite(ms):
            raise InvalidRequest(f"min_score must be a finite number, got {min_score!r}")
        return int(mr), float(ms)

    def search_with_details(
        self,
        query: str,
        *,
        max_results: int | None = None,
        min_score: float | None = None,
        sources: Sequence[str] | str | None = None,
        lexical_only: bool = False,
        active_project_keys: Sequence[str] | None = None,
        query_vector: Sequence[float] | None = None,
    ) -> SearchDetails:
        if not isinstance(query, str):
            raise InvalidRequest(f"query must be a string, got {type(query).__name__}")
        q = query.strip()
        mr, ms = self._validate_numbers(max_results, min_score)
        srcs = self._sources(sources)
        if not q:
            return SearchDetails(hits=[], mode="empty")
        provider_name = str(_get(self.config, "provider", "none"))
        if self.provider is None and provider_name != "none" and query_vector is None and not lexical_only:
            raise ProviderUnavailable(
                f"Memory search unavailable: embedding provider {provider_name!r} is configured but not available; "
                "fix the provider settings or set provider = \"none\" for keyword-only search"
            )
        with self._lock:
            has_content = self._has_content()
            if not has_content and self.on_empty_index is not None:
                self.on_empty_index()
                has_content = self._has_content()
            if not has_content:
                return SearchDetails(hits=[], mode="empty")
            self._check_identity()
            opts = self._ranking_options(active_project_keys)
            multiplier = float(_get(self.config, "query.hybrid.candidate_multiplier", 4))
            cand = candidate_count(mr, multiplier)
            conn = self._reader()
            assert conn is not None
            hybrid_enabled = bool(_get(self.config, "query.hybrid.enabled", True))
            timings: dict[str, float] = {}
            t0 = time.perf_counter()
            if self.retriever is not None:
                return self._search_pooled(q, srcs, cand, opts, mr, ms, lexical_only=lexical_only,
                                           query_vector=query_vector, hybrid_enabled=hybrid_enabled,
                                           timings=timings, t0=t0)
            want_vector = not lexical_only and (self.provider is not None or query_vector is not None)
            # embed before opening the read transaction: a slow provider must not pin a generation
            qvec = None
            if want_vector:
                qvec = query_vector if query_vector is not None else self._embed_query(q)
            with read_snapshot(conn) as revision:
                has_fts = fts_available(conn)
                params = SearchParams(
                    query=q, candidates=cand, sources=srcs, tokenizer=fts_tokenizer(conn) if has_fts else "unicode61",
                    model=getattr(self.provider, "model", None),
                    backend=str(_get(self.config, "store.vector.backend", "auto")), or_fallback=self.or_fallback,
                )
                vector_hits = None
                vector_job = None
                if want_vector:
                    # faiss/numpy need no connection: run them on a thread next to the keyword SQL
                    vector_job = vector_search.knn_prepare(
                        conn, np.asarray(qvec, dtype=np.float32), limit=params.candidates, model=params.model,
                        sources=list(params.sources), backend=params.backend, db_id=self._db_id())
                    if vector_job is not None and self.parallel_vector:
                        vector_job = self._executor().submit(vector_job)
                keyword_data = None
                if has_fts and (hybrid_enabled or not want_vector):
                    keyword_data = retrieve_keyword(conn, params)
                    timings["keyword"] = (time.perf_counter() - t0) * 1000
                if want_vector:
                    t1 = time.perf_counter()
                    if vector_job is not None:
                        pairs = vector_job.result() if self.parallel_vector else vector_job()
                        vector_hits = vector_search.load_rows(conn, pairs)
                    else:
                        vector_hits = retrieve_vector(conn, params, qvec, db_id=self._db_id())
                    timings["vector"] = (time.perf_counter() - t1) * 1000
                if keyword_data is None and vector_hits is None:
                    return SearchDetails(hits=[], mode="empty", params=params.to_dict(), revision=revision)
                mode = "keyword" if vector_hits is None else ("vector" if keyword_data is None else "hybrid")
                kw_hits = keyword_data["hits"] if keyword_data else []
                ids = [h["id"] for h in kw_hits] + [h["id"] for h in (vector_hits or [])]
                t2 = time.perf_counter()
                meta = retrieve_metadata(conn, ids)
                timings["metadata"] = (time.perf_counter() - t2) * 1000
            t3 = time.perf_counter()
            hits, ordered = rank_results(mode=mode, keyword_hits=kw_hits, vector_hits=vector_hits, metadata=meta,
                                         opts=opts, max_results=mr, min_score=ms)
            timings["rank"] = (time.perf_counter() - t3) * 1000
            timings["total"] = (time.perf_counter() - t0) * 1000
            pdict = params.to_dict()
            pdict.update(max_results=mr, min_score=ms, fusion=opts.fusion)
            return SearchDetails(hits=hits, mode=mode, params=pdict, keyword=keyword_data, vector=vector_hits,
                                 ranked=[c.parts() for c in ordered], revision=revision, timings_ms=timings)

    def _search_pooled(self, q: str, srcs: tuple[str, ...], cand: int, opts: ranking.RankingOptions, mr: int,
                       ms: float, *, lexical_only: bool, query_vector: Sequence[float] | None,
                       hybrid_enabled: bool, timings: dict[str, float], t0: float) -> SearchDetails:
        """``search_with_details`` with its snapshot reads (FTS probe, keyword, vector, metadata) run
        by ``self.retriever`` in one worker task, i.e. on one generation (H7)."""
        params = SearchParams(query=q, candidates=cand, sources=srcs, model=getattr(self.provider, "model", None),
                              backend=str(_get(self.config, "store.vector.backend", "auto")))
        want_vector = not lexical_only and (self.provider is not None or query_vector is not None)
        qvec = None
        if want_vector:
            qvec = np.asarray(query_vector if query_vector is not None else self._embed_query(q), dtype=np.float32)
        res = self.retriever.search(params.to_dict(), qvec, want_keyword=hybrid_enabled or not want_vector)
        timings["retrieve"] = (time.perf_counter() - t0) * 1000
        revision = res.get("revision")
        out = res["results"][0] if res.get("results") and isinstance(res["results"][0], dict) else {}
        params = replace(params, tokenizer=out.get("tokenizer", "unicode61"))
        keyword_data, vector_hits, meta = out.get("keyword"), out.get("vector"), out.get("metadata") or {}
        if keyword_data is None and vector_hits is None:
            return SearchDetails(hits=[], mode="empty", params=params.to_dict(), revision=revision)
        mode = "keyword" if vector_hits is None else ("vector" if keyword_data is None else "hybrid")
        kw_hits = keyword_data["hits"] if keyword_data else []
        t3 = time.perf_counter()
        hits, ordered = rank_results(mode=mode, keyword_hits=kw_hits, vector_hits=vector_hits, metadata=meta,
                                     opts=opts, max_results=mr, min_score=ms)
        timings["rank"] = (time.perf_counter() - t3) * 1000
        timings["total"] = (time.perf_counter() - t0) * 1000
        pdict = params.to_dict()
        pdict.update(max_results=mr, min_score=ms, fusion=opts.fusion)
        return SearchDetails(hits=hits, mode=mode, params=pdict, keyword=keyword_data, vector=vector_hits,
                             ranked=[c.parts() for c in ordered], revision=revision, timings_ms=timings)

    def _embed_query(self, text: str) -> np.ndarray:
        try:
            from memory_core.embeddings.batching import embed_query
        except ImportError:  # pragma: no cover
            return np.asarray(self.provider.embed_batch([text]), dtype=np.float32)[0]
        return embed_query(self.provider, text)


def with_overrides(config: Any, **overrides: Any) -> Any:
    """A copy of a dataclass-like options object with fields replaced (tests, benchmarks)."""
    return replace(config, **overrides)
