"""The embedding provider interface and the cache protocol (upstream `memory/manager-embedding-ops.ts`),
which providers implement.

A provider has one method, ``embed_batch(texts) -> float32 array (n, dims)``, L2-normalised rows.
Providers are created by name in :mod:`memory_core.embeddings.registry`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class EmbeddingProvider(Protocol):
    """Turns texts into L2-normalised float32 vectors; identity fields feed the cache and index meta.

    A provider may also set ``max_batch_inputs`` / ``max_batch_tokens``, the most one
    ``embed_batch`` call should carry (default: a remote API's limits, ``batching.MAX_BATCH_*``)."""

    id: str
    model: str
    provider_key: str
    dims: int | None
    max_input_bytes: int

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray: ...


class EmbeddingCacheStore(Protocol):
    """The embedding cache keyed by (provider, model, provider_key, chunk hash) (upstream
    `memory/manager-embedding-ops.ts`)."""

    def get_many(
        self, provider: str, model: str, provider_key: str, hashes: Sequence[str]
    ) -> dict[str, np.ndarray]: ...

    def put_many(self, provider: str, model: str, provider_key: str, items: dict[str, np.ndarray]) -> None: ...


class ProviderRequestError(Exception):
    """One embedding request failed. ``retryable``: worth another attempt; ``splittable``: a smaller
    batch might succeed (the failure may be caused by one input). The message never holds secrets."""

    def __init__(
        self, message: str, *, status: int | None = None, retryable: bool = True, splittable: bool = True
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.splittable = splittable


def compute_provider_key(settings: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of the settings that change vectors (never secret values)."""
    blob = json.dumps(dict(settings), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()
