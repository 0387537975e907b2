// memory-core as OpenClaw's memory: a plugin of kind "memory" that takes the plugins.slots.memory slot
// and answers the host's memory capability (memory.search, doctor.memory.status, the agent tools
// memory_search / memory_get) through one `memory-core serve` per gateway. Plain ESM, no build step,
// no dependency beyond Node 24 (its global WebSocket).

import fs from "node:fs";
import os from "node:os";
import path from "node:path";

import {
  GET_SCHEMA, SEARCH_SCHEMA, buildFlushPlan, buildPromptSection, getDescription, jsonResult, searchDescription,
  searchUnavailable, sourceContract,
} from "./lib/host-shapes.js";
import { INSTALL_FIX, MemoryCoreSupervisor } from "./lib/supervisor.js";

export const PLUGIN_ID = "memory-core-py";
const DEFAULT_START_TIMEOUT_MS = 120000;
const MEMORY_SEARCH_KEYS = ["enabled", "provider", "model", "fallback", "sources", "extraPaths", "experimental", "query",
  "citations"];

// ------------------------------------------------------------------ the host's config -> memory-core's

function agentEntries(cfg) {
  const list = Array.isArray(cfg?.agents?.list) ? cfg.agents.list.filter((a) => a && typeof a.id === "string" && a.id.trim()) : [];
  return list.length ? list : [{ id: "main" }];
}

export function defaultAgentId(cfg) {
  const list = agentEntries(cfg);
  return (list.find((a) => a.default === true) ?? list[0]).id.trim().toLowerCase();
}

function stateDir(pluginConfig) {
  if (typeof pluginConfig.stateDir === "string" && pluginConfig.stateDir.trim()) return path.resolve(pluginConfig.stateDir);
  const base = process.env.OPENCLAW_STATE_DIR?.trim() || path.join(os.homedir(), ".openclaw");
  return path.join(base, "memory-core-py");
}

function pick(obj) {
  const out = {};
  for (const key of MEMORY_SEARCH_KEYS) if (obj && obj[key] !== undefined) out[key] = obj[key];
  return out;
}

/**
 * memory-core's config for the host's agents: every agent id with its workspace (as the host resolves
 * it), the host's memorySearch settings memory-core shares (provider, model, sources, extraPaths, ...),
 * and an index under the plugin's state dir.
 */
export function memoryCoreConfig(cfg, resolveWorkspace, dir) {
  const defaultId = defaultAgentId(cfg);
  const agents = {};
  let workspace = null;
  for (const entry of agentEntries(cfg)) {
    const id = entry.id.trim().toLowerCase();
    const ws = resolveWorkspace(cfg, id, entry);
    const own = pick(entry.memorySearch);
    if (id === defaultId) workspace = ws;
    else agents[id] = { workspace: ws, ...own };
  }
  const doc = {
    agentId: defaultId,
    workspace,
    stateDir: path.join(dir, "index"),
    ...pick(cfg?.memory?.search),
    ...pick(cfg?.agents?.defaults?.memorySearch),
    ...pick(agentEntries(cfg).find((a) => a.id.trim().toLowerCase() === defaultId)?.memorySearch),
  };
  if (cfg?.memory?.citations) doc.citations = cfg.memory.citations;
  if (cfg?.agents?.defaults?.userTimezone) doc.userTimezone = cfg.agents.defaults.userTimezone;
  if (Object.keys(agents).length) doc.agents = agents;
  return doc;
}

function workspaceResolver(api) {
  const resolve = api.runtime?.agent?.resolveAgentWorkspaceDir;
  return (cfg, id, entry) => {
    if (typeof resolve === "function") {
      try {
        const dir = resolve(cfg, id);
        if (typeof dir === "string" && dir.trim()) return path.resolve(dir.replace(/^~(?=$|\/)/, os.homedir()));
      } catch { /* fall back to the entry's own setting */ }
    }
    const raw = entry.workspace ?? cfg?.agents?.defaults?.workspace ?? path.join(os.homedir(), ".openclaw", "workspace");
    return path.resolve(String(raw).replace(/^~(?=$|\/)/, os.homedir()));
  };
}

function commandOf(pluginConfig) {
  const c = pluginConfig.command;
  if (Array.isArray(c) && c.length && c.every((s) => typeof s === "string" && s)) return c;
  if (typeof c === "string" && c.trim()) return [c.trim()];
  return ["memory-core"];
}

