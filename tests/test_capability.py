"""The memory capability a host registers (memory_core.capability): flush plan, prompt section,
public artifacts, the legacy runtime and its reload hooks, the registered tools, the plugin manifest.

Literal values are the released OpenClaw 2026.9.6 answers for the same inputs; the ``node`` test at
the end recomputes them with the installed upstream code when Node 24 + openclaw are present.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import tomllib
from pathlib import Path

import jsonschema
import pytest

from memory_core.artifacts import list_artifacts
from memory_core.capability import memory_capability, operator_open_params
from memory_core.config import MemoryCoreConfig, load_config
from memory_core.core import MemoryCore
from memory_core.errors import MemoryManagerReloading
from memory_core.flush_plan import build_memory_flush_plan
from memory_core.slot.enforcement import MemoryCapabilityRegistration, MemoryHost
from memory_core.manifest import MANIFEST_SCHEMA, build_manifest, load_manifest
from memory_core.prompt_section import build_prompt_section
from memory_core.contract.types import MemoryProviderOpenParams
from memory_core.tools import MemoryTools
from tests.gateway_fixtures import ROOT, child_env, make_workspace

pytestmark = pytest.mark.timeout(120)

NOW_MS = 1764561600000  # 2025-12-01 04:00 UTC = 2025-11-30 23:00 in New York
READ_ONLY = ("Treat workspace bootstrap/reference files such as MEMORY.md, DREAMS.md, SOUL.md, and AGENTS.md as "
             "read-only during this flush; never overwrite, replace, or edit them.")


def flush_config(**flush) -> MemoryCoreConfig:
    return MemoryCoreConfig.model_validate({"userTimezone": "America/New_York",
                                            "compaction": {"memoryFlush": flush}})


# ---------------------------------------------------------------------- flush plan


def test_flush_plan_for_a_fixed_time_and_zone_is_upstreams():
    plan = build_memory_flush_plan(flush_config(softThresholdTokens=5000, forceFlushTranscriptBytes="1mb"), NOW_MS)
    assert plan is not None and plan.to_json() == {
        "softThresholdTokens": 5000,
        "forceFlushTranscriptBytes": 1048576,
        "reserveTokensFloor": 20000,
        "prompt": (
            "Pre-compaction memory flush. Store durable memories only in memory/2025-11-30.md (create memory/ if "
            f"needed). {READ_ONLY} If memory/2025-11-30.md already exists, APPEND new content only and do not "
            "overwrite existing entries. Do NOT create timestamped variant files (e.g., 2025-11-30-HHMM.md); always "
            "use the canonical 2025-11-30.md filename. If nothing to store, reply with NO_REPLY.\n"
            "Current time: Sunday, November 30th, 2025 - 11:00 PM (America/New_York)\n"
            "Reference UTC: 2025-12-01 04:00 UTC"),
        "systemPrompt": (
            "Pre-compaction memory flush turn. The session is near auto-compaction; capture durable memories to "
            "disk. Store durable memories only in memory/2025-11-30.md (create memory/ if needed). "
            f"{READ_ONLY} If memory/2025-11-30.md already exists, APPEND new content only and do not overwrite "
            "existing entries. You may reply, but usually NO_REPLY is correct."),
        "relativePath": "memory/2025-11-30.md",
    }


def test_flush_plan_defaults_model_and_context_window():
    utc = MemoryCoreConfig.model_validate({"userTimezone": "UTC", "compaction": {"memoryFlush": {
        "model": " m1 ", "softThresholdTokens": 12345, "forceFlushTranscriptBytes": 512}}})
    plan = build_memory_flush_plan(utc, 1751371200000, context_window_tokens=32000)
    assert plan is not None
    assert (plan.soft_threshold_tokens, plan.force_flush_transcript_bytes, plan.reserve_tokens_floor, plan.model,
            plan.relative_path) == (12000, 512, 8000, "m1", "memory/2025-07-01.md")
    assert plan.prompt.endswith("\nCurrent time: Tuesday, July 1st, 2025 - 12:00 PM (UTC)\n"
                                "Reference UTC: 2025-07-01 12:00 UTC")
    kolkata = MemoryCoreConfig.model_validate({"userTimezone": "Asia/Kolkata"})
    plan = build_memory_flush_plan(kolkata, 1767225600000, context_window_tokens=10000)
    assert plan is not None
    assert (plan.soft_threshold_tokens, plan.force_flush_transcript_bytes, plan.reserve_tokens_floor,
            plan.relative_path) == (3750, 2097152, 2500, "memory/2026-01-01.md")
    assert "Current time: Thursday, January 1st, 2026 - 5:30 AM (Asia/Kolkata)" in plan.prompt


def test_flush_plan_is_none_when_disabled():
    assert build_memory_flush_plan(flush_config(enabled=False), NOW_MS) is None
    assert memory_capability(flush_config(enabled=False)).flush_plan_resolver(NOW_MS) is None


def test_flush_settings_are_validated_and_read_from_openclaw_json(tmp_path):
    path = tmp_path / "openclaw.json"
    path.write_text(json.dumps({"agents": {"defaults": {
        "memorySearch": {}, "userTimezone": "Europe/Berlin",
        "compaction": {"reserveTokensFloor": 1, "memoryFlush": {"enabled": False, "prompt": "x"}}}},
        "memory": {"citations": "off"}}))
    cfg = load_config(path, env={})
    assert (cfg.user_timezone, cfg.compaction.memory_flush.enabled, cfg.citations) == ("Europe/Berlin", False, "off")
    path.write_text(json.dumps({"memory": {"search": {}, "citations": "on"}}))
    assert load_config(path, env={}).citations == "on"
    for bad, message in [({"userTimezone": "Mars/Base"}, "userTimezone: is not a known time zone"),
                         ({"compaction": {"memoryFlush": {"forceFlushTranscriptBytes": "2 parsecs"}}},
                          "must be a byte size like 512kb"),
                         ({"citations": "sometimes"}, "citations: must be one of 'auto', 'on' or 'off'")]:
        path.write_text(json.dumps(bad))
        with pytest.raises(Exception, match=message):
            load_config(path, env={})


# ---------------------------------------------------------------------- prompt section

RECALL = ("Before answering anything about prior work, decisions, dates, people, preferences, or todos: run "
          "memory_search; for memory-file hits, use memory_get to pull only the needed lines. If low confidence "
          "after search, say you checked.")
SESSION_LINES = ["Session hits are search snippets only; exact session history is unavailable with the enabled tools.",
                 "Session search line numbers are not history offsets. Never read raw transcript files to expand "
                 "session hits."]
OUTCOME = "Report partial, unavailable, or stale recall to the user, including returned warning and action guidance."


def test_prompt_section_with_and_without_citations():
    tools = {"memory_search", "memory_get"}
    assert build_prompt_section(tools, "auto") == [
        "## Memory Recall", RECALL, *SESSION_LINES, OUTCOME,
        "Citations: include Source: <path#line> when it helps the user verify memory snippets.", ""]
    assert build_prompt_section(tools, "off") == [
        "## Memory Recall", RECALL, *SESSION_LINES, OUTCOME,
        "Citations are disabled: do not mention file paths or line numbers in replies unless the user explicitly "
        "asks.", ""]
    assert build_prompt_section({"web_search"}, "on") == []
    assert build_prompt_section({"memory_get"}, "on")[1] == (
        "Before answering anything about prior work, decisions, dates, people, preferences, or todos that point to "
        "a specific memory file: run memory_get to pull only the needed lines. If low confidence after reading, say "
        "you checked.")


def test_prompt_builder_uses_the_configured_citations_mode():
    cap = memory_capability(MemoryCoreConfig.model_validate({"citations": "off"}))
    assert cap.prompt_builder({"memory_search"})[-2].startswith("Citations are disabled")
    assert cap.prompt_builder({"memory_search"}, "on")[-2].startswith("Citations: include")


# ---------------------------------------------------------------------- public artifacts


def test_artifacts_of_the_example_workspace():
    ws = ROOT / "examples" / "workspace"
    got = list_artifacts(str(ws), ("example",))
    dated = [f"memory/2026-11-{d:02d}.md" for d in range(1, 13)]
    projects = [f"memory/projects/rocket/{n}.md" for n in ("decisions", "overview", "runbook")]
    assert [(a.kind, a.relative_path) for a in got] == (
        [("memory-root", "MEMORY.md"), ("memory-file", "USER.md")] + [("daily-note", p) for p in dated]
        + [("memory-file", p) for p in projects])
    for a in got:
        st = os.stat(ws / a.relative_path)
        assert (a.size, a.mtime_ms, a.absolute_path) == (st.st_size, int(st.st_mtime * 1000),
                                                         str((ws / a.relative_path).resolve()))
    assert got[0].to_json() | {"mtimeMs": 0} == {
        "kind": "memory-root", "relativePath": "MEMORY.md", "absolutePath": str((ws / "MEMORY.md").resolve()),
        "agentIds": ["example"], "contentType": "markdown", "size": 1878, "mtimeMs": 0}


def test_a_symlink_out_of_the_workspace_is_not_listed(tmp_path):
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "secret.md").write_text("secret\n")
    (outside / "dir" / "more.md").write_text("more\n")
    ws = make_workspace(tmp_path, files={"memory/2026-01-02.md": "note\n"})
    (ws / "MEMORY.md").symlink_to(outside / "secret.md")
    (ws / "memory" / "leak.md").symlink_to(outside / "secret.md")
    (ws / "memory" / "linked").symlink_to(outside / "dir")
    assert [a.relative_path for a in list_artifacts(str(ws))] == ["memory/2026-01-02.md"]


def test_public_artifacts_group_agents_by_workspace(tmp_path):
    ws = make_workspace(tmp_path, files={"MEMORY.md": "# M\n"})
    ops = make_workspace(tmp_path, "ops", files={"memory/dreaming/2026-01-01.md": "dream\n"})
    cfg = MemoryCoreConfig.model_validate({"workspace": str(ws), "stateDir": str(tmp_path / "s"),
                                           "agents": {"ops": {"workspace": str(ops)}, "lab": {}}})
    got = memory_capability(cfg).public_artifacts.list_artifacts()
    assert [(a.kind, a.relative_path, a.agent_ids) for a in got] == [
        ("memory-root", "MEMORY.md", ("main", "lab")), ("dream-report", "memory/dreaming/2026-01-01.md", ("ops",))]


# ---------------------------------------------------------------------- runtime, tools


@pytest.fixture
def indexed(tmp_path) -> MemoryCoreConfig:
    ws = make_workspace(tmp_path)
    cfg = load_config(None, env={"MEMORY_CORE_HOME": str(tmp_path / "state")}, overrides={"workspace": str(ws)})
    with MemoryCore(config=cfg) as core:
        core.index()
    return cfg


def operator_open(agent_id: str = "main") -> MemoryProviderOpenParams:
    return operator_open_params(agent_id, purpose="cli")


def test_legacy_runtime_serves_a_host_adapter(indexed):
    cap = memory_capability(indexed)
    host = MemoryHost(MemoryCapabilityRegistration(plugin_id="memory-core", runtime=cap.runtime))

    async def go():
        acquired = await host.open(operator_open())
        page = await acquired.provider.search({"query": "coffee"})
        got = await acquired.provider.get({"reference": page.hits[0].reference.to_json(), "from": 4, "lines": 1})
        health = await acquired.provider.health()
        await acquired.provider.close()
        return acquired.adapter, page, got, health

    try:
        adapter, page, got, health = asyncio.run(go())
    finally:
        cap.close()
    assert adapter == "legacy"
    assert [h.citations[0].label for h in page.hits] == ["MEMORY.md#L1-L4"]
    assert got.text.startswith("- The user prefers dark roast coffee, brewed with an AeroPress.\n")
    assert (got.from_, got.lines, got.next_from) == (4, 1, 5)
    assert health.status == "ready"
    assert health.details == {"legacy": {
        "backend": "builtin", "provider": "none", "model": "fts-only", "files": 2, "chunks": 4, "dirty": False,
        "sources": ["memory"], "sourceCounts": [{"source": "memory", "files": 2, "chunks": 4}],
        "cache": {"enabled": True, "entries": 0, "maxEntries": 50000}, "fts": {"enabled": True, "available": True},
        "vector": {"enabled": False, "available": False, "dims": None}}}
    assert cap.runtime.resolve_memory_backend_config(agent_id="main") == {"backend": "builtin", "provider": "none"}


def test_prepare_reload_fences_drains_and_resumes(indexed):
    cap = memory_capability(indexed)
    runtime = cap.provider_runtime

    async def go():
        first = runtime.core("main")
        handle = cap.runtime.prepare_reload(retire_runtime=True, retiring_embedding_providers=[])
        refused = await cap.runtime.get_memory_search_manager(agent_id="main")
        opened = await runtime.open(operator_open())
        with pytest.raises(MemoryManagerReloading, match="Memory provider is reloading; retry after"):
            runtime.core("main")
        drained = await handle.drain()
        closed = first.closed
        handle.resume()
        again = await cap.runtime.get_memory_search_manager(agent_id="main")
        return refused, opened.error, drained, closed, runtime.core("main") is not first, again["manager"]

    try:
        refused, open_error, drained, closed, reopened, manager = asyncio.run(go())
    finally:
        cap.close()
    assert refused == {"manager": None,
                       "error": "Memory provider is reloading; retry after the plugin operation completes."}
    assert open_error == "Memory provider is reloading; retry after the plugin operation completes."
    assert (drained, closed, reopened, manager is not None) == ({"errors": []}, True, True, True)


def test_reload_of_an_embedding_provider_spares_other_engines(indexed):
    runtime = memory_capability(indexed).provider_runtime
    keyword = runtime.core("main")
    handle = runtime.prepare_reload(retiring_embedding_providers=[{"id": "openai"}])
    assert asyncio.run(handle.drain()) == {"errors": []}
    assert runtime.core("main") is keyword and not keyword.closed
    later = runtime.prepare_reload(retire_runtime=True)
    handle.resume()  # an older handle does not lift a newer fence
    with pytest.raises(MemoryManagerReloading):
        runtime.core("main")
    later.resume()
    asyncio.run(runtime.close_memory_search_manager(agent_id="main"))
    assert keyword.closed and runtime.core("main") is not keyword
    asyncio.run(runtime.close_all_memory_search_managers())
    assert runtime.opened_core("main") is None


def test_registered_tools_are_the_recall_tools_with_their_contracts(indexed):
    cap = memory_capability(indexed)
    try:
        tools = {t.name: t for t in cap.tools()}
        assert cap.recall_tool_names == ("memory_search", "memory_get") == tuple(tools)
        assert tools["memory_search"].parameters["required"] == ["query"]
        assert tools["memory_get"].parameters["required"] == ["path"]
        found = tools["memory_search"].execute({"query": "coffee"})
        assert [(r["citation"], r["corpus"]) for r in found["results"]] == [("MEMORY.md#L1-L4", "memory")]
        got = tools["memory_get"].execute({"path": "MEMORY.md", "from": 4, "lines": 1})
        assert got["text"].startswith("- The user prefers dark roast coffee")
        assert cap.tools()[0].execute.__self__ is tools["memory_search"].execute.__self__  # one cooldown per agent
    finally:
        cap.close()


def test_citations_setting_auto_on_off(indexed):
    def search(mode, session_key=None):
        tools = MemoryTools(indexed.model_copy(update={"citations": mode}))
        try:
            hit = tools.search({"query": "coffee"}, session_key=session_key)["results"][0]
        finally:
            tools.close()
        return hit.get("citation"), hit["snippet"].endswith("\n\nSource: MEMORY.md#L1-L4")

    assert search("auto") == ("MEMORY.md#L1-L4", True)
    assert search("auto", "agent:main:telegram:group:42") == (None, False)
    assert search("auto", "agent:main:discord:channel:7") == (None, False)
    assert search("on", "agent:main:telegram:group:42") == ("MEMORY.md#L1-L4", True)
    assert search("off") == (None, False)


class BlockingCore:
    """A core whose full search waits on an event (a provider that never answers); the keyword
    engine of the deadline reads the real index."""

    def __init__(self, real: MemoryCore, release: threading.Event, error: Exception | None = None) -> None:
        self.config, self.db_path, self._release, self._error = real.config, real.db_path, release, error
        self._real = real

    def search(self, *args, **kwargs):
        if kwargs.get("keyword_fallback"):  # the deadline's keyword answer reads the real index
            return self._real.search(*args, **kwargs)
        if self._error is not None:
            raise self._error
        self._release.wait(60)
        return []

    def sync(self, **kwargs):
        return None


def blocking_tools(cfg, release, *, error=None, clock=None):
    real = MemoryCore(config=cfg)
    tools = MemoryTools(cfg, core_factory=lambda: BlockingCore(real, release, error), timeout_ms=200,
                        **({"clock": clock} if clock else {}))
    return tools, real


def test_search_past_the_deadline_returns_keyword_matches_with_a_warning(indexed):
    release = threading.Event()
    tools, real = blocking_tools(indexed, release)
    try:
        out = tools.search({"query": "coffee"})
    finally:
        release.set()
        tools.close()
        real.close()
    assert [r["path"] for r in out.pop("results")] == ["MEMORY.md"]
    debug = out.pop("debug")
    assert (debug["effectiveMode"], debug["fallback"]) == ("keyword-only", "memory_search timed out after 0.2s")
    assert out == {
        "provider": "none", "fallback": "none", "citations": "auto", "mode": "keyword-only",
        "corpora": [{"corpus": "memory", "outcome": "partial", "error": "memory_search timed out after 0.2s"}],
        "warning": ("Memory corpus partial: memory_search timed out after 0.2s Only memory-file keyword matches are "
                    "included; semantic memory retrieval did not finish within the search time limit. Session "
                    "transcript results are not included."),
        "error": "memory_search timed out after 0.2s", "timedOut": True, "timeoutMs": 200, "partial": True}


def test_deadline_without_matches_then_the_cooldown(indexed):
    release = threading.Event()
    now = [1000.0]
    tools, real = blocking_tools(indexed, release, clock=lambda: now[0])
    try:
        timed_out = tools.search({"query": "zzzqqq"})
        now[0] += 59
        cooled = tools.search({"query": "coffee"})
        release.set()
        now[0] += 2
        after = tools.search({"query": "coffee"})
    finally:
        release.set()
        tools.close()
        real.close()
    action = ("Retry memory_search after a short wait: a memory-corpus timeout pauses retries for up to a minute. If "
              "memory-corpus timeouts persist, run: memory-core status --deep --agent main, and rebuild with "
              "memory-core index --force --agent main only if it reports the index dirty or incomplete")
    warning = "Memory search did not finish within its time limit."
    error = "memory_search timed out after 0.2s"
    assert timed_out == cooled == {
        "results": [], "disabled": True, "unavailable": True, "timedOut": True, "timeoutMs": 200, "error": error,
        "warning": warning, "action": action, "debug": {"warning": warning, "action": action, "error": error}}
    assert after["results"] == [] and "unavailable" not in after  # the cooldown is over: searched again


def test_a_failed_search_starts_the_cooldown(indexed):
    now = [0.0]
    release = threading.Event()
    tools, real = blocking_tools(indexed, release, error=RuntimeError("insufficient_quota"), clock=lambda: now[0])
    try:
        first = tools.search({"query": "coffee"})
        tools._core_factory = lambda: real  # the provider is fixed, but the cooldown still answers
        tools._core = None
        cooled = tools.search({"query": "coffee"})
        now[0] += 60
        recovered = tools.search({"query": "coffee"})
    finally:
        tools.close()
        real.close()
    assert first == cooled
    assert (first["error"], first["warning"], first["action"]) == (
        "insufficient_quota", "Memory search is unavailable because the embedding provider quota is exhausted.",
        "Top up or switch embedding provider, then retry memory_search.")
    assert [r["path"] for r in recovered["results"]] == ["MEMORY.md"]


# ---------------------------------------------------------------------- plugin manifest


def test_manifest_validates_against_its_schema_and_is_what_the_code_defines():
    manifest = load_manifest()
    jsonschema.validate(manifest, MANIFEST_SCHEMA)
    assert manifest == build_manifest(), "regenerate: python -m memory_core.manifest --write"
    assert (manifest["id"], manifest["kind"], manifest["contracts"]["tools"]) == (
        "memory-core", "memory", ["memory_get", "memory_search"])
    assert "minHostVersion" not in json.dumps(manifest)
    assert manifest["implements"]["gatewayProtocol"] == 4
    assert "doctor.memory.status" in manifest["implements"]["gatewayMethods"]


def test_manifest_config_schema_accepts_the_example_and_rejects_an_unknown_key():
    schema = load_manifest()["configSchema"]
    jsonschema.Draft202012Validator.check_schema(schema)
    example = tomllib.loads((ROOT / "examples" / "memory-core.toml").read_text())
    jsonschema.validate(example, schema)
    jsonschema.validate({"citations": "off", "userTimezone": "UTC",
                         "compaction": {"memoryFlush": {"forceFlushTranscriptBytes": "2mb"}}}, schema)
    with pytest.raises(jsonschema.ValidationError, match="'tokenz' was unexpected"):
        jsonschema.validate({**example, "chunking": {"tokenz": 300}}, schema)
    with pytest.raises(jsonschema.ValidationError, match="'sometimes' is not one of"):
        jsonschema.validate({"citations": "sometimes"}, schema)


def test_plugin_manifest_command_prints_the_shipped_manifest(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "memory_core", "plugin", "manifest"], capture_output=True,
                          text=True, cwd=ROOT, env=child_env(tmp_path), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == load_manifest()


# ---------------------------------------------------------------------- upstream, when installed


@pytest.mark.node
def test_flush_plan_and_prompt_section_equal_the_installed_upstream(tmp_path):
    from tests.test_gateway_openclaw_cli import find_client

    found = find_client()
    if isinstance(found, str):
        pytest.skip(found)
    node, entry = found
    dist = Path(entry).parent / "dist"
    contract = next(dist.glob("memory-tool-contract-*.mjs"))
    script = tmp_path / "upstream.mjs"
    script.write_text(f"""
