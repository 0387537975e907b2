"""An OpenClaw operator's openclaw.json read as-is: JSON5, the agent roster with its
workspaces and per-agent ``memory.search``, ``enabled = false``, and the keys memory-core accepts
without using them. Upstream: src/config/ (JSON5 via ``json5``), ``resolveAgentWorkspaceDir``
(dist/agent-scope-config-*.mjs), docs/reference/memory-config.md, docs/cli/memory.md."""

from __future__ import annotations

import json

import pytest

from memory_core.capability import memory_capability
from memory_core.config import load_config
from memory_core.errors import ConfigError
from tests.helpers import memory_core_cli as cli

OPENCLAW_JSON = """\
// an operator's openclaw.json: comments, unquoted keys, single quotes, trailing commas
{
  agents: {
    defaults: { workspace: '%(base)s/workspaces', },
    entries: {
      home: { workspace: "%(base)s/home-ws" },   // its own workspace
      work: { memory: { search: { query: { maxResults: 3, }, }, }, },  // <defaults>/work
    },
  },
  memory: {
    search: { provider: "none", rememberAcrossConversations: true, },
    citations: "off",
  },
}
"""


@pytest.fixture
def operator(tmp_path):
    """openclaw.json with two agents, each with its own workspace and memory."""
    (tmp_path / "home-ws").mkdir()
    (tmp_path / "home-ws" / "MEMORY.md").write_text("- The cat is called Tom.\n")
    (tmp_path / "workspaces" / "work").mkdir(parents=True)
    (tmp_path / "workspaces" / "work" / "MEMORY.md").write_text("- Alice owns billing; the cat sits on the invoice.\n")
    path = tmp_path / "openclaw.json"
    path.write_text(OPENCLAW_JSON % {"base": tmp_path})
    return path


def test_json5_roster_workspaces_and_per_agent_settings(operator, tmp_path):
    cfg = load_config(operator, env={})
    assert (cfg.agent_id, cfg.agent_ids, cfg.citations) == ("home", ["home", "work"], "off")
    home, work = cfg.for_agent("home"), cfg.for_agent("work")
    assert (home.workspace, home.query.max_results) == (str(tmp_path / "home-ws"), 6)
    assert (work.workspace, work.query.max_results) == (str(tmp_path / "workspaces" / "work"), 3)


def test_legacy_agent_list_and_owner_default_workspace(tmp_path):
    path = tmp_path / "openclaw.json"
    path.write_text(json.dumps({"agents": {
        "defaults": {"workspace": str(tmp_path / "ws"), "memorySearch": {"query": {"maxResults": 4}}},
        "list": [{"id": "main"}, {"id": "ops", "workspace": str(tmp_path / "ops"), "memorySearch": {"chunking": {"tokens": 200}}}],
    }}))
    cfg = load_config(path, env={})
    ops = cfg.for_agent("ops")
    assert (cfg.agent_ids, cfg.workspace, cfg.query.max_results) == (["main", "ops"], str(tmp_path / "ws"), 4)
    assert (ops.workspace, ops.chunking.tokens, ops.query.max_results) == (str(tmp_path / "ops"), 200, 4)


def test_accepted_but_unused_keys_are_named(operator):
    cfg = load_config(operator, env={})
    assert cfg.for_agent("work").unused_settings == [
        'accepted, not used by memory-core: rememberAcrossConversations (memory-core runs no Active Memory pass; '
        'index transcripts with experimental.sessionMemory and sources = ["memory", "sessions"])']


def test_status_and_search_cover_each_agent(operator, tmp_path):
    home = tmp_path / "state"
    r = cli("index", "--config", str(operator), home=home)
    assert r.returncode == 0, r.stderr
    r = cli("status", "--config", str(operator), "--json", home=home)
    assert r.returncode == 0, r.stderr
    status = json.loads(r.stdout)
    assert [(s["agent"], s["workspace"], s["files"]) for s in status] == [
        ("home", str(tmp_path / "home-ws"), 1), ("work", str(tmp_path / "workspaces" / "work"), 1)]
    assert status[0]["notices"][0].startswith("accepted, not used by memory-core: rememberAcrossConversations")
    r = cli("status", "--config", str(operator), "--json", "--agent", "work", home=home)
    assert [s["agent"] for s in json.loads(r.stdout)] == ["work"]
    for agent, text in (("home", "The cat is called Tom."), ("work", "Alice owns billing; the cat sits on the invoice.")):
        r = cli("search", "cat", "--config", str(operator), "--agent", agent, "--json", home=home)
        assert r.returncode == 0, r.stderr
        assert [h["snippet"].strip("- \n") for h in json.loads(r.stdout)["results"]] == [text]


