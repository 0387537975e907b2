"""The released OpenClaw client (``openclaw@2026.9.6`` on Node 24) against ``memory-core serve``.

Installs nothing: ``.ci/install-node-client`` does, into ``$MEMORY_CORE_NODE_PREFIX`` (default
``~/.cache/memory-core/node-client``; ``/work/.cache/node-client`` is also looked at). ``NODE24_BIN``
and ``OPENCLAW_BIN`` (the ``openclaw.mjs`` entry) override the lookup. Skips with the reason when
the client is absent. Each CLI call starts Node (~2 s), so the calls are few and run in parallel.
"""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from benchmarks.openclaw_host import find_client  # the Node 24 + openclaw lookup described above
from tests.gateway_fixtures import TOKEN, index_agents, make_workspace, serve_process, write_config

pytestmark = [pytest.mark.node, pytest.mark.timeout(240)]

COFFEE_SNIPPET = "# Memory\n\n## Preferences\n- The user prefers dark roast coffee, brewed with an AeroPress."


@pytest.fixture(scope="module")
def client():
    found = find_client()
    if isinstance(found, str):
        pytest.skip(found)
    return found


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    base = tmp_path_factory.mktemp("openclaw")
    cfg = write_config(base, make_workspace(base))
    index_agents(cfg)
    with serve_process(cfg) as url:
        yield url


def openclaw_call(client, tmp_path, url, method, params, *, token=TOKEN):
    node, entry = client
    home = tmp_path / f"home-{method}-{len(json.dumps(params))}-{token[:3]}"  # one $HOME per call
    home.mkdir(exist_ok=True)
    env = {"PATH": f"{Path(node).parent}{os.pathsep}{os.environ.get('PATH', '')}", "HOME": str(home),
           "TMPDIR": str(tmp_path), "NO_COLOR": "1"}
    proc = subprocess.run(
        [node, entry, "gateway", "call", method, "--url", url, "--token", token, "--params", json.dumps(params),
         "--json", "--timeout", "20000"],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )
    try:
        payload = json.loads(proc.stdout)
    except ValueError:
        payload = {"unparsed stdout": proc.stdout, "stderr": proc.stderr}
    return proc.returncode, payload, proc.stderr


def test_real_openclaw_cli_against_memory_core_serve(client, server_url, tmp_path):
    calls = {
        "v1": ("memory.search", {"query": "coffee"}, TOKEN),
        "v2": ("memory.search", {"query": "coffee", "version": 2}, TOKEN),
        "wrong_token": ("memory.search", {"query": "coffee"}, "not-the-token"),
        "unknown": ("memory.nonexistent", {}, TOKEN),
        "status": ("memory.status", {"version": 2}, TOKEN),
        "doctor": ("doctor.memory.status", {}, TOKEN),
        "flush": ("memory.flushPlan", {"nowMs": 1764561600000}, TOKEN),
    }
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {name: pool.submit(openclaw_call, client, tmp_path, server_url, m, prm, token=tok)
                   for name, (m, prm, tok) in calls.items()}
        out = {name: f.result() for name, f in futures.items()}

    code, v1, _ = out["v1"]
    assert code == 0, out
    assert [(r["path"], r["startLine"], r["endLine"], r["score"], r["snippet"]) for r in v1.pop("results")] == [
        ("MEMORY.md", 1, 4, 1.0, COFFEE_SNIPPET)]
    assert v1 == {"agentId": "main", "provider": "none", "searchMode": "fts-only"}

    code, v2, _ = out["v2"]
    assert code == 0
    hits = v2.pop("hits")
    assert v2 == {"version": 2, "agentId": "main", "providerId": "memory-core", "coverage": "complete"}
    assert [(h["excerpt"], h["citations"][0]["label"]) for h in hits] == [(COFFEE_SNIPPET, "MEMORY.md#L1-L4")]

    code, wrong, stderr = out["wrong_token"]
    message = "unauthorized: gateway token mismatch (use this gateway's gateway.auth.token or pair the device)"
    assert code == 1
    assert wrong == {"ok": False, "error": {"type": "gateway_request_error", "code": "INVALID_REQUEST",
                                            "message": message, "details": {
                                                "code": "AUTH_TOKEN_MISMATCH", "authReason": "token_mismatch",
                                                "canRetryWithDeviceToken": False,
                                                "recommendedNextStep": "update_auth_credentials"},
                                            "retryable": False}}
    assert f"gateway connect failed: GatewayClientRequestError: {message}" in stderr

    code, unknown, _ = out["unknown"]
    assert code == 1
    assert unknown == {"ok": False, "error": {"type": "gateway_request_error", "code": "INVALID_REQUEST",
                                              "message": "unknown method: memory.nonexistent", "retryable": False}}

    code, status, _ = out["status"]
    assert code == 0
    assert (status["version"], status["agentId"], status["providerId"], status["status"]) == (
        2, "main", "memory-core", "ready")

    code, doctor, _ = out["doctor"]
    assert code == 0, out["doctor"]
    details = doctor["health"].pop("details")
    assert doctor == {"agentId": "main", "provider": "memory-core", "health": {"status": "ready"}, "embedding": {
        "ok": False, "checked": False,
        "error": "memory embedding readiness not checked; run `openclaw memory status --deep` to probe"}}
    assert (details["backend"], details["provider"], details["sources"]) == ("memory-core", "none", ["memory"])
    assert "/" not in json.dumps(details)  # no host paths

    code, flush, _ = out["flush"]
    assert code == 0, out["flush"]
    assert flush["agentId"] == "main" and flush["plan"]["reserveTokensFloor"] == 20000
    assert flush["plan"]["prompt"].endswith("Reference UTC: 2025-12-01 04:00 UTC")

    code, got, _ = openclaw_call(client, tmp_path, server_url, "memory.get",
                                 {"reference": hits[0]["reference"], "from": 4, "lines": 1})
    assert code == 0
    assert got == {"version": 2, "agentId": "main", "providerId": "memory-core", "status": "ok",
                   "reference": hits[0]["reference"],
                   "text": "- The user prefers dark roast coffee, brewed with an AeroPress.",
                   "citations": hits[0]["citations"], "truncated": False, "from": 4, "lines": 1}
