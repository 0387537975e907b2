"""What a reconcile finds changed: the listed and indexed sources compared by size and mtime.

Kept apart from the scheduler so that the comparison reads as one function of its inputs; the
scheduler (:meth:`memory_core.freshness.Freshness.reconcile`) gathers them and marks the result.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from memory_core.sources import stat_matches

Stat = tuple[float, int]


def stat(path: str) -> Stat | None:
    """(mtime in ms, size) of ``path``, or None when it is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns / 1e6, st.st_size)


def changed_sources(*, indexed: dict[str, tuple[float | None, int | None]], memory: Iterable[str],
                    sessions: Iterable[str], forgotten: set[str], skipped: dict[str, tuple[float | None, int | None]],
                    verified: dict[str, Stat | None], session_grew: Callable[[str, int], bool]) -> list[str]:
    """The sources whose index rows are behind the files (absolute paths).

    A memory file is current when its stat matches the indexed row, the stat recorded after a sync
    that covered it in this process, or the stat a sync skipped it under (so unindexable or forgotten
    files do not stay dirty). A transcript that differs is changed only when ``session_grew(path,
    size)`` says its appended delta crossed the thresholds. An indexed file no longer listed is
    changed (its rows must be pruned)."""
    changed: list[str] = []
    session_set = set(sessions)
    current = set(memory) | session_set
    for path in sorted(current):
        st = stat(path)
        if st is None:
            if path in indexed:
                changed.append(path)
            continue
        if path in forgotten:
            continue
        known = verified.get(path)
        if known is not None and stat_matches(known, st):
            continue
        row = indexed.get(path)
        if row is not None and stat_matches(row, st):
            continue
        if path in skipped and stat_matches(skipped[path], st):
            continue  # the last sync that read it skipped it as it is now: a problem, not a change
        if path in session_set:
            if session_grew(path, st[1]):
                changed.append(path)
            continue
        changed.append(path)
    for path in indexed:
        if path not in current and (path not in verified or verified.get(path) is not None):
            changed.append(path)
    return changed
