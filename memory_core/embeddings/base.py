"""The embedding provider interface, the provider registry and the cache protocol (spec §7).

A provider has one method, ``embed_batch(texts) -> float32 array (n, dims)``, L2-normalised rows.
Providers are created by name from the configuration; ``"none"`` means keyword-only (no provider).
An explicitly configured provider that cannot be used raises ProviderUnavailable: memory-core never
downgrades a semantic index to keyword-only behind the user's back (D4, §7.4).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from memory_core.errors import ConfigError, ProviderUnavailable

if TYPE_CHECKING:
    from memory_core.config import MemoryCoreConfig

__all__ = [
    "EmbeddingProvider",
    "EmbeddingCacheStore",
    "ProviderRequestError",
    "ProviderUnavailable",
    "ProviderFactory",
    "register_embedding_provider",
    "create_embedding_provider",
    "registered_providers",
    "compute_provider_key",
    "l2_normalise",
]


@runtime_checkable
class EmbeddingProvider(Protocol):
    """Turns texts into L2-normalised float32 vectors; identity fields feed the cache and index meta."""

    id: str
    model: str
    provider_key: str
    dims: int | None
    max_input_bytes: int

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray: ...


class EmbeddingCacheStore(Protocol):
    """The embedding cache keyed by (provider, model, provider_key, chunk hash) (spec §7.3)."""

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


ProviderFactory = Callable[["MemoryCoreConfig"], "EmbeddingProvider | None"]

_REGISTRY: dict[str, ProviderFactory] = {}
_BUILTINS_LOADED = False


def register_embedding_provider(name: str, factory: ProviderFactory, *, replace: bool = True) -> None:
    """Make ``provider = name`` in the configuration create providers with ``factory(config)``."""
    key = name.strip().lower()
    if not key:
        raise ValueError("provider name must not be empty")
    if not replace and key in _REGISTRY:
        raise ValueError(f"embedding provider {key!r} is already registered")
    _REGISTRY[key] = factory


_BUILTINS_LOCK = threading.Lock()


def _load_builtins() -> None:
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    # Locked, and the flag set only once the registry is filled: concurrent first searches (gateway
    # threads) must never see the flag with an empty registry ("unknown embedding provider 'none'").
    with _BUILTINS_LOCK:
        if _BUILTINS_LOADED:
            return
        from memory_core.embeddings.local import create_local
        from memory_core.embeddings.openai_compatible import create_openai_compatible

        # setdefault: a provider registered by the application before first use wins over the built-in.
        _REGISTRY.setdefault("local", create_local)
        _REGISTRY.setdefault("openai-compatible", create_openai_compatible)
        _REGISTRY.setdefault("none", lambda config: None)
        _REGISTRY.setdefault("auto", _auto_factory)
        _BUILTINS_LOADED = True


def _auto_factory(config: MemoryCoreConfig) -> EmbeddingProvider | None:
    # "auto" is the optional mode of spec §7.1: the local model if it can run, else keyword-only.
    try:
        return _REGISTRY["local"](config)
    except ProviderUnavailable:
        return None


def registered_providers() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


def create_embedding_provider(config: MemoryCoreConfig) -> EmbeddingProvider | None:
    """The configured provider, or None for ``"none"`` (keyword-only).

    Unknown names raise ConfigError; a known provider that cannot run raises ProviderUnavailable.
    """
    _load_builtins()
    name = (config.provider or "none").strip().lower()
    factory = _REGISTRY.get(name)
    if factory is None:
        raise ConfigError(
            f"provider: unknown embedding provider {name!r}; use one of {', '.join(registered_providers())}"
        )
    return factory(config)


def compute_provider_key(settings: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of the settings that change vectors (never secret values)."""
    blob = json.dumps(dict(settings), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def l2_normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length as float32; all-zero rows stay zero."""
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim == 1:
        norm = float(np.linalg.norm(arr))
        return arr / norm if norm > 0 else arr
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (arr / norms).astype(np.float32, copy=False)
