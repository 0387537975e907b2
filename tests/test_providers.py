"""OpenClaw's named embedding providers against a real loopback HTTP server that answers
in each API's shape and counts the calls.

Request shapes, headers, defaults and response shapes recorded from upstream (openclaw 2026.9.6 and
openclaw/openclaw):
- openai: extensions/openai/embedding-provider.ts + packages/memory-host-sdk/src/host/embeddings-remote-provider.ts
  (``createRemoteEmbeddingProvider``: POST ``{baseUrl}/embeddings`` ``{model, input}``, ``Authorization:
  Bearer``; reads ``data[].embedding``); default text-embedding-3-small on https://api.openai.com/v1.
- gemini: extensions/google/embedding-provider.ts (POST ``models/<m>:batchEmbedContents``
  ``{requests: [{content: {parts: [{text}]}, taskType: RETRIEVAL_DOCUMENT, model: models/<m>}]}``, query
  ``:embedContent`` with RETRIEVAL_QUERY; ``x-goog-api-key`` (gemini-auth.ts); reads ``embeddings[].values``).
- voyage: extensions/voyage/embedding-provider.ts (``{model, input, input_type: document|query}``, Bearer;
  default voyage-4-large on https://api.voyageai.com/v1).
- mistral: src/memory/embeddings-mistral.ts (``{model, input}``, Bearer; mistral-embed on https://api.mistral.ai/v1).
- ollama: extensions/ollama/src/embedding-provider.ts (POST ``{base}/api/embed`` ``{model, input}``; reads
  ``embeddings[]``; nomic-embed-text on http://127.0.0.1:11434; no key needed).
- lmstudio: extensions/lmstudio (OpenAI shape; text-embedding-nomic-embed-text-v1.5 on http://localhost:1234/v1).
- retries: packages/memory-host-sdk/src/host/batch-http.ts ``postJsonWithRetry`` (429 and 5xx retried).
- fallback: docs/reference/memory-config.md "Provider selection" (``fallback``: the adapter used when
  the primary fails).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from memory_core.config import load_config
from memory_core.core import MemoryCore
from memory_core.embeddings import create_embedding_provider, embed_chunks, embed_query
from memory_core.embeddings.remote import SPECS, retry_after_seconds
from memory_core.errors import ProviderUnavailable
from memory_core.store import schema
from tests.test_embeddings import DIMS, fake_vector, unit

KEY = "sk-test-key-123"
# provider -> (base path the test points remote.baseUrl at, the path a document batch is POSTed to)
ROUTES = {
    "openai": ("/v1", "/v1/embeddings"),
    "voyage": ("/v1", "/v1/embeddings"),
    "mistral": ("/v1", "/v1/embeddings"),
    "lmstudio": ("/v1", "/v1/embeddings"),
    "gemini": ("/v1beta", "/v1beta/models/gemini-embedding-001:batchEmbedContents"),
    "ollama": ("", "/api/embed"),
    "openai-compatible": ("/v1", "/v1/embeddings"),
}
MODELS = {name: spec.default_model for name, spec in SPECS.items()} | {"openai-compatible": "test-embed"}
NAMED = sorted(ROUTES)


class ApiServer:
    """Answers each API's shape; ``script`` queues (status, headers) answers per path prefix."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.script: dict[str, list[tuple[int, dict]]] = {}
        self.always: dict[str, int] = {}  # path prefix -> status answered every time
        self.lock = threading.Lock()
        srv = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, status: int, doc: dict, headers: dict | None = None) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with srv.lock:
                    srv.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                                         "body": body})
                    scripted = None
                    for prefix, queue in srv.script.items():
                        if self.path.startswith(prefix) and queue:
                            scripted = queue.pop(0)
                            break
                    for prefix, status in srv.always.items():
                        if self.path.startswith(prefix):
                            scripted = (status, {})
                if scripted is not None:
                    return self._reply(scripted[0], {"error": {"message": "scripted failure"}}, scripted[1])
                auth = self.headers.get("Authorization") or ""
                goog = self.headers.get("x-goog-api-key") or ""
                if ":batchEmbedContents" in self.path or ":embedContent" in self.path:
                    if goog != KEY:
                        return self._reply(401, {"error": {"message": "API key not valid"}})
                    if self.path.endswith(":embedContent"):
                        return self._reply(200, {"embedding": {"values": fake_vector(body["content"]["parts"][0]["text"])}})
                    return self._reply(200, {"embeddings": [{"values": fake_vector(r["content"]["parts"][0]["text"])}
                                                            for r in body["requests"]]})
                if self.path.endswith("/api/embed"):
                    return self._reply(200, {"model": body["model"], "embeddings": [fake_vector(t) for t in body["input"]]})
                if auth and auth != f"Bearer {KEY}":
                    return self._reply(401, {"error": {"message": "Incorrect API key provided"}})
                data = [{"object": "embedding", "index": i, "embedding": fake_vector(t)} for i, t in enumerate(body["input"])]
                return self._reply(200, {"object": "list", "data": data[::-1], "model": body["model"]})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def calls(self, prefix: str) -> list[dict]:
        return [r for r in self.requests if r["path"].startswith(prefix)]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture
def server():
    srv = ApiServer()
    yield srv
    srv.close()


def config_for(name: str, server: ApiServer, key: str = KEY, **extra):
    if name == "openai-compatible":  # no default model: the operator names one
        extra.setdefault("model", MODELS[name])
    return load_config(env={}, overrides={"provider": name, "remote": {"baseUrl": server.url + ROUTES[name][0],
                                                                      "apiKey": key, "timeoutSeconds": 10}, **extra})


@pytest.mark.parametrize("name", NAMED)
def test_embeddings_land_in_the_api_shape(name, server):
    prov = create_embedding_provider(config_for(name, server))
    assert (prov.id, prov.model) == (name, MODELS[name])
    texts = ["alpha beta", "gamma delta"]
    vecs = embed_chunks(prov, texts, ["h1", "h2"], None, sleep=lambda s: None)
    assert np.allclose(vecs, [unit(fake_vector(t)) for t in texts], atol=1e-6)
    [req] = server.requests
    assert req["path"] == ROUTES[name][1]
    assert req["headers"]["content-type"] == "application/json"
    body = req["body"]
    if name == "gemini":
        assert req["headers"]["x-goog-api-key"] == KEY and "authorization" not in req["headers"]
        assert body == {"requests": [{"content": {"parts": [{"text": t}]}, "taskType": "RETRIEVAL_DOCUMENT",
                                      "model": "models/gemini-embedding-001"} for t in texts]}
    else:
        assert req["headers"]["authorization"] == f"Bearer {KEY}"
        expected = {"model": MODELS[name], "input": texts}
        if name == "voyage":
            expected["input_type"] = "document"
        assert body == expected


@pytest.mark.parametrize("name", ["gemini", "voyage"])
def test_query_shape(name, server):
    prov = create_embedding_provider(config_for(name, server))
    vec = embed_query(prov, "where is the cat", sleep=lambda s: None)
    assert np.allclose(vec, unit(fake_vector("where is the cat")), atol=1e-6)
    [req] = server.requests
    if name == "gemini":
        assert req["path"] == "/v1beta/models/gemini-embedding-001:embedContent"
        assert req["body"] == {"content": {"parts": [{"text": "where is the cat"}]}, "taskType": "RETRIEVAL_QUERY"}
    else:
        assert req["body"] == {"model": "voyage-4-large", "input": ["where is the cat"], "input_type": "query"}


@pytest.mark.parametrize("name", NAMED)
def test_429_with_retry_after_is_retried(name, server):
    server.script[ROUTES[name][1]] = [(429, {"Retry-After": "7"})]
    prov = create_embedding_provider(config_for(name, server))
    sleeps: list[float] = []
    vecs = embed_chunks(prov, ["one"], ["h"], None, sleep=sleeps.append)
    assert np.allclose(vecs[0], unit(fake_vector("one")), atol=1e-6)
    assert (len(server.calls(ROUTES[name][1])), sleeps) == (2, [7.0])


