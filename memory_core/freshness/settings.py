"""The ``sync.*`` keys of the config (plus memory-core's own timing knobs) as the freshness
scheduler reads them; apart from :mod:`memory_core.freshness` so that
:mod:`memory_core.freshness.binding` can read them without importing its package back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FULL_RECONCILE_INTERVAL_S = 15 * 60   # SESSION_PRUNE_RECONCILE_INTERVAL_MS

__all__ = ["FULL_RECONCILE_INTERVAL_S", "FreshnessSettings"]


@dataclass(frozen=True)
class FreshnessSettings:
    """The ``sync.*`` keys (``agents.defaults.memorySearch.sync``) plus memory-core's own timing knobs."""

    watch: bool = True
    watch_debounce_ms: int = 1500
    interval_minutes: float = 0.0
    on_search: bool = True
    delta_bytes: int = 100_000
    delta_messages: int = 50
    full_reconcile_s: float = FULL_RECONCILE_INTERVAL_S
    reconcile_min_interval_s: float = 1.0     # throttle of the pre-search reconcile while the watcher is healthy
    reconcile_interval_s: float = 2.0         # without a watcher: a search reconciles at most this often
    health_check_s: float = 30.0              # background watcher check + cheap reconcile
    retry_backoff_s: tuple[float, float] = (2.0, 300.0)

    @classmethod
    def from_config(cls, config: Any, **overrides: Any) -> FreshnessSettings:
        sync = config.sync
        values: dict[str, Any] = {
            "watch": bool(sync.watch),
            "watch_debounce_ms": int(sync.watch_debounce_ms),
            "interval_minutes": float(sync.interval_minutes or 0),
            "on_search": bool(sync.on_search),
            "delta_bytes": int(sync.sessions.delta_bytes),
            "delta_messages": int(sync.sessions.delta_messages),
            "reconcile_interval_s": float(sync.reconcile_interval_ms) / 1000.0,
        }
        values.update(overrides)
        return cls(**values)