/** Why `command` cannot start (its executable is neither an existing file nor on PATH), or null. */
export function commandProblem(command, env = process.env) {
  const exe = command[0];
  const runnable = (file) => {
    try {
      fs.accessSync(file, fs.constants.X_OK);
      return fs.statSync(file).isFile();
    } catch {
      return false;
    }
  };
  if (exe.includes("/")) return runnable(path.resolve(exe)) ? null : `memory-core is not installed (${exe} does not exist)`;
  const dirs = (env.PATH ?? "").split(path.delimiter).filter(Boolean);
  return dirs.some((d) => runnable(path.join(d, exe))) ? null : `memory-core is not installed (${exe} is not on PATH)`;
}

// ------------------------------------------------------------------ the search manager

function agentOf(params, cfg) {
  const raw = typeof params?.agentId === "string" && params.agentId.trim() ? params.agentId
    : /^agent:([^:]+):/.exec(params?.sessionKey ?? params?.agentSessionKey ?? "")?.[1];
  return (raw ?? defaultAgentId(cfg)).trim().toLowerCase();
}

function makeManager(supervisor, agentId, workspaceDir) {
  const details = () => supervisor.health.get(agentId)?.health ?? {};
  return {
    async search(query, opts = {}) {
      const params = { query, agentId };
      if (opts.maxResults !== undefined) params.maxResults = opts.maxResults;
      if (opts.minScore !== undefined) params.minScore = opts.minScore;
      const out = await supervisor.call("memory.search", params);
      supervisor.refreshHealth().catch(() => {});
      const sources = Array.isArray(opts.sources) ? new Set(opts.sources) : null;
      return sources ? out.results.filter((hit) => sources.has(hit.source ?? "memory")) : out.results;
    },
    async readFile({ relPath, from, lines } = {}) {
      const args = { path: relPath };
      if (from !== undefined) args.from = from;
      if (lines !== undefined) args.lines = lines;
      const out = await supervisor.call("tools.invoke", { name: "memory_get", args, agentId });
      const result = out.output.details;
      if (result.status === "error") throw Object.assign(new Error(result.error), { code: result.code });
      return result;
    },
    // synchronous: answered from memory-core's last doctor.memory.status (refreshed after each
    // search and every 15 s), never from a request made now
    status() {
      const health = details();
      const d = health.details ?? {};
      const provider = d.provider ?? "none";
      return {
        backend: "memory-core",
        provider,
        requestedProvider: provider,
        ...(d.model ? { model: d.model } : {}),
        workspaceDir,
        sources: d.sources ?? ["memory"],
        ...(typeof d.files === "number" ? { files: d.files } : {}),
        ...(typeof d.chunks === "number" ? { chunks: d.chunks } : {}),
        dirty: health.status !== "ready",
        fts: { enabled: true, available: true },
        vector: { enabled: provider !== "none" },
        ...(health.status === "degraded" && health.message ? { lastSyncError: health.message } : {}),
        custom: {
          searchMode: provider === "none" ? "fts-only" : "hybrid",
          memoryCore: { server: supervisor.client?.serverVersion ?? null, pid: supervisor.pid, health: health.status ?? "unknown",
            ...(health.message ? { message: health.message } : {}) },
        },
      };
    },
    async probeEmbeddingAvailability() {
      await supervisor.refreshHealth();
      const provider = details().details?.provider ?? "none";
      if (provider === "none") {
        return { ok: false, checked: true, error: "memory-core searches keyword-only: no embedding provider is configured (memorySearch.provider)" };
      }
      return details().status === "ready" ? { ok: true, checked: true }
        : { ok: false, checked: true, error: details().message ?? "memory-core embeddings unavailable" };
    },
    async probeVectorAvailability() {
      return (details().details?.provider ?? "none") !== "none";
    },
    async sync() {
      // memory-core keeps its index fresh itself (watcher, interval, search-time sync)
    },
    async close() {
      // the connection is the plugin's, shared by every manager
    },
  };
}

// ------------------------------------------------------------------ public artifacts

const DAILY = /^memory\/\d{4}-\d{2}-\d{2}[^/]*\.md$/;

function artifactKind(rel) {
  if (rel === "MEMORY.md" || rel === "memory.md") return "memory-root";
  if (rel.startsWith("memory/dreaming/")) return "dream-report";
  return DAILY.test(rel) ? "daily-note" : "memory-file";
}