def test_disabled_agent_has_no_prompt_no_tools_and_a_disabled_search(tmp_path):
    path = tmp_path / "openclaw.json"
    path.write_text("{memory: {search: {enabled: false}}, agents: {entries: {main: {workspace: '%s'}}}}" % tmp_path)
    cfg = load_config(path, env={})
    cap = memory_capability(cfg)
    try:
        assert cap.prompt_builder({"memory_search", "memory_get"}) == []
        assert cap.tools("main") == ()
    finally:
        cap.close()
    from memory_core.tools import MemoryTools

    assert MemoryTools(cfg).search({"query": "cat"}) == {
        "disabled": True, "unavailable": True, "error": "memory search unavailable"}
    r = cli("search", "cat", "--config", str(path), "--json", home=tmp_path / "state")
    assert (r.returncode, json.loads(r.stdout)) == (0, {"agentId": "main", "status": "disabled"})
    r = cli("search", "cat", "--config", str(path), home=tmp_path / "state")
    assert (r.returncode, r.stdout) == (0, "Memory search disabled.\n")
    r = cli("status", "--config", str(path), "--json", home=tmp_path / "state")
    assert (r.returncode, json.loads(r.stdout)) == (0, [])


def test_unset_provider_is_openclaws_default_openai_when_its_key_is_there(tmp_path):
    path = tmp_path / "openclaw.json"
    path.write_text("{memory: {search: {query: {maxResults: 4}}}}")
    cfg = load_config(path, env={"OPENAI_API_KEY": "sk-x"})
    assert (cfg.provider, cfg.notices) == ("openai", [])
    cfg = load_config(path, env={})
    assert (cfg.provider, cfg.notices) == ("none", [
        'provider: not set in the openclaw.json and no OpenAI key (OPENAI_API_KEY or models.providers.openai.apiKey): '
        'keyword-only search; set memory.search.provider'])
    path.write_text("{memory: {search: {}}, models: {providers: {openai: {apiKey: 'sk-y'}}}}")
    path.chmod(0o600)
    assert load_config(path, env={}).provider == "openai"


def test_one_agents_missing_workspace_does_not_stop_the_others(operator, tmp_path):
    doc = operator.read_text().replace('work: {', f'gone: {{ workspace: "{tmp_path}/nowhere" }}, work: {{')
    operator.write_text(doc)
    r = cli("index", "--config", str(operator), home=tmp_path / "state")
    assert r.returncode == 2
    assert f"error: agent gone: workspace {tmp_path}/nowhere does not exist" in r.stderr
    assert [line.split(" (")[0] for line in r.stdout.splitlines() if line.startswith("Indexed")] == [
        f"Indexed {tmp_path}/home-ws", f"Indexed {tmp_path}/workspaces/work"]


def test_the_rest_of_an_openclaw_json_is_left_to_openclaw(tmp_path):
    """Other sections (channels, tools, session...) are OpenClaw's; its gateway gives memory-core's
    port and auth; ``${VAR}`` references are resolved as upstream (config/env-substitution.ts)."""
    path = tmp_path / "openclaw.json"
    path.write_text("""{
      gateway: { mode: "local", port: 18790, bind: "loopback", auth: { mode: "token", token: "${GW_TOKEN}" } },
      channels: { telegram: { enabled: true, botToken: "${TELEGRAM_TOKEN}" } },
      session: { dmScope: "main" }, tools: { profile: "coding" },
      memory: { search: { provider: "openai-compatible", model: "m",
                          remote: { baseUrl: "http://127.0.0.1:9/v1", apiKey: "${EMB_KEY}", headers: { "X-Lit": "$${EMB_KEY}" } } } },
    }""")
    path.chmod(0o600)
    cfg = load_config(path, env={"GW_TOKEN": "t0k", "EMB_KEY": "sk-e"})  # TELEGRAM_TOKEN: not memory's, not read
    assert (cfg.gateway.port, cfg.gateway.host, cfg.gateway.auth, cfg.gateway.token) == (18790, "127.0.0.1", "token", "t0k")
    assert (cfg.remote.api_key, cfg.remote.headers) == ("sk-e", {"X-Lit": "${EMB_KEY}"})
    with pytest.raises(ConfigError) as info:
        load_config(path, env={"GW_TOKEN": "t0k"})
    assert info.value.message == ("remote.apiKey: environment variable EMB_KEY (referenced as ${EMB_KEY}) is not set; "
                                  "set it or write the value in the config")
