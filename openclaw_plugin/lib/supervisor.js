// One memory-core per gateway: start `memory-core serve` as a child on loopback with a generated
// token, wait until every agent is in sync, restart it with backoff when it dies, stop it with the
// gateway. Or, with `url`, connect to a shared `memory-core serve` instead. The child holds our pipe
// on its stdin (`--exit-on-stdin-eof`), so it also ends if the gateway dies without stopping it.

import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import path from "node:path";

import { GatewayClient } from "./gateway-client.js";

const LISTENING = /memory-core gateway listening on (ws:\/\/\S+)/;
// an agent is settled when its startup sync is done, or when it cannot be opened at all (its own
// requests then answer that error; the other agents are served)
const SETTLED = /memory-core: agent (\S+): (?:in sync|cannot open)/;
const MAX_BACKOFF_MS = 30000;
// how long an answer waits for Node to report the exit of a child the kernel has already ended, and how
// long a lost connection waits for that report before it is taken for a live server to reconnect to
const EXIT_REPORT_MS = 5000;
// the methods this plugin calls: a memory-core without them is too old for it
export const REQUIRED_METHODS = ["memory.search", "doctor.memory.status", "tools.invoke"];

export class MemoryCoreSupervisor {
  /**
   * settings: {command: string[], env: {}, url?, token?, configPath, memoryConfig, agentIds,
   * startTimeoutMs, restartDelayMs}; log: {info, warn, error}.
   */
  constructor(settings, log) {
    this.settings = settings;
    this.log = log;
    this.state = "stopped"; // stopped | starting | ready | failed
    this.problem = null; // {error, fix} while not ready
    this.client = null;
    this.child = null;
    this.pid = null;
    this.restarts = 0;
    this.stopping = false;
    this.waiters = new Set();
    this.health = new Map(); // agentId -> memory-core's doctor.memory.status answer (the last one)
    this._timer = null;
    this._refresh = null;
    this._lost = null; // the child whose connection closed while its exit is not reported yet
  }

  get ready() {
    return this.state === "ready" && Boolean(this.client) && !this.client.closed
      && !(this.child && processEnded(this.child.pid));
  }

  /**
   * Before answering from the state: when our child has ended (the kernel says so, or it dropped its
   * connection) but Node has not reported its exit yet, wait for that report (at most EXIT_REPORT_MS),
   * so the answer names how it ended instead of a dead child's last health.
   */
  async settle() {
    const child = this.child;
    if (!child || this.stopping || this.ready) return;
    if (this._lost === child || processEnded(child.pid)) await exitOf(child, EXIT_REPORT_MS);
  }

  /** The one-line problem and its fix, for doctor.memory.status, the tools and plugins inspect. */
  describeProblem() {
    if (this.ready) return null;
    if (this.child && processEnded(this.child.pid) && !this.problem) {
      return `memory-core unavailable: memory-core (pid ${this.child.pid}) has exited; it is being restarted`;
    }
    if (this.problem) return `memory-core unavailable: ${this.problem.error}; ${this.problem.fix}`;
    if (this.state === "starting") return "memory-core unavailable: memory-core is starting (indexing the workspace); retry shortly";
    return "memory-core unavailable: memory-core is not running (the gateway has not started it)";
  }

  start() {
    this.stopping = false;
    if (this.state === "starting" || this.ready) return;
    if (this.settings.url) this._connect(this.settings.url, this.settings.token);
    else this._spawn();
    if (!this._refresh) {
      this._refresh = setInterval(() => this.refreshHealth().catch(() => {}), 15000);
      this._refresh.unref?.();
    }
  }

  /** Wait until ready (or the deadline): true when ready. */
  waitReady(timeoutMs) {
    if (this.ready) return Promise.resolve(true);
    return new Promise((resolve) => {
      const done = (ok) => {
        clearTimeout(timer);
        this.waiters.delete(done);
        resolve(ok);
      };
      const timer = setTimeout(() => done(this.ready), timeoutMs);
      timer.unref?.();
      this.waiters.add(done);
    });
  }

  _notify() {
    for (const done of [...this.waiters]) done(this.ready);
  }

  _fail(error, fix, { restart = true } = {}) {
    this.state = "failed";
    this.problem = { error, fix };
    this.log.warn(`memory-core: ${error}; ${fix}`);
    this._notify();
    if (restart && !this.stopping) this._scheduleRestart();
  }

  _scheduleRestart() {
    if (this._timer || this.stopping) return;
    // restartDelayMs (default 1 s), doubling per failed start, at most 30 s
    const delay = Math.min(MAX_BACKOFF_MS, (this.settings.restartDelayMs ?? 1000) * 2 ** Math.min(this.restarts, 10));
    this.restarts += 1;
    this._timer = setTimeout(() => {
      this._timer = null;
      if (this.stopping) return;
      if (this.settings.url) this._connect(this.settings.url, this.settings.token);
      else this._spawn();
    }, delay);
    this._timer.unref?.();
  }

