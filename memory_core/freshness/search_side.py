"""What a search asks of the freshness scheduler: is the watcher healthy, must the sources be
reconciled before answering, is the index empty (bootstrap), and how stale the answer is.

A mixin of :class:`~memory_core.freshness.Freshness` (it reads the scheduler's policy under its lock).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from memory_core.errors import IndexUnreadable
from memory_core.freshness import report

log = logging.getLogger("memory_core.freshness")


class SearchSide:
    """The search hooks and the read-only state of a :class:`~memory_core.freshness.Freshness`."""

    _cond: Any
    _policy: Any
    watcher: Any
    settings: Any
    targets: Any
    _bootstrapped: bool

    def watching(self) -> bool:
        """A watcher runs and is healthy: it reports changes, so no reconcile is needed to find them."""
        return self.watcher is not None and self.watcher.healthy()

    def before_search_is_cheap(self) -> bool:
        """Whether :meth:`before_search` would only read state now: the watcher is up (no inline
        reconcile, no restart) and the index was bootstrapped (no sync waited for). An event loop
        may then run it instead of a thread."""
        return self._bootstrapped and self.watching()

    def check_watcher(self) -> bool:
        """Restart a watcher that died; True when it had to be restarted."""
        w = self.watcher
        if w is None or w.state != "dead":
            return False
        w.restart("watcher found dead")
        return True

    def before_search(self) -> dict | None:
        """Run before every search: notice a dead watcher, cheap reconcile, bootstrap an empty
        index (forced sync, waited for), start a background sync when dirty (not waited for).

        Returns the staleness of the index *as this search will see it*, or None when fresh.
        """
        restarted = self.check_watcher()
        if not self.watching() or restarted:
            # No watcher (or it just died): only a reconcile can tell whether this answer is stale.
            # It stats every source, so it runs at most once per reconcile_interval_s (and at once
            # for the first search and after a watcher death); the searches in between only read.
            # An unreadable index file is this search's error, not something a sync can fix.
            due = time.monotonic() - self._last_reconcile >= self.settings.reconcile_interval_s
            if restarted or not self._reconciled_once or due:
                self.reconcile(sessions_by_delta=True, strict=True)
                self._reconciled_once = True
        elif time.monotonic() - self._last_reconcile >= self.settings.reconcile_min_interval_s:
            # The watcher is up: re-check for missed events in the background, at most once per
            # interval, so searches do not pay for a listing.
            self._last_reconcile = time.monotonic()
            with self._cond:
                self._policy.reconcile_due = True
            self._wake()
        if not self._bootstrapped:
            self._bootstrap()
        # The answer's staleness is taken before the background sync starts: the search does not
        # wait for it, so it must say that it may not see the newest content.
        stale = self.staleness()
        if self.settings.on_search and self.is_dirty():
            self.request_sync([], reason="search")
        return stale

    def _bootstrap(self) -> None:
        """An empty index with sources to index: a forced sync, waited for."""
        try:
            # A file a sync skipped shows the index was built, even when nothing could be indexed.
            indexed = self._indexed_fn() or (self._skipped_fn() if self._skipped_fn else {})
        except IndexUnreadable:
            raise
        except Exception:  # noqa: BLE001
            indexed = {}
        if not indexed:
            try:
                memory, sessions = self._list_fn()
            except Exception:  # noqa: BLE001
                memory, sessions = [], []
            if memory or sessions:
                try:
                    self.request_sync(None, reason="search", force=True).result()
                except IndexUnreadable:
                    raise
                except Exception as exc:  # noqa: BLE001 - recorded in last_sync_error; reported as stale
                    log.warning("bootstrap sync failed: %s", exc)
        self._bootstrapped = True

    # ------------------------------------------------------------------ state

    def is_dirty(self) -> bool:
        with self._cond:
            return self._policy.is_dirty()

    def is_behind(self) -> bool:
        """Dirty, or a sync is publishing changes right now."""
        with self._cond:
            return self._policy.is_behind()

    def pending_paths(self) -> list[str]:
        with self._cond:
            return sorted(self._policy.pending())

    def staleness(self) -> dict | None:
        """Upstream ``resolveMemorySearchStaleness``: ``{stale: True, warning, action}`` or None
        (worded by :mod:`memory_core.freshness.report`)."""
        paused = None
        if self._paused_fn is not None:
            try:
                paused = self._paused_fn()
            except Exception as exc:  # noqa: BLE001
                paused = str(exc)
        with self._cond:
            problems = dict(self._policy.problems)
            behind = self._policy.is_behind()
            files = self._policy.behind_files()
        return report.staleness(paused=paused, sync_error=self.last_sync_error, problems=problems,
                                behind=behind, action_command=self._action_command, display=self.display,
                                files=files)

    def answer_staleness(self, stale: dict | None, query: str, hit_paths: Any) -> dict | None:
        """The staleness of one answer (``stale``: what :meth:`before_search` returned): see
        :func:`memory_core.freshness.report.for_answer`."""
        return report.for_answer(stale, query, hit_paths, self.display, self._action_command)

    def status(self) -> dict:
        """Fields for ``memory-core status``: dirty, last sync, error, problems, pending paths, watcher."""
        return report.status(self)

    def snapshot(self) -> dict[str, Any]:
        """What is behind, in one consistent read (worded by :func:`report.status`)."""
        with self._cond:
            pol = self._policy
            return {"dirty": pol.is_dirty(), "behind": pol.is_behind(), "full": pol.dirty_full,
                    "pending": sorted(pol.pending()), "running": pol.running is not None,
                    "queued": pol.queued is not None, "problems": dict(pol.problems)}

    def display(self, path: str) -> str:
        """``path`` as status shows it: workspace-relative, ``sessions/<name>`` for a transcript."""
        sd = self.targets.sessions_dir
        if sd and path.startswith(sd.rstrip(os.sep) + os.sep):
            return "sessions/" + os.path.basename(path)
        rel = os.path.relpath(path, self.targets.workspace)
        return rel.replace(os.sep, "/")
