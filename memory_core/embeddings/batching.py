"""Embedding chunks through the cache, in bounded batches, with retries and batch splitting (upstream
`memory/manager-embedding-ops.ts`).

Cache hits are reused; misses are packed into batches of at most ``MAX_BATCH_TOKENS`` estimated
tokens (characters / 4) and ``MAX_BATCH_INPUTS`` inputs. A failing batch is retried up to
``RETRY_ATTEMPTS`` times with exponential back-off (500 ms doubling, capped at 8 s), then split in
half; a single input that still fails raises ProviderUnavailable carrying the provider's error.
Each successful batch is written to the cache at once, so a later failure loses no finished work.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from host_facades.chunking.pipeline import hash_text, split_passages
from host_facades.db.vectors import normalize_rows as l2_normalise
from memory_core.embeddings.base import (
    EmbeddingCacheStore,
    EmbeddingProvider,
    ProviderRequestError,
)
from memory_core.errors import ProviderUnavailable

MAX_BATCH_TOKENS = 8000  # EMBEDDING_BATCH_MAX_TOKENS
MAX_BATCH_INPUTS = 64
RETRY_ATTEMPTS = 3
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 8.0

Sleep = Callable[[float], None]


def estimate_tokens(text: str) -> int:
    """The batching estimate: one token per 4 characters, at least 1."""
    return max(1, math.ceil(len(text) / 4))


def batch_limits(provider: EmbeddingProvider) -> tuple[int, int]:
    """``(max_tokens, max_inputs)`` of one ``embed_batch`` call: the provider's own, else a remote API's."""
    return (int(getattr(provider, "max_batch_tokens", MAX_BATCH_TOKENS)),
            int(getattr(provider, "max_batch_inputs", MAX_BATCH_INPUTS)))


def plan_batches(
    texts: Sequence[str], *, max_tokens: int = MAX_BATCH_TOKENS, max_inputs: int = MAX_BATCH_INPUTS
) -> list[list[int]]:
    """Indices of ``texts`` packed greedily in order; an input larger than ``max_tokens`` goes alone."""
    batches: list[list[int]] = []
    current: list[int] = []
    tokens = 0
    for i, text in enumerate(texts):
        t = estimate_tokens(text)
        if current and (tokens + t > max_tokens or len(current) >= max_inputs):
            batches.append(current)
            current, tokens = [], 0
        current.append(i)
        tokens += t
    if current:
        batches.append(current)
    return batches


def backoff_delays(attempts: int = RETRY_ATTEMPTS) -> list[float]:
    """The sleeps between attempts: 0.5, 1.0, 2.0, ... capped at 8 s (attempts - 1 of them)."""
    return [min(BACKOFF_MAX_S, BACKOFF_BASE_S * (2**i)) for i in range(max(0, attempts - 1))]


def _check_output(provider: EmbeddingProvider, out: object, n: int) -> np.ndarray:
    arr = np.asarray(out, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[0] != n:
        raise ProviderRequestError(
            f"provider {provider.id} returned an array of shape {arr.shape} for {n} inputs", retryable=False
        )
    if provider.dims is not None and arr.shape[1] != provider.dims:
        raise ProviderRequestError(
            f"provider {provider.id} returned {arr.shape[1]}-dim vectors, expected {provider.dims}",
            retryable=False,
            splittable=False,
        )
    if not np.all(np.isfinite(arr)):
        raise ProviderRequestError(f"provider {provider.id} returned non-finite values", retryable=False)
    return l2_normalise(arr)


def _unavailable(provider: EmbeddingProvider, exc: BaseException, what: str) -> ProviderUnavailable:
    return ProviderUnavailable(
        f"embedding provider {provider.id!r} (model {provider.model!r}) failed {what}: {exc}. "
        "Check the provider settings and that it is reachable; memory-core does not fall back to "
        "keyword-only for a configured provider"
    )


def _call_with_retry(
    provider: EmbeddingProvider, texts: Sequence[str], call: Callable[[Sequence[str]], object], sleep: Sleep
) -> np.ndarray:
    delays = backoff_delays()
    last: BaseException | None = None
    for attempt in range(RETRY_ATTEMPTS):
        try:
            return _check_output(provider, call(texts), len(texts))
        except ProviderUnavailable:
            raise
        except ProviderRequestError as exc:
            last = exc
            if not exc.retryable:
                break
        except (OSError, TimeoutError, ValueError, RuntimeError) as exc:
            last = ProviderRequestError(f"{type(exc).__name__}: {exc}")
        if attempt < len(delays):
            # a 429's Retry-After (seconds, capped by the provider) wins over a shorter back-off
            sleep(max(delays[attempt], getattr(last, "retry_after", None) or 0.0))
    assert last is not None
    raise last


def _embed_split(
    provider: EmbeddingProvider,
    texts: Sequence[str],
    call: Callable[[Sequence[str]], object],
    sleep: Sleep,
    emit: Callable[[int, np.ndarray], None],
    offset: int = 0,
) -> None:
    """Embed ``texts`` and ``emit(offset, vectors)`` for every part that succeeded, splitting on failure."""
    try:
        vecs = _call_with_retry(provider, texts, call, sleep)
    except ProviderRequestError as exc:
        if len(texts) == 1:
            raise _unavailable(provider, exc, "for one input") from exc
        if not exc.splittable:
            raise _unavailable(provider, exc, f"for a batch of {len(texts)} inputs") from exc
        mid = len(texts) // 2
        _embed_split(provider, texts[:mid], call, sleep, emit, offset)
        _embed_split(provider, texts[mid:], call, sleep, emit, offset + mid)
        return
    emit(offset, vecs)


def embed_texts(
    provider: EmbeddingProvider,
    texts: Sequence[str],
    *,
    sleep: Sleep = time.sleep,
    max_tokens: int | None = None,
    max_inputs: int | None = None,
    on_batch: Callable[[list[int], np.ndarray], None] | None = None,
) -> np.ndarray:
    """Embed ``texts`` (no cache) in planned batches (limits: ``max_tokens`` / ``max_inputs``, else
    :func:`batch_limits`); ``on_batch(indices, vectors)`` after each success.

    ``on_batch`` also runs for the parts of a split batch that succeeded before a failing input
    raises ProviderUnavailable, so the caller can keep (cache) them.
    """
    if not texts:
        return np.zeros((0, provider.dims or 0), dtype=np.float32)
    state: dict[str, np.ndarray] = {}
    own_tokens, own_inputs = batch_limits(provider)
    plan = plan_batches(texts, max_tokens=max_tokens or own_tokens, max_inputs=max_inputs or own_inputs)
    for idx in plan:

        def emit(offset: int, vecs: np.ndarray, idx: list[int] = idx) -> None:
            out = state.get("out")
            if out is None:
                out = state["out"] = np.zeros((len(texts), vecs.shape[1]), dtype=np.float32)
            elif vecs.shape[1] != out.shape[1]:
                raise _unavailable(provider, ValueError("inconsistent vector dimensions"), "between batches")
            part = idx[offset : offset + len(vecs)]
            out[part] = vecs
            if on_batch is not None:
                on_batch(part, vecs)

        _embed_split(provider, [texts[i] for i in idx], provider.embed_batch, sleep, emit)
    return state["out"]


def embed_chunks(
    provider: EmbeddingProvider,
    texts: Sequence[str],
    hashes: Sequence[str],
    cache: EmbeddingCacheStore | None,
    *,
    sleep: Sleep = time.sleep,
    max_tokens: int | None = None,
    max_inputs: int | None = None,
) -> np.ndarray:
    """Vectors (n, dims) for chunk ``texts`` whose content hashes are ``hashes``, through ``cache``.

    Identical hashes are embedded once (so identical text shares one vector, as in upstream's cache).
    """
    if len(texts) != len(hashes):
        raise ValueError(f"embed_chunks: {len(texts)} texts but {len(hashes)} hashes")
    if not texts:
        return np.zeros((0, provider.dims or 0), dtype=np.float32)
    first: dict[str, int] = {}
    for i, h in enumerate(hashes):
        first.setdefault(h, i)
    found: dict[str, np.ndarray] = {}
    if cache is not None:
        hits = cache.get_many(provider.id, provider.model, provider.provider_key, list(first))
        for h, vec in hits.items():
            arr = np.asarray(vec, dtype=np.float32).reshape(-1)
            if arr.size and (provider.dims is None or arr.size == provider.dims):
                found[h] = arr
    missing = [h for h in first if h not in found]
    if missing:
        miss_texts = [texts[first[h]] for h in missing]

        def store(idx: list[int], vecs: np.ndarray) -> None:
            items = {missing[i]: vecs[k] for k, i in enumerate(idx)}
            found.update(items)
            if cache is not None:
                cache.put_many(provider.id, provider.model, provider.provider_key, items)

        embed_texts(
            provider, miss_texts, sleep=sleep, max_tokens=max_tokens, max_inputs=max_inputs, on_batch=store
        )
    dims = {v.size for v in found.values()}
    if len(dims) != 1:
        raise ProviderUnavailable(
            f"embedding cache and provider {provider.id!r} disagree on vector dimensions {sorted(dims)}; "
            "run `memory-core index --force`"
        )
    return np.vstack([found[h] for h in hashes]).astype(np.float32, copy=False)


def embed_with_passages(
    provider: EmbeddingProvider,
    texts: Sequence[str],
    hashes: Sequence[str],
    cache: EmbeddingCacheStore | None,
    **kwargs: Any,
) -> tuple[np.ndarray, list[np.ndarray | None]]:
    """The vectors of chunk ``texts`` (as :func:`embed_chunks`) and, per chunk, the vectors
    ``(passages, dims)`` of its passages (``host_facades.chunking.pipeline.split_passages``) or None for a
    chunk with one passage. Passages go through ``cache`` keyed by their own text hash; chunks and
    passages are embedded in one :func:`embed_chunks` call, so they share its batches."""
    split = [split_passages(t) for t in texts]
    flat = [p for ps in split for p in ps]
    matrix = embed_chunks(provider, [*texts, *flat], [*hashes, *(hash_text(p) for p in flat)], cache, **kwargs)
    return matrix[:len(texts)], rows_per_group(split, matrix, len(texts))


def rows_per_group(groups: Sequence[Sequence[Any]], rows: Any, offset: int = 0) -> list[Any]:
    """Per group, its slice of ``rows`` (a matrix or a list holding the groups' items in order, from
    ``offset`` on), or None for an empty group (e.g. a chunk of one passage has no passages)."""
    out: list[Any] = []
    for g in groups:
        out.append(rows[offset:offset + len(g)] if g else None)
        offset += len(g)
    return out


def embed_query(provider: EmbeddingProvider, text: str, *, sleep: Sleep = time.sleep) -> np.ndarray:
    """One query vector (dims,), L2-normalised; uses the provider's query input type if it has one."""
    call = getattr(provider, "embed_queries", None) or provider.embed_batch
    try:
        vecs = _call_with_retry(provider, [text], call, sleep)
    except ProviderRequestError as exc:
        raise _unavailable(provider, exc, "to embed the query") from exc
    return vecs[0]