  _spawn() {
    const { command, env, configPath, memoryConfig, agentIds, startTimeoutMs } = this.settings;
    this.state = "starting";
    try {
      fs.mkdirSync(path.dirname(configPath), { recursive: true });
      fs.writeFileSync(configPath, `${JSON.stringify(memoryConfig, null, 2)}\n`, { mode: 0o600 });
    } catch (err) {
      this._fail(`cannot write its config ${configPath} (${err.message})`,
        "make the OpenClaw state directory writable or set plugins.entries.memory-core-py.config.stateDir");
      return;
    }
    const token = randomBytes(24).toString("base64url");
    const args = [...command.slice(1), "serve", "--config", configPath, "--host", "127.0.0.1", "--port", "0",
      "--exit-on-stdin-eof"];
    let child;
    try {
      child = spawn(command[0], args, {
        env: { ...process.env, ...env, MEMORY_CORE_GATEWAY_TOKEN: token, PYTHONUNBUFFERED: "1" },
        stdio: ["pipe", "pipe", "pipe"],
      });
    } catch (err) {
      this._fail(`cannot start ${command.join(" ")} (${err.message})`, INSTALL_FIX);
      return;
    }
    this.child = child;
    this.pid = child.pid ?? null;
    const synced = new Set();
    let url = null;
    let lastError = "";
    const startedAt = Date.now();
    const deadline = setTimeout(() => {
      if (this.child === child && this.state === "starting") {
        this.log.warn(`memory-core: not in sync after ${startTimeoutMs} ms; still waiting (pid ${child.pid})`);
      }
    }, startTimeoutMs);
    deadline.unref?.();
    const maybeReady = () => {
      if (!url || this.child !== child || this.state !== "starting") return;
      if (!agentIds.every((id) => synced.has(id))) return;
      this._connect(url, token, child);
    };
    lines(child.stdout, (line) => {
      const m = LISTENING.exec(line);
      if (m) {
        url = m[1];
        this.log.info(`memory-core: pid ${child.pid} listening on ${url}`);
        maybeReady();
      }
    });
    lines(child.stderr, (line) => {
      const m = SETTLED.exec(line);
      if (m) {
        synced.add(m[1]);
        this.log.info(`${line} (${Date.now() - startedAt} ms after start)`);
        maybeReady();
        return;
      }
      if (/^error: /.test(line)) lastError = line.slice("error: ".length);
      else if (/startup sync failed|cannot open/.test(line)) lastError = line;
      if (line.trim()) this.log.info(`memory-core[${child.pid}]: ${line}`);
    });
    child.stdin.on("error", () => {}); // the child may be gone before we write or close
    child.on("error", (err) => {
      if (this.child !== child) return;
      this.child = null;
      this.pid = null;
      clearTimeout(deadline);
      const missing = err.code === "ENOENT";
      this._fail(missing ? `memory-core is not installed (cannot run ${command[0]})` : `cannot start ${command[0]} (${err.message})`,
        INSTALL_FIX);
    });
    child.on("exit", (code, signal) => {
      clearTimeout(deadline);
      if (this.child !== child) return;
      this.child = null;
      this.pid = null;
      this._lost = null;
      this.client?.close();
      this.client = null;
      if (this.stopping) {
        this.state = "stopped";
        return;
      }
      const how = signal ? `was killed by ${signal}` : `exited with code ${code}`;
      this._fail(`memory-core (pid ${child.pid}) ${how}${lastError ? `: ${lastError}` : ""}`,
        code === 2 ? "fix the memory-core config the plugin wrote (see the gateway log) or the plugin config"
          : "it is being restarted; if this repeats, see the gateway log");
    });
  }

