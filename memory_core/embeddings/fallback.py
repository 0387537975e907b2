"""``fallback``: a second embedding provider used when the configured one fails (upstream
``memory.search.fallback``; docs/reference/memory-config.md "Provider selection").

:class:`FallbackProvider` embeds with the primary (with the usual retries) until it fails for good -
it cannot be created, rejects its key, or keeps answering 5xx/429/network errors - and then with the
fallback for the rest of the process. Vectors are never mixed silently: the switch raises
:class:`FallbackActivated`, the owner rebuilds the index with the fallback (``MemoryCore._do_sync``),
and the index identity records the fallback's provider and model (``id``/``model``/``provider_key``
follow the active provider).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from memory_core.embeddings.base import EmbeddingProvider, ProviderRequestError
from memory_core.errors import MemoryCoreError, ProviderUnavailable


class FallbackActivated(ProviderUnavailable):
    """The primary embedding provider failed and the fallback took over; rebuild with the fallback."""

    code = "fallback_activated"


class FallbackProvider:
    """The primary provider (possibly None: it could not be created), else the fallback."""

    def __init__(self, primary: EmbeddingProvider | None, make_fallback: Callable[[], EmbeddingProvider],
                 *, primary_name: str, reason: str | None = None, sleep: Callable[[float], None] = time.sleep) -> None:
        self._primary = primary
        self._make_fallback = make_fallback
        self._fallback: EmbeddingProvider | None = None
        self.primary_name = primary_name
        self.reason = reason  # why the fallback is active (None while the primary is)
        self._sleep = sleep
        if primary is None:
            self._fallback = make_fallback()

    @property
    def active(self) -> EmbeddingProvider:
        return self._fallback if self._fallback is not None else self._primary  # type: ignore[return-value]

    @property
    def fallback_active(self) -> bool:
        return self._fallback is not None

    def __getattr__(self, name: str) -> Any:  # id, model, provider_key, dims, batch limits...
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.active, name)

    def __repr__(self) -> str:
        return f"FallbackProvider(active={self.active!r}, primary={self.primary_name!r}, reason={self.reason!r})"

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        return self._call("embed_batch", texts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._call("embed_queries", texts)

    def _call(self, name: str, texts: Sequence[str]) -> np.ndarray:
        active = self.active
        call = getattr(active, name, None) or active.embed_batch
        if self._fallback is not None:
            return np.asarray(call(texts))
        from memory_core.embeddings.batching import _call_with_retry

        try:
            return _call_with_retry(active, texts, call, self._sleep)
        except ProviderRequestError as exc:
            if not exc.retryable:
                raise  # the request's fault (e.g. one bad input): the caller splits the batch
            self._switch(str(exc))
        except ProviderUnavailable as exc:
            self._switch(exc.message)
        raise FallbackActivated(
            f"embedding provider {self.primary_name!r} failed ({self.reason}); switched to the fallback "
            f"{self.active.id!r} (model {self.active.model!r}): the index is rebuilt with its vectors")

    def _switch(self, reason: str) -> None:
        try:
            self._fallback = self._make_fallback()
        except MemoryCoreError as exc:
            raise ProviderUnavailable(
                f"embedding provider {self.primary_name!r} failed ({reason}) and the fallback cannot be used: "
                f"{exc.message}") from None
        self.reason = reason
