"""OpenClaw's named remote embedding providers over httpx: ``openai``, ``gemini``, ``voyage``,
``mistral``, ``ollama`` and ``lmstudio`` (upstream ``extensions/<provider>/embedding-provider.ts``
and ``packages/memory-host-sdk/src/host/embeddings-remote-*.ts``).

Each provider is one :class:`ProviderSpec` (default model, base URL, API-key environment variable,
request shape, batch limits) and one :class:`RemoteEmbeddingProvider`. Settings are resolved as
upstream resolves them: ``memory.search.remote.{baseUrl,apiKey,headers}`` first, then
``models.providers.<id>.{baseUrl,apiKey,headers}``, then the provider's environment variable and
default URL. Failures become :class:`ProviderRequestError` (429 carries ``Retry-After``; 5xx and
network errors are retryable, see :mod:`memory_core.embeddings.batching`), and a rejected key or a
missing model (401/403/404) one :class:`ProviderUnavailable` line naming the provider and the fix.
"""

from __future__ import annotations

import email.utils
import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
import numpy as np

from host_facades.db.vectors import normalize_rows
from memory_core.embeddings.base import ProviderRequestError, compute_provider_key
from memory_core.errors import ConfigError, ProviderUnavailable

if TYPE_CHECKING:
    from memory_core.config import MemoryCoreConfig

BODY_EXCERPT_CHARS = 300
MAX_RETRY_AFTER_S = 60.0  # a Retry-After longer than this is capped (the batch is retried, not parked)
RETRYABLE_STATUS = {408, 409, 425, 429}  # and every 5xx


@dataclass(frozen=True)
class ProviderSpec:
    """One named provider as upstream defines it."""

    id: str
    shape: str  # "openai" (POST {base}/embeddings), "gemini" (batchEmbedContents), "ollama" (/api/embed)
    default_model: str
    default_base_url: str
    env_key: str | None  # the API key's usual environment variable
    key_required: bool
    default_dims: int | None  # the default model's native dimensions (documentation and status)
    max_batch_inputs: int = 64
    max_batch_tokens: int = 8000  # upstream EMBEDDING_BATCH_MAX_TOKENS
    max_input_tokens: int = 8192  # DEFAULT_EMBEDDING_MAX_INPUT_TOKENS
    config_provider: str | None = None  # models.providers.<id> key when it differs (gemini -> google)
    model_prefixes: tuple[str, ...] = ()
    input_types: bool = False  # sends input_type document/query (voyage)


SPECS: dict[str, ProviderSpec] = {
    # extensions/openai/embedding-provider.ts: DEFAULT_EMBEDDING_MODEL, https://api.openai.com/v1
    "openai": ProviderSpec("openai", "openai", "text-embedding-3-small", "https://api.openai.com/v1",
                           "OPENAI_API_KEY", True, 1536, max_batch_inputs=2048, model_prefixes=("openai/",)),
    # extensions/google/embedding-provider.ts: gemini-embedding-001 (2048 input tokens), v1beta, x-goog-api-key
    "gemini": ProviderSpec("gemini", "gemini", "gemini-embedding-001",
                           "https://generativelanguage.googleapis.com/v1beta", "GEMINI_API_KEY", True, 3072,
                           max_batch_inputs=100, max_input_tokens=2048, config_provider="google",
                           model_prefixes=("models/", "gemini/", "google/")),
    # extensions/voyage/embedding-provider.ts: voyage-4-large, input_type document/query
    "voyage": ProviderSpec("voyage", "openai", "voyage-4-large", "https://api.voyageai.com/v1", "VOYAGE_API_KEY",
                           True, 1024, max_batch_inputs=128, max_input_tokens=32000, model_prefixes=("voyage/",),
                           input_types=True),
    # src/memory/embeddings-mistral.ts: mistral-embed, https://api.mistral.ai/v1
    "mistral": ProviderSpec("mistral", "openai", "mistral-embed", "https://api.mistral.ai/v1", "MISTRAL_API_KEY",
                            True, 1024, model_prefixes=("mistral/",)),
    # extensions/ollama/src/embedding-provider.ts: nomic-embed-text, POST {base}/api/embed {model, input}
    "ollama": ProviderSpec("ollama", "ollama", "nomic-embed-text", "http://127.0.0.1:11434", "OLLAMA_API_KEY",
                           False, 768, model_prefixes=("ollama/",)),
    # extensions/lmstudio: text-embedding-nomic-embed-text-v1.5 on http://localhost:1234/v1 (OpenAI shape)
    "lmstudio": ProviderSpec("lmstudio", "openai", "text-embedding-nomic-embed-text-v1.5", "http://localhost:1234/v1",
                             "LMSTUDIO_API_KEY", False, 768, model_prefixes=("lmstudio/",)),
}


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """A ``Retry-After`` header (seconds or an HTTP date) in seconds, capped; None when absent or bad."""
    if not value:
        return None
    value = value.strip()
    try:
        secs = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value).timestamp()
        except (TypeError, ValueError):
            return None
        secs = when - (time.time() if now is None else now)
    if not math.isfinite(secs):
        return None
    return max(0.0, min(MAX_RETRY_AFTER_S, secs))


