"""Search: lexical + vector retrieval, hybrid merge and ranking (spec §4-6)."""

from memory_core.search.types import SearchHit, citation_for

__all__ = ["SearchHit", "citation_for"]
