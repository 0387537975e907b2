"""Embedding providers, the provider registry, batching with retries, and the cache protocol (upstream
`memory/manager-embedding-ops.ts`)."""

from memory_core.embeddings.base import (
    EmbeddingCacheStore,
    EmbeddingProvider,
    ProviderRequestError,
    compute_provider_key,
)
from memory_core.embeddings.batching import (
    MAX_BATCH_INPUTS,
    MAX_BATCH_TOKENS,
    batch_limits,
    embed_chunks,
    embed_with_passages,
    embed_query,
    embed_texts,
    estimate_tokens,
    plan_batches,
)
from memory_core.embeddings.registry import (
    create_embedding_provider,
    register_embedding_provider,
    registered_providers,
)
from memory_core.errors import ProviderUnavailable

__all__ = [
    "EmbeddingCacheStore",
    "EmbeddingProvider",
    "ProviderRequestError",
    "ProviderUnavailable",
    "compute_provider_key",
    "create_embedding_provider",
    "register_embedding_provider",
    "registered_providers",
    "MAX_BATCH_INPUTS",
    "MAX_BATCH_TOKENS",
    "batch_limits",
    "embed_chunks",
    "embed_with_passages",
    "embed_query",
    "embed_texts",
    "estimate_tokens",
    "plan_batches",
]