@pytest.mark.parametrize("name", NAMED)
def test_5xx_is_retried_with_backoff(name, server):
    server.script[ROUTES[name][1]] = [(503, {}), (502, {})]
    prov = create_embedding_provider(config_for(name, server))
    sleeps: list[float] = []
    embed_chunks(prov, ["one"], ["h"], None, sleep=sleeps.append)
    assert (len(server.calls(ROUTES[name][1])), sleeps) == (3, [0.5, 1.0])


@pytest.mark.parametrize("name", NAMED)
def test_401_is_one_clear_line(name, server):
    server.always[ROUTES[name][1]] = 401
    prov = create_embedding_provider(config_for(name, server))
    with pytest.raises(ProviderUnavailable) as info:
        embed_chunks(prov, ["one", "two"], ["h1", "h2"], None, sleep=lambda s: None)
    hints = {"gemini": "GEMINI_API_KEY or models.providers.google.apiKey or memory.search.remote.apiKey",
             "openai-compatible": "memory.search.remote.apiKey (or an Authorization header in remote.headers)"}
    hint = hints.get(name) or f"{SPECS[name].env_key} or models.providers.{name}.apiKey or memory.search.remote.apiKey"
    assert info.value.message == (
        f"embedding provider {name} rejected the API key (HTTP 401 from {server.url}{ROUTES[name][1]}); "
        f"set a valid key in {hint}")
    assert len(server.requests) == 1 and KEY not in info.value.message


@pytest.mark.parametrize("name", ["openai", "gemini", "voyage", "mistral"])
def test_key_from_the_providers_environment_variable_or_models_providers(name, server, monkeypatch):
    env_key = SPECS[name].env_key
    monkeypatch.setenv(env_key, KEY)
    cfg = load_config(env={}, overrides={"provider": name, "remote": {"baseUrl": server.url + ROUTES[name][0]}})
    embed_chunks(create_embedding_provider(cfg), ["one"], ["h"], None, sleep=lambda s: None)
    monkeypatch.delenv(env_key)
    with pytest.raises(ProviderUnavailable, match=f"embedding provider {name}: no API key; set {env_key}"):
        create_embedding_provider(cfg)
    own = SPECS[name].config_provider or name
    cfg = load_config(env={}, overrides={"provider": name, "modelProviders": {
        own: {"apiKey": KEY, "baseUrl": server.url + ROUTES[name][0]}}})
    embed_chunks(create_embedding_provider(cfg), ["two"], ["h"], None, sleep=lambda s: None)
    assert len(server.requests) == 2


def test_retry_after_header_forms():
    assert (retry_after_seconds("3"), retry_after_seconds("1e9"), retry_after_seconds("soon"),
            retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0)) == (3.0, 60.0, None, 10.0)


@pytest.mark.parametrize("name", NAMED)
def test_fallback_takes_over_when_the_first_returns_500s_and_the_index_records_it(name, server, tmp_path):
    fb = "mistral" if name != "mistral" else "openai"
    server.always[ROUTES[name][1]] = 500
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("- The deploy runs on Fridays.\n")
    (ws / "memory" / "2026-01-02.md").write_text("- Alice owns billing.\n")
    cfg = config_for(name, server, fallback=fb, stateDir=str(tmp_path / "state"), pool={"workers": 0},
                     modelProviders={fb: {"baseUrl": server.url + "/fb/v1", "apiKey": KEY}})
    with MemoryCore(str(ws), config=cfg) as core:
        summary = core.index()
        meta = json.loads(core._owner.read_meta_value(schema.META_KEY))
        hits = core.search("who owns billing", min_score=0)
    assert (summary.provider, summary.model, summary.chunks) == (fb, SPECS[fb].default_model, 2)
    assert (meta["provider"], meta["model"], meta["vectorDims"]) == (fb, SPECS[fb].default_model, DIMS)
    assert len(server.calls(ROUTES[name][1])) == 3  # the primary's attempts, then never again
    assert len(server.calls("/fb/v1/embeddings")) >= 2  # the documents and the query
    assert "memory/2026-01-02.md" in [h.path for h in hits]  # searched with the fallback's query vector
