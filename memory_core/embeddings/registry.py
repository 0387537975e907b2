"""The embedding provider registry: providers are created by name from the configuration (upstream
`src/agents/memory-search.ts`).

``"none"`` means keyword-only (no provider). An explicitly configured provider that cannot be used
raises ProviderUnavailable: memory-core never downgrades a semantic index to keyword-only behind
the user's back (docs/decisions.md D4).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from memory_core.embeddings.base import EmbeddingProvider
from memory_core.errors import ConfigError, ProviderUnavailable

if TYPE_CHECKING:
    from memory_core.config import MemoryCoreConfig

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
        from memory_core.embeddings.remote import SPECS, factory

        # setdefault: a provider registered by the application before first use wins over the built-in.
        _REGISTRY.setdefault("local", create_local)
        _REGISTRY.setdefault("openai-compatible", create_openai_compatible)
        _REGISTRY.setdefault("none", lambda config: None)
        for name in SPECS:  # openai, gemini, voyage, mistral, ollama, lmstudio
            _REGISTRY.setdefault(name, factory(name))
        _REGISTRY.setdefault("auto", _auto_factory)
        _BUILTINS_LOADED = True


def _auto_factory(config: MemoryCoreConfig) -> EmbeddingProvider | None:
    # "auto" is the optional mode of upstream `src/agents/memory-search.ts`: the local model if it can run,
    # else keyword-only.
    try:
        return _REGISTRY["local"](config)
    except ProviderUnavailable:
        return None


def registered_providers() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


def check_provider_name(config: MemoryCoreConfig) -> ProviderFactory:
    """The factory of the configured provider (its ``fallback`` name checked too); an unknown name is a
    :class:`ConfigError` naming the registered ones (the same message from every command, before anything
    is read or synced)."""
    _load_builtins()
    factory = _factory((config.provider or "none").strip().lower(), "provider")
    fallback = (config.fallback or "none").strip().lower()
    if fallback != "none":
        _factory(fallback, "fallback")
    return factory


def create_embedding_provider(config: MemoryCoreConfig) -> EmbeddingProvider | None:
    """The configured provider, or None for ``"none"`` (keyword-only).

    Unknown names raise ConfigError; a known provider that cannot run raises ProviderUnavailable.
    """
    factory = check_provider_name(config)
    name = (config.provider or "none").strip().lower()
    fallback = (config.fallback or "none").strip().lower()
    if fallback in ("none", name) or name == "none":
        return factory(config)
    fb_factory = _factory(fallback, "fallback")

    def make_fallback() -> EmbeddingProvider:
        from memory_core.embeddings.remote import SPECS, create_named

        # the primary's model and remote settings are not the fallback's (upstream)
        provider = create_named(SPECS[fallback], config, as_fallback=True) if fallback in SPECS else fb_factory(config)
        if provider is None:
            raise ConfigError(f"fallback: {fallback!r} is no embedding provider; use another or \"none\"")
        return provider

    from memory_core.embeddings.fallback import FallbackProvider

    try:
        primary = factory(config)
    except (ProviderUnavailable, ConfigError) as exc:  # the primary cannot even be created
        return FallbackProvider(None, make_fallback, primary_name=name, reason=exc.message)
    if primary is None:
        return None
    return FallbackProvider(primary, make_fallback, primary_name=name)


def _factory(name: str, key: str) -> ProviderFactory:
    factory = _REGISTRY.get(name)
    if factory is None:
        import difflib

        close = difflib.get_close_matches(name, registered_providers(), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(
            f"{key}: unknown embedding provider {name!r}{hint}; use one of {', '.join(registered_providers())}"
        )
    return factory
