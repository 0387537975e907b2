"""memory-core configuration: one pydantic model tree with upstream's keys and defaults (upstream
`src/agents/memory-search.ts`).

Attributes are snake_case; the accepted input keys are upstream's camelCase names (snake_case is
accepted too). Values are clamped the way upstream's ``mergeConfig`` clamps them; values of the
wrong type and negative counts are rejected with :class:`~memory_core.errors.ConfigError` naming
the dotted key path, the allowed range and where the value came from.

Layers, later wins: built-in defaults, the config file (TOML or JSON), ``MEMORY_CORE_*`` environment
variables, then explicit overrides. See :func:`load_config`.
"""

from __future__ import annotations

import copy
import inspect
import json
import math
import os
import re
import tomllib
from collections import ChainMap
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from memory_core.errors import ConfigError
from memory_core.open_agents import DEFAULT_MAX_OPEN_AGENTS, DEFAULT_MAX_OPEN_INDEXES
from memory_core.paths import real_path
from memory_core.validation import DEFAULT_MAX_QUERY_CHARS, DEFAULT_MAX_QUERY_TERMS

DEFAULT_STATE_DIR = "~/.memory-core"
DEFAULT_GATEWAY_PORT = 18789
ENV_PREFIX = "MEMORY_CORE_"
DEFAULT_VECTOR_WEIGHT = 0.7
DEFAULT_TEXT_WEIGHT = 0.3
DEFAULT_MMR_LAMBDA = 0.7
DEFAULT_HALF_LIFE_DAYS = 30
# Env vars with a fixed meaning; everything else under MEMORY_CORE_ uses the generic "__" form.
SPECIAL_ENV: dict[str, tuple[str, ...]] = {
    "MEMORY_CORE_HOME": ("stateDir",),
    "MEMORY_CORE_PROVIDER": ("provider",),
    "MEMORY_CORE_MODEL": ("model",),
    "MEMORY_CORE_WORKSPACE": ("workspace",),
    "MEMORY_CORE_GATEWAY_TOKEN": ("gateway", "token"),
    "MEMORY_CORE_GATEWAY_PASSWORD": ("gateway", "password"),
    "MEMORY_CORE_API_KEY": ("remote", "apiKey"),
}
# MEMORY_CORE_* variables that are not configuration keys but knobs of tests, benchmarks and the
# search internals: never mistaken for a misspelt setting.
KNOWN_KNOBS = frozenset({
    "MEMORY_CORE_CONFIG", "MEMORY_CORE_NO_SKIPS", "MEMORY_CORE_HYPOTHESIS", "MEMORY_CORE_NODE_PREFIX",
    "MEMORY_CORE_GENSIM_WHEEL_DIR", "MEMORY_CORE_BENCH_CACHE", "MEMORY_CORE_SLOW_REPUBLISHES",
    "MEMORY_CORE_COMPACT_VECTORS_MIN_ROWS", "MEMORY_CORE_FAISS_THREADS", "MEMORY_CORE_READ_MMAP_BYTES",
    "MEMORY_CORE_FP16_MIN_ROWS", "MEMORY_CORE_CANDIDATE_INDEX", "MEMORY_CORE_UPDATE_GOLDEN",
    "MEMORY_CORE_CHURN_SECONDS", "MEMORY_CORE_WATCHER", "MEMORY_CORE_FRESHNESS_THREADS",
})
# Keys whose values are free-form mappings: their own keys are data, not config keys.
_DATA_KEYS = {"headers", "modelProviders"}
# Keys upstream reads for memory that memory-core accepts without acting on them, and why
# (``status`` says so once; nothing is silently ignored).
UNUSED_SETTINGS: dict[str, str] = {
    "rememberAcrossConversations": "memory-core runs no Active Memory pass; index transcripts with "
                                   "experimental.sessionMemory and sources = [\"memory\", \"sessions\"]",
    "sync.onSessionStart": "memory-core sees no session-start event; the watcher and search-time sync keep "
                           "the index fresh",
    "sync.sessions.postCompactionForce": "memory-core sees no compaction event; transcripts sync on their "
                                         "deltaBytes/deltaMessages thresholds",
    "remote.batch": "memory-core embeds through the synchronous embeddings API (no provider batch jobs)",
    "remote.nonBatchConcurrency": "memory-core sends one embedding request at a time",
    "multimodal": "memory-core indexes Markdown and transcripts only, no images or audio",
    "local.contextSize": "the bundled local model has a fixed context",
    "local.modelCacheDir": "the bundled local model ships inside its Python package",
}


def _camel(name: str) -> str:
    """snake_case (or already camelCase) -> camelCase; ``lambda_`` -> ``lambda``."""
    name = name.rstrip("_")
    parts = name.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:] if p)


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, alias_generator=_camel, validate_default=False
    )

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, v: Any, info: ValidationInfo) -> Any:
        # pydantic's lax mode turns true into 1; a boolean where a number belongs is a mistake.
        if isinstance(v, bool) and info.field_name:
            ann = cls.model_fields[info.field_name].annotation
            args = set(get_args(ann)) or {ann}
            if bool not in args and args & {int, float}:
                raise ValueError("must be a number, not a boolean")
        return v


def _clamp(value: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, value))


def _finite(value: float, default: float) -> float:
    return value if math.isfinite(value) else default


# --------------------------------------------------------------------------- sections


class ExtraPath(_Model):
    """An extra source: a folder, a file, or a folder plus a glob ``pattern``."""

    path: str
    pattern: str | None = None


class Experimental(_Model):
    session_memory: bool = False


class RemoteBatch(_Model):
    enabled: bool = False
    wait: bool = True
    concurrency: int = Field(2, ge=0)
    poll_interval_ms: int = Field(2000, ge=0)
    timeout_minutes: float = Field(60, ge=0)

    @field_validator("concurrency")
    @classmethod
    def _min_one(cls, v: int) -> int:
        return max(1, v)


class Remote(_Model):
    base_url: str | None = None
    api_key: str | None = Field(None, repr=False)
    headers: dict[str, str] = Field(default_factory=dict)
    batch: RemoteBatch = Field(default_factory=RemoteBatch)
    non_batch_concurrency: int = Field(4, ge=1)
    timeout_seconds: float = Field(120.0, gt=0)


class Local(_Model):
    model_path: str | None = None
    model_cache_dir: str | None = None
    context_size: int = Field(4096, ge=1)
    threads: int = Field(0, ge=0)  # threads a batch of embeddings runs on; 0 = the machine's cores


class Multimodal(_Model):
    enabled: bool = False
    modalities: list[Literal["image", "audio", "all"]] = Field(default_factory=list)
    max_file_bytes: int = Field(10_000_000, ge=1)