def post_json(client: httpx.Client, url: str, body: Any, headers: Mapping[str, str], *, label: str = "",
              timeout_splittable: bool = False) -> httpx.Response:
    """POST ``body`` as JSON; a timeout or network failure is a retryable ProviderRequestError
    (splitting the batch cannot help an unreachable server)."""
    try:
        return client.post(url, content=json.dumps(body).encode("utf-8"), headers=dict(headers))
    except httpx.TimeoutException:
        raise ProviderRequestError(f"{label}POST {url} timed out after {client.timeout.read:g} s",
                                   splittable=timeout_splittable) from None
    except httpx.HTTPError as exc:
        raise ProviderRequestError(f"{label}POST {url} failed: {exc}", splittable=False) from None


def status_error(resp: httpx.Response, message: str, *, retryable: bool, splittable: bool) -> ProviderRequestError:
    """The ProviderRequestError of an HTTP error answer, with its ``Retry-After`` (seconds) if any."""
    err = ProviderRequestError(message, status=resp.status_code, retryable=retryable, splittable=splittable)
    err.retry_after = retry_after_seconds(resp.headers.get("retry-after"))  # type: ignore[attr-defined]
    return err


def body_excerpt(text: str, secret: str | None) -> str:
    """A one-line excerpt of an answer's body, the secret masked."""
    text = text.strip().replace("\n", " ")
    if secret:
        text = text.replace(secret, "***")
    return (text[:BODY_EXCERPT_CHARS] + "...") if len(text) > BODY_EXCERPT_CHARS else (text or "(empty body)")


