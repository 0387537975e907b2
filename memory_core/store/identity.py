"""Index identity: what an index was built with (``memory_index_meta_v1``) and what changed since.

An index whose stored identity differs from the configuration's in any :data:`IDENTITY_KEYS`
key must be rebuilt (``memory-core index --force``) before it serves that configuration.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from host_facades.chunking.pipeline import CHUNKING_VERSION
from memory_core.config import MemoryCoreConfig

IDENTITY_KEYS = (
    "model",
    "provider",
    "providerKey",
    "sources",
    "scopeHash",
    "chunkTokens",
    "chunkOverlap",
    "chunkingVersion",
    "vectorDims",
    "ftsTokenizer",
    "provenanceVersion",
)


def scope_hash(config: MemoryCoreConfig) -> str:
    """sha256 of the extraPaths and multimodal settings (part of the index identity)."""
    extra = [p if isinstance(p, str) else p.model_dump() for p in config.extra_paths]
    payload = {"extraPaths": extra, "multimodal": config.multimodal.model_dump(by_alias=True)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def index_identity(config: MemoryCoreConfig, provider: Any | None) -> dict[str, Any]:
    """The ``memory_index_meta_v1`` JSON for this config and embedding provider (None = FTS-only)."""
    if provider is None:
        prov, model, key, dims = "none", "fts-only", "", None
    else:
        prov = str(getattr(provider, "id", config.provider))
        model = str(getattr(provider, "model", config.model or ""))
        key = str(getattr(provider, "provider_key", ""))
        dims = getattr(provider, "dims", None)
    return {
        "model": model,
        "provider": prov,
        "providerKey": key,
        "sources": sorted(config.sources),
        "scopeHash": scope_hash(config),
        "chunkTokens": config.chunking.tokens,
        "chunkOverlap": config.chunking.overlap,
        "chunkingVersion": CHUNKING_VERSION,
        "vectorDims": dims,
        "ftsTokenizer": config.store.fts.tokenizer,
        "provenanceVersion": 1,
    }


def identity_mismatch(stored: Mapping[str, Any] | None, current: Mapping[str, Any]) -> list[str]:
    """Keys whose values differ (all keys if nothing is stored); vectorDims only when both are set."""
    if not stored:
        return list(IDENTITY_KEYS)
    out: list[str] = []
    for key in IDENTITY_KEYS:
        a, b = stored.get(key), current.get(key)
        if key == "vectorDims" and (a is None or b is None):
            continue
        if key == "sources":
            a = sorted(a) if isinstance(a, list) else a
            b = sorted(b) if isinstance(b, list) else b
        if a != b:
            out.append(key)
    return out
