"""The agent tools ``memory_search`` and ``memory_get`` (upstream `extensions/memory-core/src/tools.ts`,
`host/read-file.ts`): served over MCP by
``memory-core mcp`` and registered by the memory capability (``memory_core.capability``).

``MemoryTools.search`` follows upstream's tool (``extensions/memory-core/src/tools.ts``, 2026.9.6):

* a per-call deadline (30 s): when it passes, the memory-file keyword matches are returned with
  ``partial: true`` and a warning (session transcripts excluded), or, without any, the unavailable
  result with ``timedOut`` - never a hang;
* a failure cooldown: after a failed search the same agent gets the unavailable result for 60 s
  without searching (a config change lifts it);
* ``citations`` (``auto``/``on``/``off``): whether each snippet ends in ``Source: path#L..``; ``auto``
  cites in direct chats (a session key without a ``group`` or ``channel`` token, or none).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, is_dataclass
from typing import Any

from memory_core.errors import InvalidRequest, MemoryCoreError, ReferenceNotFound, redact_paths
from memory_core.surfaces.render import mcp_result
from memory_core.validation import MAX_SAFE_INTEGER, check_query, is_finite_number, shown

log = logging.getLogger("memory_core.tools")

DEFAULT_MEMORY_SEARCH_TIMEOUT_MS = 30_000
MEMORY_SEARCH_TOOL_COOLDOWN_MS = 60_000
CORPORA = ("memory", "wiki", "all", "sessions")
GET_CORPORA = ("memory", "wiki", "all")
PARTIAL_WARNING = ("Only memory-file keyword matches are included; semantic memory retrieval did not finish within "
                   "the search time limit. Session transcript results are not included.")

SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What to look for in the agent's memory."},
        "maxResults": {"type": "integer", "minimum": 1, "description": "Most results to return."},
        "minScore": {"type": "number", "description": "Drop results scoring below this (0..1)."},
        "corpus": {"type": "string", "enum": list(CORPORA), "description": "memory, sessions, wiki or all."},
    },
    "required": ["query"],
    "additionalProperties": False,
}
GET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "Workspace-relative path: MEMORY.md or memory/**/*.md."},
        "from": {"type": "integer", "minimum": 1, "description": "1-based first line."},
        "lines": {"type": "integer", "minimum": 1, "description": "Number of lines to read."},
        "corpus": {"type": "string", "enum": list(GET_CORPORA)},
    },
    "required": ["path"],
    "additionalProperties": False,
}
SEARCH_DESCRIPTION = ("Search the agent's memory files (MEMORY.md, memory/**/*.md) and, when configured, "
                      "session transcripts. Returns ranked snippets with path#line citations.")
GET_DESCRIPTION = "Read lines of a memory file found by memory_search (default 120 lines)."

# What the 2026.9.6 host's own tools answer where memory-core's MCP tools say more (host_search/host_get).
WIKI_NOT_REGISTERED = "Wiki corpus is not registered; results do not cover that requested corpus."
SESSIONS_OFF_ERROR = "Session transcript search is not enabled."
SESSIONS_OFF_WARNING = "Session transcript search is unavailable for this agent."
SESSIONS_OFF_ACTION = ("If an exact session-history capability is available for this run, use it. Otherwise, ask the "
                       "operator to enable semantic session search by enabling memory.search.experimental.sessionMemory "
                       "and adding \"sessions\" to memory.search.sources.")
PATH_NOT_ALLOWED = "path is not an allowed Markdown memory file"


class ToolArgumentError(ValueError):
    """A tool argument has the wrong type or value; the message says which and what is allowed."""


@dataclass(frozen=True)
class ToolContract:
    """A registered agent tool: name, label, description, JSON-Schema parameters and the function."""

    name: str
    label: str
    description: str
    parameters: dict[str, Any]
    execute: Callable[..., dict[str, Any]]


def _positive_int(args: dict[str, Any], key: str) -> int | None:
    value = args.get(key)
    if value is None:
        return None
    if not is_finite_number(value) or not float(value).is_integer() or value < 1:
        raise ToolArgumentError(f"{key} must be a positive integer, got {shown(value)}")
    if value > MAX_SAFE_INTEGER:
        raise ToolArgumentError(f"{key} must be a positive integer no larger than {MAX_SAFE_INTEGER}, "
                                f"got {shown(value)}")
    return int(value)


def _camel_read(result: Any) -> dict[str, Any]:
    """A ReadResult (dataclass, model or dict) in the tool's camelCase form, None fields omitted."""
    if hasattr(result, "to_dict"):
        data = result.to_dict()
    elif hasattr(result, "model_dump"):
        data = result.model_dump(by_alias=True, exclude_none=True)
    elif is_dataclass(result):
        data = asdict(result)  # type: ignore[arg-type]
    else:
        data = dict(result)
    names = {"from_": "from", "next_from": "nextFrom"}
    return {names.get(k, k): v for k, v in data.items() if v is not None}