  async _connect(url, token, child = null) {
    this.state = "starting";
    let client;
    try {
      client = await GatewayClient.open(url, { token });
    } catch (err) {
      if (child && this.child !== child) return;
      const fix = this.settings.url ? "check plugins.entries.memory-core-py.config.url and token and that `memory-core serve` runs there"
        : "it is being restarted";
      this._fail(`cannot connect to memory-core at ${url} (${err.message})`, fix);
      if (child) child.kill("SIGTERM");
      return;
    }
    const missing = REQUIRED_METHODS.filter((m) => !client.methods.includes(m));
    if (!client.serverVersion.startsWith("memory-core-") || missing.length) {
      client.close();
      this._fail(`${client.serverVersion || "the server"} at ${url} is not a memory-core this plugin supports`
        + (missing.length ? ` (it does not serve ${missing.join(", ")})` : ""),
        "upgrade memory-core (pip install -U memory-core) and rerun `memory-core plugin install`", { restart: false });
      if (child) {
        this.stopping = true;
        child.kill("SIGTERM");
      }
      return;
    }
    if (this.stopping || (child && this.child !== child)) {
      client.close();
      return;
    }
    this.client = client;
    client.onClose = () => {
      if (this.client !== client) return;
      this.client = null;
      if (this.stopping) return;
      if (this.settings.url) {
        this._fail(`lost the connection to memory-core at ${url}`, "reconnecting");
        return;
      }
      const child = this.child;
      if (!child) return;
      // a dying server drops its connections before Node reports its exit: until that report (or
      // EXIT_REPORT_MS, when the server lives and is reconnected to), we are not ready, and say why
      this._lost = child;
      this.state = "starting";
      this.problem = { error: `lost the connection to memory-core (pid ${child.pid})`,
        fix: "reconnecting, or restarting it if it has exited" };
      exitOf(child, EXIT_REPORT_MS).then((exited) => {
        if (exited || this.child !== child || this.stopping || this.client) return;
        this._lost = null;
        this._connect(url, token, child);
      });
    };
    // this server's health first: status() answers from it (provider, files) the moment we are ready
    await this.refreshHealth(client).catch(() => {});
    if (this.client !== client || this.stopping) return; // closed meanwhile: onClose has taken over
    this.state = "ready";
    this.problem = null;
    this._lost = null;
    this.restarts = 0;
    this.log.info(`memory-core: ready (${client.serverVersion}, ${url})`);
    this._notify();
  }

  /** Ask memory-core for every agent's health (doctor.memory.status), kept for status(). */
  async refreshHealth(client = this.ready ? this.client : null) {
    if (!client) return;
    await Promise.all(this.settings.agentIds.map(async (agentId) => {
      try {
        this.health.set(agentId, await client.call("doctor.memory.status", { agentId }, { timeoutMs: 15000 }));
      } catch {
        // kept from the last answer; a dead child is reported by describeProblem()
      }
    }));
  }

  async call(method, params, options) {
    if (!this.ready) throw new Error(this.describeProblem());
    return await this.client.call(method, params, options);
  }

  /** Stop the child (SIGTERM, then SIGKILL after 10 s) and wait for it to exit. */
  async stop() {
    this.stopping = true;
    clearTimeout(this._timer);
    this._timer = null;
    clearInterval(this._refresh);
    this._refresh = null;
    this.client?.close();
    this.client = null;
    const child = this.child;
    this.state = "stopped";
    this._notify();
    if (!child) return;
    const exited = new Promise((resolve) => child.once("exit", resolve));
    try { child.stdin.end(); } catch { /* gone */ }
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), 10000);
    await exited;
    clearTimeout(timer);
  }
}

export const INSTALL_FIX = "install memory-core (pip install memory-core), then run `memory-core plugin install` "
  + "(or set plugins.entries.memory-core-py.config.command to the memory-core command)";

const PROC_STAT = (() => {
  try {
    return fs.statSync("/proc/self/stat").isFile();
  } catch {
    return false;
  }
})();

/**
 * Whether process `pid` is ending or has ended as the kernel sees it now: gone, or its main thread a
 * zombie (after a SIGKILL the main thread goes first; the other threads, the open sockets and the
 * SIGCHLD follow, later on a loaded machine). Node reports a child's exit only once it has reaped it,
 * and the connection's close only when its last thread is gone: until then the event loop would serve
 * requests from the dead child's last health.
 */
export function processEnded(pid) {
  if (!pid) return false;
  if (PROC_STAT) {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
      return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) === "Z";
    } catch {
      return true;
    }
  }
  try {
    process.kill(pid, 0);
    return false;
  } catch (err) {
    return err.code === "ESRCH";
  }
}

/** Resolves true once `child` has exited (as Node reports it), false after `ms`. */
function exitOf(child, ms) {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(true);
  return new Promise((resolve) => {
    const onExit = () => {
      clearTimeout(timer);
      resolve(true);
    };
    const timer = setTimeout(() => {
      child.off("exit", onExit);
      resolve(false);
    }, ms);
    timer.unref?.();
    child.once("exit", onExit);
  });
}

function lines(stream, onLine) {
  let buffer = "";
  stream.setEncoding("utf8");
  stream.on("data", (chunk) => {
    buffer += chunk;
    let nl;
    while ((nl = buffer.indexOf("\n")) >= 0) {
      onLine(buffer.slice(0, nl));
      buffer = buffer.slice(nl + 1);
    }
  });
  stream.on("error", () => {});
}
