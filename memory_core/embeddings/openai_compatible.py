"""The ``openai-compatible`` provider: POST ``{model, input: [...]}`` to an OpenAI-style embeddings URL.

URL convention (upstream's ``${baseUrl}/embeddings`` with ``baseUrl = https://api.openai.com/v1``):
a base URL that has a path (``http://host:port/v1``) gets ``/embeddings`` appended; a bare
``http://host:port`` gets ``/v1/embeddings``. The API key is sent as a Bearer token and never
appears in messages, reprs or the provider key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
import numpy as np

from host_facades.db.vectors import normalize_rows
from memory_core.embeddings.base import (
    ProviderRequestError,
    compute_provider_key,
)
from memory_core.embeddings.remote import body_excerpt, post_json, status_error
from memory_core.errors import ConfigError, ProviderUnavailable

if TYPE_CHECKING:
    from memory_core.config import MemoryCoreConfig

PROVIDER_ID = "openai-compatible"
DEFAULT_MAX_INPUT_BYTES = 8192
# Statuses worth retrying as-is; other 4xx are the request's fault (a smaller batch may still pass).
RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
FATAL_STATUS = {401, 403, 404, 405}


def embeddings_url(base_url: str) -> str:
    base = base_url.strip().rstrip("/")
    if base.endswith("/embeddings"):
        return base
    path = urlsplit(base).path
    return base + ("/embeddings" if path and path != "/" else "/v1/embeddings")


class OpenAICompatibleProvider:
    """Embeddings from any server implementing OpenAI's ``POST /v1/embeddings``."""

    id = PROVIDER_ID

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 120.0,
        dimensions: int | None = None,
        input_type: str | None = None,
        document_input_type: str | None = None,
        query_input_type: str | None = None,
        max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES,
    ) -> None:
        if not base_url or urlsplit(base_url.strip()).scheme not in ("http", "https"):
            raise ConfigError(
                f"remote.baseUrl: {base_url!r} is not an http(s) URL; set remote.baseUrl "
                "(e.g. http://127.0.0.1:8080/v1) for provider openai-compatible"
            )
        if not model:
            raise ConfigError("model: provider openai-compatible needs a model name; set `model`")
        self.base_url = base_url.strip().rstrip("/")
        self.url = embeddings_url(self.base_url)
        self.model = model
        self._api_key = api_key or None
        self._headers = dict(headers or {})
        self.timeout_s = float(timeout_s)
        self.dimensions = dimensions
        self.dims: int | None = dimensions
        self.document_input_type = document_input_type or input_type
        self.query_input_type = query_input_type or input_type
        self.max_input_bytes = max_input_bytes
        self.provider_key = compute_provider_key(
            {
                "provider": PROVIDER_ID,
                "baseUrl": self.base_url,
                "model": model,
                "dimensions": dimensions,
                "headerNames": sorted(h.lower() for h in self._headers),
                "documentInputType": self.document_input_type,
            }
        )
        self.requests = 0
        self._client = httpx.Client(timeout=self.timeout_s)

    def __repr__(self) -> str:  # never show the key or header values
        return f"OpenAICompatibleProvider(url={self.url!r}, model={self.model!r}, dims={self.dims})"

    # ------------------------------------------------------------------ protocol

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        return self._post(texts, self.document_input_type)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._post(texts, self.query_input_type)

    # ------------------------------------------------------------------ HTTP

    def _post(self, texts: Sequence[str], input_type: str | None) -> np.ndarray:
        body: dict[str, Any] = {"model": self.model, "input": list(texts)}
        if self.dimensions:
            body["dimensions"] = self.dimensions
        if input_type:
            body["input_type"] = input_type
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        headers.update(self._headers)
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        self.requests += 1
        resp = post_json(self._client, self.url, body, headers, timeout_splittable=True)
        status = resp.status_code
        if status in (401, 403):
            raise ProviderUnavailable(
                f"embedding provider {PROVIDER_ID} rejected the API key (HTTP {status} from {self.url}); set a valid "
                "key in memory.search.remote.apiKey (or an Authorization header in remote.headers)")
        if status >= 400:
            raise status_error(resp, f"POST {self.url} returned HTTP {status}: {self._excerpt(resp.content)}",
                               retryable=status in RETRYABLE_STATUS, splittable=status not in FATAL_STATUS)
        return self._parse(resp.content, len(texts))

    def _excerpt(self, raw: bytes) -> str:
        return body_excerpt(raw.decode("utf-8", "replace"), self._api_key)

    def _parse(self, raw: bytes, n: int) -> np.ndarray:
        try:
            doc = json.loads(raw)
            rows = doc["data"]
            rows = sorted(rows, key=lambda r: int(r.get("index", 0)))
            vecs = [r["embedding"] for r in rows]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ProviderRequestError(
                f"POST {self.url} returned an unexpected body ({type(exc).__name__}): {self._excerpt(raw)}",
                retryable=False,
            ) from None
        if len(vecs) != n:
            raise ProviderRequestError(
                f"POST {self.url} returned {len(vecs)} embeddings for {n} inputs", retryable=False
            )
        try:
            arr = np.asarray(vecs, dtype=np.float32)
        except (ValueError, TypeError):
            raise ProviderRequestError(f"POST {self.url} returned ragged or non-numeric embeddings",
                                       retryable=False) from None
        if arr.ndim != 2 or arr.shape[1] == 0:
            raise ProviderRequestError(f"POST {self.url} returned embeddings of shape {arr.shape}", retryable=False)
        if self.dims is None:
            self.dims = int(arr.shape[1])
        return normalize_rows(arr)


def create_openai_compatible(config: MemoryCoreConfig) -> OpenAICompatibleProvider:
    remote = config.remote
    timeout = config.sync.embedding_batch_timeout_seconds or remote.timeout_seconds
    return OpenAICompatibleProvider(
        base_url=remote.base_url or "",
        model=config.model or "",
        api_key=remote.api_key,
        headers=remote.headers,
        timeout_s=timeout,
        dimensions=config.output_dimensionality,
        input_type=config.input_type,
        document_input_type=config.document_input_type,
        query_input_type=config.query_input_type,
    )