const mod = await import({json.dumps(str(dist / "extensions/memory-core/index.js"))});
const tools = await import({json.dumps(str(contract))});
let cap = null;
const noop = () => {{}};
const handler = {{ get(t, k) {{ if (k === "registerMemoryCapability") return (c) => {{ cap = c; }};
  if (k in t) return t[k]; return new Proxy(function(){{}}, handler); }}, apply() {{ return undefined; }} }};
mod.default.register(new Proxy({{ logger: {{ info: noop, warn: noop, error: noop, debug: noop }}, config: {{}} }}, handler));
const input = JSON.parse(process.argv[2]);
console.log(JSON.stringify({{
  plans: input.plans.map((c) => cap.flushPlanResolver(c)),
  prompts: input.prompts.map(([t, m]) => tools.r({{ availableTools: new Set(t), citationsMode: m }})),
}}));
""")
    zones = ["America/New_York", "UTC", "Asia/Kolkata", "Pacific/Auckland", "Europe/Berlin"]
    times = [NOW_MS, 1751371200000, 1767225600000, 1709208000000, 1700000000123]
    plans = []
    for i, (zone, ms) in enumerate(zip(zones, times, strict=True)):
        flush = {"softThresholdTokens": 1000 * i, "forceFlushTranscriptBytes": ["3kb", 7, "1.5mb", "2g", "0"][i]}
        plans.append(({"userTimezone": zone, "compaction": {"memoryFlush": flush}}, ms, [None, 32000, 10000, 1, 0][i]))
    plans.append(({"compaction": {"memoryFlush": {"enabled": False}}}, NOW_MS, None))
    prompts = [(t, m) for t in (["memory_search", "memory_get"], ["memory_search"], ["memory_get"],
                                ["memory_search", "sessions_search"], ["memory_search", "sessions_history"],
                                ["memory_search", "sessions_search", "sessions_history"], [])
               for m in ("auto", "on", "off")]
    upstream_input = {
        "plans": [{"cfg": {"agents": {"defaults": {"userTimezone": c.get("userTimezone"),
                                                   "compaction": c["compaction"]}}},
                   "nowMs": ms, **({"contextWindowTokens": w} if w is not None else {})} for c, ms, w in plans],
        "prompts": prompts,
    }
    proc = subprocess.run([node, str(script), json.dumps(upstream_input)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env={**os.environ, "TZ": "UTC"})
    assert proc.returncode == 0, proc.stderr
    upstream = json.loads(proc.stdout)
    ours = [build_memory_flush_plan(MemoryCoreConfig.model_validate({"userTimezone": "UTC", **c}), ms,
                                    context_window_tokens=w) for c, ms, w in plans]
    assert [None if p is None else p.to_json() for p in ours] == upstream["plans"]
    assert [build_prompt_section(set(t), m) for t, m in prompts] == upstream["prompts"]


def test_readme_host_example_runs(tmp_path):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("<!-- readme-example:start -->\n```python\n", 1)[1].split("```\n<!-- readme-example:end", 1)[0]
    assert len(block.strip().splitlines()) == 10
    env = child_env(tmp_path, MEMORY_CORE_CONFIG=str(ROOT / "examples" / "memory-core.toml"), TZ="UTC")
    proc = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, timeout=120,
                          cwd=ROOT / "examples" / "workspace", env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "## Memory Recall memory/2025-12-01.md",
        "MEMORY.md ('memory_search', 'memory_get')",
        "MEMORY.md#L15-L17 # Long-term memory",
        "",
        "[More content available. Use from=2 to continue.]",
        "ready True",
    ]
