"""memory-core as OpenClaw's memory: the shipped plugin (``openclaw_plugin/``), ``memory-core plugin
path|install``, and the real OpenClaw 2026.9.6 gateway answering memory.search, the agent tools and
doctor.memory.status through the plugin and its ``memory-core serve`` child.

The real-host tests need Node 24 + openclaw@2026.9.6 (.ci/install-node-client) and skip with the
reason when they are absent (CI sets MEMORY_CORE_NO_SKIPS=1, which turns a skip into a failure).
Polling goes through memory-core's Python protocol-4 client (what the CLI sends, without ~2 s of Node
start-up per call); the acceptance calls themselves go through the real ``openclaw`` CLI.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from benchmarks.openclaw_host import ROOT, TOKEN, OpenClawHost, pid_alive, wait_for
from memory_core.flush_plan import build_memory_flush_plan
from memory_core.gateway.client import GatewayCallError, GatewayClient
from memory_core.prompt_section import build_prompt_section
from memory_core.tools import PATH_NOT_ALLOWED, WIKI_NOT_REGISTERED
from tests.gateway_fixtures import TOKEN as TOKEN_SERVE
from tests.gateway_fixtures import MEMORY_MD, NOTE_MD, index_agents, make_workspace, serve_process, write_config
from tests.test_gateway_openclaw_cli import client  # noqa: F401 - the fixture: (node, openclaw.mjs) or a skip

PLUGIN = ROOT / "openclaw_plugin"


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "memory_core", *args], capture_output=True, text=True, env=full,
                          cwd=cwd or ROOT, timeout=120, check=False)


# --------------------------------------------------------------------------- the shipped plugin


def test_plugin_path_prints_the_shipped_plugin_folder(tmp_path):
    done = run_cli("plugin", "path", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    folder = Path(done.stdout.strip())
    assert folder == PLUGIN.resolve()
    manifest = json.loads((folder / "openclaw.plugin.json").read_text(encoding="utf-8"))
    package = json.loads((folder / "package.json").read_text(encoding="utf-8"))
    assert (manifest["id"], manifest["kind"], manifest["contracts"]) == (
        "memory-core-py", "memory", {"tools": ["memory_get", "memory_search"]})
    assert (package["type"], package["openclaw"], package.get("dependencies")) == (
        "module", {"extensions": ["./index.js"]}, None)


def test_plugin_install_without_openclaw_prints_the_commands(tmp_path):
    done = run_cli("plugin", "install", env={"PATH": str(tmp_path)}, cwd=tmp_path)  # no openclaw on PATH
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"openclaw plugins install --link --force --accept-capabilities {PLUGIN.resolve()}"
    assert lines[1].startswith("openclaw config set plugins.entries.memory-core-py.config '{\"command\":[")
    start = json.loads(lines[1].split("'")[1])
    assert start == {"command": [sys.executable, "-m", "memory_core"], "env": {"PYTHONPATH": str(ROOT)}}
    assert "openclaw is not on PATH" in done.stderr


NODE_TWINS = """
import { buildFlushPlan, buildPromptSection } from %s;
const out = {prompts: [], plans: []};
for (const [tools, mode] of %s) out.prompts.push(buildPromptSection(new Set(tools), mode));
for (const [nowMs, tz, window, flush] of %s) {
  const cfg = {agents: {defaults: {userTimezone: tz, compaction: {memoryFlush: flush}}}};
  out.plans.push(buildFlushPlan({cfg, nowMs, contextWindowTokens: window}));
}
console.log(JSON.stringify(out));
"""


@pytest.mark.node
def test_the_plugins_prompt_section_and_flush_plan_are_memory_cores(client, tmp_path):
    """What the host reads synchronously is computed in JS; it must equal memory-core's Python twin."""
    from memory_core.config import load_config

    tool_sets = [(["memory_search", "memory_get"], "auto"), (["memory_get"], "off"), (["read"], "auto"),
                 (["memory_search", "sessions_search", "sessions_history"], "on"), (["memory_search"], "auto")]
    plans = [(1764561600000, "UTC", None, {}), (1764590400000, "America/New_York", 32000, {"softThresholdTokens": 9000}),
             (1767225599000, "Asia/Tokyo", None, {"model": " ollama/qwen3:8b ", "forceFlushTranscriptBytes": 4096}),
             (1764561600000, "UTC", None, {"enabled": False})]
    script = NODE_TWINS % (json.dumps((PLUGIN / "lib" / "host-shapes.js").as_uri()), json.dumps(tool_sets),
                           json.dumps(plans))
    (tmp_path / "twins.mjs").write_text(script, encoding="utf-8")
    done = subprocess.run([client[0], str(tmp_path / "twins.mjs")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    js = json.loads(done.stdout)
    assert js["prompts"] == [build_prompt_section(tools, mode) for tools, mode in tool_sets]
    expected = []
    for now_ms, tz, window, flush in plans:
        cfg = load_config(None, env={"MEMORY_CORE_HOME": str(tmp_path)},
                          overrides={"userTimezone": tz, "compaction": {"memoryFlush": flush}})
        plan = build_memory_flush_plan(cfg, now_ms, context_window_tokens=window)
        expected.append(None if plan is None else plan.to_json())
    assert js["plans"] == expected


# --------------------------------------------------------------------------- the real host


def call_python(url: str, method: str, params: dict) -> dict:
    """One request to the real gateway through memory-core's protocol-4 client: payload or {"error": ...}."""
    async def go() -> dict:
        async with await GatewayClient.open(url, token=TOKEN, scopes=["operator.read", "operator.write"]) as c:
            return await c.call(method, params)
    try:
        return asyncio.run(asyncio.wait_for(go(), 60))
    except (GatewayCallError, OSError, TimeoutError) as exc:
        return {"error": str(exc)}


def healthy(doctor: dict) -> bool:
    """doctor.memory.status as 2026.9.6 answers when the slot owner's manager opened (no error branch)."""
    return doctor.get("provider") == "none" and "dreaming" in doctor and "searchRuntimeRegistered" not in doctor


@pytest.fixture(scope="module")
def host(client, tmp_path_factory):
    base = tmp_path_factory.mktemp("openclaw-host")
    ws = base / "workspace"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text(MEMORY_MD, encoding="utf-8")
    (ws / "memory" / "2026-09-01.md").write_text(NOTE_MD + "The quarterly review codeword is zanzibarquokka.\n",
                                                 encoding="utf-8")
    oc = OpenClawHost(*client, base)
    oc.workspace = ws
    oc.configure(ws)
    installed = oc.install_plugin()
    assert installed.returncode == 0, installed.stdout + installed.stderr
    # a 5 s first restart delay (default 1 s) leaves the test time to see the failure before the recovery
    done = oc.openclaw("config", "set", "plugins.entries.memory-core-py.config.restartDelayMs", "5000", "--strict-json")
    assert done.returncode == 0, done.stderr
    oc.start()
    try:
        oc.wait_logged(r"memory-core: ready \(memory-core-", timeout=300)
        oc.wait_logged(r"\[gateway\] ready", timeout=120)
        yield oc
    finally:
        oc.stop()


@pytest.mark.slow
@pytest.mark.node
@pytest.mark.timeout(900)
def _kill_the_child_and_see_it_recover(host) -> None:
    """SIGKILL memory-core under the real gateway: doctor names the failure, the tools answer the
    unavailable shape (no traceback), and within 30 s memory-core is healthy again."""
    [first] = host.child_pids()
    offset = len(host.log_text())
    os.kill(first, signal.SIGKILL)
    # the plugin's own report that it saw the exit (Node reaped the child), not the kernel's view of
    # the pid: a killed process's threads and sockets outlive its main thread's zombie state, and in
    # that window the gateway still holds a live connection to it
    host.wait_logged(rf"memory-core: memory-core \(pid {first}\) was killed by SIGKILL", after=offset,
                     timeout=60)
    assert not pid_alive(first)
    failed = call_python(host.url, "doctor.memory.status", {})
    assert failed.get("searchRuntimeRegistered") is True and failed["embedding"]["ok"] is False, failed
    assert failed["embedding"]["error"].startswith(f"memory-core unavailable: memory-core (pid {first}) was killed by "
                                                   "SIGKILL; it is being restarted"), failed
    down = call_python(host.url, "tools.invoke", {"name": "memory_search", "args": {"query": "coffee"}})
    assert down["output"]["details"]["unavailable"] is True and "Traceback" not in json.dumps(down)
    wait_for(lambda: healthy(call_python(host.url, "doctor.memory.status", {})), 30, "memory-core healthy again")
    host.wait_logged(r"memory-core: ready", after=offset, timeout=5)
    assert call_python(host.url, "memory.search", {"query": "quillwhistle"})["results"]


def test_a_real_openclaw_gateway_runs_its_memory_on_memory_core(host):
    # installed as an operator would: the plugin linked, enabled, in the memory slot, told how to start us
    cfg = host.config()["plugins"]
    assert cfg["slots"]["memory"] == "memory-core-py" and cfg["entries"]["memory-core-py"]["enabled"] is True
    assert cfg["entries"]["memory-core-py"]["config"]["command"] == [sys.executable, "-m", "memory_core"]
    assert str(PLUGIN.resolve()) in cfg["load"]["paths"]
    assert "not selected for the memory slot" in host.log_text()  # the bundled Memory Core stood aside

    calls = {
        "inspect": lambda: host.openclaw("plugins", "inspect", "memory-core-py", "--runtime", "--json"),
        "search": lambda: host.call("memory.search", {"query": "zanzibarquokka"}),
        "tool_search": lambda: host.call("tools.invoke", {"name": "memory_search", "args": {"query": "zanzibarquokka"}}),
        "tool_get": lambda: host.call("tools.invoke", {"name": "memory_get",
                                                       "args": {"path": "MEMORY.md", "from": 4, "lines": 2}}),
        "tool_get_denied": lambda: host.call("tools.invoke", {"name": "memory_get", "args": {"path": "../secret.md"}}),
        "tool_sessions": lambda: host.call("tools.invoke", {"name": "memory_search",
                                                            "args": {"query": "coffee", "corpus": "sessions"}}),
        "tool_wiki": lambda: host.call("tools.invoke", {"name": "memory_search",
                                                        "args": {"query": "coffee", "corpus": "wiki"}}),
        "doctor": lambda: host.call("doctor.memory.status", {}),
    }
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {name: pool.submit(fn) for name, fn in calls.items()}
        out = {name: f.result() for name, f in futures.items()}

    inspect = json.loads(out["inspect"].stdout)
    plugin = inspect["plugin"]
    assert (plugin["status"], plugin["kind"], plugin["memorySlotSelected"], plugin["activationReason"]) == (
        "loaded", "memory", True, "selected memory slot"), out["inspect"].stderr
    assert (plugin["toolNames"], plugin["services"], inspect["diagnostics"]) == (
        ["memory_search", "memory_get"], ["memory-core-py-server"], [])

    code, search = out["search"]
    assert code == 0, search
    assert (search["agentId"], search["provider"], search["searchMode"]) == ("main", "none", "fts-only")
    assert [(r["path"], r["source"]) for r in search["results"]] == [("memory/2026-09-01.md", "memory")]
    assert "zanzibarquokka" in search["results"][0]["snippet"]

    code, tool = out["tool_search"]
    assert code == 0 and tool["ok"] is True and tool["toolName"] == "memory_search", tool
    details = tool["output"]["details"]
    assert [(r["path"], r["corpus"], r["citation"]) for r in details["results"]] == [
        ("memory/2026-09-01.md", "memory", "memory/2026-09-01.md#L1-L5")]
    assert (details["provider"], details["citations"], details["mode"]) == ("none", "auto", "fts-only")
    assert json.loads(tool["output"]["content"][0]["text"]) == details

    code, got = out["tool_get"]
    assert code == 0, got
    assert got["output"]["details"] == {
        "status": "ok", "text": "- The user prefers dark roast coffee, brewed with an AeroPress.\n- Favourite editor: "
        "Neovim with the gruvbox theme.\n\n[More content available. Use from=6 to continue.]", "path": "MEMORY.md",
        "from": 4, "lines": 2, "truncated": True, "nextFrom": 6}
    assert out["tool_get_denied"][1]["output"]["details"] == {
        "path": "../secret.md", "text": "", "status": "error", "code": "MEMORY_PATH_NOT_ALLOWED",
        "error": PATH_NOT_ALLOWED}
    sessions = out["tool_sessions"][1]["output"]["details"]
    assert (sessions["unavailable"], sessions["error"]) == (True, "Session transcript search is not enabled.")
    assert out["tool_wiki"][1]["output"]["details"] == {"results": [], "citations": "auto", "corpora": [
        {"corpus": "wiki", "outcome": "not-registered"}], "warning": WIKI_NOT_REGISTERED}
    code, doctor = out["doctor"]
    assert code == 0 and healthy(doctor), doctor
    assert doctor["embedding"]["checked"] is False

    # freshness runs through the host: a file written now is found by the gateway's memory.search
    (host.workspace / "memory" / "fresh.md").write_text("# Fresh\nThe new codeword is quillwhistle.\n", encoding="utf-8")
    wait_for(lambda: call_python(host.url, "memory.search", {"query": "quillwhistle"}).get("results"), 60,
             "the file written after start to be found through the gateway")

    # the child dies: doctor names the failure, and within 30 s memory-core is healthy again
    _kill_the_child_and_see_it_recover(host)

    # stopping the gateway stops memory-core: no process left, checked by PID
    pids = host.child_pids()
    assert len(pids) == 2 and pid_alive(pids[1])
    assert host.stop() is not None
    wait_for(lambda: not any(pid_alive(p) for p in pids), 30, f"memory-core pids {pids} to exit with the gateway")

    # memory-core not installed: `openclaw plugins inspect` names the problem and the fix
    missing = host.base / "no-such-memory-core"
    assert host.openclaw("config", "set", "plugins.entries.memory-core-py.config.command",
                         json.dumps([str(missing)]), "--strict-json").returncode == 0
    inspected = host.openclaw("plugins", "inspect", "memory-core-py", "--runtime")
    assert (f"[plugins] memory-core-py: memory-core is not installed ({missing} does not exist); install memory-core "
            "(pip install memory-core), then run `memory-core plugin install`") in inspected.stdout + inspected.stderr


# --------------------------------------------------------------------------- failure is visible, never fatal

# The plugin registered as the host registers it (tools, services, capability, logs collected in reg);
# each harness goes on from there (its two %s: the plugin's URL, then [pluginConfig, workspace]).
REGISTERED = """
import plugin from %s;
const [pluginConfig, workspace] = %s;
const reg = {tools: {}, services: [], capability: null, logs: []};
const config = {agents: {defaults: {workspace}}};
plugin.register({
  pluginConfig, config, runtime: {}, logger: {info: (m) => reg.logs.push(m), warn: (m) => reg.logs.push(m)},
  registerService: (s) => reg.services.push(s), registerMemoryCapability: (c) => { reg.capability = c; },
  registerTool: (factory, opts) => { reg.tools[opts.names[0]] = factory({agentId: "main", config}); },
});
"""

HARNESS = REGISTERED + """
await reg.services[0].start({config});
const deadline = Date.now() + 60000;
let acquired;
do {  // until the plugin has decided (not "starting"): polled, with a deadline
  acquired = await reg.capability.runtime.getMemorySearchManager({cfg: config, agentId: "main", purpose: "status"});
  if (acquired.manager || !/is starting|not running/.test(acquired.error)) break;
  await new Promise((r) => setTimeout(r, 100));
} while (Date.now() < deadline);
const search = await reg.tools.memory_search.execute("t1", {query: "AeroPress"});
const get = await reg.tools.memory_get.execute("t2", {path: "MEMORY.md"});
const hits = acquired.manager ? await acquired.manager.search("AeroPress", {maxResults: 3}) : null;
const status = acquired.manager ? acquired.manager.status() : null;
await reg.services[0].stop();
console.log(JSON.stringify({error: acquired.error, manager: acquired.manager ? Object.keys(acquired.manager).sort() : null,
                            hits, status, search: search.details,
                            get: get.details, logs: reg.logs}));
"""


class OldServer:
    """A protocol-4 server that says it is memory-core 0.0.9 and serves only memory.search (a memory-core
    older than the plugin), on a free loopback port in a thread."""

    def __init__(self) -> None:
        import threading

        self.url = ""
        self._ready = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def _handle(self, ws) -> None:
        await ws.send(json.dumps({"type": "event", "event": "connect.challenge", "payload": {"nonce": "n", "ts": 1}}))
        req = json.loads(await ws.recv())
        await ws.send(json.dumps({"type": "res", "id": req["id"], "ok": True, "payload": {
            "type": "hello-ok", "protocol": 4, "server": {"version": "memory-core-0.0.9", "connId": "c"},
            "features": {"methods": ["memory.search"], "events": []}}}))
        async for _ in ws:
            pass

    async def _main(self) -> None:
        from websockets.asyncio.server import serve

        self._stop = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        async with serve(self._handle, "127.0.0.1", 0) as server:
            self.url = f"ws://127.0.0.1:{next(iter(server.sockets)).getsockname()[1]}"
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> OldServer:
        self._thread.start()
        assert self._ready.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)  # asyncio.Event is not thread-safe
        self._thread.join(30)


def run_harness(client, tmp_path, plugin_config: dict) -> dict:
    ws = tmp_path / "workspace"
    ws.mkdir(exist_ok=True)
    (ws / "MEMORY.md").write_text(MEMORY_MD, encoding="utf-8")
    plugin_config = {"stateDir": str(tmp_path / "state"), **plugin_config}
    script = HARNESS % (json.dumps((PLUGIN / "index.js").as_uri()), json.dumps([plugin_config, str(ws)]))
    (tmp_path / "harness.mjs").write_text(script, encoding="utf-8")
    done = subprocess.run([client[0], str(tmp_path / "harness.mjs")], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


INSTALL_FIX = ("install memory-core (pip install memory-core), then run `memory-core plugin install` (or set "
               "plugins.entries.memory-core-py.config.command to the memory-core command)")


@pytest.mark.node
def test_url_and_token_connect_to_a_shared_memory_core_serve(client, tmp_path):
    cfg = write_config(tmp_path, make_workspace(tmp_path, "shared-ws"))
    index_agents(cfg)  # a shared server that has been running: its index is built
    with serve_process(cfg) as url:
        out = run_harness(client, tmp_path, {"url": url, "token": TOKEN_SERVE})
    assert out["manager"] == ["close", "probeEmbeddingAvailability", "probeVectorAvailability", "readFile", "search",
                              "status", "sync"]
    assert [(h["path"], h["startLine"]) for h in out["hits"]] == [("MEMORY.md", 1)]
    assert (out["status"]["backend"], out["status"]["provider"], out["status"]["custom"]["searchMode"],
            out["status"]["custom"]["memoryCore"]["health"]) == ("memory-core", "none", "fts-only", "ready")
    assert [r["citation"] for r in out["search"]["results"]] == ["MEMORY.md#L1-L4"]
    assert out["get"]["status"] == "ok" and out["get"]["text"].startswith("# Memory")


def assert_unavailable_tools(out: dict) -> None:
    assert out["manager"] is None
    assert (out["search"]["results"], out["search"]["unavailable"], out["search"]["error"]) == ([], True, out["error"])
    assert out["get"] == {"path": "MEMORY.md", "text": "", "status": "error", "code": "MEMORY_READ_FAILED",
                          "error": out["error"]}
    assert "Traceback" not in json.dumps(out)


@pytest.mark.node
def test_memory_core_not_installed_is_named_with_its_fix(client, tmp_path):
    out = run_harness(client, tmp_path, {"command": [str(tmp_path / "no-such-memory-core")]})
    missing = tmp_path / "no-such-memory-core"
    assert out["error"] == f"memory-core unavailable: memory-core is not installed (cannot run {missing}); {INSTALL_FIX}"
    assert f"memory-core-py: memory-core is not installed ({missing} does not exist); {INSTALL_FIX}" in out["logs"]
    assert_unavailable_tools(out)


@pytest.mark.node
def test_a_child_that_fails_to_start_is_named_with_its_error(client, tmp_path):
    failing = [sys.executable, "-c", "import sys; print('error: config file x.toml: bad key', file=sys.stderr); "
                                     "sys.exit(2)"]
    out = run_harness(client, tmp_path, {"command": failing})
    assert out["error"].startswith("memory-core unavailable: memory-core (pid "), out
    assert out["error"].endswith("exited with code 2: config file x.toml: bad key; fix the memory-core config the "
                                 "plugin wrote (see the gateway log) or the plugin config")
    assert_unavailable_tools(out)


@pytest.mark.node
def test_a_memory_core_too_old_for_the_plugin_is_named_with_the_upgrade(client, tmp_path):
    with OldServer() as old:
        out = run_harness(client, tmp_path, {"url": old.url, "token": "t" * 20})
    assert out["error"] == (f"memory-core unavailable: memory-core-0.0.9 at {old.url} is not a memory-core this plugin "
                            "supports (it does not serve doctor.memory.status, tools.invoke); upgrade memory-core "
                            "(pip install -U memory-core) and rerun `memory-core plugin install`")
    assert_unavailable_tools(out)


KILLED_HARNESS = """
import fs from "node:fs";
""" + REGISTERED + """
const acquire = () => reg.capability.runtime.getMemorySearchManager({cfg: config, agentId: "main", purpose: "status"});
await reg.services[0].start({config});
let deadline = Date.now() + 120000;
let acquired;
do {  // until memory-core is ready: polled, with a deadline
  acquired = await acquire();
  if (acquired.manager || !/is starting/.test(acquired.error)) break;
  await new Promise((r) => setTimeout(r, 100));
} while (Date.now() < deadline);
const before = acquired.manager ? acquired.manager.status().custom.memoryCore : {error: acquired.error};
const pid = before.pid;
process.kill(pid, "SIGKILL");
// hold the event loop until the kernel has ended the child entirely (a zombie with no thread left):
// its closed connection and its SIGCHLD are then pending, and the plugin has seen neither
const proc = (file) => { try { return fs.readFileSync(`/proc/${pid}/${file}`, "utf8"); } catch { return ""; } };
const ended = () => proc("stat").slice(proc("stat").lastIndexOf(")") + 2)[0] === "Z" && fs.readdirSync(`/proc/${pid}/task`).length === 1;
deadline = Date.now() + 60000;
while (!ended() && Date.now() < deadline) { /* a condition, not a sleep: the loop must not turn */ }
const endedUnseen = ended();
const after = acquire();  // asked now, before the loop turns
const search = reg.tools.memory_search.execute("t1", {query: "AeroPress"});
const [afterDone, searchDone] = await Promise.all([after, search]);
await reg.services[0].stop();
console.log(JSON.stringify({before, endedUnseen, error: afterDone.error, manager: Boolean(afterDone.manager),
                            search: searchDone.details, logs: reg.logs}));
"""


@pytest.mark.node
def test_a_child_killed_before_node_has_reaped_it_is_reported_not_served(client, tmp_path):
    """The window between the child's death and Node reporting its exit: the kernel has ended the
    process (a zombie, its socket closed) but the event loop has not turned, so the plugin has seen
    neither the closed connection nor the exit. The host asks then: the plugin must not hand out a
    manager answering from the dead child's last health; it waits for the exit and names it."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / "MEMORY.md").write_text(MEMORY_MD, encoding="utf-8")
    plugin_config = {"stateDir": str(tmp_path / "state"), "command": [sys.executable, "-m", "memory_core"],
                     "env": {"PYTHONPATH": str(ROOT)}, "restartDelayMs": 600000}  # no restart within the test
    script = KILLED_HARNESS % (json.dumps((PLUGIN / "index.js").as_uri()), json.dumps([plugin_config, str(ws)]))
    (tmp_path / "killed.mjs").write_text(script, encoding="utf-8")
    done = subprocess.run([client[0], str(tmp_path / "killed.mjs")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HOME": str(tmp_path)}, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    pid = out["before"].get("pid")
    assert out["before"]["health"] == "ready" and out["endedUnseen"] is True, out
    error = (f"memory-core unavailable: memory-core (pid {pid}) was killed by SIGKILL; it is being restarted; "
             "if this repeats, see the gateway log")
    assert (out["manager"], out.get("error")) == (False, error), out
    assert (out["search"]["unavailable"], out["search"]["error"]) == (True, error)
    assert "Traceback" not in json.dumps(out)
    assert not pid_alive(pid)


CONFIG_SCRIPT = """
import { memoryCoreConfig } from %s;
const [cfg, dir] = %s;
const resolve = (c, id, entry) => entry.workspace ?? c.agents.defaults.workspace;
console.log(JSON.stringify(memoryCoreConfig(cfg, resolve, dir)));
"""


@pytest.mark.node
def test_the_child_serves_every_agent_of_the_hosts_config(client, tmp_path):
    """The config the plugin writes names each agents.list entry with its workspace and the host's
    memorySearch settings, and memory-core reads it as those agents."""
    from memory_core.config import load_config

    main_ws, ops_ws = make_workspace(tmp_path, "main-ws"), make_workspace(tmp_path, "ops-ws")
    host_cfg = {"memory": {"search": {"provider": "none"}, "citations": "off"},
                "agents": {"defaults": {"workspace": str(main_ws), "memorySearch": {"sources": ["memory"]}},
                           "list": [{"id": "Ops", "workspace": str(ops_ws), "memorySearch": {"extraPaths": ["notes"]}},
                                    {"id": "main", "default": True}]}}
    script = CONFIG_SCRIPT % (json.dumps((PLUGIN / "index.js").as_uri()), json.dumps([host_cfg, str(tmp_path / "mc")]))
    (tmp_path / "config.mjs").write_text(script, encoding="utf-8")
    done = subprocess.run([client[0], str(tmp_path / "config.mjs")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc == {"agentId": "main", "workspace": str(main_ws), "stateDir": str(tmp_path / "mc" / "index"),
                   "provider": "none", "sources": ["memory"], "citations": "off",
                   "agents": {"ops": {"workspace": str(ops_ws), "extraPaths": ["notes"]}}}
    (tmp_path / "mc.json").write_text(json.dumps(doc), encoding="utf-8")
    cfg = load_config(str(tmp_path / "mc.json"), env={})
    assert (cfg.agent_id, cfg.workspace, cfg.citations) == ("main", str(main_ws), "off")
    ops = cfg.for_agent("ops")
    assert (ops.workspace, ops.provider, [getattr(p, "path", p) for p in ops.extra_paths]) == (str(ops_ws), "none",
                                                                                              ["notes"])
