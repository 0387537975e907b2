"""The staleness report: what a search answer and ``status`` say about an index that is behind.

"Stale" means the answer may not reflect the files as they are now: files changed that are not
published yet (dirty, or being published), files whose last publish failed (retried with backoff),
a failed sync, or an index paused for a settings change. Upstream's shape:
``{stale: True, warning, action}`` (``resolveMemorySearchStaleness``); None when fresh.
"""

from __future__ import annotations

from typing import Any


def staleness(*, paused: str | None, sync_error: str | None, problems: dict[str, str], behind: bool,
              action_command: str, display: Any) -> dict[str, Any] | None:
    """The report for one answer, most serious reason first."""
    if paused:
        return {
            "stale": True,
            "warning": f"Memory index is stale: {paused}. Search results may be incomplete.",
            "action": f"Run: {action_command} --force",
        }
    if sync_error:
        return {
            "stale": True,
            "warning": f"Memory index is stale: {sync_error}. Search results may be incomplete.",
            "action": f"Run: {action_command}",
        }
    if problems:
        first = min(problems)
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return {
            "stale": True,
            "warning": f"Memory index is stale: {display(first)} could not be indexed{more}: {problems[first]}; "
                       "retrying. Search results may be incomplete.",
            "action": f"Run: {action_command}",
        }
    if behind:
        return {
            "stale": True,
            "warning": "Memory index is dirty. Search results may be incomplete.",
            "action": f"Run: {action_command}",
        }
    return None


def status(fresh: Any) -> dict[str, Any]:
    """The ``freshness`` fields of ``memory-core status`` for a :class:`~memory_core.freshness.Freshness`."""
    snap = fresh.snapshot()
    settings = fresh.settings
    return {
        "dirty": snap["dirty"],
        "behind": snap["behind"],
        "fullSyncPending": snap["full"],
        "pendingPaths": [fresh.display(p) for p in snap["pending"][:100]],
        "pendingCount": len(snap["pending"]),
        "syncRunning": snap["running"],
        "syncQueued": snap["queued"],
        "lastSyncAt": fresh.last_sync_at,
        "lastSyncReason": fresh.last_sync_reason,
        "lastSyncError": fresh.last_sync_error,
        "lastSyncErrorAt": fresh.last_sync_error_at,
        "lastFullSyncAt": fresh.last_full_sync_wall,
        "lastReconcileAt": fresh.last_reconcile_at,
        "syncCount": fresh.sync_count,
        "problems": [{"path": fresh.display(p), "code": "publish_failed", "message": m}
                     for p, m in sorted(snap["problems"].items())[:100]],
        "problemCount": len(snap["problems"]),
        "sessionDeltas": {fresh.display(p): v for p, v in fresh.session_deltas().items()},
        "watcher": fresh.watcher.status() if fresh.watcher is not None else {"state": "disabled"},
        "settings": {
            "watch": settings.watch,
            "watchDebounceMs": settings.watch_debounce_ms,
            "intervalMinutes": settings.interval_minutes,
            "reconcileIntervalMs": round(settings.reconcile_interval_s * 1000),
            "onSearch": settings.on_search,
            "deltaBytes": settings.delta_bytes,
            "deltaMessages": settings.delta_messages,
        },
    }