function listWorkspaceArtifacts(workspaceDir, agentIds) {
  const out = [];
  const add = (rel) => {
    const abs = path.join(workspaceDir, rel);
    let st;
    try { st = fs.lstatSync(abs); } catch { return; }
    if (!st.isFile()) return;
    out.push({ kind: artifactKind(rel), workspaceDir, relativePath: rel, absolutePath: abs, agentIds: [...agentIds],
      contentType: "markdown", size: st.size, mtimeMs: Math.floor(st.mtimeMs) });
  };
  for (const name of ["MEMORY.md", "memory.md", "USER.md"]) add(name);
  const walk = (relDir) => {
    let entries;
    try { entries = fs.readdirSync(path.join(workspaceDir, relDir), { withFileTypes: true }); } catch { return; }
    for (const e of entries) {
      const rel = `${relDir}/${e.name}`;
      if (e.isDirectory()) walk(rel);
      else if (e.isFile() && e.name.endsWith(".md")) add(rel);
    }
  };
  walk("memory");
  return out;
}

// ------------------------------------------------------------------ the plugin

export default {
  id: PLUGIN_ID,
  name: "memory-core (Python)",
  description: "OpenClaw's memory on memory-core: memory.search, doctor.memory.status and the memory_search / memory_get tools run on a memory-core serve child",
  kind: "memory",
  register(api) {
    const pluginConfig = api.pluginConfig && typeof api.pluginConfig === "object" ? api.pluginConfig : {};
    const liveConfig = () => (api.runtime?.config?.current ? api.runtime.config.current() : api.config) ?? {};
    const resolveWorkspace = workspaceResolver(api);
    const dir = stateDir(pluginConfig);
    const log = {
      info: (m) => api.logger?.info?.(m),
      warn: (m) => (api.logger?.warn ?? api.logger?.info)?.(m),
      error: (m) => (api.logger?.error ?? api.logger?.warn)?.(m),
    };
    const cfg0 = api.config ?? {};
    const supervisor = new MemoryCoreSupervisor({
      command: commandOf(pluginConfig),
      env: pluginConfig.env && typeof pluginConfig.env === "object" ? pluginConfig.env : {},
      url: typeof pluginConfig.url === "string" && pluginConfig.url.trim() ? pluginConfig.url.trim() : null,
      token: typeof pluginConfig.token === "string" ? pluginConfig.token : process.env.MEMORY_CORE_GATEWAY_TOKEN,
      configPath: path.join(dir, "memory-core.json"),
      memoryConfig: memoryCoreConfig(cfg0, resolveWorkspace, dir),
      agentIds: agentEntries(cfg0).map((a) => a.id.trim().toLowerCase()),
      startTimeoutMs: Number(pluginConfig.startTimeoutMs) > 0 ? Number(pluginConfig.startTimeoutMs) : DEFAULT_START_TIMEOUT_MS,
      restartDelayMs: Number(pluginConfig.restartDelayMs) > 0 ? Number(pluginConfig.restartDelayMs) : 1000,
    }, log);
    const startProblem = supervisor.settings.url ? null : commandProblem(supervisor.settings.command);
    if (startProblem) log.warn(`memory-core-py: ${startProblem}; ${INSTALL_FIX}`);

    // `/memory-core`: where memory-core stands, for an operator in chat; `openclaw plugins inspect
    // --runtime` lists it with this description, so a memory-core that cannot start is named there too
    api.registerCommand?.({
      name: "memory-core",
      description: startProblem ? `memory-core status. PROBLEM: ${startProblem}; ${INSTALL_FIX}`
        : "memory-core status: the memory-core server behind OpenClaw's memory (state, pid, health per agent)",
      acceptsArgs: false,
      handler: async () => ({ text: statusText(supervisor) }),
    });

    // one memory-core per gateway: started with the gateway's services, stopped with them
    api.registerService({
      id: `${PLUGIN_ID}-server`,
      async start(ctx) {
        const cfg = ctx?.config ?? liveConfig();
        supervisor.settings.memoryConfig = memoryCoreConfig(cfg, resolveWorkspace, dir);
        supervisor.settings.agentIds = agentEntries(cfg).map((a) => a.id.trim().toLowerCase());
        supervisor.start();
      },
      async stop() {
        await supervisor.stop();
      },
    });

    const workspaceOf = (cfg, agentId) => {
      const entry = agentEntries(cfg).find((a) => a.id.trim().toLowerCase() === agentId) ?? { id: agentId };
      return resolveWorkspace(cfg, agentId, entry);
    };

    const runtime = {
      async getMemorySearchManager(params = {}) {
        const cfg = params.cfg ?? liveConfig();
        const agentId = agentOf(params, cfg);
        await supervisor.settle();
        if (!supervisor.ready) return { manager: null, error: supervisor.describeProblem() };
        if (!supervisor.settings.agentIds.includes(agentId)) {
          return { manager: null, error: `memory-core does not serve agent "${agentId}"; restart the gateway after adding it to agents.list` };
        }
        return { manager: makeManager(supervisor, agentId, workspaceOf(cfg, agentId)), debug: { backend: "memory-core" } };
      },
      resolveMemoryBackendConfig() {
        return { backend: "builtin", citations: liveConfig()?.memory?.citations ?? "auto" };
      },
      async authorizeSearchHits(params) {
        // memory-core's v1 search answers memory files; transcript hits stay withheld, as the host
        // does for a runtime without its own transcript visibility policy
        return (params.hits ?? []).filter((hit) => hit.source !== "sessions");
      },
      async closeAllMemorySearchManagers() {},
      async closeMemorySearchManager() {},
    };

    api.registerMemoryCapability({
      deterministicRecallToolName: "memory_search",
      recallToolNames: ["memory_search", "memory_get"],
      supportsPrivateTranscriptRecall: false,
      promptBuilder: (params) => buildPromptSection(params.availableTools ?? new Set(),
        params.citationsMode ?? liveConfig()?.memory?.citations),
      flushPlanResolver: (params = {}) => buildFlushPlan({ ...params, cfg: params.cfg ?? liveConfig() }),
      runtime,
      publicArtifacts: {
        async listArtifacts(params = {}) {
          const cfg = params.cfg ?? liveConfig();
          const byWorkspace = new Map();
          for (const entry of agentEntries(cfg)) {
            const id = entry.id.trim().toLowerCase();
            const ws = resolveWorkspace(cfg, id, entry);
            byWorkspace.set(ws, [...(byWorkspace.get(ws) ?? []), id]);
          }
          return [...byWorkspace].flatMap(([ws, ids]) => listWorkspaceArtifacts(ws, ids));
        },
      },
    });

    const makeTool = (name, ctx) => {
      const cfg = (ctx?.getRuntimeConfig?.() ?? ctx?.runtimeConfig ?? ctx?.config) || liveConfig();
      const agentId = agentOf({ agentId: ctx?.agentId, sessionKey: ctx?.sessionKey }, cfg);
      const search = { ...pick(cfg?.agents?.defaults?.memorySearch),
        ...pick(agentEntries(cfg).find((a) => a.id.trim().toLowerCase() === agentId)?.memorySearch) };
      if (search.enabled === false) return null; // memory is off for this agent: no tool, as upstream
      const contract = sourceContract({ extraPaths: search.extraPaths ?? [], sources: search.sources ?? ["memory"] });
      return {
        label: name === "memory_search" ? "Memory Search" : "Memory Get",
        name,
        description: name === "memory_search" ? searchDescription(contract) : getDescription(contract),
        parameters: name === "memory_search" ? SEARCH_SCHEMA : GET_SCHEMA,
        async execute(_toolCallId, params) {
          const args = params && typeof params === "object" ? params : {};
          await supervisor.settle();
          if (!supervisor.ready) return unavailableTool(name, args, supervisor.describeProblem());
          let out;
          try {
            out = await supervisor.call("tools.invoke", { name, args, agentId,
              ...(ctx?.sessionKey ? { sessionKey: ctx.sessionKey } : {}) });
          } catch (err) {
            if (err.code === "INVALID_REQUEST") throw new Error(err.message); // a bad argument: upstream throws too
            return unavailableTool(name, args, `memory-core unavailable: ${err.message}`);
          }
          return jsonResult(out.output.details);
        },
      };
    };
    api.registerTool((ctx) => makeTool("memory_search", ctx), { names: ["memory_search"] });
    api.registerTool((ctx) => makeTool("memory_get", ctx), { names: ["memory_get"] });
  },
};

function statusText(supervisor) {
  const problem = supervisor.describeProblem();
  if (problem) return `memory-core: ${supervisor.state}. ${problem}`;
  const agents = supervisor.settings.agentIds.map((id) => `${id}: ${supervisor.health.get(id)?.health?.status ?? "unknown"}`);
  return `memory-core: ready (${supervisor.client?.serverVersion}, pid ${supervisor.pid ?? "shared server"}); ${agents.join(", ")}`;
}

function unavailableTool(name, args, error) {
  if (name === "memory_search") return jsonResult(searchUnavailable(error));
  return jsonResult({ path: typeof args.path === "string" ? args.path : "", text: "", status: "error",
    code: "MEMORY_READ_FAILED", error });
}