class Chunking(_Model):
    tokens: int = Field(400, ge=1)
    overlap: int = Field(80, ge=0)

    @model_validator(mode="after")
    def _clamp_overlap(self) -> Chunking:
        self.overlap = int(_clamp(self.overlap, 0, max(0, self.tokens - 1)))
        return self


class SyncSessions(_Model):
    delta_bytes: int = Field(100_000, ge=0)
    delta_messages: int = Field(50, ge=0)
    post_compaction_force: bool = True


class Sync(_Model):
    on_session_start: bool = True
    on_search: bool = True
    watch: bool = True
    watch_debounce_ms: int = Field(1500, ge=0)
    interval_minutes: float = Field(0, ge=0)
    # without a watcher (library, one-shot CLI) a search stats the sources at most this often
    reconcile_interval_ms: int = Field(2000, ge=0)
    sessions: SyncSessions = Field(default_factory=SyncSessions)
    embedding_batch_timeout_seconds: float | None = Field(None, gt=0)


class Mmr(_Model):
    enabled: bool = True  # D2
    lambda_: float = Field(DEFAULT_MMR_LAMBDA, alias="lambda")

    @field_validator("lambda_")
    @classmethod
    def _clamp_lambda(cls, v: float) -> float:
        return _clamp(_finite(v, DEFAULT_MMR_LAMBDA), 0.0, 1.0)


class TemporalDecay(_Model):
    enabled: bool = True  # D2
    half_life_days: float = DEFAULT_HALF_LIFE_DAYS

    @field_validator("half_life_days")
    @classmethod
    def _floor_min_one(cls, v: float) -> int:
        return max(1, math.floor(_finite(v, DEFAULT_HALF_LIFE_DAYS)))


class Hybrid(_Model):
    enabled: bool = True
    vector_weight: float = DEFAULT_VECTOR_WEIGHT
    text_weight: float = DEFAULT_TEXT_WEIGHT
    candidate_multiplier: float = 4
    fusion: Literal["weighted", "upstream", "rrf", "minmax", "zscore"] = "weighted"  # D7; host_facades.ranking.rank.FUSIONS
    rrf_k: int = Field(60, ge=1)
    mmr: Mmr = Field(default_factory=Mmr)
    temporal_decay: TemporalDecay = Field(default_factory=TemporalDecay)

    @field_validator("candidate_multiplier")
    @classmethod
    def _clamp_multiplier(cls, v: float) -> int:
        return int(_clamp(math.floor(_finite(v, 4)), 1, 20))

    @model_validator(mode="after")
    def _normalise_weights(self) -> Hybrid:
        vw = _clamp(_finite(self.vector_weight, DEFAULT_VECTOR_WEIGHT), 0.0, 1.0)
        tw = _clamp(_finite(self.text_weight, DEFAULT_TEXT_WEIGHT), 0.0, 1.0)
        total = vw + tw
        if total > 0:
            self.vector_weight, self.text_weight = vw / total, tw / total
        else:
            self.vector_weight, self.text_weight = DEFAULT_VECTOR_WEIGHT, DEFAULT_TEXT_WEIGHT
        return self


class Query(_Model):
    max_results: int = Field(6, ge=1)
    min_score: float = 0.35
    # the query budget, checked on every surface before any work (memory_core.validation)
    max_chars: int = Field(DEFAULT_MAX_QUERY_CHARS, ge=1)
    max_terms: int = Field(DEFAULT_MAX_QUERY_TERMS, ge=1)
    hybrid: Hybrid = Field(default_factory=Hybrid)

    @field_validator("min_score")
    @classmethod
    def _clamp_min_score(cls, v: float) -> float:
        return _clamp(_finite(v, 0.35), 0.0, 1.0)


class Cache(_Model):
    enabled: bool = True
    max_entries: int | None = Field(50_000, ge=1)


class Fts(_Model):
    tokenizer: Literal["unicode61", "trigram"] = "unicode61"


class Vector(_Model):
    enabled: bool = True
    extension_path: str | None = None
    backend: Literal["auto", "sqlite-vec", "faiss", "numpy"] = "auto"


class Store(_Model):
    driver: Literal["sqlite"] = "sqlite"
    path: str | None = None
    fts: Fts = Field(default_factory=Fts)
    vector: Vector = Field(default_factory=Vector)


class Pool(_Model):
    workers: int | None = Field(None, ge=0)  # None -> cpu count; 0 -> in-process
    max_pending_tasks: int = Field(256, ge=1)
    max_pending_bytes: int = Field(64 * 1024 * 1024, ge=1)
    task_timeout_s: float = Field(30.0, gt=0)
    idle_timeout_s: float = Field(300.0, gt=0)
    cursor_ttl_s: float = Field(60.0, gt=0)

    def resolved_workers(self) -> int:
        return (os.cpu_count() or 1) if self.workers is None else self.workers


_BYTE_UNITS = {"b": 1, "kb": 1024, "k": 1024, "mb": 1024**2, "m": 1024**2, "gb": 1024**3, "g": 1024**3,
               "tb": 1024**4, "t": 1024**4}


def parse_byte_size(value: int | str) -> int:
    """Upstream ``parseNonNegativeByteSize``: an integer, or a number with a binary unit (512kb, 2mb)."""
    if isinstance(value, int):
        return value
    import re

    m = re.fullmatch(r"(\d+(?:\.\d+)?)([a-z]+)?", value.strip().lower())
    if not m or (m.group(2) or "b") not in _BYTE_UNITS:
        raise ValueError("must be a byte size like 512kb, 10mb, 1gb or 500")
    return math.floor(float(m.group(1)) * _BYTE_UNITS[m.group(2) or "b"] + 0.5)  # JS Math.round


class MemoryFlush(_Model):
    """``agents.defaults.compaction.memoryFlush``: the pre-compaction flush turn (flush_plan.py)."""

    enabled: bool = True
    soft_threshold_tokens: int | None = Field(None, ge=0)
    force_flush_transcript_bytes: int | str | None = None
    model: str | None = None

    @field_validator("force_flush_transcript_bytes", mode="after")
    @classmethod
    def _byte_size(cls, v: int | str | None) -> int | None:
        if v is None:
            return None
        if isinstance(v, int) and v < 0:
            raise ValueError("must be >= 0")
        return parse_byte_size(v)


class Compaction(_Model):
    memory_flush: MemoryFlush = Field(default_factory=MemoryFlush)


class Gateway(_Model):
    host: str = "127.0.0.1"
    port: int = Field(DEFAULT_GATEWAY_PORT, ge=0, le=65535)
    token: str | None = Field(None, repr=False)
    password: str | None = Field(None, repr=False)
    auth: Literal["token", "password", "none"] = "token"
    max_connections: int = Field(256, ge=1)  # more are closed at once with 1013 (try again later)
    idle_timeout_seconds: float = Field(600.0, gt=0)  # an authenticated connection with no request
    # agents open at once in one server (index owners: watch, scheduling state; about 20 KB each);
    # least recently used closed
    max_open_agents: int = Field(DEFAULT_MAX_OPEN_AGENTS, ge=1)
    # of those, agents holding SQLite connections in the server (writer, identity reader: the fds);
    # least recently used closed, lowered to fit the open-files limit
    max_open_indexes: int = Field(DEFAULT_MAX_OPEN_INDEXES, ge=1)


