"""Query vectors kept per query text for a short time: an agent repeats its queries (a retry, the
v2 cursor pages, the same question asked again), and the model call is the largest part of a hybrid
search. Keyed by the provider's identity (id, model, provider key) and the exact text."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

TTL_S = 60.0
MAX_ENTRIES = 256


class QueryVectorCache:
    """At most ``max_entries`` query vectors, each answered for ``ttl_s`` seconds after it was
    embedded (least recently used dropped first). Vectors come back read-only."""

    def __init__(self, *, ttl_s: float = TTL_S, max_entries: int = MAX_ENTRIES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._clock = clock
        self._rows: OrderedDict[tuple[Any, ...], tuple[float, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(provider: Any, text: str) -> tuple[Any, ...]:
        return (getattr(provider, "id", None), getattr(provider, "model", None),
                getattr(provider, "provider_key", None), text)

    def has(self, provider: Any, text: str) -> bool:
        """Whether :meth:`vector` would answer ``text`` without embedding it."""
        now = self._clock()
        with self._lock:
            row = self._rows.get(self.key(provider, text))
            return row is not None and now - row[0] < self.ttl_s

    def vector(self, provider: Any, text: str, embed: Callable[[Any, str], np.ndarray]) -> np.ndarray:
        """The cached vector of ``text`` under ``provider``, else ``embed(provider, text)`` (kept)."""
        k = self.key(provider, text)
        now = self._clock()
        with self._lock:
            row = self._rows.get(k)
            if row is not None and now - row[0] < self.ttl_s:
                self._rows.move_to_end(k)
                return row[1]
        vec = np.array(embed(provider, text), dtype=np.float32)  # a copy of our own, made read-only
        vec.setflags(write=False)
        with self._lock:
            self._rows[k] = (now, vec)
            self._rows.move_to_end(k)
            while len(self._rows) > self.max_entries:
                self._rows.popitem(last=False)
        return vec

    def clear(self) -> None:
        with self._lock:
            self._rows.clear()