def chat_type(session_key: str | None) -> str:
    """``deriveChatTypeFromSessionKey``: ``channel``/``group`` from the key's tokens, else ``direct``."""
    parts = (session_key or "").strip().lower().split(":")
    if len(parts) < 3 or parts[0] != "agent" or not parts[1]:
        return "direct"
    tokens = {t for t in parts[2:] if t}
    return "channel" if "channel" in tokens else "group" if "group" in tokens else "direct"


def include_citations(mode: str, session_key: str | None) -> bool:
    return mode == "on" or (mode != "off" and chat_type(session_key) == "direct")


# upstream's answer of a memory_search whose agent has memory search disabled
# (extensions/memory-core/index.ts createLazyMemoryTool: the tool did not load)
DISABLED_RESULT: dict[str, Any] = {"disabled": True, "unavailable": True, "error": "memory search unavailable"}


def unavailable_result(error: str | None, *, agent_id: str | None = None, deadline: bool = False,
                       timeout_ms: int = DEFAULT_MEMORY_SEARCH_TIMEOUT_MS, warning: str | None = None,
                       action: str | None = None) -> dict[str, Any]:
    """``buildMemorySearchUnavailableResult``: the result an agent gets when memory search failed
    (the error without host paths; the log keeps them). ``warning``/``action`` override the derived ones."""
    reason = (error or "memory search unavailable").strip() or "memory search unavailable"
    if reason != redact_paths(reason):
        log.warning("memory_search failed: %s", reason)
        reason = redact_paths(reason)
    low = reason.lower()
    overrides = (warning, action)
    if any(w in low for w in ("insufficient_quota", "quota", "429")):
        warning = "Memory search is unavailable because the embedding provider quota is exhausted."
        action = "Top up or switch embedding provider, then retry memory_search."
    elif deadline:
        warning = "Memory search did not finish within its time limit."
        action = (f"Retry memory_search after a short wait: a memory-corpus timeout pauses retries for up to a "
                  f"minute. If memory-corpus timeouts persist, run: memory-core status --deep --agent {agent_id}, "
                  f"and rebuild with memory-core index --force --agent {agent_id} only if it reports the index "
                  "dirty or incomplete" if agent_id else
                  "Retry memory_search after a short wait. If memory-corpus timeouts persist, inspect this agent's "
                  "memory index before rebuilding it.")
    else:
        warning = "Memory search is unavailable due to an embedding/provider error."
        action = "Check embedding provider configuration and retry memory_search."
    warning = overrides[0] if overrides[0] is not None else warning
    action = overrides[1] if overrides[1] is not None else action
    out: dict[str, Any] = {"results": [], "disabled": True, "unavailable": True}
    if deadline:
        out.update(timedOut=True, timeoutMs=timeout_ms)
    out.update(error=reason, warning=warning, action=action, debug={"warning": warning, "action": action,
                                                                     "error": reason})
    return out


