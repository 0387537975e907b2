"""Session deltas: when an appended-to transcript is worth a sync (upstream `memory/manager-sync-ops.ts`,
``sync.sessions.*``).

A transcript is only re-indexed once enough was appended since the last sync (``deltaBytes`` or
``deltaMessages``); a rewrite, truncation, deletion or archive makes it dirty at once. This part
only decides; the scheduler (:class:`memory_core.freshness.Freshness`) marks what it decides dirty.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from memory_core.freshness.reconcile import stat
from memory_core.watcher import is_session_archive

_READ_BLOCK = 1 << 20


def count_newlines(path: str, start: int, end: int, *, stop_at: int | None = None) -> int:
    """Newlines in bytes [start, end) of a file, read in 1 MiB blocks (never the whole file)."""
    n = 0
    with open(path, "rb") as fh:
        fh.seek(start)
        left = end - start
        while left > 0:
            block = fh.read(min(_READ_BLOCK, left))
            if not block:
                break
            left -= len(block)
            n += block.count(b"\n")
            if stop_at is not None and n >= stop_at:
                break
    return n


@dataclass
class SessionDelta:
    offset: int = 0          # bytes of the file already accounted for
    pending_bytes: int = 0
    pending_messages: int = 0


class SessionDeltas:
    """Per-transcript appended bytes/messages since the last sync; thread-safe."""

    def __init__(self, delta_bytes: int, delta_messages: int) -> None:
        self.delta_bytes = delta_bytes
        self.delta_messages = delta_messages
        self._lock = threading.RLock()
        self._sessions: dict[str, SessionDelta] = {}

    def threshold_reached(self, d: SessionDelta) -> bool:
        b, m = self.delta_bytes, self.delta_messages
        if b <= 0 and m <= 0:
            return d.pending_bytes > 0 or d.pending_messages > 0
        return (b > 0 and d.pending_bytes >= b) or (m > 0 and d.pending_messages >= m) or (
            b <= 0 and d.pending_bytes > 0) or (m <= 0 and d.pending_messages > 0)

    def unseen(self, path: str, size: int) -> bool:
        """The transcript's size differs from what was accounted for (or it was never seen)."""
        with self._lock:
            d = self._sessions.get(path)
            return d is None or d.offset != size

    def on_change(self, path: str, st: tuple[float, int] | None, *, already_dirty: bool) -> str | None:
        """Account a change of ``path`` (``st`` None: deleted); returns the reason it became dirty
        (``session-deleted``, ``session-rewritten``, ``session-delta``, ``session-unreadable``) or None."""
        with self._lock:
            if st is None:
                self._sessions.pop(path, None)
                return "session-deleted"
            d = self._sessions.get(path)
            if d is None:
                d = self._sessions[path] = SessionDelta()
            size = st[1]
            if size < d.offset:
                d.offset = size  # rewritten or truncated: the appended-bytes model no longer holds
                return "session-rewritten"
            if already_dirty or self.threshold_reached(d):
                d.pending_bytes += size - d.offset
                d.offset = size
                return None
            start, d.offset = d.offset, size
            d.pending_bytes += size - start
            if size > start and not self.threshold_reached(d):
                need = self.delta_messages - d.pending_messages if self.delta_messages > 0 else 1
                try:
                    d.pending_messages += count_newlines(path, start, size, stop_at=need)
                except OSError:
                    return "session-unreadable"
            return "session-delta" if self.threshold_reached(d) else None

    def seed(self, indexed: dict[str, tuple[float | None, int | None]], prefix: str) -> None:
        """Baseline offsets: a transcript's indexed size (its content up to there is in the index)."""
        with self._lock:
            for path, (_mtime, size) in indexed.items():
                if path.startswith(prefix) and size is not None and path not in self._sessions:
                    self._sessions[path] = SessionDelta(offset=int(size))

    def synced(self, path: str, st: tuple[float, int] | None, *, is_session: bool) -> None:
        """A sync published ``path`` as it was at ``st``: nothing of it is pending any more."""
        with self._lock:
            d = self._sessions.get(path)
            if d is None and st is not None and is_session:
                d = self._sessions[path] = SessionDelta()
            if d is not None:
                d.pending_bytes = 0
                d.pending_messages = 0
                if st is not None:
                    d.offset = max(d.offset, st[1])

    def forget(self, path: str) -> None:
        with self._lock:
            self._sessions.pop(path, None)

    def pending(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {
                p: {"offset": d.offset, "pendingBytes": d.pending_bytes, "pendingMessages": d.pending_messages}
                for p, d in self._sessions.items()
                if d.pending_bytes or d.pending_messages
            }


def is_session_path(path: str, sessions_dir: str | None, is_archive: bool) -> bool:
    return bool(sessions_dir) and os.path.dirname(path) == sessions_dir.rstrip(os.sep) and not is_archive


class TranscriptTracking:
    """The transcript side of a :class:`~memory_core.freshness.Freshness` (a mixin): watch events of
    transcripts go through :class:`SessionDeltas`, forgotten sessions stop being tracked."""

    _cond: Any
    _policy: Any
    _sessions: SessionDeltas
    _forgotten: set[str]
    _verified: dict[str, Any]
    _indexed_fn: Any
    targets: Any
    _mark: Any    # Freshness._mark(path, reason) -> bool

    def _session_event(self, path: str, *, deleted: bool) -> bool:
        """Account appended bytes/newlines of a transcript; True when it became dirty."""
        with self._cond:
            if path in self._forgotten:
                return False  # tombstoned: a sync would refuse it anyway
        if is_session_archive(path):
            return self._mark(path, "session-archive")
        st = None if deleted else stat(path)
        with self._cond:
            already = path in self._policy.dirty_paths
        why = self._sessions.on_change(path, st, already_dirty=already)
        if why is not None:
            return self._mark(path, why)
        if already:
            self._mark(path, "session-delta")
        return False

    def _seed_session_offsets(self) -> None:
        """Baseline offsets: a transcript's indexed size (its content up to there is in the index)."""
        if not self.targets.sessions_dir:
            return
        try:
            indexed = self._indexed_fn()
        except Exception:  # noqa: BLE001 - an unreadable index just means no baseline
            return
        self._sessions.seed(indexed, self.targets.sessions_dir.rstrip(os.sep) + os.sep)

    def session_deltas(self) -> dict[str, dict[str, int]]:
        return self._sessions.pending()

    def forget_path(self, indexed_path: str) -> None:
        """A session was forgotten: stop tracking it (its tombstone keeps it out of the index)."""
        sd = self.targets.sessions_dir
        if not sd:
            return
        path = os.path.join(sd, os.path.basename(indexed_path))
        self._sessions.forget(path)
        with self._cond:
            self._forgotten.add(path)
            self._policy.dirty_paths.discard(path)
            self._policy.problems.pop(path, None)
            self._verified[path] = stat(path)

