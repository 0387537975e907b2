"""Embedding providers, the provider registry, batching with retries, and the cache protocol (spec §7)."""

from memory_core.embeddings.base import (
    EmbeddingCacheStore,
    EmbeddingProvider,
    ProviderRequestError,
    ProviderUnavailable,
    compute_provider_key,
    create_embedding_provider,
    l2_normalise,
    register_embedding_provider,
    registered_providers,
)
from memory_core.embeddings.batching import (
    MAX_BATCH_INPUTS,
    MAX_BATCH_TOKENS,
    embed_chunks,
    embed_query,
    embed_texts,
    estimate_tokens,
    plan_batches,
)

__all__ = [
    "EmbeddingCacheStore",
    "EmbeddingProvider",
    "ProviderRequestError",
    "ProviderUnavailable",
    "compute_provider_key",
    "create_embedding_provider",
    "l2_normalise",
    "register_embedding_provider",
    "registered_providers",
    "MAX_BATCH_INPUTS",
    "MAX_BATCH_TOKENS",
    "embed_chunks",
    "embed_query",
    "embed_texts",
    "estimate_tokens",
    "plan_batches",
]