def _run_with_deadline(fn: Callable[[], Any], timeout_s: float) -> tuple[bool, Any, BaseException | None]:
    """Run ``fn`` in a daemon thread: (finished, value, error). A search past the deadline keeps
    running in the background (it cannot be interrupted) and its result is dropped."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name="memory_search", daemon=True).start()
    if not done.wait(timeout_s):
        return False, None, None
    return True, box.get("value"), box.get("error")


class MemoryTools:
    """The two tools over one agent's engine (opened lazily; blocking work runs in a thread).

    ``core_factory`` supplies a shared engine (the capability's), which ``close`` then leaves open;
    ``clock`` (monotonic seconds) times the failure cooldown.
    """

    def __init__(self, config: Any, *, core_factory: Callable[[], Any] | None = None,
                 timeout_ms: int = DEFAULT_MEMORY_SEARCH_TIMEOUT_MS, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.timeout_ms = int(timeout_ms)
        self._core_factory = core_factory
        self._clock = clock
        self._core: Any = None
        self._cooldown: tuple[float, str, bool] | None = None  # (until, error, deadline)
        self._lock = threading.Lock()  # the engine (held while it opens, which may index)

    def core(self) -> Any:
        with self._lock:
            if self._core is None:
                if self._core_factory is not None:
                    self._core = self._core_factory()
                else:
                    from memory_core.core import MemoryCore

                    self._core = MemoryCore(self.config.workspace, agent_id=self.config.agent_id, config=self.config)
                    self._core.serve_freshness()  # watcher, interval and startup catch-up while serving
            return self._core

    def close(self) -> None:
        with self._lock:
            if self._core is not None and self._core_factory is None:
                self._core.close()
            self._core = None

    def contracts(self) -> tuple[ToolContract, ...]:
        """The two tools as a host registers them; none when memory search is disabled
        (``memory.search.enabled = false``: upstream registers no memory tools)."""
        if not self.config.enabled:
            return ()
        return (ToolContract("memory_search", "Memory Search", SEARCH_DESCRIPTION, SEARCH_SCHEMA, self.search),
                ToolContract("memory_get", "Memory Get", GET_DESCRIPTION, GET_SCHEMA, self.get))

    # ------------------------------------------------------------------ memory_search

    def _sources(self, corpus: str | None) -> list[str]:
        configured = list(self.config.sources)
        if corpus in (None, "all"):
            return configured
        if corpus == "memory":
            return ["memory"]
        if corpus == "sessions":
            if "sessions" not in configured:
                raise ToolArgumentError(
                    'corpus "sessions" needs session transcripts as a search source: add "sessions" to '
                    "`sources` in the config (and index), or use corpus memory"
                )
            return ["sessions"]
        return []  # wiki: no corpus supplement is registered in memory-core

    def _timeout_error(self) -> str:
        return f"memory_search timed out after {self.timeout_ms / 1000:g}s"

    def _keyword_matches(self, query: str, max_results: int | None, min_score: float | None) -> list[Any]:
        """Memory-file keyword matches: the owner's search as a deadline's fallback (it never waits
        on the search in flight)."""
        core = self._core
        if core is None:  # the engine is still opening: nothing to read yet
            return []
        return list(core.search(query, max_results=max_results, min_score=min_score, sources=["memory"],
                                keyword_fallback=True))

    def search(self, args: dict[str, Any], *, session_key: str | None = None) -> dict[str, Any]:
        """``memory_search``: bad arguments raise ToolArgumentError; failures return the unavailable result."""
        if not self.config.enabled:
            return dict(DISABLED_RESULT)
        started = time.perf_counter()
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolArgumentError("query must be a non-empty string")
        max_results = _positive_int(args, "maxResults")
        min_score = args.get("minScore")
        if min_score is not None and not is_finite_number(min_score):
            raise ToolArgumentError(f"minScore must be a finite number, got {shown(min_score)}")
        try:
            check_query(self.config, query)  # the query budget, before the engine opens
        except InvalidRequest as exc:
            raise ToolArgumentError(exc.message) from None
        corpus = args.get("corpus")
        if corpus is not None and corpus not in CORPORA:
            raise ToolArgumentError(f"corpus must be one of {', '.join(CORPORA)}, got {json.dumps(corpus)}")
        sources = self._sources(corpus)
        agent_id = self.config.agent_id
        if corpus != "wiki" and self._cooldown is not None:
            until, error, deadline = self._cooldown
            if self._clock() < until:
                return unavailable_result(error, agent_id=agent_id, deadline=deadline, timeout_ms=self.timeout_ms)
            self._cooldown = None
        text = query.strip()
        timing: dict[str, float] = {}

        def full_search() -> list[Any]:
            core = self.core()
            timing["manager"] = (time.perf_counter() - started) * 1000
            t0 = time.perf_counter()
            hits: list[Any] = []
            if sources:  # upstream: no hits run one forced sync, then the search again
                hits = list(core.search(text, max_results=max_results, min_score=min_score, sources=sources,
                                        sync_if_empty=True))
            timing["search"] = (time.perf_counter() - t0) * 1000
            return hits

        finished, hits, error = _run_with_deadline(full_search, self.timeout_ms / 1000)
        mode = self.config.search_mode
        partial: str | None = None
        if error is not None:
            reason = error.message if isinstance(error, MemoryCoreError) else (str(error) or type(error).__name__)
            self._cooldown = (self._clock() + MEMORY_SEARCH_TOOL_COOLDOWN_MS / 1000, reason, False)
            return unavailable_result(reason, agent_id=agent_id, timeout_ms=self.timeout_ms)
        if not finished:
            partial = self._timeout_error()
            try:
                hits = self._keyword_matches(text, max_results, min_score) if "memory" in sources else []
            except Exception:  # noqa: BLE001 - no partial result: reported as the deadline below
                hits = []
            if not hits:
                self._cooldown = (self._clock() + MEMORY_SEARCH_TOOL_COOLDOWN_MS / 1000, partial, True)
                return unavailable_result(partial, agent_id=agent_id, deadline=True, timeout_ms=self.timeout_ms)
            mode = "keyword-only"
        cite = include_citations(self.config.citations, session_key)
        results = [mcp_result(hit, cite=cite) for hit in hits]
        tool_ms = (time.perf_counter() - started) * 1000
        search_ms = timing.get("search", tool_ms - timing.get("manager", 0.0))
        out: dict[str, Any] = {
            "results": results,
            "provider": self.config.provider,
            "model": self.config.model,
            "fallback": self.config.fallback,
            "citations": self.config.citations,
            "mode": mode,
        }
        if partial is not None:
            out.update(corpora=[{"corpus": "memory", "outcome": "partial", "error": partial}],
                       warning=f"Memory corpus partial: {partial} {PARTIAL_WARNING}", error=partial,
                       timedOut=True, timeoutMs=self.timeout_ms, partial=True)
        out["debug"] = {
            "backend": "builtin",
            "configuredMode": "hybrid" if self.config.vectors_enabled else "fts-only",
            "effectiveMode": mode,
            "fallback": partial or self.config.fallback,
            "toolMs": round(tool_ms),
            "managerMs": round(timing.get("manager", 0.0)),
            "searchMs": round(search_ms),
            "outsideSearchMs": round(tool_ms - search_ms),
            "hits": len(results),
        }
        return {k: v for k, v in out.items() if v is not None}

    # ------------------------------------------------------------------ memory_get

    def _get_args(self, args: dict[str, Any]) -> tuple[str, int | None, int | None, str | None]:
        path = args.get("path")
        if not isinstance(path, str) or not path.strip():
            raise ToolArgumentError("path required: pass a workspace-relative path such as MEMORY.md")
        from_ = _positive_int(args, "from")
        lines = _positive_int(args, "lines")
        corpus = args.get("corpus")
        if corpus is not None and corpus not in GET_CORPORA:
            raise ToolArgumentError(f"corpus must be one of {', '.join(GET_CORPORA)}, got {json.dumps(corpus)}")
        return path, from_, lines, corpus

    def get(self, args: dict[str, Any], *, session_key: str | None = None) -> dict[str, Any]:
        """``memory_get``: a bounded excerpt, or ``{path, text: "", disabled, error}`` when unreadable."""
        path, from_, lines, corpus = self._get_args(args)
        if corpus == "wiki":
            return {"status": "not_found", "text": "", "path": path}
        try:
            result = self.core().get(path, from_=from_, lines=lines)
        except MemoryCoreError as exc:
            log.warning("memory_get %s failed: %s", path, exc.message)
            return {"path": path, "text": "", "disabled": True, "error": redact_paths(exc.message)}
        return _camel_read(result)

    # ------------------------------------------------------------------ the 2026.9.6 host's shapes

    def host_search(self, args: dict[str, Any], *, session_key: str | None = None) -> dict[str, Any]:
        """``memory_search`` as the 2026.9.6 host's tool answers it: ``corpus=sessions`` without session
        sources is the unavailable result (not an argument error), ``corpus=wiki`` the empty result with
        the "not registered" warning (no wiki supplement is registered), ``corpus=all`` names both corpora."""
        corpus = args.get("corpus")
        if corpus in ("sessions", "wiki"):
            query = args.get("query")
            if not isinstance(query, str) or not query.strip():
                raise ToolArgumentError("query must be a non-empty string")
            _positive_int(args, "maxResults")
            min_score = args.get("minScore")
            if min_score is not None and not is_finite_number(min_score):
                raise ToolArgumentError(f"minScore must be a finite number, got {shown(min_score)}")
            if corpus == "wiki":
                return {"results": [], "citations": self.config.citations,
                        "corpora": [{"corpus": "wiki", "outcome": "not-registered"}], "warning": WIKI_NOT_REGISTERED}
            if "sessions" not in self.config.sources:
                return unavailable_result(SESSIONS_OFF_ERROR, warning=SESSIONS_OFF_WARNING, action=SESSIONS_OFF_ACTION)
        out = self.search(args, session_key=session_key)
        if corpus == "all" and not out.get("unavailable"):
            memory = out.get("corpora") or [{"corpus": "memory", "outcome": "ok"}]
            shaped = {k: v for k, v in out.items() if k != "debug"}
            shaped["corpora"] = [*memory, {"corpus": "wiki", "outcome": "not-registered"}]
            if "debug" in out:
                shaped["debug"] = out["debug"]
            return shaped
        return out

    def host_get(self, args: dict[str, Any], *, session_key: str | None = None) -> dict[str, Any]:
        """``memory_get`` as the 2026.9.6 host's tool answers it: ``status`` ``ok``/``not_found``/``error``
        (a path outside the memory files is ``code: MEMORY_PATH_NOT_ALLOWED``), no other keys."""
        path, from_, lines, corpus = self._get_args(args)
        wiki = {"corpora": [{"corpus": "wiki", "outcome": "not-registered"}], "warning": WIKI_NOT_REGISTERED}
        if corpus == "wiki":
            return {"path": path, "text": "", **wiki}
        try:
            result = _camel_read(self.core().get(path, from_=from_, lines=lines))
        except ReferenceNotFound:
            return {"path": path, "text": "", "status": "error", "code": "MEMORY_PATH_NOT_ALLOWED",
                    "error": PATH_NOT_ALLOWED}
        except MemoryCoreError as exc:
            log.warning("memory_get %s failed: %s", path, exc.message)
            return {"path": path, "text": "", "status": "error", "code": "MEMORY_READ_FAILED",
                    "error": redact_paths(exc.message)}
        if result.get("status") != "not_found":
            result = {"status": "ok", **{k: v for k, v in result.items() if k not in ("status", "note")}}
        if corpus == "all":
            result["corpora"] = [{"corpus": "memory", "outcome": "ok"}, wiki["corpora"][0]]
        return result
