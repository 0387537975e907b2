"""The reload fence behind ``prepareReload`` (upstream ``prepareMemoryManagerReload``).

A host about to reload plugins calls ``prepare(retire_runtime, retiring_embedding_providers)``: from
then on, opening an engine whose embedding provider is retiring (every engine when the runtime
retires) raises :class:`~memory_core.errors.MemoryManagerReloading`; ``await handle.drain()`` closes
those engines and returns ``{"errors": [...]}``; ``handle.resume()`` lifts the fence, unless a later
``prepare`` replaced it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from memory_core.errors import MemoryManagerReloading

RELOADING = "Memory provider is reloading; retry after the plugin operation completes."


def adapter_id(adapter: Any) -> str:
    """An embedding provider adapter's id (an object with ``id``, a mapping with ``"id"``, or the id)."""
    if isinstance(adapter, str):
        return adapter
    if isinstance(adapter, dict):
        return str(adapter.get("id"))
    return str(getattr(adapter, "id", adapter))


@dataclass
class _Reload:
    retire_runtime: bool = False
    adapters: set[str] = field(default_factory=set)
    generation: int = 0

    def retires(self, provider: str) -> bool:
        return self.retire_runtime or provider in self.adapters


class ReloadHandle:
    """What ``prepare`` returns: ``await drain()`` then ``resume()``."""

    def __init__(self, fence: ReloadFence, reload: _Reload, generation: int) -> None:
        self._fence, self._reload, self._generation = fence, reload, generation

    async def drain(self) -> dict[str, list[str]]:
        return await asyncio.to_thread(self._fence.drain_now, self._reload)

    def resume(self) -> None:
        self._fence.resume(self._reload, self._generation)


class ReloadFence:
    """Shared by a runtime's legacy and provider faces: ``engines()`` maps agent id -> provider name,
    ``close_agent(agent_id)`` closes that agent's engine."""

    def __init__(self, engines: Callable[[], dict[str, str]], close_agent: Callable[[str], None]) -> None:
        self._engines = engines
        self._close_agent = close_agent
        self._lock = threading.Lock()
        self._reload: _Reload | None = None

    def prepare(self, retire_runtime: bool = False, retiring_embedding_providers: Iterable[Any] = ()) -> ReloadHandle:
        with self._lock:
            reload = self._reload or _Reload()
            reload.retire_runtime = reload.retire_runtime or bool(retire_runtime)
            reload.adapters.update(adapter_id(a) for a in retiring_embedding_providers)
            reload.generation += 1
            self._reload = reload
            return ReloadHandle(self, reload, reload.generation)

    def check(self, provider: str) -> None:
        """Raise while a pending reload retires an engine using ``provider``."""
        reload = self._reload
        if reload is not None and reload.retires(provider):
            raise MemoryManagerReloading(RELOADING)

    def drain_now(self, reload: _Reload) -> dict[str, list[str]]:
        errors: list[str] = []
        for agent_id, provider in sorted(self._engines().items()):
            if reload.retires(provider):
                try:
                    self._close_agent(agent_id)
                except Exception as exc:  # noqa: BLE001 - reported to the host, the other closes go on
                    errors.append(f"{agent_id}: {exc}")
        return {"errors": errors}

    def resume(self, reload: _Reload, generation: int) -> None:
        with self._lock:
            if self._reload is reload and reload.generation == generation:
                self._reload = None
