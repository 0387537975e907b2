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


# how each identity key reads in a message, and the setting that restores it (None: nothing to set,
# the code that builds the index changed, or the value follows from the provider)
_SHOWN = {
    "sources": ("sources", "sources"),
    "scopeHash": ("extraPaths/multimodal", None),
    "chunkTokens": ("chunking.tokens", "chunking.tokens"),
    "chunkOverlap": ("chunking.overlap", "chunking.overlap"),
    "chunkingVersion": ("chunker version", None),
    "ftsTokenizer": ("store.fts.tokenizer", "store.fts.tokenizer"),
    "provenanceVersion": ("provenance version", None),
}
_EMBEDDING_KEYS = ("provider", "model", "providerKey", "vectorDims")


def _toml(value: Any) -> str:
    return json.dumps(sorted(value) if isinstance(value, list) else value)


def _embeddings(ident: Mapping[str, Any], keys: list[str]) -> str:
    if (ident.get("provider") or "none") == "none":
        return "none (keyword-only)"
    text = f"{ident.get('provider')} / {ident.get('model')}"
    if "providerKey" in keys and "provider" not in keys and "model" not in keys:
        text += f" (provider key {str(ident.get('providerKey'))[:12]})"
    if "vectorDims" in keys:
        text += f", {ident.get('vectorDims')} dims"
    return text


def _side(ident: Mapping[str, Any], keys: list[str]) -> str:
    parts = [_embeddings(ident, keys)] if any(k in keys for k in _EMBEDDING_KEYS) else []
    for key in keys:
        if key in _SHOWN:
            value = ident.get(key)
            shown = str(value)[:8] if key == "scopeHash" else (_toml(value) if isinstance(value, list) else value)
            parts.append(f"{_SHOWN[key][0]} {shown}")
    return ", ".join(parts)


def paused_message(stored: Mapping[str, Any], current: Mapping[str, Any], keys: list[str], *,
                   what: str = "memory search paused") -> str:
    """The one-line error for an index built with other settings: what differs, as the index has it
    and as the configuration has it, and both ways out (set it back, or rebuild)."""
    fixes: list[str] = []
    if any(k in keys for k in ("provider", "model", "providerKey")):
        prov = stored.get("provider") or "none"
        if prov != (current.get("provider") or "none"):
            fixes.append(f"provider = {_toml(prov)}")
        elif prov != "none" and "model" in keys:  # same provider, another model
            fixes.append(f"model = {_toml(stored.get('model'))}")
    settable = not any(k in keys for k in ("scopeHash", "chunkingVersion", "provenanceVersion"))
    settable = settable and not ("providerKey" in keys and not fixes)
    for key in keys:
        setting = _SHOWN.get(key, (None, None))[1]
        if setting:
            fixes.append(f"{setting} = {_toml(stored.get(key))}")
    drops = (stored.get("provider") or "none") != "none" and (current.get("provider") or "none") == "none"
    rebuild = ("run `memory-core index --force` to rebuild it with the configuration (its vectors are dropped)"
               if drops else "run `memory-core index` to rebuild it with the configuration")
    how = (f"set {', '.join(f'`{f}`' for f in fixes)} in the config to search it as built, or {rebuild}"
           if settable and fixes else rebuild)
    return (f"{what}: the index was built with other settings than the configuration's "
            f"(index: {_side(stored, keys)}; configuration: {_side(current, keys)}); {how}")


def settings_change(stored: Mapping[str, Any], current: Mapping[str, Any], keys: list[str]) -> str:
    """What a rebuild for an identity change changes, old -> new: ``chunking.tokens 400 -> 300``."""
    parts = []
    if any(k in keys for k in _EMBEDDING_KEYS):
        parts.append(f"embeddings {_embeddings(stored, keys)} -> {_embeddings(current, keys)}")
    for key in keys:
        if key in _SHOWN:
            old, new = _side(stored, [key]), _side(current, [key])
            parts.append(f"{old} -> {new[len(_SHOWN[key][0]) + 1:]}")
    return ", ".join(parts)

