"""Session transcript flattening (upstream `host/session-files.ts`); pure, streams lines.

A JSONL transcript becomes ``User: ...`` / ``Assistant: ...`` lines with a map back to the 1-based
JSONL line numbers. Filters follow upstream's default host services: system wrappers, cron prompts,
heartbeat prompts and ``HEARTBEAT_OK`` acks, silent replies (``NO_REPLY``), exec completion events,
inter-session user messages and inbound metadata envelopes are dropped.

Documented choices:
- ``redactSensitiveText`` and ``stripInternalRuntimeContext`` are the identity, as in upstream's
  default host services, so content hashes match upstream for the same transcript.
- Lone UTF-16 surrogates (from ``\\ud800`` escapes) become U+FFFD in the output text; hashes are
  unaffected because Node hashes them as U+FFFD too.
- Timestamps are ints when integral (the usual case) and floats otherwise, and are formatted like
  JavaScript numbers in the hash. ISO strings without an offset are read as UTC.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Iterable

from host_facades.chunking.pipeline import hash_text

__all__ = [
    "FlattenedSession",
    "flatten_session_lines",
    "HEARTBEAT_TOKEN",
    "HEARTBEAT_PROMPT",
    "SILENT_REPLY_TOKEN",
    "SESSION_EXPORT_CONTENT_WRAP_CHARS",
    "EMPTY_SESSION_HASH",
    "is_compaction_checkpoint_name",
    "is_session_archive_name",
    "is_usage_counted_transcript_name",
    "is_usage_counted_archive_name",
]

HEARTBEAT_TOKEN = "HEARTBEAT_OK"
SILENT_REPLY_TOKEN = "NO_REPLY"
HEARTBEAT_PROMPT = "Run the following periodic tasks (only those due based on their intervals):"
SESSION_EXPORT_CONTENT_WRAP_CHARS = 800
MAX_DATE_TIMESTAMP_MS = 8_640_000_000_000_000
DREAMING_NARRATIVE_RUN_PREFIX = "dreaming-narrative-"
EMPTY_SESSION_HASH = hash_text("\n\n")  # upstream's hash of a skipped (empty) transcript

_JS_WS = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_JS_S_RUN = re.compile("[\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff]+")
_LONE_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_ASTRAL_RE = re.compile("[\U00010000-\U0010ffff]")

_GENERATED_SYSTEM_MESSAGE_RE = re.compile(r"System(?: \(untrusted\))?: \[[^\]]+\]" + "[" + _JS_WS + "]*")
_DIRECT_CRON_PROMPT_RE = re.compile(r"\[cron:[^\]]+\]")
_EXEC_FINISHED_RE = re.compile(r"exec finished(?::|[" + _JS_WS + r"]*\()")
_EXEC_DONE_RE = re.compile(r"exec (completed|failed) \([a-z0-9_-]{1,64}, (code -?[0-9]+|signal [^)]+)\)( :: [^\n\r\u2028\u2029]*)?\Z")
_SILENT_RE = re.compile(re.escape(SILENT_REPLY_TOKEN) + r"\Z", re.I)
_LEADING_TIMESTAMP_PREFIX_RE = re.compile(r"\[[A-Za-z]{3} [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}[^\]]*\] *")
_INBOUND_META_SENTINELS = (
    "Conversation info (untrusted metadata):",
    "Sender (untrusted metadata):",
    "Thread starter (untrusted, for context):",
    "Replied message (untrusted, for context):",
    "Forwarded message context (untrusted metadata):",
    "Chat history since last reply (untrusted, for context):",
)
_CRON_RUN_REST_RE = re.compile(r"cron:[^:]+:run:[^:]+\Z")
_ARCHIVE_TIMESTAMP_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}-[0-9]{2}-[0-9]{2}(?:\.[0-9]{3})?Z\Z")
_LEGACY_STORE_BACKUP_RE = re.compile(r"sessions\.json\.bak\.[0-9]+\Z")
_CHECKPOINT_RE = re.compile(
    r"(.+)\.checkpoint\.([0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12})\.jsonl\Z", re.I
)


# --- file names ---------------------------------------------------------------------------------


def _has_archive_suffix(name: str, reason: str) -> bool:
    marker = f".{reason}."
    index = name.rfind(marker)
    return index >= 0 and _ARCHIVE_TIMESTAMP_RE.match(name[index + len(marker) :]) is not None


def is_session_archive_name(name: str) -> bool:
    """``.deleted.<iso>``, ``.reset.<iso>``, ``.bak.<iso>`` archives and legacy store backups."""
    return (
        _LEGACY_STORE_BACKUP_RE.match(name) is not None
        or _has_archive_suffix(name, "deleted")
        or _has_archive_suffix(name, "reset")
        or _has_archive_suffix(name, "bak")
    )


def is_compaction_checkpoint_name(name: str) -> bool:
    return _CHECKPOINT_RE.match(name) is not None


def _is_primary_transcript_name(name: str) -> bool:
    return (
        name != "sessions.json"
        and name.endswith(".jsonl")
        and not name.endswith(".trajectory.jsonl")
        and not is_compaction_checkpoint_name(name)
        and not is_session_archive_name(name)
    )


def is_usage_counted_transcript_name(name: str) -> bool:
    """Live ``*.jsonl`` transcripts plus ``.jsonl.reset.<iso>`` / ``.jsonl.deleted.<iso>`` archives."""
    return _is_primary_transcript_name(name) or _has_archive_suffix(name, "reset") or _has_archive_suffix(name, "deleted")


def is_usage_counted_archive_name(name: str) -> bool:
    if not (is_usage_counted_transcript_name(name) and is_session_archive_name(name)):
        return False
    for reason in ("reset", "deleted"):
        index = name.rfind(f".jsonl.{reason}.")
        if index > 0 and _has_archive_suffix(name, reason):
            return True
    return False


# --- text filters -------------------------------------------------------------------------------


def _normalize(text: str) -> str:
    return _JS_S_RUN.sub(" ", text).strip(_JS_WS)


def _strip_inbound_metadata(text: str) -> str:
    if not text:
        return text
    without = _LEADING_TIMESTAMP_PREFIX_RE.sub("", text, count=1)
    if not any(s in without for s in _INBOUND_META_SENTINELS):
        return without
    result: list[str] = []
    in_meta = in_fence = False
    for line in without.split("\n"):
        stripped = line.strip(_JS_WS)
        if not in_meta and stripped in _INBOUND_META_SENTINELS:
            in_meta, in_fence = True, False
            continue
        if in_meta:
            if not in_fence and stripped == "```json":
                in_fence = True
                continue
            if in_fence:
                if stripped == "```":
                    in_meta = in_fence = False
                continue
            if stripped == "":
                continue
            in_meta = False
        result.append(line)
    return "\n".join(result).lstrip("\n").rstrip("\n")


def _is_exec_completion(text: str) -> bool:
    normalized = text.strip(_JS_WS).lower()
    return _EXEC_FINISHED_RE.match(normalized) is not None or _EXEC_DONE_RE.match(normalized) is not None


def _reject_constant(_: str) -> Any:
    raise ValueError("non-standard JSON constant")


def _is_silent_reply(text: str) -> bool:
    trimmed = text.strip(_JS_WS)
    if not trimmed:
        return False
    if _SILENT_RE.match(trimmed):
        return True
    if not (trimmed.startswith("{") and trimmed.endswith("}") and SILENT_REPLY_TOKEN in trimmed):
        return False
    try:
        parsed = json.loads(trimmed, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return False
    return (
        isinstance(parsed, dict)
        and len(parsed) == 1
        and isinstance(parsed.get("action"), str)
        and parsed["action"].strip(_JS_WS) == SILENT_REPLY_TOKEN
    )


def _sanitize(text: str, role: str) -> str | None:
    if role == "user":
        text = _strip_inbound_metadata(text)
    normalized = _normalize(text)
    if not normalized:
        return None
    if role == "user" and (
        _GENERATED_SYSTEM_MESSAGE_RE.match(normalized)
        or _DIRECT_CRON_PROMPT_RE.match(normalized)
        or normalized.startswith(HEARTBEAT_PROMPT)
    ):
        return None
    if _is_silent_reply(normalized):
        return None
    if role == "assistant" and normalized == HEARTBEAT_TOKEN:
        return None
    if _is_exec_completion(_GENERATED_SYSTEM_MESSAGE_RE.sub("", normalized, count=1).strip(_JS_WS)):
        return None
    return normalized


def _collect_raw_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    parts = [
        b["text"]
        for b in content
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    ]
    return "\n".join(parts) if parts else None


def _split_long_line(text: str, max_units: int = SESSION_EXPORT_CONTENT_WRAP_CHARS) -> list[str]:
    """Wrap at spaces into pieces of at most ``max_units`` UTF-16 units, as upstream does."""
    normalized = text.strip(_JS_WS)
    if not normalized:
        return []
    astral = not normalized.isascii() and _ASTRAL_RE.search(normalized) is not None
    if astral:
        # Work on one Python char per UTF-16 unit, then re-join surrogate pairs.
        data = normalized.encode("utf-16-le", "surrogatepass")
        t = "".join(chr(int.from_bytes(data[i : i + 2], "little")) for i in range(0, len(data), 2))
    else:
        t = normalized
    n = len(t)
    if n <= max_units:
        return [normalized]
    segments: list[str] = []
    cursor = 0
    while cursor < n:
        if n - cursor <= max_units:
            segments.append(t[cursor:].strip(_JS_WS))
            break
        limit = cursor + max_units
        space = t.rfind(" ", cursor + 1, limit + 1)
        split_at = space if space >= 0 else limit
        if (
            split_at < n
            and split_at > cursor
            and "\ud800" <= t[split_at - 1] <= "\udbff"
            and "\udc00" <= t[split_at] <= "\udfff"
        ):
            split_at -= 1
        segments.append(t[cursor:split_at].strip(_JS_WS))
        cursor = split_at
        while cursor < n and t[cursor] == " ":
            cursor += 1
    if astral:
        segments = [s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass") for s in segments]
    return [s for s in segments if s]


def _parse_timestamp(record: dict, message: dict) -> int | float:
    for value in (message.get("timestamp"), record.get("timestamp")):
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)) and math.isfinite(value):
            ms = value * 1000 if 0 < value < 1e11 else value
            if math.isfinite(ms) and 0 < ms <= MAX_DATE_TIMESTAMP_MS:
                return int(ms) if float(ms).is_integer() else float(ms)
        if isinstance(value, str):
            parsed = _parse_date_string(value)
            if parsed is not None and parsed > 0:
                return parsed
    return 0


def _parse_date_string(value: str) -> int | None:
    s = value.strip()
    if not s:
        return None
    dt: datetime | None = None
    try:
        dt = datetime.fromisoformat(s[:-1] + "+00:00" if s.endswith(("Z", "z")) else s)
    except ValueError:
        try:
            dt = parsedate_to_datetime(s)
        except (TypeError, ValueError, IndexError):
            return None
    if dt is None:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    try:
        delta = dt - datetime(1970, 1, 1, tzinfo=timezone.utc)
    except (OverflowError, ValueError):
        return None
    return (delta.days * 86_400_000) + (delta.seconds * 1000) + (delta.microseconds // 1000)


def _js_number(v: int | float) -> str:
    if isinstance(v, int):
        return str(v)
    if v.is_integer() and abs(v) < 1e21:
        return str(int(v))
    return repr(v)


def _starts_with_dreaming(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(DREAMING_NARRATIVE_RUN_PREFIX)


def _is_dreaming_record(record: dict) -> bool:
    data = record.get("data")
    if (
        record.get("type") == "custom"
        and record.get("customType") == "openclaw:bootstrap-context:full"
        and isinstance(data, dict)
        and _starts_with_dreaming(data.get("runId"))
    ):
        return True
    if _starts_with_dreaming(record.get("runId")) or _starts_with_dreaming(record.get("sessionKey")):
        return True
    return isinstance(data, dict) and (
        _starts_with_dreaming(data.get("runId")) or _starts_with_dreaming(data.get("sessionKey"))
    )


def _is_cron_run_key(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    parts = [p for p in value.strip(_JS_WS).lower().split(":") if p]
    if len(parts) < 3 or parts[0] != "agent" or not parts[1]:
        return False
    return _CRON_RUN_REST_RE.match(":".join(parts[2:])) is not None


def _is_cron_record(record: dict) -> bool:
    if _is_cron_run_key(record.get("sessionKey")):
        return True
    data = record.get("data")
    return isinstance(data, dict) and _is_cron_run_key(data.get("sessionKey"))


# --- flattening ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlattenedSession:
    """Flattened transcript: content lines, their JSONL line numbers and timestamps (ms, 0 = unknown)."""

    content: str
    line_map: tuple[int, ...]
    timestamps: tuple[int, ...]
    skipped_lines: int
    messages: int
    hash: str
    generated_by_dreaming_narrative: bool = False
    generated_by_cron_run: bool = False


def _session_hash(pieces: list[str], content: str, line_map: list[int], stamps: list[Any]) -> str:
    """``hash_text(content + "\n" + lineMap + "\n" + timestamps)`` fed to sha256 piece by piece, so a
    large transcript is not copied twice more (concatenation + UTF-8 encoding) just to be hashed."""
    h = hashlib.sha256()
    try:
        for i, piece in enumerate(pieces):
            if i:
                h.update(b"\n")
            h.update(piece.encode("utf-8"))
    except UnicodeEncodeError:  # lone surrogates: let hash_text apply its U+FFFD rule
        return hash_text(content + "\n" + ",".join(map(str, line_map)) + "\n" + ",".join(map(_js_number, stamps)))
    h.update(b"\n" + ",".join(map(str, line_map)).encode("ascii"))
    h.update(b"\n" + ",".join(map(_js_number, stamps)).encode("utf-8"))
    return h.hexdigest()


def flatten_session_lines(
    lines: Iterable[str | bytes],
    *,
    archive: bool = False,
    generated_by_dreaming_narrative: bool = False,
    generated_by_cron_run: bool = False,
) -> FlattenedSession:
    """Flatten JSONL lines (upstream `host/session-files.ts`). ``archive``: the file is a
    ``.reset``/``.deleted`` archive, whose
    content may reveal a cron run. Malformed JSON lines are skipped and counted; never raises on
    odd records."""
    collected: list[str] = []
    # Output lines are joined in blocks as they come, so a large transcript is not held as a
    # list of small strings next to its joined content (peak memory).
    blocks: list[str] = []
    line_map: list[int] = []
    stamps: list[int | float] = []
    skipped = 0
    messages = 0
    dreaming = generated_by_dreaming_narrative
    cron = generated_by_cron_run
    for index, raw in enumerate(lines):
        if isinstance(raw, (bytes, bytearray)):
            raw = bytes(raw).decode("utf-8", "replace")
        line = raw[:-1] if raw.endswith("\n") else raw
        if not line.strip(_JS_WS):
            continue
        try:
            record = json.loads(line, parse_constant=_reject_constant)
        except (ValueError, RecursionError):
            skipped += 1
            continue
        if not isinstance(record, dict):
            continue
        if not dreaming and _is_dreaming_record(record):
            dreaming = True
        if not cron and archive and _is_cron_record(record):
            cron = True
            collected.clear()
            blocks.clear()
            line_map.clear()
            stamps.clear()
        if record.get("type") != "message":
            continue
        message = record.get("message")
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role not in ("user", "assistant"):
            continue
        if role == "user":
            prov = message.get("provenance")
            if isinstance(prov, dict) and prov.get("kind") == "inter_session":
                continue
        raw_text = _collect_raw_text(message.get("content"))
        if raw_text is None:
            continue
        if not cron and archive and role == "user" and _DIRECT_CRON_PROMPT_RE.match(_normalize(raw_text)):
            cron = True
            collected.clear()
            blocks.clear()
            line_map.clear()
            stamps.clear()
        text = _sanitize(raw_text, role)
        if not text or dreaming or cron:
            continue
        if not text.isascii() and _LONE_SURROGATE_RE.search(text):
            text = _LONE_SURROGATE_RE.sub("\ufffd", text)
        label = "User" if role == "user" else "Assistant"
        rendered = [f"{label}: {seg}" for seg in _split_long_line(text)]
        if not rendered:
            continue
        ts = _parse_timestamp(record, message)
        messages += 1
        collected.extend(rendered)
        if len(collected) >= 2048:
            blocks.append("\n".join(collected))
            collected.clear()
        line_map.extend([index + 1] * len(rendered))
        stamps.extend([ts] * len(rendered))
    if collected:
        blocks.append("\n".join(collected))
        collected.clear()
    content = "\n".join(blocks)
    digest = _session_hash(blocks, content, line_map, stamps)
    return FlattenedSession(
        content=content,
        line_map=tuple(line_map),
        timestamps=tuple(stamps),  # type: ignore[arg-type]
        skipped_lines=skipped,
        messages=messages,
        hash=digest,
        generated_by_dreaming_narrative=dreaming,
        generated_by_cron_run=cron,
    )
