// What the host reads synchronously from the capability, so it cannot wait for memory-core: the
// memory prompt section, the pre-compaction flush plan and the tool contracts. Each is the JS twin
// of memory-core's own (memory_core/prompt_section.py, memory_core/flush_plan.py), which are
// upstream 2026.9.6's; tests/test_openclaw_plugin.py checks the twins give the same answers.

// ------------------------------------------------------------------ prompt section

export function buildPromptSection(availableTools, citationsMode = "auto") {
  const has = (name) => (availableTools instanceof Set ? availableTools.has(name) : [...availableTools].includes(name));
  const hasSearch = has("memory_search");
  const hasGet = has("memory_get");
  if (!hasSearch && !hasGet) return [];
  const guidance = hasSearch
    ? `Before answering anything about prior work, decisions, dates, people, preferences, or todos: run memory_search${hasGet ? "; for memory-file hits, use memory_get to pull only the needed lines" : ""}. If low confidence after search, say you checked.`
    : "Before answering anything about prior work, decisions, dates, people, preferences, or todos that point to a specific memory file: run memory_get to pull only the needed lines. If low confidence after reading, say you checked.";
  const sessionGuidance = !hasSearch ? [] : [
    has("sessions_search")
      ? `For session hits, use sessions_search with distinctive snippet text (and sessionKey set to the transcript ID when known)${has("sessions_history") ? ", then sessions_history with the returned sessionKey, messageId, and sessionId for a bounded sanitized excerpt" : "; exact session history is unavailable with the enabled tools"}.`
      : has("sessions_history")
        ? "For session hits, use sessions_history with a known session key or transcript ID and a small limit; paginate its returned history metadata to locate the excerpt."
        : "Session hits are search snippets only; exact session history is unavailable with the enabled tools.",
    "Session search line numbers are not history offsets. Never read raw transcript files to expand session hits.",
  ];
  return [
    "## Memory Recall",
    guidance,
    ...sessionGuidance,
    "Report partial, unavailable, or stale recall to the user, including returned warning and action guidance.",
    citationsMode === "off"
      ? "Citations are disabled: do not mention file paths or line numbers in replies unless the user explicitly asks."
      : "Citations: include Source: <path#line> when it helps the user verify memory snippets.",
    "",
  ];
}

// ------------------------------------------------------------------ flush plan

const SOFT_TOKENS = 4000;
const FORCE_TRANSCRIPT_BYTES = 2 * 1024 * 1024;
const RESERVE_TOKENS_FLOOR = 20000;
const MAX_RESERVE_RATIO = 0.25;
const SILENT = "NO_REPLY";
const TARGET_HINT = "Store durable memories only in memory/YYYY-MM-DD.md (create memory/ if needed).";
const APPEND_ONLY_HINT = "If memory/YYYY-MM-DD.md already exists, APPEND new content only and do not overwrite existing entries.";
const READ_ONLY_HINT = "Treat workspace bootstrap/reference files such as MEMORY.md, DREAMS.md, SOUL.md, and AGENTS.md as read-only during this flush; never overwrite, replace, or edit them.";
const REQUIRED_HINTS = [TARGET_HINT, APPEND_ONLY_HINT, READ_ONLY_HINT];
const FLUSH_PROMPT = ["Pre-compaction memory flush.", TARGET_HINT, READ_ONLY_HINT, APPEND_ONLY_HINT,
  "Do NOT create timestamped variant files (e.g., YYYY-MM-DD-HHMM.md); always use the canonical YYYY-MM-DD.md filename.",
  `If nothing to store, reply with ${SILENT}.`].join(" ");
const FLUSH_SYSTEM_PROMPT = ["Pre-compaction memory flush turn.",
  "The session is near auto-compaction; capture durable memories to disk.", TARGET_HINT, READ_ONLY_HINT,
  APPEND_ONLY_HINT, `You may reply, but usually ${SILENT} is correct.`].join(" ");

function nonNegativeInt(value) {
  return typeof value === "number" && Number.isFinite(value) && value >= 0 ? Math.floor(value) : null;
}

function byteSize(value) {
  if (typeof value === "number") return nonNegativeInt(value);
  if (typeof value !== "string") return null;
  const m = /^\s*(\d+(?:\.\d+)?)\s*(b|kb|k|mb|m|gb|g)?\s*$/i.exec(value);
  if (!m) return null;
  const unit = { b: 1, k: 1024, kb: 1024, m: 1024 ** 2, mb: 1024 ** 2, g: 1024 ** 3, gb: 1024 ** 3 }[(m[2] || "b").toLowerCase()];
  return Math.floor(Number(m[1]) * unit);
}

function parts(nowMs, timeZone) {
  const fmt = new Intl.DateTimeFormat("en-US", {
    timeZone, weekday: "long", month: "long", day: "numeric", year: "numeric", hour: "numeric",
    minute: "2-digit", hour12: true,
  });
  const out = {};
  for (const p of fmt.formatToParts(new Date(nowMs))) out[p.type] = p.value;
  const iso = new Intl.DateTimeFormat("en-CA", { timeZone, year: "numeric", month: "2-digit", day: "2-digit" })
    .format(new Date(nowMs));
  return { ...out, stamp: iso };
}

function ordinal(day) {
  if (day >= 11 && day <= 13) return "th";
  return { 1: "st", 2: "nd", 3: "rd" }[day % 10] ?? "th";
}

export function currentTimeLines(nowMs, timeZone) {
  const p = parts(nowMs, timeZone);
  const day = Number(p.day);
  const utc = new Date(nowMs).toISOString();
  return `Current time: ${p.weekday}, ${p.month} ${day}${ordinal(day)}, ${p.year} - ${p.hour}:${p.minute} ${p.dayPeriod} (${timeZone})\n`
    + `Reference UTC: ${utc.slice(0, 10)} ${utc.slice(11, 16)} UTC`;
}

