"""Worker task functions. Imports only the standard library, numpy and ``host_facades``.

Every task is ``fn(payload: dict, ctx: WorkerContext) -> plain data``. The same functions run in
the owner process when the pool is disabled (``pool.workers = 0``), which is what makes pooled
and in-process results identical. Tasks that read SQLite open the database read-only per task and
close it in ``finally``; all reads of one task happen in one read transaction, i.e. on one
generation, and the task reports that generation (``revision``) and the file identity.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar


from host_facades.search.edge import SearchReply, SearchRequest, request_from_wire
from host_facades.retrieval.vector_cache import DerivedStateCache
from host_facades.db.sqlite_read import (
    SQLITE_IDLE_HANDLE_TTL_S,
    db_identity,
    open_readonly,
    read_snapshot,
    swap_transient,
    wait_out_swap,
    unreadable,
)
from host_facades.db.sqlite_ext import load_sqlite_vec
from host_facades.retrieval.vector_state import model_key

MAX_CACHED_READERS = 8
T = TypeVar("T")


class TaskError(Exception):
    """A task failure as the owner's typed error: ``error_type`` names a ``memory_core.errors`` class
    (workers never import it), ``code`` is its stable code. Crosses the pipe as :meth:`to_data`, the
    shape of ``MemoryCoreError.to_data()``, which the owner rebuilds with ``error_from_data``."""

    def __init__(self, error_type: str, code: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.code = code
        self.message = message

    @classmethod
    def from_data(cls, data: dict[str, str]) -> TaskError:
        return cls(data["type"], data["code"], data["message"])

    def to_data(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message, "type": self.error_type}


def failure_data(exc: BaseException) -> dict[str, str]:
    """The error data of any exception a task raised: a :class:`TaskError` as itself, anything else
    as a ``WorkerError`` naming the exception."""
    if isinstance(exc, TaskError):
        return exc.to_data()
    return {"code": "failed", "message": f"{type(exc).__name__}: {exc}", "type": "WorkerError"}


@dataclass
class WorkerContext:
    """Per-process state that outlives one task: the derived per-generation vector state."""

    pool_name: str = "inline"
    # from vector_compact.COMPACT_MIN_ROWS vectors a state holds int8 codes only (host_facades.retrieval.vector_cache)
    cache: DerivedStateCache = field(default_factory=DerivedStateCache)
    tasks_run: int = 0
    # db_path -> (read-only connection, file identity, last use); reused between tasks while the
    # file identity is unchanged and for at most SQLITE_IDLE_HANDLE_TTL_S of idleness.
    readers: dict = field(default_factory=dict)
    # the db_paths whose cached connection has sqlite-vec loaded (loaded at the first task that
    # needs vectors: a keyword-only search never does, and loading it costs as much as the open)
    with_vec: set = field(default_factory=set)

    def reader(self, db_path: str, ident: str, *, vec: bool = True):
        """A read-only connection to ``db_path`` whose file identity is ``ident`` (cached), with
        sqlite-vec loaded when ``vec``."""
        now = time.monotonic()
        for path, (conn, _ident, used) in list(self.readers.items()):
            if now - used > SQLITE_IDLE_HANDLE_TTL_S:
                self.drop_reader(path)
        entry = self.readers.get(db_path)
        if entry is not None and entry[1] == ident:
            self.readers[db_path] = (entry[0], ident, now)
            conn = entry[0]
        else:
            self.drop_reader(db_path)
            while len(self.readers) >= MAX_CACHED_READERS:  # least recently used first
                self.drop_reader(min(self.readers, key=lambda p: self.readers[p][2]))
            conn = open_readonly(db_path, load_vec=False)
            self.readers[db_path] = (conn, ident, now)
        if vec and db_path not in self.with_vec:
            load_sqlite_vec(conn)
            self.with_vec.add(db_path)
        return conn

    def drop_reader(self, db_path: str) -> None:
        self.with_vec.discard(db_path)
        entry = self.readers.pop(db_path, None)
        if entry is not None:
            try:
                entry[0].close()
            except Exception:
                pass


TASKS: dict[str, Callable[[Any, WorkerContext], Any]] = {}
CONTROLS: dict[str, Callable[[Any, WorkerContext], None]] = {}


def task(name: str):
    """Register ``fn(payload, ctx)`` as the task ``name``. A module of extra tasks (tests'
    diagnostics, a benchmark's probe) registers its own with this decorator and is named in the
    pool's ``task_modules``: every worker imports it at start."""

    def deco(fn):
        TASKS[name] = fn
        return fn

    return deco


def control(name: str):
    def deco(fn):
        CONTROLS[name] = fn
        return fn

    return deco


def _unreadable_as_task_error(db_path: str, exc: BaseException) -> None:
    """An index file SQLite cannot read crosses the boundary as its typed error's data (the owner
    raises IndexCorrupt / IndexUnreadable), not as a generic task failure."""
    err = unreadable(db_path, exc)
    if err is not None:
        raise TaskError.from_data(err.to_data()) from None


@control("retain")
def retain_control(payload: dict, ctx: WorkerContext) -> None:
    """Owner says: of database ``db_id`` keep only revisions ``keep`` (current + leased)."""
    ctx.cache.retain(payload["db_id"], payload.get("keep", ()))


@control("drop")
def drop_control(payload: dict, ctx: WorkerContext) -> None:
    ctx.cache.drop_database(payload.get("db_id"))


# --- read-only SQLite tasks -------------------------------------------------------------------


@task("index_state")
def index_state(payload: dict, ctx: WorkerContext) -> dict:
    """Revision, identity and counts of the index; an absent database is an empty state (upstream
    `memory/manager-search.worker.ts`)."""
    db_path = payload["db_path"]
    if not os.path.exists(db_path):
        return {"exists": False, "db_id": None, "revision": 0, "chunks": 0, "vectors": 0}
    try:
        conn = open_readonly(db_path, load_vec=False)
        try:
            with read_snapshot(conn) as revision:
                chunks, vectors = conn.execute(
                    "SELECT count(*), count(*) FILTER (WHERE length(embedding) > 0) FROM memory_index_chunks"
                ).fetchone()
            return {"exists": True, "db_id": db_identity(db_path), "revision": revision,
                    "chunks": int(chunks), "vectors": int(vectors)}
        finally:
            conn.close()
    except Exception as exc:
        _unreadable_as_task_error(db_path, exc)
        raise




@task("agent_state")
def agent_state(payload: dict, ctx: WorkerContext) -> dict | None:
    """What the owner reads when it opens an agent, read here so that the owner opens no connection
    of its own for an agent whose index is current: the ``memory_index_meta`` values of
    ``keys`` and the rows its startup catch-up compares with the files (sources, tombstones,
    skipped files), on one snapshot. payload: ``db_path``, ``keys``. Returns ``{db_id, revision,
    meta, sources, forgotten, skipped}`` (rows as lists), None when the file does not exist; a table
    or the meta the schema does not have yet reads as empty. With ``req`` (a keyword-only
    :class:`~host_facades.search.edge.SearchRequest`'s wire form), also ``search``: the ``search``
    task's answer ``(db_id, revision, reply)`` to it on the same snapshot, which the owner uses only
    once what it read here let it answer (``PooledRetriever.stash``)."""
    from host_facades.db.sqlite_read import CATCH_UP_TABLES, index_rows, meta_values
    from host_facades.search.run import run_search

    keys = [str(k) for k in payload.get("keys", ())]
    req = request_from_wire(payload["req"]) if payload.get("req") is not None else None
    if req is not None and req.qvec is not None:
        raise TaskError("InvalidRequest", "invalid_request", "agent_state searches keyword-only requests only")

    def reads(conn, db_id: str, revision: int) -> dict:
        out: dict[str, Any] = {"db_id": db_id, "revision": revision, "meta": meta_values(conn, keys)}
        for name in CATCH_UP_TABLES:
            out[name] = [list(row) for row in index_rows(conn, name)]
        if req is not None:
            out["search"] = (db_id, revision, run_search(conn, req, revision=revision, db_id=db_id).wire())
        return out

    return on_snapshot(ctx, payload["db_path"], (), reads, vec=False, retain=False)


@task("search")
def search(payload: dict, ctx: WorkerContext) -> tuple[str | None, int, SearchReply | None]:
    """A WHOLE search (retrieval + metadata + ranking + selection) on one snapshot:
    ``host_facades.search.run.run_search``, the same function in-process searches call.

    payload: ``db_path``, ``keep`` (revisions the owner still leases: derived state of other old
    revisions is dropped), ``req``, a :class:`~host_facades.search.edge.SearchRequest`, and
    optionally ``keyword``, the ``keyword`` task's answer for ``req``: used when it read the same
    file and generation as this task, else the keyword stage runs again (never stale). Returns ``(db_id, revision, reply)``;
    ``(None, 0, None)`` when the database file does not exist. A request in its wire form
    (:meth:`~host_facades.search.edge.SearchRequest.wire`, what the pooled owner sends) is answered
    in the reply's (:meth:`~host_facades.search.edge.SearchReply.wire`)."""
    from host_facades.search.run import run_search

    req = payload.get("req")
    wire = type(req) is tuple
    if wire:
        req = request_from_wire(req)
    elif not isinstance(req, SearchRequest):
        raise TaskError("InvalidRequest", "invalid_request",
                        f"the search task takes a host_facades.search.edge.SearchRequest as 'req', "
                        f"got {type(req).__name__}")

    ahead = payload.get("keyword")

    def reads(conn, db_id: str, revision: int) -> tuple[str, int, SearchReply]:
        def vector_state(conn, model):
            return ctx.cache.get_or_build(conn, (db_id, revision, model_key(model)))

        reply = run_search(conn, req, revision=revision, vector_state=vector_state, db_id=db_id,
                           keyword_ahead=None if ahead is None else tuple(ahead))
        return db_id, revision, reply.wire() if wire else reply

    done = on_snapshot(ctx, payload["db_path"], payload.get("keep", ()), reads, vec=req.qvec is not None)
    return (None, 0, None) if done is None else done


@task("keyword")
def keyword(payload: dict, ctx: WorkerContext) -> tuple[str, int, str | None, dict | None, float] | None:
    """The keyword stage of a search alone, started while the owner embeds the query: payload
    ``db_path``, ``keep`` and ``req`` (a :class:`~host_facades.search.edge.SearchRequest` in its
    wire form, ``qvec`` not needed). Returns ``(db_id, revision, tokenizer, keyword stage, ms)``
    (``host_facades.search.run.KeywordAhead``), which the ``search`` task then takes as its
    ``keyword``; None when the database file does not exist."""
    from host_facades.search.run import keyword_stage

    req = request_from_wire(payload["req"])

    def reads(conn, db_id: str, revision: int) -> tuple[str, int, str | None, dict | None, float]:
        t = time.perf_counter()
        tokenizer, stage = keyword_stage(conn, req)
        return db_id, revision, tokenizer, stage, (time.perf_counter() - t) * 1000

    return on_snapshot(ctx, payload["db_path"], payload.get("keep", ()), reads, vec=False)


def on_snapshot(ctx: WorkerContext, db_path: str, keep: Any, reads: Callable[[Any, str, int], T], *,
                vec: bool = True, retain: bool = True) -> T | None:
    """``reads(conn, db_id, revision)`` inside ONE read transaction of ``db_path`` (one
    generation), after telling the derived-state cache which revisions to keep; None when the file
    does not exist. An atomic swap of the file while it was opened is retried on the new file.
    ``vec``: the reads may use sqlite-vec (False: a keyword-only search). ``retain`` False: the
    reads use no derived state, so the cache's revisions are left as they are."""
    ctx.tasks_run += 1
    if not os.path.exists(db_path):
        return None
    for _attempt in range(3):
        before = db_identity(db_path)
        try:
            conn = ctx.reader(db_path, before, vec=vec)
        except Exception as exc:
            _unreadable_as_task_error(db_path, exc)
            raise
        try:
            with read_snapshot(conn) as revision:
                after = db_identity(db_path)
                # The file was swapped (atomic reindex) while we opened it: end the read
                # transaction first, then drop the handle (closing it inside would fail the COMMIT).
                if after == before:
                    if retain:
                        ctx.cache.retain(after, set(keep) | {revision})
                    return reads(conn, after, revision)
            ctx.drop_reader(db_path)
        except BaseException as exc:
            ctx.drop_reader(db_path)  # never reuse a handle whose task failed
            if swap_transient(exc) and _attempt < 2:  # another process swapped the file in mid-read
                wait_out_swap(_attempt)
                continue
            _unreadable_as_task_error(db_path, exc)
            raise
    raise TaskError("WorkerUnavailable", "unavailable", f"database file {db_path} kept changing identity while opening; retry the search")


# --- indexing (chunk preparation from an immutable content snapshot) ---------------------------


@task("prepare")
def prepare(payload: dict, ctx: WorkerContext) -> list:
    """``host_facades.chunking.pipeline.prepare_chunks(**payload)`` (the pure chunking pipeline, upstream
    `memory/manager-index-preparation.ts`)."""
    from host_facades.chunking.pipeline import prepare_chunks

    return prepare_chunks(**payload)


@task("prepare_many")
def prepare_many(payload: dict, ctx: WorkerContext) -> list[list]:
    """Several ``prepare`` calls in one hop: ``{"items": [kwargs, ...]}`` -> list of chunk lists."""
    from host_facades.chunking.pipeline import prepare_chunks

    return [prepare_chunks(**item) for item in payload["items"]]