def _default_state_dir() -> str:
    return os.path.expanduser(os.environ.get("MEMORY_CORE_HOME") or DEFAULT_STATE_DIR)


# --------------------------------------------------------------------------- root


def _new_dict() -> dict[Any, Any]:
    return {}


def _new_list() -> list[Any]:
    return []


# pydantic asks every new model whether its private attributes' factories take the validated data
# (inspect.signature, per instance): for the builtins dict/list that parses their text signature, a
# third of an agent's config view (for_agent) with thousands of agents. A stated signature answers at once.
_new_dict.__signature__ = _new_list.__signature__ = inspect.Signature()  # type: ignore[attr-defined]


class MemoryCoreConfig(_Model):
    """The resolved memory-search settings for one agent (plus memory-core's own sections)."""

    enabled: bool = True
    workspace: str | None = None
    agent_id: str = Field("main", min_length=1)
    state_dir: str = Field(default_factory=_default_state_dir)
    sessions_dir: str | None = None
    sources: list[Literal["memory", "sessions"]] = Field(default_factory=lambda: ["memory"])
    extra_paths: list[str | ExtraPath] = Field(default_factory=list)
    experimental: Experimental = Field(default_factory=Experimental)
    provider: str = "none"  # D4
    model: str | None = None
    fallback: str = "none"
    remote: Remote = Field(default_factory=Remote)
    local: Local = Field(default_factory=Local)
    multimodal: Multimodal = Field(default_factory=Multimodal)
    output_dimensionality: int | None = Field(None, ge=1)
    input_type: str | None = None
    query_input_type: str | None = None
    document_input_type: str | None = None
    remember_across_conversations: bool | None = None
    # upstream ``memory.citations``: whether memory_search appends "Source: path#L.." (tools.citations.ts)
    citations: Literal["auto", "on", "off"] = "auto"
    # upstream ``agents.defaults.userTimezone`` (IANA name; None = the host's zone): the flush plan's day
    user_timezone: str | None = None
    compaction: Compaction = Field(default_factory=Compaction)
    chunking: Chunking = Field(default_factory=Chunking)
    sync: Sync = Field(default_factory=Sync)
    query: Query = Field(default_factory=Query)
    cache: Cache = Field(default_factory=Cache)
    store: Store = Field(default_factory=Store)
    pool: Pool = Field(default_factory=Pool)
    gateway: Gateway = Field(default_factory=Gateway)
    agents: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # openclaw.json ``models.providers``: a provider's apiKey / baseUrl / headers, by provider id
    model_providers: dict[str, dict[str, Any]] = Field(default_factory=dict, repr=False)

    _raw: dict[str, Any] = PrivateAttr(default_factory=_new_dict)
    _origins: dict[str, str] = PrivateAttr(default_factory=_new_dict)
    # settings that were accepted but have no effect, said once by the CLI (``warning: ...``)
    _notices: list[str] = PrivateAttr(default_factory=_new_list)
    # warnings about the config file itself (a secret others can read); every agent's view keeps them
    _file_notices: list[str] = PrivateAttr(default_factory=_new_list)
    # the config before any agent's overrides were merged (set on an agent's view): another agent's
    # view is merged from it, never from this agent's (its extraPaths, workspace...)
    _base: MemoryCoreConfig | None = PrivateAttr(default=None)
    # one validated agent view per override shape (override_shape): the other agents of that shape
    # are copies of it with their own workspace and id (for_agent), not validated again
    _shape_views: dict[str, MemoryCoreConfig] = PrivateAttr(default_factory=_new_dict)

    @field_validator("state_dir", "workspace", "sessions_dir", mode="after")
    @classmethod
    def _expand_user(cls, v: str | None) -> str | None:
        return os.path.expanduser(v) if v else v

    @field_validator("user_timezone", mode="after")
    @classmethod
    def _known_zone(cls, v: str | None) -> str | None:
        if v is None or not v.strip():
            return None
        from zoneinfo import ZoneInfo

        try:
            ZoneInfo(v.strip())
        except (ValueError, KeyError, OSError):
            raise ValueError("is not a known time zone; use an IANA name such as Europe/Berlin or UTC") from None
        return v.strip()

    @field_validator("provider", "fallback", mode="after")
    @classmethod
    def _norm_provider(cls, v: str) -> str:
        v = v.strip().lower()
        return v or "none"

    @field_validator("sources", mode="before")
    @classmethod
    def _split_sources(cls, v: Any) -> Any:
        if isinstance(v, str):
            return [s.strip() for s in v.split(",") if s.strip()]
        return v

    @field_validator("extra_paths", mode="before")
    @classmethod
    def _split_extra_paths(cls, v: Any) -> Any:
        if isinstance(v, str):
            return [s for s in v.split(os.pathsep)]
        return v

    @field_validator("extra_paths", mode="after")
    @classmethod
    def _dedupe_extra_paths(cls, v: list[str | ExtraPath]) -> list[str | ExtraPath]:
        out: list[str | ExtraPath] = []
        seen: set[str] = set()
        for item in v:
            if isinstance(item, str):
                item = item.strip()
                if not item:
                    continue
                key = item
            else:
                item = ExtraPath(path=item.path.strip(), pattern=item.pattern)
                if not item.path:
                    continue
                key = json.dumps([item.path, item.pattern])
            if key not in seen:
                seen.add(key)
                out.append(item)
        return out

    @model_validator(mode="after")
    def _normalise_sources(self) -> MemoryCoreConfig:
        # upstream normalizeSources: "sessions" only with experimental.sessionMemory; never empty.
        out: list[Literal["memory", "sessions"]] = []
        for s in self.sources or ["memory"]:
            if s == "sessions" and not self.experimental.session_memory:
                notice = ('sources: "sessions" is ignored: session transcripts are indexed only with '
                          "experimental.sessionMemory = true")
                if notice not in self._notices:
                    self._notices.append(notice)
                continue
            if s not in out:
                out.append(s)
        self.sources = out or ["memory"]
        return self

    # ------------------------------------------------------------------ helpers

    @property
    def notices(self) -> list[str]:
        """Settings that were accepted but have no effect (e.g. "sessions" without the flag), and
        warnings about the config file (a secret in a file other users can read)."""
        return list(self._notices) + list(self._file_notices)

    @property
    def agent_ids(self) -> list[str]:
        """Every configured agent: the default one, then the configured agents (openclaw.json's
        roster, or memory-core's ``agents`` table), in order."""
        return list(dict.fromkeys([self.agent_id, *self.agents]))

    @property
    def unused_settings(self) -> list[str]:
        """Settings upstream reads for memory that this config sets and memory-core accepts but does
        not use, each as ``accepted, not used by memory-core: <key> (<why>)``."""
        out: list[str] = []
        present = set(self._origins)  # what the file, the environment or the overrides set
        for key, why in UNUSED_SETTINGS.items():
            if key in present:
                out.append(f"accepted, not used by memory-core: {key} ({why})")
        return out

    @property
    def vectors_enabled(self) -> bool:
        """Vectors are used only with a provider and ``store.vector.enabled`` (upstream
        `host/sqlite-vec.ts`)."""
        return self.provider != "none" and self.store.vector.enabled

    @property
    def search_mode(self) -> str:
        """What a search of this configuration is, as OpenClaw names it: ``hybrid`` or ``fts-only``."""
        return "hybrid" if self.vectors_enabled else "fts-only"

    @property
    def candidate_limit(self) -> int:
        """min(200, max(1, floor(maxResults x candidateMultiplier))) (upstream `memory/manager.ts`)."""
        return min(200, max(1, math.floor(self.query.max_results * self.query.hybrid.candidate_multiplier)))

    def db_path(self, agent_id: str | None = None) -> str:
        """The agent's SQLite file: ``store.path`` ({agentId} substituted) or ``<state_dir>/<id>.sqlite``.

        Refuses (ConfigError) a path inside ``<workspace>/memory/``: the index must never become a source.
        """
        agent = agent_id or self.agent_id
        if not agent or "/" in agent or "\\" in agent or agent in (".", ".."):
            raise ConfigError(f"agent id {agent!r} cannot name a database file; use letters, digits, - or _")
        if self.store.path:
            raw = self.store.path.replace("{agentId}", agent)
            path = os.path.abspath(os.path.expanduser(raw))
            key = "store.path"
        else:
            path = os.path.abspath(os.path.join(os.path.expanduser(self.state_dir), f"{agent}.sqlite"))
            key = "stateDir (MEMORY_CORE_HOME)"
        if self.workspace:
            mem_dir = real_path(os.path.join(os.path.expanduser(self.workspace), "memory"))
            real = real_path(path)
            if real == mem_dir or real.startswith(mem_dir + os.sep):
                raise ConfigError(
                    f"{key}: the index database {path} would be inside the workspace's memory/ folder "
                    f"({mem_dir}); choose a path outside it (default: <MEMORY_CORE_HOME>/<agentId>.sqlite)"
                )
        return path

    def for_agent(self, agent_id: str) -> MemoryCoreConfig:
        """This config with ``agents.<agent_id>`` overrides merged per key (upstream ``mergeConfig``)."""
        # The resolved values are the base (so model_copy(update=...) changes survive), except the
        # hybrid weights, which upstream merges raw and normalises after the merge.
        src = self._base if self._base is not None and agent_id != self.agent_id else self
        if src is not self:
            return src.for_agent(agent_id)
        raw_override = self.agents.get(agent_id) or {}
        shape = _view_shape(agent_id, raw_override)
        template = self._shape_views.get(shape) if shape is not None else None
        if template is not None and template._base is self:  # (a model_copy shares the dict, not the settings)
            return _view_like(self, template, agent_id, raw_override)
        base = self.model_dump(by_alias=True, exclude={"agents"})
        override = _normalise_keys(raw_override)
        o_hybrid = ((override.get("query") or {}).get("hybrid") or {}) if isinstance(override.get("query"), dict) else {}
        if isinstance(o_hybrid, dict) and ({"vectorWeight", "textWeight"} & set(o_hybrid)):
            r_hybrid = ((self._raw.get("query") or {}).get("hybrid") or {}) if self._raw else {}
            hybrid = base["query"]["hybrid"]
            hybrid["vectorWeight"] = r_hybrid.get("vectorWeight", DEFAULT_VECTOR_WEIGHT)
            hybrid["textWeight"] = r_hybrid.get("textWeight", DEFAULT_TEXT_WEIGHT)
        if self._raw and "sources" in self._raw:  # as configured: normalised after the merge
            base["sources"] = self._raw["sources"]  # (an agent may turn on experimental.sessionMemory)
        merged = _merge_agent(base, override)
        merged["agentId"] = agent_id
        where = f"agents.{agent_id} in " + self._origins.get(f"agents.{agent_id}", "the config")
        origins = ChainMap({p: where for p in _leaf_paths(override)}, self._origins)
        # the agents table is shared, not copied or validated again: with N agents, each for_agent
        # stays independent of N (load_config validates every agent: N calls, not N squared work)
        # and ``merged`` is this view's own (built above, read-only after): kept as its raw, not copied
        cfg = _validate(merged, origins, prefix_note=f"agent {agent_id!r}", copy_origins=False, copy_raw=False)
        cfg.agents = self.agents
        cfg._file_notices = list(self._file_notices)
        cfg._base = self
        if shape is not None and len(self._shape_views) < SHAPE_VIEWS_KEPT:
            self._shape_views[shape] = cfg
        return cfg


