"""Bring your embeddings: an index built by the real openclaw 2026.9.6 (``openclaw memory
index``, an ``openai-compatible`` provider pointed at a loopback server here), then ``memory-core
import-embeddings --from`` it, then ``memory-core index``: unchanged chunks make zero embedding calls,
counted at the server. The same ``openclaw.json`` configures both.

Upstream's cache: ``memory_embedding_cache(provider, model, provider_key, hash, embedding, dims)``
in ``agents/<id>/agent/openclaw-agent.sqlite`` (dist/openclaw-agent-board-schema-*.mjs), vectors as
float64 BLOBs, ``hash`` = sha256 of the chunk text (memory-core's chunk hash too).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import memory_core_cli as mc
from tests.test_gateway_openclaw_cli import find_client

pytestmark = [pytest.mark.node, pytest.mark.timeout(300)]

DIMS = 16
NOTES = {  # agent main: one-line daily notes, the same chunks in OpenClaw and memory-core
    "memory/2026-01-02.md": "- The deploy runs on Fridays.\n",
    "memory/2026-01-03.md": "- Alice owns billing.\n",
    "memory/2026-01-04.md": "- The office coffee machine is on the third floor.\n",
}
# agent notes: a note of several lines is one chunk with three passages (memory-core's own vectors)
PASSAGES = ["- Standup is at 9:30 every weekday.", "- The staging database is refreshed on Sundays.",
            "- Carol is the on-call lead this month."]
LONG_NOTE = "".join(p + "\n" for p in PASSAGES)


def fake_vector(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return [(b - 127.5) / 10.0 for b in digest[:DIMS]]


def unit(vec: np.ndarray) -> np.ndarray:
    return vec / np.linalg.norm(vec)


class Embeddings:
    """OpenAI's POST /v1/embeddings on loopback, recording every input it embeds."""

    def __init__(self) -> None:
        self.inputs: list[list[str]] = []
        srv = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                srv.inputs.append(list(body["input"]))
                data = [{"object": "embedding", "index": i, "embedding": fake_vector(t)}
                        for i, t in enumerate(body["input"])]
                out = json.dumps({"object": "list", "data": data, "model": body["model"]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def openclaw_index(tmp_path_factory):
    """(openclaw.json, workspace, {agent: its OpenClaw index}, the server) after `openclaw memory index`
    of both agents."""
    found = find_client()
    if isinstance(found, str):
        pytest.skip(found)
    node, entry = found
    base = tmp_path_factory.mktemp("openclaw-import")
    ws, ws2 = base / "ws", base / "ws-notes"
    for rel, text in NOTES.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)
    (ws2 / "memory").mkdir(parents=True)
    (ws2 / "memory" / "2026-02-01.md").write_text(LONG_NOTE)
    server = Embeddings()
    config = base / "openclaw.json"
    config.write_text(f"""// the operator's openclaw.json (JSON5), read by both
{{
  agents: {{ ownership: "explicit", entries: {{ main: {{ workspace: "{ws}" }}, notes: {{ workspace: "{ws2}" }}, }} }},
  memory: {{ search: {{ provider: "openai-compatible", model: "test-embed",
                       remote: {{ baseUrl: "{server.url}", apiKey: "sk-test" }}, }} }},
}}
""")
    config.chmod(0o600)
    home = base / "home"
    home.mkdir()
    env = {"PATH": f"{Path(node).parent}{os.pathsep}{os.environ.get('PATH', '')}", "HOME": str(home),
           "OPENCLAW_STATE_DIR": str(home / ".openclaw"), "OPENCLAW_CONFIG_PATH": str(config),
           "TMPDIR": str(base), "NO_COLOR": "1"}
    proc = subprocess.run([node, entry, "memory", "index", "--force"], env=env,  # every agent
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    indexes = {a: home / ".openclaw" / "agents" / a / "agent" / "openclaw-agent.sqlite" for a in ("main", "notes")}
    assert all(p.is_file() for p in indexes.values()), proc.stdout
    assert sorted(t for batch in server.inputs for t in batch) == sorted([*NOTES.values(), LONG_NOTE])
    yield config, ws, indexes, server
    server.close()


def test_imported_vectors_mean_zero_embedding_calls_for_unchanged_chunks(openclaw_index, tmp_path):
    config, ws, indexes, server = openclaw_index
    index = indexes["main"]
    home = tmp_path / "state"
    before = len(server.inputs)
    r = mc("import-embeddings", "--from", str(index), "--config", str(config), "--agent", "main", "--json",
           home=home)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"source": str(index), "provider": "openai-compatible", "model": "test-embed",
                                    "dims": DIMS, "imported": 3, "skipped": 0, "otherModels": [],
                                    "passagesToEmbed": 0, "warnings": []}
    r = mc("index", "--config", str(config), "--agent", "main", "--json", home=home)
    assert r.returncode == 0, r.stderr
    assert (json.loads(r.stdout)["chunks"], server.inputs[before:]) == (3, [])  # zero embedding calls
    # the index's vectors are OpenClaw's (float64 there as the API answered, float32 unit vectors here)
    theirs = {h: unit(np.frombuffer(e, "<f8")) for h, e in sqlite3.connect(index).execute(
        "SELECT hash, embedding FROM memory_index_chunks")}
    ours = {h: np.frombuffer(e, "<f4") for h, e in sqlite3.connect(home / "main.sqlite").execute(
        "SELECT hash, embedding FROM memory_index_chunks")}
    assert sorted(ours) == sorted(theirs) and all(np.allclose(ours[h], theirs[h], atol=1e-6) for h in ours)
    # what changed is embedded, and only that
    (ws / "memory" / "2026-01-03.md").write_text("- Bob owns billing now.\n")
    try:
        r = mc("index", "--config", str(config), "--agent", "main", home=home)
        assert r.returncode == 0, r.stderr
        assert server.inputs[before:] == [["- Bob owns billing now.\n"]]
    finally:
        (ws / "memory" / "2026-01-03.md").write_text(NOTES["memory/2026-01-03.md"])


def test_a_note_of_several_lines_needs_only_its_passage_vectors(openclaw_index, tmp_path):
    """OpenClaw has the chunk's vector, not memory-core's per-passage vectors: the import says how
    many the next index embeds, and that index embeds exactly those (never the chunk)."""
    config, _, indexes, server = openclaw_index
    home = tmp_path / "state"
    before = len(server.inputs)
    r = mc("import-embeddings", "--from", str(indexes["notes"]), "--config", str(config), "--agent", "notes",
           "--json", home=home)
    assert r.returncode == 0, r.stderr
    assert {k: v for k, v in json.loads(r.stdout).items() if k in ("imported", "passagesToEmbed")} == {
        "imported": 1, "passagesToEmbed": 3}
    r = mc("index", "--config", str(config), "--agent", "notes", home=home)
    assert r.returncode == 0, r.stderr
    assert [t for batch in server.inputs[before:] for t in batch] == PASSAGES


def test_import_refuses_another_model_or_dimension_count(openclaw_index, tmp_path):
    config, _, indexes, server = openclaw_index
    index = indexes["main"]
    doc = config.read_text()
    other = tmp_path / "openclaw.json"
    other.write_text(doc.replace('model: "test-embed"', 'model: "other-embed"'))
    other.chmod(0o600)
    r = mc("import-embeddings", "--from", str(index), "--config", str(other), "--agent", "main", home=tmp_path / "a")
    assert (r.returncode, r.stderr) == (2, (
        f"error: --from {index}: it holds openai-compatible/test-embed, not openai-compatible/other-embed; set "
        "`provider` and `model` to the ones it was built with (vectors of another model cannot be reused), or "
        "index from scratch\n"))
    other.write_text(doc.replace('model: "test-embed"', 'model: "test-embed", outputDimensionality: 32'))
    r = mc("import-embeddings", "--from", str(index), "--config", str(other), "--agent", "main", home=tmp_path / "b")
    assert (r.returncode, r.stderr) == (2, (
        f"error: --from {index}: its openai-compatible/test-embed vectors have 16 dimensions but provider "
        "openai-compatible gives 32-dimension vectors; set outputDimensionality to 16 (or rebuild)\n"))
