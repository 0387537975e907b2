"""The staleness report: what a search answer and ``status`` say about an index that is behind.

"Stale" means the answer may not reflect the files as they are now: files changed that are not
published yet (dirty, or being published), files whose last publish failed (retried with backoff),
a failed sync, or an index paused for a settings change. Upstream's shape:
``{stale: True, warning, action}`` (``resolveMemorySearchStaleness``); None when fresh.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any


class Staleness(dict):  # type: ignore[type-arg]
    """An index-wide report (upstream's ``{stale, warning, action}`` dict) that also knows which
    files are behind: ``files`` (absolute paths) when only they are, None when the whole index may
    be (paused, a failed sync, a full pass pending or running). :func:`for_answer` narrows it to one
    answer."""

    files: frozenset[str] | None = None
    problems: dict[str, str] = {}


def staleness(*, paused: str | None, sync_error: str | None, problems: dict[str, str], behind: bool,
              action_command: str, display: Any, files: set[str] | None = None) -> dict[str, Any] | None:
    """The report for the index, most serious reason first. ``files``: the paths that are behind
    (pending, being published, failed), or None when the whole index may be behind."""
    if paused:
        return Staleness({
            "stale": True,
            "warning": f"Memory index is stale: {paused}. Search results may be incomplete.",
            "action": f"Run: {action_command} --force",
        })
    if sync_error:
        return Staleness({
            "stale": True,
            "warning": f"Memory index is stale: {sync_error}. Search results may be incomplete.",
            "action": f"Run: {action_command}",
        })
    out: Staleness | None = None
    if problems:
        out = Staleness(_problem_report(problems, action_command, display))
    elif behind:
        out = Staleness({
            "stale": True,
            "warning": "Memory index is dirty. Search results may be incomplete.",
            "action": f"Run: {action_command}",
        })
    if out is not None and files is not None:
        out.files = frozenset(files) | frozenset(problems)
        out.problems = dict(problems)
    return out


def _problem_report(problems: dict[str, str], action_command: str, display: Any) -> dict[str, Any]:
    first = min(problems)
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return {
        "stale": True,
        "warning": f"Memory index is stale: {display(first)} could not be indexed{more}: {problems[first]}; "
                   "retrying. Search results may be incomplete.",
        "action": f"Run: {action_command}",
    }


# A file larger than this is not read to look for the query's terms: it counts as holding them.
TERM_SCAN_MAX_BYTES = 1 << 20
# With more files behind than this, an answer is not checked file by file: it is stale.
TERM_SCAN_MAX_FILES = 64
_TERM = re.compile(r"\w+")


def for_answer(stale: dict[str, Any] | None, query: str, hit_paths: Iterable[str], display: Any,
               action_command: str) -> dict[str, Any] | None:
    """One answer's staleness: stale only when a file it could depend on is behind (a hit's own
    file, or a file behind whose current text holds a term of the query), naming those files; an
    index-wide reason (``files`` None) stays as it is."""
    files = getattr(stale, "files", None)
    if stale is None or files is None or len(files) > TERM_SCAN_MAX_FILES:
        return stale
    hits = set(hit_paths)
    terms = {t.lower() for t in _TERM.findall(query or "")}
    touched = sorted(p for p in files if display(p) in hits or _holds_any(p, terms))
    if not touched:
        return None
    problems = {p: m for p, m in getattr(stale, "problems", {}).items() if p in touched}
    if problems:
        return _problem_report(problems, action_command, display)
    shown = ", ".join(display(p) for p in touched[:3])
    more = f" (and {len(touched) - 3} more)" if len(touched) > 3 else ""
    return {"stale": True,
            "warning": f"Memory index is dirty: {shown}{more} changed since the last sync. "
                       "Search results may be incomplete.",
            "action": f"Run: {action_command}"}


def _holds_any(path: str, terms: set[str]) -> bool:
    """Whether the file as it is now holds one of ``terms`` (a gone file holds none; a large or
    unreadable one counts as holding them)."""
    if not terms:
        return True
    try:
        if os.path.getsize(path) > TERM_SCAN_MAX_BYTES:
            return True
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read().lower()
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return any(t in text for t in terms)


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