class RemoteEmbeddingProvider:
    """Embeddings from one named provider's HTTP API; the key never appears in messages or reprs."""

    def __init__(self, spec: ProviderSpec, *, model: str | None = None, base_url: str | None = None,
                 api_key: str | None = None, headers: Mapping[str, str] | None = None,
                 dimensions: int | None = None, timeout_s: float = 120.0, key_hint: str | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.spec = spec
        self.id = spec.id
        self.model = _normalise_model(model, spec)
        base = (base_url or spec.default_base_url).strip().rstrip("/")
        if urlsplit(base).scheme not in ("http", "https"):
            raise ConfigError(f"remote.baseUrl: {base!r} is not an http(s) URL; set remote.baseUrl for provider "
                              f"{spec.id} or leave it unset for {spec.default_base_url}")
        self.base_url = base
        self._api_key = (api_key or "").strip() or None
        self._headers = dict(headers or {})
        has_auth = any(k.lower() == "authorization" for k in self._headers)
        if spec.key_required and not self._api_key and not has_auth:
            raise ProviderUnavailable(
                f"embedding provider {spec.id}: no API key; set {spec.env_key}, or "
                f"models.providers.{spec.config_provider or spec.id}.apiKey or memory.search.remote.apiKey "
                "in the config")
        self.dimensions = dimensions
        self.dims: int | None = dimensions
        self.default_dims = spec.default_dims
        self.max_batch_inputs = spec.max_batch_inputs
        self.max_batch_tokens = spec.max_batch_tokens
        self.max_input_tokens = spec.max_input_tokens
        self.max_input_bytes = spec.max_input_tokens  # the chunker's per-input cap (bytes >= tokens)
        self._key_hint = key_hint or spec.env_key or "remote.apiKey"
        self.provider_key = compute_provider_key({
            "provider": spec.id, "baseUrl": self.base_url, "model": self.model, "dimensions": dimensions,
            "headerNames": sorted(h.lower() for h in self._headers)})
        self._client = httpx.Client(timeout=timeout_s, transport=transport)
        self.requests = 0

    def __repr__(self) -> str:
        return f"RemoteEmbeddingProvider(id={self.id!r}, url={self.base_url!r}, model={self.model!r}, dims={self.dims})"

    # ------------------------------------------------------------------ protocol

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts, "document")

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts, "query")

    def close(self) -> None:
        self._client.close()

    # ------------------------------------------------------------------ request shapes

    def _embed(self, texts: Sequence[str], kind: str) -> np.ndarray:
        shape = self.spec.shape
        if shape == "gemini":
            if kind == "query" and len(texts) == 1:
                url = f"{self.base_url}/models/{self.model}:embedContent"
                body: dict[str, Any] = _gemini_request(texts[0], "RETRIEVAL_QUERY", self.dimensions)
                doc = self._post(url, body)
                rows = [((doc.get("embedding") or {}) if isinstance(doc, dict) else {}).get("values")]
            else:
                url = f"{self.base_url}/models/{self.model}:batchEmbedContents"
                task = "RETRIEVAL_QUERY" if kind == "query" else "RETRIEVAL_DOCUMENT"
                body = {"requests": [{**_gemini_request(t, task, self.dimensions), "model": f"models/{self.model}"}
                                     for t in texts]}
                doc = self._post(url, body)
                rows = [e.get("values") if isinstance(e, dict) else None
                        for e in (doc.get("embeddings") if isinstance(doc, dict) else None) or []]
        elif shape == "ollama":
            doc = self._post(f"{self.base_url}/api/embed", {"model": self.model, "input": list(texts)})
            rows = list((doc.get("embeddings") if isinstance(doc, dict) else None) or [])
        else:
            body = {"model": self.model, "input": list(texts)}
            if self.dimensions and self.id == "openai":
                body["dimensions"] = self.dimensions
            if self.spec.input_types:
                body["input_type"] = kind
            doc = self._post(f"{self.base_url}/embeddings", body)
            data = (doc.get("data") if isinstance(doc, dict) else None) or []
            data = sorted((r for r in data if isinstance(r, dict)), key=lambda r: int(r.get("index", 0)))
            rows = [r.get("embedding") for r in data]
        return self._vectors(rows, len(texts))

    def _headers_for(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            if self.spec.shape == "gemini":
                headers["x-goog-api-key"] = self._api_key
            else:
                headers["Authorization"] = f"Bearer {self._api_key}"
        headers.update(self._headers)
        return headers

    def _post(self, url: str, body: dict[str, Any]) -> Any:
        self.requests += 1
        resp = post_json(self._client, url, body, self._headers_for(), label=f"{self.id}: ")
        status = resp.status_code
        if status in (401, 403):
            raise ProviderUnavailable(
                f"embedding provider {self.id} rejected the API key (HTTP {status} from {url}); set a valid key in "
                f"{self._key_hint}")
        if status == 404:
            raise ProviderUnavailable(
                f"embedding provider {self.id} has no model {self.model!r} at {url} (HTTP 404); set `model` to one "
                f"it serves (default {self.spec.default_model}) or fix remote.baseUrl")
        if status >= 400:
            raise status_error(resp, f"{self.id}: POST {url} returned HTTP {status}: "
                                     f"{body_excerpt(resp.text, self._api_key)}",
                               retryable=status in RETRYABLE_STATUS or status >= 500, splittable=status != 429)
        try:
            return resp.json()
        except ValueError:
            raise ProviderRequestError(f"{self.id}: POST {url} returned a body that is not JSON: "
                                       f"{body_excerpt(resp.text, self._api_key)}", retryable=False) from None

    def _vectors(self, rows: list[Any], n: int) -> np.ndarray:
        if len(rows) != n:
            raise ProviderRequestError(f"{self.id}: returned {len(rows)} embeddings for {n} inputs", retryable=False)
        try:
            arr = np.asarray(rows, dtype=np.float32)
        except (ValueError, TypeError):
            raise ProviderRequestError(f"{self.id}: returned ragged or non-numeric embeddings", retryable=False) from None
        if arr.ndim != 2 or arr.shape[1] == 0:
            raise ProviderRequestError(f"{self.id}: returned embeddings of shape {arr.shape}", retryable=False)
        if self.dims is None:
            self.dims = int(arr.shape[1])
        return normalize_rows(arr)


def _gemini_request(text: str, task: str, dims: int | None) -> dict[str, Any]:
    """buildGeminiEmbeddingRequest for text input and a non-"embedding-2" model."""
    req: dict[str, Any] = {"content": {"parts": [{"text": text}]}, "taskType": task}
    if dims is not None:
        req["outputDimensionality"] = dims
    return req


def _normalise_model(model: str | None, spec: ProviderSpec) -> str:
    """normalizeEmbeddingModelWithPrefixes: trimmed, known prefixes stripped, empty -> the default."""
    m = (model or "").strip()
    for prefix in spec.model_prefixes:
        if m.startswith(prefix):
            m = m[len(prefix):]
    return m or spec.default_model


def create_named(spec: ProviderSpec, config: MemoryCoreConfig, *, as_fallback: bool = False,
                 env: Mapping[str, str] | None = None) -> RemoteEmbeddingProvider:
    """The provider ``spec`` with upstream's settings resolution. As a fallback, ``model`` and
    ``remote`` (the primary's) are not used: the provider's defaults and ``models.providers`` are."""
    from memory_core.config import substitute_env

    env = os.environ if env is None else env
    pid = spec.config_provider if spec.config_provider in config.model_providers else spec.id
    own = substitute_env(config.model_providers.get(pid) or {}, env, f"models.providers.{pid}")
    remote = config.remote
    use_remote = not as_fallback
    base_url = (remote.base_url if use_remote else None) or own.get("baseUrl")
    headers = {**(own.get("headers") or {}), **(remote.headers if use_remote else {})}
    key = ((remote.api_key if use_remote else None) or own.get("apiKey")
           or (env.get(spec.env_key) if spec.env_key else None))
    if spec.id == "gemini" and not key:
        key = env.get("GOOGLE_API_KEY")
    timeout = config.sync.embedding_batch_timeout_seconds or remote.timeout_seconds
    hint = (f"{spec.env_key} or models.providers.{spec.config_provider or spec.id}.apiKey"
            + ("" if as_fallback else " or memory.search.remote.apiKey"))
    return RemoteEmbeddingProvider(
        spec, model=None if as_fallback else config.model, base_url=base_url, api_key=key, headers=headers,
        dimensions=None if as_fallback else config.output_dimensionality, timeout_s=timeout, key_hint=hint)


def factory(name: str) -> Callable[[MemoryCoreConfig], RemoteEmbeddingProvider]:
    spec = SPECS[name]
    return lambda config: create_named(spec, config)
