// A protocol-4 client of `memory-core serve` over Node's global WebSocket: connect once (answering the
// challenge with the token), then any number of concurrent requests matched by id.

import { randomUUID } from "node:crypto";

export class GatewayCallError extends Error {
  constructor(error) {
    super(error?.message || "memory-core request failed");
    this.code = error?.code;
    this.details = error?.details;
  }
}

const CLIENT = { id: "gateway-client", version: "2026.9.6", platform: process.platform, mode: "backend" };

export class GatewayClient {
  /** Open a connection and finish the handshake; rejects with the server's error or a timeout. */
  static open(url, { token, scopes = ["operator.read", "operator.write"], timeoutMs = 10000 } = {}) {
    return new Promise((resolve, reject) => {
      let ws;
      try {
        ws = new WebSocket(url);
      } catch (err) {
        reject(err);
        return;
      }
      const client = new GatewayClient(ws);
      const timer = setTimeout(() => {
        reject(new Error(`memory-core at ${url} did not finish the handshake within ${timeoutMs} ms`));
        try { ws.close(); } catch { /* closing anyway */ }
      }, timeoutMs);
      timer.unref?.();
      ws.addEventListener("error", () => {
        clearTimeout(timer);
        reject(new Error(`cannot connect to memory-core at ${url}`));
      });
      ws.addEventListener("close", () => {
        clearTimeout(timer);
        client._fail(new Error("memory-core connection closed"));
        reject(new Error(`memory-core at ${url} closed the connection during the handshake`));
      });
      ws.addEventListener("message", (event) => {
        let frame;
        try {
          frame = JSON.parse(typeof event.data === "string" ? event.data : String(event.data));
        } catch {
          return;
        }
        if (frame.type === "event" && frame.event === "connect.challenge") {
          const params = {
            minProtocol: 4, maxProtocol: 4, client: { ...CLIENT, instanceId: randomUUID() }, caps: [],
            role: "operator", scopes, ...(token ? { auth: { token } } : {}),
          };
          client._request("connect", params).then((hello) => {
            clearTimeout(timer);
            client.hello = hello;
            resolve(client);
          }, (err) => {
            clearTimeout(timer);
            reject(err);
          });
          return;
        }
        if (frame.type === "res") client._settle(frame);
      });
    });
  }

  constructor(ws) {
    this.ws = ws;
    this.hello = null;
    this.pending = new Map();
    this.closed = false;
    this.onClose = null;
    ws.addEventListener("close", () => {
      this.closed = true;
      this._fail(new Error("memory-core connection closed"));
      this.onClose?.();
    });
  }

  get serverVersion() {
    return this.hello?.server?.version ?? "";
  }

  get methods() {
    return this.hello?.features?.methods ?? [];
  }

  /** One request: resolves with the payload, rejects with GatewayCallError (or a timeout). */
  call(method, params = {}, { timeoutMs = 60000 } = {}) {
    if (this.closed) return Promise.reject(new Error("memory-core connection closed"));
    return this._request(method, params, timeoutMs);
  }

  _request(method, params, timeoutMs = 60000) {
    const id = randomUUID();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`memory-core did not answer ${method} within ${timeoutMs} ms`));
      }, timeoutMs);
      timer.unref?.();
      this.pending.set(id, { resolve, reject, timer });
      try {
        this.ws.send(JSON.stringify({ type: "req", id, method, params }));
      } catch (err) {
        clearTimeout(timer);
        this.pending.delete(id);
        reject(err);
      }
    });
  }

  _settle(frame) {
    const entry = this.pending.get(frame.id);
    if (!entry) return;
    this.pending.delete(frame.id);
    clearTimeout(entry.timer);
    if (frame.ok) entry.resolve(frame.payload);
    else entry.reject(new GatewayCallError(frame.error));
  }

  _fail(err) {
    for (const [id, entry] of this.pending) {
      clearTimeout(entry.timer);
      entry.reject(err);
      this.pending.delete(id);
    }
  }

  close() {
    this.closed = true;
    try { this.ws.close(); } catch { /* already closed */ }
  }
}
