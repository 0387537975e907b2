"""memory-core's legacy, file-shaped runtime (upstream ``MemoryPluginRuntime``; upstream
`src/plugins/registry-contribution-types.ts`, `src/memory-host-sdk/host/types.ts`).

The same engines as the provider runtime (one :class:`MemoryCoreProviderRuntime` owns them) seen
through the older contract a host's legacy adapter drives (:mod:`memory_core.slot.legacy`):
``get_memory_search_manager`` hands out a manager over the agent's engine (``search`` answers
``MemorySearchResult`` dicts, ``read_file`` is the read boundary, ``status`` and ``sync``);
``authorize_search_hits`` keeps session hits only for a sessionless (trusted) caller of the same agent,
since memory-core cannot map a transcript to a session key to vet a session caller (fail closed); and
the lifecycle hooks
``prepare_reload``, ``close_memory_search_manager`` and ``close_all_memory_search_managers``.
A manager's ``close`` is a no-op: engines are shared and closed only by those hooks.
"""

from __future__ import annotations

import asyncio
from typing import Any

from memory_core.errors import MemoryCoreError
from memory_core.provider.runtime import MemoryCoreProviderRuntime
from memory_core.surfaces.render import legacy_result


def legacy_status(st: dict[str, Any]) -> dict[str, Any]:
    """``MemoryCore.status()`` in upstream's legacy status keys."""
    counts = [{"source": s, "files": st["files_by_source"].get(s, 0), "chunks": st["chunks_by_source"].get(s, 0)}
              for s in st["sources"]]
    out: dict[str, Any] = {
        "backend": "builtin", "provider": st["provider"], "model": st["model"], "files": st["files"],
        "chunks": st["chunks"], "dirty": st["dirty"], "workspaceDir": st["workspace"], "dbPath": st["db_path"],
        "extraPaths": st["extra_paths"], "sources": st["sources"], "sourceCounts": counts,
        "cache": {"enabled": st["cache"]["enabled"], "entries": st["cache"]["entries"],
                  "maxEntries": st["cache"]["max_entries"]},
        "fts": {"enabled": True, "available": st["fts"]["available"]},
        "vector": {"enabled": st["vector"]["enabled"], "available": st["vector"]["available"],
                   "dims": st["vector"]["dims"]},
    }
    last = st.get("last_sync") or {}
    if last.get("error"):
        out["lastSyncError"] = last["error"]
    return out


class MemoryCoreManager:
    """One agent's engine behind the legacy manager methods (blocking work runs in a thread)."""

    def __init__(self, core: Any) -> None:
        self._core = core

    async def search(self, query: str, opts: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        opts = opts or {}
        kwargs = {k: opts[k] for k in ("max_results", "min_score", "sources", "lexical_only", "active_project_keys")
                  if opts.get(k) is not None}
        hits = await asyncio.to_thread(self._core.search, query, **kwargs)
        return [legacy_result(h) for h in hits]

    async def read_file(self, *, rel_path: str, from_: int | None = None, lines: int | None = None) -> dict[str, Any]:
        try:
            result = await asyncio.to_thread(self._core.get, rel_path, from_=from_, lines=lines)
        except MemoryCoreError:
            return {"status": "not_found"}
        data = result.to_dict() if hasattr(result, "to_dict") else dict(result)
        return {"status": "ok", **data}

    async def status(self) -> dict[str, Any]:
        """The upstream ``MemoryProviderStatus`` shape (the adapter redacts its host paths from health)."""
        return legacy_status(await asyncio.to_thread(self._core.status))

    async def sync(self, *, reason: str = "provider-refresh") -> None:
        await asyncio.to_thread(self._core.sync, reason=reason)

    async def close(self) -> None:
        """Nothing: the engine is shared (see the module docstring)."""


class MemoryCoreLegacyRuntime:
    """``runtime`` of the memory capability: legacy managers over ``provider_runtime``'s engines."""

    def __init__(self, provider_runtime: MemoryCoreProviderRuntime) -> None:
        self.provider_runtime = provider_runtime

    async def get_memory_search_manager(self, *, cfg: Any = None, agent_id: str, purpose: Any = None) -> dict[str, Any]:
        """``{"manager"}``, or ``{"manager": None, "error"}`` for an unknown/disabled agent or a reload."""
        agent_cfg = self.provider_runtime.agent_config(agent_id)
        if agent_cfg is None or not agent_cfg.enabled:
            return {"manager": None, "error": "Memory is disabled for this agent."}
        try:
            core = await asyncio.to_thread(self.provider_runtime.core, agent_id)
        except MemoryCoreError as exc:
            return {"manager": None, "error": exc.message}
        return {"manager": MemoryCoreManager(core)}

    def authorize_search_hits(self, *, cfg: Any = None, agent_id: str | None, hits: list[Any],
                              requester_session_key: str | None = None, sandboxed: bool = False,
                              trusted_agent_scope: bool = False, conversation_recall: Any = None) -> list[Any]:
        """``authorizeSearchHits``: memory hits pass; session hits only for a trusted sessionless caller."""
        if (trusted_agent_scope and not requester_session_key and conversation_recall is None
                and agent_id is not None and self.provider_runtime.agent_config(agent_id) is not None):
            return list(hits)
        if conversation_recall is not None and getattr(conversation_recall, "corpus", None) == "sessions":
            return []
        return [h for h in hits if getattr(h, "source", None) != "sessions"]

    def resolve_memory_backend_config(self, *, cfg: Any = None, agent_id: str | None = None) -> dict[str, Any]:
        """``resolveMemoryBackendConfig``: memory-core is the builtin SQLite backend."""
        agent_cfg = self.provider_runtime.agent_config(agent_id or self.provider_runtime.config.agent_id)
        return {"backend": "builtin", "provider": str(getattr(agent_cfg, "provider", "none"))}

    def prepare_reload(self, retire_runtime: bool = False, retiring_embedding_providers: Any = ()) -> Any:
        return self.provider_runtime.prepare_reload(retire_runtime, retiring_embedding_providers)

    async def close_memory_search_manager(self, *, cfg: Any = None, agent_id: str) -> None:
        await self.provider_runtime.close_memory_search_manager(cfg=cfg, agent_id=agent_id)

    async def close_all_memory_search_managers(self) -> None:
        await self.provider_runtime.close_all_memory_search_managers()