# --------------------------------------------------------------------------- loading


def _normalise_keys(data: Any, *, under_data: bool = False) -> Any:
    """Recursively camelCase mapping keys, leaving free-form data maps (headers, agent ids) alone."""
    if isinstance(data, Mapping):
        out: dict[str, Any] = {}
        for k, v in data.items():
            key = str(k) if under_data else _camel(str(k))
            if key in _DATA_KEYS and not under_data:
                out[key] = dict(v) if isinstance(v, Mapping) else v
            elif key == "agents" and not under_data and isinstance(v, Mapping):
                out[key] = {str(a): _normalise_keys(o) for a, o in v.items()}
            else:
                out[key] = _normalise_keys(v)
        return out
    if isinstance(data, list):
        return [_normalise_keys(x) for x in data]
    return data


def _deep_merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in top.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) and k not in _DATA_KEYS:
            out[k] = _deep_merge(dict(out[k]), v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _merge_agent(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = _deep_merge(base, override)
    # upstream concatenates extraPaths of defaults and agent, then de-duplicates (validator).
    if "extraPaths" in override and "extraPaths" in base:
        bp, op = base["extraPaths"], override["extraPaths"]
        if isinstance(bp, list) and isinstance(op, list):
            merged["extraPaths"] = list(bp) + list(op)
    return merged


def _leaf_paths(data: Mapping[str, Any], prefix: str = "") -> list[str]:
    out: list[str] = []
    for k, v in data.items():
        p = f"{prefix}{k}"
        out.append(p)
        if isinstance(v, Mapping) and k not in _DATA_KEYS:
            out.extend(_leaf_paths(v, p + "."))
    return out


# keys of openclaw.json's ``agents`` that are not agent ids
_AGENTS_SECTION_KEYS = {"defaults", "entries", "list", "ownership"}
OPENCLAW_HOME = "~/.openclaw"


def _agent_roster(agents: Any) -> dict[str, Mapping[str, Any]]:
    """The configured agents of openclaw.json, by id: keyed ``agents.entries`` (2026.9) and the
    legacy ``agents.list[]`` roster (``{id, workspace, memorySearch, default}``)."""
    roster: dict[str, Mapping[str, Any]] = {}
    if not isinstance(agents, Mapping):
        return roster
    entries = agents.get("entries")
    if isinstance(entries, Mapping):
        for aid, entry in entries.items():
            roster[str(aid)] = entry if isinstance(entry, Mapping) else {}
    for entry in agents.get("list") or []:
        if isinstance(entry, Mapping) and entry.get("id"):
            roster.setdefault(str(entry["id"]), entry)
    return roster


def _roster_owner(roster: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The agent that owns the default workspace (upstream ``tryResolveLegacyDataOwnerAgentId``):
    the one marked ``default: true``, else ``main``, else the sole agent."""
    marked = [aid for aid, e in roster.items() if e.get("default") is True]
    if len(marked) == 1:
        return marked[0]
    if "main" in roster:
        return "main"
    return next(iter(roster)) if len(roster) == 1 else None


def _roster_workspace(aid: str, entry: Mapping[str, Any], defaults_ws: str | None, owner: str | None) -> str:
    """upstream ``resolveAgentWorkspaceDir``: the agent's own workspace, else the default one for
    the owner agent, else ``<agents.defaults.workspace>/<id>``, else ``~/.openclaw/workspace-<id>``."""
    own = entry.get("workspace")
    if isinstance(own, str) and own.strip():
        return own.strip()
    if aid == owner:
        return defaults_ws or f"{OPENCLAW_HOME}/workspace"
    if defaults_ws:
        return os.path.join(defaults_ws, aid)
    return f"{OPENCLAW_HOME}/workspace-{aid}"


# openclaw.json's other root sections (channels, tools, ...): their presence marks an OpenClaw file,
# whose non-memory sections memory-core leaves alone instead of refusing them as unknown keys
UPSTREAM_ROOT_KEYS = frozenset({
    "memory", "models", "channels", "session", "skills", "tools", "plugins", "bindings", "messages", "commands",
    "hooks", "cron", "talk", "tts", "browser", "ui", "logging", "meta", "wizard", "auth", "env", "update",
    "diagnostics", "web", "discovery", "canvasHost", "nodeHost", "broadcast", "audio", "approvals", "secrets",
    "multiAgent", "acp", "media", "sandbox", "identity",
})
# upstream gateway keys memory-core does not have: a ``gateway`` holding one is openclaw.json's
_UPSTREAM_GATEWAY_KEYS = frozenset({"mode", "bind", "controlUi", "tailscale", "remote", "reload", "nodes",
                                    "trustedProxies", "http", "tls", "customBindHost"})
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


def _gateway_from_upstream(gw: Mapping[str, Any]) -> dict[str, Any]:
    """openclaw.json's ``gateway`` as memory-core's: ``port``, ``auth.{mode,token,password}`` and
    ``bind`` (loopback/lan); memory-core's own gateway keys pass through; the rest is OpenClaw's."""
    own = {f.alias or n for n, f in Gateway.model_fields.items()} - {"auth"}
    out: dict[str, Any] = {k: v for k, v in gw.items() if k in own}
    auth = gw.get("auth")
    if isinstance(auth, str):
        out["auth"] = auth
    elif isinstance(auth, Mapping):
        if auth.get("mode") in ("token", "password", "none"):
            out["auth"] = auth["mode"]
        for key in ("token", "password"):
            if isinstance(auth.get(key), str):
                out[key] = auth[key]
    bind = gw.get("bind")
    if bind in ("loopback", "lan") and "host" not in out:
        out["host"] = "127.0.0.1" if bind == "loopback" else "0.0.0.0"
    return out


def substitute_env(data: Any, env: Mapping[str, str], path: str = "") -> Any:
    """openclaw.json's ``${VAR}`` references (upper-case names; ``$${VAR}`` is a literal ``${VAR}``)
    replaced from ``env``; an unset or empty variable is a ConfigError naming it and the key."""
    if isinstance(data, Mapping):
        return {k: substitute_env(v, env, f"{path}.{k}" if path else str(k)) for k, v in data.items()}
    if isinstance(data, list):
        return [substitute_env(v, env, f"{path}[{i}]") for i, v in enumerate(data)]
    if not isinstance(data, str) or "$" not in data:
        return data
    out: list[str] = []
    i = 0
    while i < len(data):
        escaped = data.startswith("$${", i)
        start = i + (3 if escaped else 2)
        end = data.find("}", start) if escaped or data.startswith("${", i) else -1
        if end != -1 and _ENV_NAME.fullmatch(data[start:end]):
            name = data[start:end]
            if escaped:
                out.append("${" + name + "}")
            elif not env.get(name):
                raise ConfigError(f"{path}: environment variable {name} (referenced as ${{{name}}}) is not set; "
                                  "set it or write the value in the config")
            else:
                out.append(env[name])
            i = end + 1
            continue
        out.append(data[i])
        i += 1
    return "".join(out)


def _unwrap_upstream(doc: dict[str, Any]) -> dict[str, Any]:
    """Accept ``{memory:{search:{...}}}`` (G2) and ``{agents:{defaults:{memorySearch}}}`` (G1) shapes,
    and openclaw.json's agent roster (``agents.entries`` or legacy ``agents.list``) with each
    agent's workspace and ``memory.search`` / ``memorySearch`` overrides."""
    known = set(MemoryCoreConfig.model_fields) | {f.alias for f in MemoryCoreConfig.model_fields.values() if f.alias}
    agents = doc.get("agents")
    roster = _agent_roster(agents)
    a_defaults = agents.get("defaults") if isinstance(agents, Mapping) else None
    g1 = bool(roster) or isinstance(a_defaults, Mapping) and (
        "memorySearch" in a_defaults or "workspace" in a_defaults
    )
    mem = doc.get("memory")
    g2 = isinstance(mem, Mapping) and isinstance(mem.get("search"), Mapping)
    gateway = doc.get("gateway")
    upstream_gateway = isinstance(gateway, Mapping) and bool(
        set(gateway) & _UPSTREAM_GATEWAY_KEYS or isinstance(gateway.get("auth"), Mapping))
    if not (g1 or g2 or upstream_gateway or set(doc) & UPSTREAM_ROOT_KEYS):
        return doc
    base: dict[str, Any] = {k: v for k, v in doc.items() if k in known and k not in ("agents", "memory", "gateway")}
    if isinstance(doc.get("gateway"), Mapping):
        base["gateway"] = _gateway_from_upstream(doc["gateway"])
    models = doc.get("models")
    if isinstance(models, Mapping) and isinstance(models.get("providers"), Mapping):
        # upstream's provider credentials and endpoints (models.providers.<id>.apiKey / baseUrl)
        base["modelProviders"] = {str(k): dict(v) for k, v in models["providers"].items() if isinstance(v, Mapping)}
    overrides: dict[str, Any] = {}
    if g2:
        base = _deep_merge(base, mem["search"])
        if isinstance(agents, Mapping):
            for aid, a in agents.items():
                if aid in _AGENTS_SECTION_KEYS:
                    continue
                if isinstance(a, Mapping) and isinstance(a.get("memory"), Mapping):
                    search = a["memory"].get("search")
                    if isinstance(search, Mapping):
                        overrides[str(aid)] = dict(search)
    if g1 and isinstance(agents, Mapping):
        defaults = agents.get("defaults") or {}
        if isinstance(defaults.get("memorySearch"), Mapping):
            base = _deep_merge(base, defaults["memorySearch"])
        if "userTimezone" in defaults:  # the agent settings the flush plan reads
            base["userTimezone"] = defaults["userTimezone"]
        flush = (defaults.get("compaction") or {}).get("memoryFlush")
        if isinstance(flush, Mapping):  # the flush keys memory-core reads (upstream has more compaction keys)
            known = {f.alias or n for n, f in MemoryFlush.model_fields.items()}
            base["compaction"] = {"memoryFlush": {k: v for k, v in flush.items() if k in known}}
        defaults_ws = defaults.get("workspace") if isinstance(defaults.get("workspace"), str) else None
        defaults_ws = (defaults_ws or "").strip() or None
        owner = _roster_owner(roster)
        for aid, entry in roster.items():
            override: dict[str, Any] = {}
            if isinstance(entry.get("memorySearch"), Mapping):  # legacy per-agent shape
                override = _deep_merge(override, entry["memorySearch"])
            search = (entry.get("memory") or {}).get("search") if isinstance(entry.get("memory"), Mapping) else None
            if isinstance(search, Mapping):  # 2026.9: agents.entries.<id>.memory.search
                override = _deep_merge(override, search)
            override["workspace"] = _roster_workspace(aid, entry, defaults_ws, owner)
            overrides[aid] = override
        if roster and "agentId" not in base:
            base["agentId"] = owner or next(iter(roster))
        elif not roster and defaults_ws and "workspace" not in base:
            base["workspace"] = defaults_ws
    if isinstance(mem, Mapping) and "citations" in mem:  # upstream memory.citations, in either shape
        base["citations"] = mem["citations"]
    if overrides:
        base["agents"] = _deep_merge(base.get("agents") or {}, overrides)
    return base


def _read_file(path: str) -> dict[str, Any]:
    p = Path(path).expanduser()
    ext = p.suffix.lower()
    if ext not in (".toml", ".json", ".json5"):
        raise ConfigError(
            f"config file {p}: unsupported extension {ext or '(none)'!r}; use a .toml or .json file"
        )
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist; pass an existing .toml or .json file")
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"config file {p} cannot be read: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {p} is not valid UTF-8 (byte {exc.start}); save it as UTF-8") from exc
    if ext == ".toml":
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {p}: TOML syntax error: {exc}") from exc
    else:
        doc = _read_json5(p, text)
    if not isinstance(doc, dict):
        raise ConfigError(f"config file {p}: the top level must be a table/object, not {type(doc).__name__}")
    return doc


def _read_json5(p: Path, text: str) -> Any:
    """A ``.json`` file read as OpenClaw reads ``openclaw.json``: JSON5 (comments, trailing commas,
    unquoted keys, single quotes). Plain JSON is read by the faster ``json`` first."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        first = exc
    import json5

    try:
        return json5.loads(text)
    except ValueError as exc:
        import re

        m = re.search(r":(\d+) (.*) at column (\d+)", str(exc), re.DOTALL)
        where, what = ((f"line {m.group(1)} column {m.group(3)}", m.group(2).replace("\n", "\\n")) if m
                       else (f"line {first.lineno} column {first.colno}", first.msg))
        raise ConfigError(f"config file {p}: JSON syntax error at {where}: {what}") from None


def _env_value(raw: str) -> Any:
    s = raw.strip()
    if s[:1] in ("[", "{"):
        try:
            return json.loads(s)
        except json.JSONDecodeError:
            return raw
    return raw


def _env_layer(env: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    top_fields = {f.alias or n for n, f in MemoryCoreConfig.model_fields.items()}
    layer: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX):
            continue
        if name in SPECIAL_ENV:
            path = SPECIAL_ENV[name]
        else:
            rest = name[len(ENV_PREFIX):]
            path = tuple(_camel(part.lower()) for part in rest.split("__"))
            if not path or path[0] not in top_fields:
                if "__" in rest:  # the nested form only addresses config keys: a misspelt section
                    raise ConfigError(
                        f"environment variable {name}: unknown configuration section {path[0]!r}; "
                        f"known: {', '.join(sorted(top_fields))} (MEMORY_CORE_<SECTION>__<KEY>, e.g. "
                        "MEMORY_CORE_QUERY__MAX_RESULTS)")
                _refuse_misspelt_env(name, top_fields)
                continue  # other components' MEMORY_CORE_* variables (e.g. test or bench knobs)
        node = layer
        for part in path[:-1]:
            nxt = node.get(part)
            if not isinstance(nxt, dict):
                nxt = node[part] = {}
            node = nxt
        node[path[-1]] = _env_value(env[name])
        origins[".".join(path)] = f"environment variable {name}"
    return layer, origins


def _env_name(key: str) -> str:
    """The top-level variable for a config key: ``extraPaths`` -> ``MEMORY_CORE_EXTRA_PATHS``."""
    return ENV_PREFIX + "".join("_" + c if c.isupper() else c.upper() for c in key)


def _refuse_misspelt_env(name: str, top_fields: set[str]) -> None:
    """Raise :class:`ConfigError` for a variable that is no setting and no known knob but reads like
    a misspelt setting (``PROVIDR`` for ``PROVIDER``): silently ignored, the setting would not apply."""
    if name in KNOWN_KNOBS:
        return
    import difflib

    rest = name[len(ENV_PREFIX):]
    suggestion = None
    for field in MemoryCoreConfig.model_fields.values():  # POOL_WORKERS for POOL__WORKERS
        section = field.annotation
        prefix = _env_name(field.alias or "")[len(ENV_PREFIX):] + "_"
        if isinstance(section, type) and issubclass(section, BaseModel) and rest.startswith(prefix):
            keys = {f.alias or n for n, f in section.model_fields.items()}
            if _camel(rest[len(prefix):].lower()) in keys:
                suggestion = f"{ENV_PREFIX}{prefix}_{rest[len(prefix):]}"
    if suggestion is None:
        suffixes = {n[len(ENV_PREFIX):]: n for n in set(SPECIAL_ENV) | {_env_name(k) for k in top_fields}}
        close = difflib.get_close_matches(rest, sorted(suffixes), n=1, cutoff=0.75)
        suggestion = suffixes[close[0]] if close else None
    if suggestion is None:  # a nested setting written as a top-level one: MAX_RESULTS for QUERY__MAX_RESULTS
        moved = _same_name_key(_camel(rest.lower()))
        suggestion = _env_path_name(moved) if moved else None
    if suggestion:
        raise ConfigError(
            f"environment variable {name} is not a memory-core setting; did you mean {suggestion}? "
            "(rename or unset it)")


def _origin_for(path: str, origins: Mapping[str, str]) -> str:
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        hit = origins.get(".".join(parts[:i]))
        if hit:
            return hit
    return "the built-in defaults"


def _describe(err: Mapping[str, Any]) -> str:
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    simple = {
        "int_parsing": "an integer",
        "int_type": "an integer",
        "int_from_float": "a whole number",
        "float_parsing": "a number",
        "float_type": "a number",
        "bool_parsing": "a boolean (true/false)",
        "bool_type": "a boolean (true/false)",
        "string_type": "a string",
        "list_type": "a list",
        "dict_type": "a table/object",
        "model_type": "a table/object",
        "model_attributes_type": "a table/object",
        "finite_number": "a finite number",
    }
    if kind in simple:
        return f"must be {simple[kind]}"
    if kind == "greater_than_equal":
        return f"must be >= {ctx.get('ge')}"
    if kind == "greater_than":
        return f"must be > {ctx.get('gt')}"
    if kind == "less_than_equal":
        return f"must be <= {ctx.get('le')}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}"
    if kind == "extra_forbidden":
        return "is not a known setting (check the spelling; keys are camelCase as in OpenClaw)"
    if kind == "value_error":
        return str(ctx.get("error") or err.get("msg", "is invalid"))
    if kind == "string_too_short":
        return "must not be empty"
    return str(err.get("msg", "is invalid"))


def _known_paths(model: type[BaseModel] | None = None, prefix: str = "") -> list[str]:
    """Every setting's key path (``query.maxResults``), sections included, from the models."""
    out: list[str] = []
    for name, field in (model or MemoryCoreConfig).model_fields.items():
        path = prefix + (field.alias or _camel(name))
        out.append(path)
        section = field.annotation
        if isinstance(section, type) and issubclass(section, BaseModel):
            out.extend(_known_paths(section, path + "."))
    return out


def _nearest_key(path: str) -> str | None:
    """The known key path a misplaced or misspelt ``path`` most likely means: the one setting with
    the same name in another section (``maxResults`` -> ``query.maxResults``), else a close spelling."""
    import difflib

    moved = _same_name_key(path)
    if moved:
        return moved
    close = difflib.get_close_matches(path, _known_paths(), n=1, cutoff=0.75)
    return close[0] if close else None


def _same_name_key(path: str) -> str | None:
    """The one known key path with the last name of ``path`` in another section, if exactly one."""
    name = path.rsplit(".", 1)[-1].lower()
    same_name = [k for k in _known_paths() if k.rsplit(".", 1)[-1].lower() == name and k != path]
    return same_name[0] if len(same_name) == 1 else None


def _env_path_name(path: str) -> str:
    """The variable that sets a key path: ``query.maxResults`` -> ``MEMORY_CORE_QUERY__MAX_RESULTS``."""
    return "__".join(_env_name(part) if i == 0 else _env_name(part)[len(ENV_PREFIX):]
                     for i, part in enumerate(path.split(".")))


def _written_names(doc: Any, out: dict[str, str] | None = None) -> dict[str, str]:
    """camelCase key -> the key as the file wrote it (``maxResults`` -> ``max_results``), for errors."""
    out = {} if out is None else out
    if isinstance(doc, Mapping):
        for k, v in doc.items():
            if _camel(str(k)) != str(k):
                out.setdefault(_camel(str(k)), str(k))
            if str(k) not in _DATA_KEYS:
                _written_names(v, out)
    elif isinstance(doc, list):
        for item in doc:
            _written_names(item, out)
    return out


def _loc_path(loc: tuple[Any, ...]) -> str:
    out: list[str] = []
    for part in loc:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif str(part) in ("str", "ExtraPath", "function-after[_dedupe_extra_paths(), list[union[str,ExtraPath]]]"):
            continue  # union branch names
        elif "[" in str(part) and "(" in str(part):
            continue
        else:
            seg = _camel(str(part))
            out.append(("." if out else "") + seg)
    return "".join(out)


def _validate(data: dict[str, Any], origins: Mapping[str, str], prefix_note: str = "",
              written: Mapping[str, str] | None = None, copy_origins: bool = True,
              copy_raw: bool = True) -> MemoryCoreConfig:
    try:
        cfg = MemoryCoreConfig.model_validate(data)
    except ValidationError as exc:
        lines = []
        seen: set[str] = set()
        for err in exc.errors():
            path = _loc_path(tuple(err.get("loc", ())))
            if path in seen:
                continue  # a union reports once per branch
            seen.add(path)
            value = err.get("input")
            shown = "" if isinstance(value, (dict, list)) else f" (got {value!r})"
            if path.rsplit(".", 1)[-1] in ("apiKey", "token", "password") or ".headers" in path:
                shown = ""  # never echo secrets
            if err.get("type") == "extra_forbidden":
                lines.append(_unknown_key(path, shown, _origin_for(path, origins), written or {}))
                continue
            if path.startswith("extraPaths[") and path.endswith("]") and err.get("type") == "string_type":
                lines.append(f"{path}: must be a path string or a {{path, pattern}} table{shown}; "
                             f"set in {_origin_for('extraPaths', origins)}")
                continue
            lines.append(f"{path}: {_describe(err)}{shown}; set in {_origin_for(path.split('[')[0], origins)}")
        where = f" for {prefix_note}" if prefix_note else ""
        raise ConfigError(f"invalid configuration{where}: " + "; ".join(lines)) from None
    cfg._raw = copy.deepcopy(data) if copy_raw else data
    cfg._origins = dict(origins) if copy_origins else origins  # type: ignore[assignment]
    return cfg


def _unknown_key(path: str, shown: str, origin: str, written: Mapping[str, str]) -> str:
    """An unknown key, named as it was written, with the nearest known key path."""
    near = _nearest_key(path)
    if origin.startswith("environment variable "):
        hint = f" (did you mean {_env_path_name(near)}?)" if near else ""
        return f"{origin[len('environment variable '):]}: is not a known setting{hint}{shown}"
    as_written = ".".join(written.get(part, part) for part in path.split("."))
    hint = (f" (did you mean {near}?)" if near else
            " (check the spelling; keys are camelCase as in OpenClaw)")
    return f"{as_written}: is not a known setting{hint}{shown}; set in {origin}"


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> MemoryCoreConfig:
    """Defaults < TOML/JSON file < ``MEMORY_CORE_*`` env (``os.environ`` if None) < ``overrides``.

    Without ``path``, the file named by ``MEMORY_CORE_CONFIG`` is read, if set.

    Invalid values raise ConfigError naming the camelCase key path, the allowed range and the origin.
    """
    env = os.environ if env is None else env
    if path is None and env.get("MEMORY_CORE_CONFIG"):
        path = env["MEMORY_CORE_CONFIG"]
    data: dict[str, Any] = {}
    origins: dict[str, str] = {}
    notices: list[str] = []
    written: dict[str, str] = {}
    if path is not None:
        raw = _read_file(str(path))
        written = _written_names(raw)
        raw_doc = _normalise_keys(raw)
        unwrapped = _unwrap_upstream(raw_doc)
        if unwrapped is not raw_doc:  # an openclaw.json: its ${VAR} references, in what memory-core reads
            providers = unwrapped.pop("modelProviders", None)  # resolved when a provider is created
            unwrapped = substitute_env(unwrapped, env)
            if providers is not None:
                unwrapped["modelProviders"] = providers
        if unwrapped is not raw_doc and "provider" not in unwrapped:
            # openclaw.json without a provider: OpenClaw's default is OpenAI, used when its key is
            # configured (upstream falls back to keyword search when embeddings are unavailable)
            openai = (unwrapped.get("modelProviders") or {}).get("openai") or {}
            if openai.get("apiKey") or env.get("OPENAI_API_KEY"):
                unwrapped["provider"] = "openai"
            else:
                notices.append('provider: not set in the openclaw.json and no OpenAI key (OPENAI_API_KEY or '
                               'models.providers.openai.apiKey): keyword-only search; set memory.search.provider')
        doc = _normalise_keys(unwrapped)
        notices.extend(_exposed_secrets(Path(path).expanduser(), doc))
        data = _deep_merge(data, doc)
        where = f"config file {Path(path).expanduser()}"
        origins.update({p: where for p in _leaf_paths(doc)})
        for aid in (doc.get("agents") or {}):
            origins[f"agents.{aid}"] = where
    env_doc, env_origins = _env_layer(env)
    data = _deep_merge(data, _normalise_keys(env_doc))
    origins.update(env_origins)
    if overrides:
        ov = _normalise_keys(dict(overrides))
        data = _deep_merge(data, ov)
        origins.update({p: "overrides" for p in _leaf_paths(ov)})
    # the state dir comes from the given env only (MEMORY_CORE_HOME above), never from os.environ
    data.setdefault("stateDir", DEFAULT_STATE_DIR)
    cfg = _validate(data, origins, written=written)
    checked: set[str] = set()
    for aid, override in cfg.agents.items():
        # validate every agent's merged settings now, not at first use; agents whose overrides differ
        # only in their workspace path (any string is a valid one) are validated once per shape, so
        # a config of 10,000 agents loads in a second, not in a quarter of a minute
        shape = override_shape(override)
        if shape is None or shape not in checked:
            cfg.for_agent(aid)
            if shape is not None:
                checked.add(shape)
    if cfg.agent_id in cfg.agents:
        cfg = cfg.for_agent(cfg.agent_id)
    cfg._file_notices = notices
    return cfg


SHAPE_VIEWS_KEPT = 64  # validated views kept as templates, one per override shape (about 25 KB each)


def _view_shape(agent_id: Any, override: Any) -> str | None:
    """What two agents' views share when they differ only in their workspace string and id (None:
    not comparable that way): ``override_shape`` and whether the override names a workspace at all
    (one that does not keeps the base config's)."""
    if not isinstance(agent_id, str) or not agent_id or not isinstance(override, Mapping):
        return None
    if "workspace" in override and not isinstance(override["workspace"], str):
        return None
    shape = override_shape(override)
    return None if shape is None else f"{'workspace' in override}:{shape}"


def _view_like(base: MemoryCoreConfig, template: MemoryCoreConfig, agent_id: str,
               override: Mapping[str, Any]) -> MemoryCoreConfig:
    """``base.for_agent(agent_id)`` made from ``template``, the validated view of an agent whose
    override differs from this one's only in its workspace path (the same ``override_shape``): the
    same settings with this agent's id and workspace (expanded as validation expands it), and what
    a validated view records of its merge (raw settings, origins) for this agent."""
    update: dict[str, Any] = {"agent_id": agent_id}
    raw = dict(template._raw)
    raw["agentId"] = agent_id
    if "workspace" in override:
        workspace = override["workspace"]
        update["workspace"] = os.path.expanduser(workspace) if workspace else workspace
        raw["workspace"] = workspace
    cfg = template.model_copy(update=update)
    where = f"agents.{agent_id} in " + base._origins.get(f"agents.{agent_id}", "the config")
    cfg._raw = raw
    cfg._origins = ChainMap({p: where for p in _leaf_paths(_normalise_keys(override))}, base._origins)  # type: ignore[assignment]
    cfg._notices = list(template._notices)
    cfg._file_notices = list(base._file_notices)
    cfg._shape_views = {}
    cfg._base = base
    return cfg


def override_shape(override: Any) -> str | None:
    """An agent override with its workspace path left out (a string workspace is valid whatever it
    says), or None when it cannot be compared that way."""
    if not isinstance(override, Mapping):
        return None
    workspace = override.get("workspace")
    if workspace is not None and not isinstance(workspace, str):
        return None
    try:
        return json.dumps({k: v for k, v in override.items() if k != "workspace"}, sort_keys=True)
    except (TypeError, ValueError):
        return None


_SECRET_KEYS = {"token", "password", "apiKey"}


def _exposed_secrets(path: Path, doc: Mapping[str, Any]) -> list[str]:
    """A notice when the config file holds a secret and other users may read it (group/other bits)."""
    keys = [p for p in _leaf_paths(doc) if p.rsplit(".", 1)[-1] in _SECRET_KEYS]
    keys += [f"models.providers.{pid}.apiKey" for pid, own in (doc.get("modelProviders") or {}).items()
             if isinstance(own, Mapping) and own.get("apiKey")]
    try:
        mode = path.stat().st_mode & 0o777
    except OSError:
        return []
    if not keys or not mode & 0o044:
        return []
    return [f"config file {path} holds {', '.join(keys)} and other users can read it (mode {mode:04o}); "
            f"run `chmod 600 {path}`"]
