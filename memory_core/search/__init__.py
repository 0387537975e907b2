"""Search: lexical + vector retrieval, hybrid merge and ranking (spec §4-6)."""

from __future__ import annotations

from typing import Any

__all__ = ["SearchHit", "citation_for"]


def __getattr__(name: str) -> Any:
    # lazy: importing a submodule (the CLI's search command) must not load numpy via types
    if name in __all__:
        from memory_core.search import types

        return getattr(types, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
