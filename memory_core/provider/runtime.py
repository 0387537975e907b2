"""The memory-core provider runtime (provider id ``memory-core``; upstream
`src/plugins/memory-provider-types.ts`, `extensions/memory-core/src/session-search-visibility.ts`).

``MemoryCoreProviderRuntime.open(params)`` returns a caller-bound :class:`MemoryCoreProvider` lease
or ``{provider: None, error}``. The lease authorizes from the supplied authority alone:

* an operator acts for the opened agent (memory and session transcripts);
* a session with a host-minted *owner-private* audience for the same agent reads memory and the
  agent's own transcripts (a sandboxed session reads memory only; a ``conversationRecall`` pass
  narrows what is admitted, upstream `extensions/memory-core/src/session-search-visibility.ts`);
* a session without an audience, a conversation audience, another agent's audience, and a host
  authority get no stored data: ``search`` returns an empty page with a warning, ``get`` raises.

The API is async; blocking engine work runs in ``asyncio.to_thread`` and ``context.assert_current``
is called before each I/O and again after each blocking call, so nothing is read or released under
stale authority. Shared state (one engine per agent, cursor pins, embedding-failure times) lives in
the runtime; ``close`` releases only the lease.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import logging
import math
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from host_facades.db.chunk_rows import memory_candidates, provenance_of, read_chunks
from host_facades.ranking.rank import citation_for, project_keys_of
from memory_core.errors import (
    Aborted,
    AuthorityNotCurrent,
    CursorExpired,
    Forbidden,
    InvalidRequest,
    MemoryCoreError,
    MemoryManagerReloading,
    ProviderUnavailable,
)
from memory_core.slot.awaiting import race_with_signal
from memory_core.provider.lifecycle import RELOADING, ReloadFence
from memory_core.contract.types import (
    ConversationRecallContext,
    MemoryCallerContext,
    MemoryCandidateRequest,
    MemoryCitation,
    MemoryGetNotFound,
    MemoryGetOk,
    MemoryGetRequest,
    MemoryHealth,
    MemoryProviderCapabilities,
    MemoryProviderOpenParams,
    MemoryProviderOpenResult,
    MemoryReference,
    MemorySearchPage,
    MemorySearchRequest,
    OperatorAuthority,
    OwnerPrivateAudience,
    SessionAuthority,
)
from memory_core.read_file import slice_text
from memory_core.surfaces.render import provider_hit
from memory_core.search.types import SearchHit
from memory_core.store.reader import CachedReader
from memory_core.validation import MAX_SAFE_INTEGER, cap_results, check_query

log = logging.getLogger("memory_core.provider")

PROVIDER_ID = "memory-core"
CAPABILITIES = MemoryProviderCapabilities(sources=("memory", "sessions"), pagination=True,
                                          candidates=("trigger", "project"), project_filter=True)
DISABLED = "Memory is disabled for this agent."
# Agent tools a host may allow for deep recall (memory_core.capability registers them).
RECALL_TOOL_NAMES: tuple[str, ...] = ("memory_search", "memory_get")
OPEN_LOCK_STRIPES = 16       # agents opened at once at most (one per stripe; the same agent never twice)
AGENT_CONFIGS_KEPT = 2048    # agent config views kept (about 25 KB each); the others are merged again when asked
RESULT_WINDOW = 200          # at most this many hits are ranked once per search and paged with cursors
WINDOW_PAGES = 4             # a search ranks up to this many pages ahead (coverage "partial" beyond)
DEFAULT_CANDIDATES = 48
MAX_CANDIDATES = 200
_CHUNK_ID = re.compile(r"^[0-9a-f]{64}$")
_ACTIVE_MEMORY_CHILD = re.compile(r"^(?P<anchor>.+):active-memory:[0-9a-f]{12}$")

DEGRADED_EMBEDDING = ("The last memory embedding request failed. Check the memory-core log; "
                      "fix the embedding provider settings, then retry memory search.")
UNAVAILABLE_STORE = "The memory-core index could not be read. Check the memory-core log."
NOT_INDEXED = "The memory index has not been built yet. Run `memory-core index`."
PAUSED_INDEX = ("Memory search is paused: the index was built with different settings ({keys} changed). "
                "Run `memory-core index --force`.")
DEGRADED_SYNC = ("The last memory index sync failed, so search may miss recent changes. Check the memory-core "
                 "log, then run `memory-core index`.")
EMBEDDING_FAILED = "memory-core: memory search embedding failed; check the memory-core log"


# --- authorization ---------------------------------------------------------------------------


def agent_of_session_key(session_key: str) -> str | None:
    """``agent:<agentId>:...`` -> agentId (used only to check a recall pass's anchor, never to grant)."""
    parts = session_key.split(":")
    return parts[1] if len(parts) >= 3 and parts[0] == "agent" and parts[1] else None


@dataclass(frozen=True)
class ReadGrant:
    """What one caller may read: a denial reason, or the admitted sources and transcript rule."""

    denial: str | None = None
    sources: frozenset[str] = frozenset()
    notes: tuple[str, ...] = ()
    recall: ConversationRecallContext | None = None
    anchor_transcript: str | None = None      # excluded under a recall pass ("sessions/<id>.jsonl")
    transcripts_unvetted: bool = False        # a pass whose anchor transcript cannot be identified

    def admits(self, source: str, path: str) -> bool:
        if self.denial or source not in self.sources:
            return False
        if source != "sessions" or self.recall is None:
            return True
        if self.transcripts_unvetted or ".jsonl.deleted." in path:
            return False
        return path != self.anchor_transcript

    @property
    def fingerprint(self) -> str:
        return json.dumps([self.denial, sorted(self.sources), self.anchor_transcript, self.transcripts_unvetted,
                           None if self.recall is None else self.recall.to_json()], sort_keys=True)


def resolve_read_grant(authority: Any, agent_id: str) -> ReadGrant:
    """Authorize from the supplied authority alone (checklist 23-26); never widened by lookups."""
    both = frozenset({"memory", "sessions"})
    if isinstance(authority, OperatorAuthority):
        return ReadGrant(sources=both)
    if not isinstance(authority, SessionAuthority):
        return ReadGrant(denial="host operations cannot read stored memories")
    audience = authority.audience
    if not isinstance(audience, OwnerPrivateAudience):
        return ReadGrant(denial="this session has no owner-private memory audience")
    if audience.agent_id != agent_id:
        return ReadGrant(denial="the memory audience belongs to another agent")
    recall = authority.conversation_recall
    if recall is None:
        if authority.sandboxed:
            return ReadGrant(sources=frozenset({"memory"}),
                             notes=("session transcripts were not searched: the session is sandboxed",))
        return ReadGrant(sources=both)
    requester = authority.session_key
    anchor = recall.anchor_session_key
    child = _ACTIVE_MEMORY_CHILD.match(requester)
    valid = (not authority.sandboxed and recall.scope == "same-agent-private"
             and recall.corpus in ("sessions", "configured")
             and (requester == anchor or (child is not None and child.group("anchor") == anchor))
             and agent_of_session_key(anchor) == agent_id)
    if not valid:
        note = "the conversation recall pass does not apply to this session"
        if recall.corpus == "configured":
            return ReadGrant(sources=frozenset({"memory"}), notes=(f"session transcripts were not searched: {note}",))
        return ReadGrant(sources=frozenset(), notes=(f"stored memories were not searched: {note}",))
    sources = frozenset({"sessions"}) if recall.corpus == "sessions" else both
    anchor_id = authority.session_id if requester == anchor else None
    return ReadGrant(sources=sources, recall=recall,
                     anchor_transcript=f"sessions/{anchor_id}.jsonl" if anchor_id else None,
                     transcripts_unvetted=anchor_id is None)


# --- helpers -------------------------------------------------------------------------------------


def project_admits(project_key: str | None, active: list[str] | None) -> bool:
    """``activeProjectKeys`` filter: global entries pass; keyed entries need all keys active."""
    if not active:
        return True
    keys = project_keys_of(project_key)
    if keys is None:
        return True
    return bool(keys) and all(k in active for k in keys)


def slice_lines(text: str, from_: int | None, lines: int | None) -> dict[str, Any]:
    """1-based ``from``/``lines`` window over ``text`` by the one line rule of every ``get``
    (:func:`memory_core.read_file.slice_text`); reports from, lines, truncated, nextFrom."""
    start = max(1, int(from_ or 1))
    selected, more, last_ended = slice_text(text, start, lines)
    body = "\n".join(selected) + ("\n" if selected and (more or last_ended) else "")
    out: dict[str, Any] = {"text": body, "from_": start, "lines": len(selected), "truncated": more}
    if more:
        out["next_from"] = start + len(selected)
    return out


# --- store reads (run in a thread) ----------------------------------------------------------


def read_store_facts(conn: Any) -> dict[str, Any]:
    """Counts and revision, read in one transaction."""
    conn.execute("BEGIN")
    try:
        files = int(conn.execute("SELECT count(*) FROM memory_index_sources").fetchone()[0])
        chunks = int(conn.execute("SELECT count(*) FROM memory_index_chunks").fetchone()[0])
        row = conn.execute("SELECT revision FROM memory_index_state WHERE id = 1").fetchone()
    finally:
        conn.execute("COMMIT")
    return {"files": files, "chunks": chunks, "revision": int(row[0]) if row else 0}


# --- cursors ---------------------------------------------------------------------------------


class CursorCodec:
    """Opaque, signed cursors: ``base64url(json{t: pin, r: revision, o: offset, q: search hash}).mac``.

    The pin (see :class:`memory_core.generations.CursorPins`) holds the ranked result list of one
    index generation for the cursor TTL; the revision is rechecked against it on every page.
    """

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or secrets.token_bytes(32)

    def _mac(self, payload: str) -> str:
        return base64.urlsafe_b64encode(hmac.new(self._secret, payload.encode(), hashlib.sha256).digest()[:16]
                                        ).decode().rstrip("=")

    def encode(self, token: str, offset: int, search_hash: str, revision: int) -> str:
        payload = base64.urlsafe_b64encode(json.dumps({"t": token, "r": revision, "o": offset, "q": search_hash},
                                                      separators=(",", ":")).encode()).decode().rstrip("=")
        return f"{payload}.{self._mac(payload)}"

    def decode(self, cursor: str) -> tuple[str, int, str, int]:
        try:
            payload, mac = cursor.rsplit(".", 1)
            if not hmac.compare_digest(mac, self._mac(payload)):
                raise ValueError("bad mac")
            data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
            return str(data["t"]), int(data["o"]), str(data["q"]), int(data["r"])
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidRequest("memory-core: the cursor is not a valid memory-core cursor; "
                                 "run the search again without a cursor") from exc


# --- the runtime -----------------------------------------------------------------------------


class MemoryCoreProviderRuntime:
    """``providerRuntime`` for memory-core: shared engines per agent, cursor pins, health facts."""

    def __init__(self, config: Any = None, *, core_factory: Callable[[Any, str], Any] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if config is None:
            from memory_core.config import MemoryCoreConfig

            config = MemoryCoreConfig()
        self.config = config
        self._core_factory = core_factory
        self._clock = clock
        from memory_core.open_agents import HELD, OpenAgents, fd_bounded_cap

        # open index owners, least recently used closed past gateway.maxOpenAgents; of those, the
        # ones holding SQLite connections past gateway.maxOpenIndexes (lowered to fit the
        # open-files limit) close them
        gateway = config.gateway
        self._cores = OpenAgents(int(gateway.max_open_agents))
        HELD.cap = fd_bounded_cap(int(gateway.max_open_indexes))
        self._lock = threading.RLock()  # cores/engines are created from the loop and from worker threads
        self._agent_configs: OrderedDict[str, Any] = OrderedDict()  # agent_config's views, LRU
        self._views_lock = threading.Lock()
        self._open_locks = [threading.RLock() for _ in range(OPEN_LOCK_STRIPES)]
        self._embedding_failures: dict[str, float] = {}
        self.codec = CursorCodec()
        from memory_core.generations import CursorPins, GenerationLeases

        self.pins = CursorPins(GenerationLeases(), ttl_s=float(config.pool.cursor_ttl_s), clock=clock)
        self.fence = ReloadFence(lambda: {a: str(c.config.provider) for a, c in self._cores.items()},
                                 self.close_agent)

    # --- agents ---------------------------------------------------------------------------

    def agent_config(self, agent_id: str) -> Any | None:
        """The agent's config view (``for_agent``, ~1 ms of validation), kept for the most recently
        asked :data:`AGENT_CONFIGS_KEPT` agents (every v2 request asks); None for an unknown agent."""
        cfg = self.config
        if agent_id == cfg.agent_id:
            return cfg
        if agent_id not in cfg.agents:
            return None
        views = self._agent_configs
        with self._views_lock:
            view = views.get(agent_id)
            if view is not None:
                views.move_to_end(agent_id)
                return view
        view = cfg.for_agent(agent_id)
        with self._views_lock:
            views[agent_id] = view
            while len(views) > AGENT_CONFIGS_KEPT:
                views.popitem(last=False)
        return view

    def core(self, agent_id: str) -> Any:
        """The agent's open index owner, opened now if it is not. Agents open in parallel (an open
        waits on SQLite, the file system and the worker pool, not only on this process): one agent
        is opened once, under its own stripe of :data:`OPEN_LOCK_STRIPES` locks."""
        core = self._cores.get(agent_id)
        if core is not None:
            self.fence.check(str(core.config.provider))
            return core
        with self._open_lock(agent_id):
            return self._core_locked(agent_id)

    def _open_lock(self, agent_id: str) -> Any:
        return self._open_locks[hash(agent_id) % OPEN_LOCK_STRIPES]

    @property
    def open_agents(self) -> Any:
        """The open index owners (:class:`~memory_core.open_agents.OpenAgents`: LRU, capped)."""
        return self._cores

    def opened_core(self, agent_id: str) -> Any:
        """The agent's engine if it is already open, else None (never opens, never blocks on I/O)."""
        return self._cores.get(agent_id)

    def _core_locked(self, agent_id: str) -> Any:
        core = self._cores.get(agent_id)
        if core is not None:
            self.fence.check(str(core.config.provider))
        else:
            cfg = self.agent_config(agent_id)
            self.fence.check(str(getattr(cfg, "provider", "none")))
            if self._core_factory is not None:
                core = self._core_factory(cfg, agent_id)
            else:
                from memory_core.core import MemoryCore

                core = MemoryCore(config=cfg, agent_id=agent_id)
            self._cores[agent_id] = core
        return core

    def engine(self, agent_id: str) -> Any:
        """The agent's search engine: the one its index owner (``MemoryCore``) holds, with the same
        pool and freshness check as every other surface (creating it may load the embedding model)."""
        return self.core(agent_id).search_engine

    def reader(self, agent_id: str) -> CachedReader:
        """The agent's read-only connection (the index owner's; reopened after a file swap)."""
        return self.core(agent_id).reader

    def record_embedding(self, agent_id: str, ok: bool) -> None:
        if ok:
            self._embedding_failures.pop(agent_id, None)
        else:
            self._embedding_failures[agent_id] = time.time() * 1000.0

    def embedding_failure(self, agent_id: str) -> float | None:
        return self._embedding_failures.get(agent_id)

    async def open(self, params: MemoryProviderOpenParams) -> MemoryProviderOpenResult:
        cfg = self.agent_config(params.agent_id)
        if cfg is None or not getattr(cfg, "enabled", True):
            return MemoryProviderOpenResult(provider=None, error=DISABLED)
        params.context.assert_current()
        try:
            self.core(params.agent_id)
        except MemoryManagerReloading:
            return MemoryProviderOpenResult(provider=None, error=RELOADING)
        except MemoryCoreError as exc:
            log.warning("memory-core: cannot open agent %s: %s", params.agent_id, exc)
            return MemoryProviderOpenResult(provider=None, error="memory-core cannot open this agent's workspace; "
                                                                 "check the memory-core configuration and log")
        return MemoryProviderOpenResult(provider=MemoryCoreProvider(self, params.agent_id, params.context,
                                                                    params.purpose))

    # --- lifecycle hooks shared with the legacy runtime (upstream `src/plugins/registry-contribution-types.ts`)

    def prepare_reload(self, retire_runtime: bool = False, retiring_embedding_providers: Any = ()) -> Any:
        """``prepareReload``: fence engines a reload retires; ``await .drain()`` closes them, ``.resume()``."""
        return self.fence.prepare(retire_runtime, retiring_embedding_providers)

    def close_agent(self, agent_id: str) -> None:
        """``closeMemorySearchManager``: close one agent's index owner (its engine and reader with it;
        reopened on next use)."""
        with self._lock, self._open_lock(agent_id):
            core = self._cores.pop(agent_id, None)
        if core is not None:
            core.close()

    async def close_memory_search_manager(self, *, cfg: Any = None, agent_id: str) -> None:
        await asyncio.to_thread(self.close_agent, agent_id)

    async def close_all_memory_search_managers(self) -> None:
        await asyncio.to_thread(self.close_all)

    def close_all(self) -> None:
        """``closeAllMemorySearchManagers``: close every engine and core (host shutdown only)."""
        with contextlib.ExitStack() as held:
            held.enter_context(self._lock)
            for lock in self._open_locks:  # no agent is being opened while they close
                held.enter_context(lock)
            self._close_all_locked()

    def _close_all_locked(self) -> None:
        self.pins.close()
        for core in self._cores.values():
            core.close()
        self._cores.clear()


class MemoryCoreProvider:
    """One caller's lease. Methods are async; see the module docstring for the authorization rules."""

    capabilities = CAPABILITIES

    def __init__(self, runtime: MemoryCoreProviderRuntime, agent_id: str, context: MemoryCallerContext,
                 purpose: str | None) -> None:
        self._runtime = runtime
        self.agent_id = agent_id
        self._context = context
        self.purpose = purpose or "default"
        self._grant = resolve_read_grant(context.authority, agent_id)
        self._closed = False

    # --- currency and denial -------------------------------------------------------------

    def _check(self) -> None:
        if self._closed:
            raise AuthorityNotCurrent("memory-core: this memory provider lease is closed")
        self._context.assert_current()
        if self._context.signal is not None:
            self._context.signal.throw_if_aborted()

    def _assert_read_allowed(self) -> None:
        if self._grant.denial:
            raise Forbidden(f"memory-core: memory access denied: {self._grant.denial}")
        self._check()

    async def _io(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Blocking work in a thread, with currency checked right before and right after it."""
        self._check()
        result = await race_with_signal(asyncio.to_thread(fn, *args, **kwargs), self._context.signal)
        self._check()
        return result

    async def _read(self, fn: Callable[..., Any], *args: Any) -> Any:
        """A store read on the agent's cached read-only connection (in a thread, currency checked)."""
        reader = self._runtime.reader(self.agent_id)
        return await self._io(reader.run, lambda conn: fn(conn, *args))

    @property
    def _cfg(self) -> Any:
        return self._runtime.core(self.agent_id).config

    @property
    def _db_path(self) -> str:
        return self._runtime.core(self.agent_id).db_path

    # --- search --------------------------------------------------------------------------

    def _search_hash(self, req: MemorySearchRequest, query: str, min_score: float) -> str:
        data = [self.agent_id, query, sorted(req.sources or []), min_score, bool(req.lexical_only),
                sorted(req.active_project_keys or []), self._grant.fingerprint]
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:32]

    async def search(self, request: MemorySearchRequest | dict[str, Any]) -> MemorySearchPage:
        req = request if isinstance(request, MemorySearchRequest) else MemorySearchRequest.model_validate(request)
        grant = self._grant
        if grant.denial:
            self._check()
            return MemorySearchPage(hits=[], warning=f"memory-core: stored memories were not searched: {grant.denial}")
        self._check()
        query = req.query.strip()
        if not query:
            return MemorySearchPage(hits=[], coverage="complete")
        cfg = self._cfg
        check_query(cfg, query)  # the query budget, before any embedding or store work
        max_results = _clamp_results(req.max_results, int(cfg.query.max_results))
        min_score = float(req.min_score) if req.min_score is not None else float(cfg.query.min_score)
        if not math.isfinite(min_score):
            raise InvalidRequest("minScore must be a finite number")
        search_hash = self._search_hash(req, query, min_score)
        if req.cursor is not None:
            return self._next_page(req.cursor, search_hash, max_results)

        requested = list(req.sources) if req.sources else list(cfg.sources)
        for source in requested:
            if source not in ("memory", "sessions"):
                raise InvalidRequest(f"memory-core: unknown source {source!r}; use memory and/or sessions")
        sources = [s for s in requested if s in grant.sources]
        notes = [f"memory-core: {n}" for n in grant.notes if _note_applies(n, requested)]
        if not sources:
            return MemorySearchPage(hits=[], coverage="complete", warning=" ".join(notes) or None)

        if "sessions" in sources and "sessions" not in cfg.sources:
            notes.append("memory-core: session transcripts are not indexed for this agent")
        core = self._runtime.core(self.agent_id)
        window = result_window(max_results)
        # the owner's one search verb: its freshness check (an answer that may miss changes says so),
        # the query embedding, its engine and its pool, as for v1, MCP and the CLI; the candidates
        # are those of one page (as v1 ranks them), kept up to the window for the cursors
        raw = await self._io(core.search, query, max_results=window, min_score=min_score, sources=sources,
                             lexical_only=bool(req.lexical_only),
                             active_project_keys=req.active_project_keys or None,
                             candidates_for=max_results, on_embedding=self._embedded)
        stale = raw.staleness
        if stale and stale.get("warning"):
            notes.append(f"memory-core: {stale['warning']}")
        # each hit carries its chunk's hash and recall metadata, read in the search's own snapshot;
        # the admitted window is pinned as SearchHits and rendered a page at a time
        active = req.active_project_keys
        hits = [h for h in raw if grant.admits(h.source, h.path) and project_admits(h.project_key, active)]
        coverage = "partial" if len(raw) >= window else "complete"
        warning = " ".join(notes) or None
        next_cursor = None
        if len(hits) > max_results:
            db_id = _db_identity(self._db_path)
            revision = int(raw.revision or 0)
            token = self._runtime.pins.pin(db_id, revision, {"hits": hits, "coverage": coverage, "warning": warning})
            next_cursor = self._runtime.codec.encode(token, max_results, search_hash, revision)
        return MemorySearchPage(hits=[provider_hit(h, PROVIDER_ID) for h in hits[:max_results]],
                                next_cursor=next_cursor, coverage=coverage, warning=warning)

    def _next_page(self, cursor: str, search_hash: str, max_results: int) -> MemorySearchPage:
        token, offset, cursor_hash, cursor_revision = self._runtime.codec.decode(cursor)
        if cursor_hash != search_hash:
            raise InvalidRequest("memory-core: the cursor belongs to a different search (query, sources, filters "
                                 "or caller changed); run the search again without a cursor")
        _db_id, revision, state = self._runtime.pins.get(token)   # CursorExpired after the TTL
        if revision != cursor_revision:
            raise CursorExpired("memory-core: the cursor's index generation is no longer pinned; "
                                "run the search again without a cursor")
        hits = state["hits"]
        page = [provider_hit(h, PROVIDER_ID) for h in hits[offset:offset + max_results]]
        nxt = offset + max_results
        next_cursor = self._runtime.codec.encode(token, nxt, search_hash, revision) if nxt < len(hits) else None
        return MemorySearchPage(hits=page, next_cursor=next_cursor, coverage=state["coverage"],
                                warning=state["warning"])

    def _embedded(self, error: BaseException | None) -> None:
        """The engine's ``on_embedding`` hook: a failed query embedding is a generic error and marks
        health degraded (the log keeps the cause); after one, the lease must still be current before
        the store is read."""
        if error is not None:
            self._runtime.record_embedding(self.agent_id, ok=False)
            log.warning("memory-core: query embedding failed for agent %s: %s", self.agent_id, error)
            raise ProviderUnavailable(EMBEDDING_FAILED) from error
        self._runtime.record_embedding(self.agent_id, ok=True)
        self._check()  # authority may lapse while the query embeds: never read the store then

    # --- get -----------------------------------------------------------------------------

    async def get(self, request: MemoryGetRequest | dict[str, Any]) -> MemoryGetOk | MemoryGetNotFound:
        req = request if isinstance(request, MemoryGetRequest) else MemoryGetRequest.model_validate(request)
        self._assert_read_allowed()
        for name, value in (("from", req.from_), ("lines", req.lines)):
            if value is not None and value < 1:
                raise InvalidRequest(f"{name} must be a positive integer")
            if value is not None and value > MAX_SAFE_INTEGER:
                raise InvalidRequest(f"{name} must be a positive integer no larger than {MAX_SAFE_INTEGER}")
        ref = req.reference
        if ref.provider_id != PROVIDER_ID or not _CHUNK_ID.match(ref.id):
            return MemoryGetNotFound()
        try:
            rows = await self._read(read_chunks, [ref.id])
        except FileNotFoundError:
            return MemoryGetNotFound()
        row = rows.get(ref.id)
        if row is None or (ref.revision is not None and ref.revision != row["hash"]):
            return MemoryGetNotFound()  # a stale reference never resolves to other content
        if not self._grant.admits(row["source"], row["path"]):
            raise Forbidden("memory-core: memory access denied: this caller may not read that record")
        out = slice_lines(row["text"], req.from_, req.lines)
        reference = MemoryReference(provider_id=PROVIDER_ID, id=row["id"], revision=row["hash"])
        citation = MemoryCitation(label=citation_for(row["path"], row["start_line"], row["end_line"]),
                                  reference=reference, start_line=row["start_line"], end_line=row["end_line"])
        return MemoryGetOk(reference=reference, citations=[citation], **out)

    # --- health --------------------------------------------------------------------------

    async def health(self) -> MemoryHealth:
        self._check()
        cfg = self._cfg
        details: dict[str, Any] = {"backend": "memory-core", "provider": str(cfg.provider),
                                   "sources": list(cfg.sources)}
        if cfg.model:
            details["model"] = str(cfg.model)
        try:
            facts = await self._read(read_store_facts)
        except (AuthorityNotCurrent, Forbidden, Aborted):
            raise
        except FileNotFoundError:
            return MemoryHealth(status="degraded", message=NOT_INDEXED, details=details)
        except Exception as exc:  # noqa: BLE001 - health never carries raw backend errors
            log.warning("memory-core: health could not read the index of agent %s: %s", self.agent_id, exc)
            return MemoryHealth(status="unavailable", message=UNAVAILABLE_STORE, details=details)
        if not self._grant.denial:
            details.update(facts)
        core = self._runtime.core(self.agent_id)
        try:
            identity = await self._io(core.identity_state)
        except (AuthorityNotCurrent, Forbidden, Aborted):
            raise
        except Exception:  # noqa: BLE001 - the store read above succeeded; the search reports the rest
            identity = {}
        if identity.get("state") == "mismatch":  # every search is refused until the rebuild
            keys = ", ".join(identity.get("mismatch") or []) or "settings"
            # the search's own message (what differs, both fixes; no paths), else the generic one
            message = identity.get("message") or PAUSED_INDEX.format(keys=keys)
            return MemoryHealth(status="unavailable", message=message, details=details)
        from memory_core.freshness import watch_fallback

        fallback = watch_fallback(core)
        if fallback is not None:  # said once here and in status, not per retry in the log
            details["watcher"] = f"reconcile: {fallback}"
        if core.last_sync_error:
            return MemoryHealth(status="degraded", message=DEGRADED_SYNC, details=details)
        failed_at = self._runtime.embedding_failure(self.agent_id)
        if failed_at is not None:
            return MemoryHealth(status="degraded", message=DEGRADED_EMBEDDING,
                                details={**details, "embeddingFailedAtMs": int(failed_at)})
        return MemoryHealth(status="ready", details=details)

    # --- candidates ----------------------------------------------------------------------

    async def candidates(self, request: MemoryCandidateRequest | dict[str, Any]) -> MemorySearchPage:
        req = request if isinstance(request, MemoryCandidateRequest) else MemoryCandidateRequest.model_validate(request)
        if self._grant.denial:
            self._check()
            return MemorySearchPage(hits=[], warning=f"memory-core: stored memories were not searched: "
                                                     f"{self._grant.denial}")
        self._check()
        if req.kind not in ("trigger", "project"):
            raise InvalidRequest(f"memory-core: unknown candidates kind {req.kind!r}; use trigger or project")
        if "memory" not in self._grant.sources:
            return MemorySearchPage(hits=[], coverage="complete")
        limit = DEFAULT_CANDIDATES if req.limit is None else max(1, min(MAX_CANDIDATES, int(req.limit)))
        try:
            rows = await self._read(memory_candidates, req.kind)
        except FileNotFoundError:
            return MemorySearchPage(hits=[], coverage="complete")
        hits = []
        for row in rows:
            if not project_admits(row["project_key"], req.active_project_keys):
                continue
            hit = provider_hit(_candidate_hit(row), PROVIDER_ID, scored=False)
            if hit.automatic_recall is None or not hit.automatic_recall.eligible:
                continue
            if req.kind == "project" and not hit.automatic_recall.project_keys:
                continue
            hits.append(hit)
        return MemorySearchPage(hits=hits[:limit], coverage="complete" if len(hits) <= limit else "partial")

    # --- refresh / close -----------------------------------------------------------------

    async def refresh(self) -> None:
        """Provider-owned re-index (an incremental sync); not a repair or deletion API."""
        core = self._runtime.core(self.agent_id)
        await self._io(core.sync, reason="provider-refresh")

    async def close(self) -> None:
        """Release this lease only; engines and the store are shared with other callers."""
        self._closed = True


def _candidate_hit(row: dict[str, Any]) -> SearchHit:
    """A candidates row as the one hit type (it has no score: the provider hit carries none)."""
    return SearchHit(id=row["id"], path=row["path"], start_line=row["start_line"], end_line=row["end_line"],
                     score=0.0, snippet=row["text"], source=row["source"], importance=row["importance"],
                     triggers=row["triggers"], project_key=row["project_key"],
                     provenance=provenance_of(row), hash=row["hash"])


def result_window(max_results: int) -> int:
    """How many hits a search of ``max_results`` per page ranks (and pins for its cursor pages)."""
    return min(RESULT_WINDOW, max(max_results * WINDOW_PAGES, 24))


def _note_applies(note: str, requested: list[str]) -> bool:
    return "sessions" in requested or not note.startswith("session transcripts")


def _clamp_results(value: int | None, default: int) -> int:
    n = default if value is None else int(value)
    return cap_results(n)


def _db_identity(db_path: str) -> str | None:
    from host_facades.db.sqlite_read import db_identity

    try:
        return db_identity(db_path)
    except OSError:
        return None