function ensureNoReply(text) {
  return text.includes(SILENT) ? text : `${text}\n\nIf no user-visible reply is needed, start with ${SILENT}.`;
}

function ensureSafetyHints(text) {
  let out = text.trim();
  for (const hint of REQUIRED_HINTS) if (!out.includes(hint)) out = out ? `${out}\n\n${hint}` : hint;
  return out;
}

/** upstream buildMemoryFlushPlan({cfg, nowMs, contextWindowTokens}); null when the flush is disabled. */
export function buildFlushPlan(params = {}) {
  const cfg = params.cfg ?? {};
  const flush = cfg.agents?.defaults?.compaction?.memoryFlush;
  if (flush?.enabled === false) return null;
  const nowMs = typeof params.nowMs === "number" && Number.isFinite(params.nowMs) ? Math.floor(params.nowMs) : Date.now();
  let soft = nonNegativeInt(flush?.softThresholdTokens) ?? SOFT_TOKENS;
  const force = byteSize(flush?.forceFlushTranscriptBytes) ?? FORCE_TRANSCRIPT_BYTES;
  let reserve = RESERVE_TOKENS_FLOOR;
  const window = nonNegativeInt(params.contextWindowTokens);
  if (window !== null && window > 0) {
    reserve = Math.min(reserve, Math.floor(Math.max(1, window) * MAX_RESERVE_RATIO));
    soft = Math.min(soft, Math.floor((window - reserve) / 2));
  }
  const timeZone = cfg.agents?.defaults?.userTimezone || Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
  const stamp = parts(nowMs, timeZone).stamp;
  const prompt = ensureNoReply(ensureSafetyHints(FLUSH_PROMPT)).replaceAll("YYYY-MM-DD", stamp).trimEnd();
  const model = typeof flush?.model === "string" && flush.model.trim() ? flush.model.trim() : undefined;
  return {
    softThresholdTokens: soft,
    forceFlushTranscriptBytes: force,
    reserveTokensFloor: reserve,
    ...(model ? { model } : {}),
    prompt: prompt.includes("Current time:") ? prompt : `${prompt}\n${currentTimeLines(nowMs, timeZone)}`,
    systemPrompt: ensureNoReply(ensureSafetyHints(FLUSH_SYSTEM_PROMPT)).replaceAll("YYYY-MM-DD", stamp),
    relativePath: `memory/${stamp}.md`,
  };
}

// ------------------------------------------------------------------ tool contracts (upstream's)

export const SEARCH_SCHEMA = {
  type: "object",
  properties: {
    query: { type: "string" },
    maxResults: { type: "integer", minimum: 1 },
    minScore: { type: "number" },
    corpus: { type: "string", enum: ["memory", "wiki", "all", "sessions"] },
  },
  required: ["query"],
  additionalProperties: false,
};

export const GET_SCHEMA = {
  type: "object",
  properties: {
    path: { type: "string" },
    from: { type: "integer", minimum: 1 },
    lines: { type: "integer", minimum: 1 },
    corpus: { type: "string", enum: ["memory", "wiki", "all"] },
  },
  required: ["path"],
  additionalProperties: false,
};

const CORPUS_GUIDANCE = "Corpus outcomes cover each requested corpus; a corpus warning means results are partial and must be surfaced to the user.";
const GET_GUIDANCE = "status=ok means the requested excerpt was read; status=not_found means every requested available corpus missed; status=error means the requested read failed, not that memory is disabled.";

/** resolveMemorySourceContract: what the descriptions say the tools cover. */
export function sourceContract({ extraPaths = [], sources = ["memory"] } = {}) {
  const files = ["MEMORY.md, USER.md, Markdown files recursively under memory/", extraPaths.length > 0 ? "configured extra paths" : ""]
    .filter(Boolean).join(", ");
  return { files, search: sources.includes("sessions") ? `${files}, indexed session transcripts` : files };
}

export function searchDescription({ search }) {
  return `Mandatory recall step: semantically search ${search} before answering questions about prior work, decisions, dates, people, preferences, or todos. Session results are transcript search references, not readable memory-file paths. Optional \`corpus=wiki\` or \`corpus=all\` also searches registered compiled-wiki supplements. \`corpus=memory\` restricts hits to indexed memory files (excludes session transcript chunks from ranking). \`corpus=sessions\` searches indexed session transcripts under the same visibility rules as session history tools and returns unavailable when semantic session indexing is disabled. ${CORPUS_GUIDANCE} If response has disabled=true or stale=true, tell the user and include the warning/action guidance.`;
}

export function getDescription({ files }) {
  return `Safe exact excerpt read from ${files}. Session transcript paths are unsupported; use the available session-history workflow for session hits. Defaults to a bounded excerpt when lines are omitted and includes truncation/continuation info when more content exists. \`corpus=wiki\` reads registered compiled-wiki supplements. ${GET_GUIDANCE} ${CORPUS_GUIDANCE}`;
}

/** buildMemorySearchUnavailableResult for a memory-core that cannot answer (not started, dead, too old). */
export function searchUnavailable(error) {
  const warning = "Memory search is unavailable due to an embedding/provider error.";
  const action = "Check embedding provider configuration and retry memory_search.";
  return { results: [], disabled: true, unavailable: true, error, warning, action, debug: { warning, action, error } };
}

export function jsonResult(payload) {
  return { content: [{ type: "text", text: JSON.stringify(payload, null, 2) }], details: payload };
}
