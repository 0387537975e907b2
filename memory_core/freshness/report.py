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
        first = sorted(problems)[0]
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
