"""Memory Core's pre-compaction flush plan (the file arm of upstream ``buildMemoryFlushPlan``).

:func:`build_memory_flush_plan` answers what the released OpenClaw 2026.9.6 resolver answers for the
same settings and clock (``extensions/memory-core/src/flush-plan.ts`` with ``resolveCronStyleNow``):
the day's note ``memory/YYYY-MM-DD.md`` in the configured time zone, the flush prompt ending in the
current-time lines, the system prompt, and the thresholds; ``None`` when ``compaction.memoryFlush.enabled``
is false. Upstream reads the 12/24-hour preference from the host locale; memory-core always uses the
12-hour form (what an en-US host gets).
"""

from __future__ import annotations

import math
import os
import time
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

DEFAULT_MEMORY_FLUSH_SOFT_TOKENS = 4000
DEFAULT_MEMORY_FLUSH_FORCE_TRANSCRIPT_BYTES = 2 * 1024 * 1024
DEFAULT_AGENT_COMPACTION_RESERVE_TOKENS_FLOOR = 20_000
MAX_COMPACTION_RESERVE_RATIO = 0.25
SILENT_REPLY_TOKEN = "NO_REPLY"

MEMORY_FLUSH_TARGET_HINT = "Store durable memories only in memory/YYYY-MM-DD.md (create memory/ if needed)."
MEMORY_FLUSH_APPEND_ONLY_HINT = ("If memory/YYYY-MM-DD.md already exists, APPEND new content only and do not "
                                 "overwrite existing entries.")
MEMORY_FLUSH_READ_ONLY_HINT = ("Treat workspace bootstrap/reference files such as MEMORY.md, DREAMS.md, SOUL.md, "
                               "and AGENTS.md as read-only during this flush; never overwrite, replace, or edit them.")
MEMORY_FLUSH_REQUIRED_HINTS = (MEMORY_FLUSH_TARGET_HINT, MEMORY_FLUSH_APPEND_ONLY_HINT, MEMORY_FLUSH_READ_ONLY_HINT)
DEFAULT_MEMORY_FLUSH_PROMPT = " ".join([
    "Pre-compaction memory flush.",
    MEMORY_FLUSH_TARGET_HINT,
    MEMORY_FLUSH_READ_ONLY_HINT,
    MEMORY_FLUSH_APPEND_ONLY_HINT,
    "Do NOT create timestamped variant files (e.g., YYYY-MM-DD-HHMM.md); always use the canonical "
    "YYYY-MM-DD.md filename.",
    f"If nothing to store, reply with {SILENT_REPLY_TOKEN}.",
])
DEFAULT_MEMORY_FLUSH_SYSTEM_PROMPT = " ".join([
    "Pre-compaction memory flush turn.",
    "The session is near auto-compaction; capture durable memories to disk.",
    MEMORY_FLUSH_TARGET_HINT,
    MEMORY_FLUSH_READ_ONLY_HINT,
    MEMORY_FLUSH_APPEND_ONLY_HINT,
    f"You may reply, but usually {SILENT_REPLY_TOKEN} is correct.",
])


class MemoryFlushPlan(BaseModel):
    """Upstream ``MemoryFlushPlan`` (camelCase on the wire, ``model`` omitted when unset)."""

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)

    soft_threshold_tokens: int
    force_flush_transcript_bytes: int
    reserve_tokens_floor: int
    model: str | None = None
    prompt: str
    system_prompt: str
    relative_path: str

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


def host_timezone() -> str:
    """The host's IANA zone name (upstream: ``Intl...resolvedOptions().timeZone``), else ``UTC``."""
    candidates = [os.environ.get("TZ", "").lstrip(":")]
    try:
        with open("/etc/timezone", encoding="utf-8") as fh:
            candidates.append(fh.read().strip())
    except OSError:
        pass
    link = os.path.realpath("/etc/localtime")
    if "/zoneinfo/" in link:
        candidates.append(link.split("/zoneinfo/", 1)[1])
    for name in candidates:
        if name:
            try:
                ZoneInfo(name)
                return name
            except (ValueError, KeyError, OSError):
                continue
    return "UTC"


def _ordinal(day: int) -> str:
    if 11 <= day <= 13:
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")


def current_time_lines(now_ms: int, timezone: str) -> str:
    """``resolveCronStyleNow(...).timeLine``: the local time (12-hour) and the UTC reference line."""
    local = datetime.fromtimestamp(now_ms / 1000, ZoneInfo(timezone))
    hour = local.hour % 12 or 12
    formatted = (f"{local:%A}, {local:%B} {local.day}{_ordinal(local.day)}, {local.year} - "
                 f"{hour}:{local:%M} {'AM' if local.hour < 12 else 'PM'}")
    utc = datetime.fromtimestamp(now_ms / 1000, UTC)
    return f"Current time: {formatted} ({timezone})\nReference UTC: {utc:%Y-%m-%d %H:%M} UTC"


def _ensure_no_reply_hint(text: str) -> str:
    if SILENT_REPLY_TOKEN in text:
        return text
    return f"{text}\n\nIf no user-visible reply is needed, start with {SILENT_REPLY_TOKEN}."


def _ensure_safety_hints(text: str) -> str:
    out = text.strip()
    for hint in MEMORY_FLUSH_REQUIRED_HINTS:
        if hint not in out:
            out = f"{out}\n\n{hint}" if out else hint
    return out


def _append_current_time(text: str, time_lines: str) -> str:
    trimmed = text.rstrip()
    if not trimmed:
        return time_lines
    if "Current time:" in trimmed:
        return trimmed
    return f"{trimmed}\n{time_lines}"


def _now_ms(now_ms: float | None) -> int:
    if isinstance(now_ms, (int, float)) and not isinstance(now_ms, bool) and math.isfinite(now_ms):
        return int(now_ms)
    return int(time.time() * 1000)


def build_memory_flush_plan(config: Any, now_ms: float | None = None, *,
                            context_window_tokens: int | None = None) -> MemoryFlushPlan | None:
    """The flush plan for ``config`` at ``now_ms`` (epoch ms; None = now); None when flushing is off.

    ``context_window_tokens`` (the model's window) caps the reserve at a quarter of it and the soft
    threshold at half of what the reserve leaves, as upstream does.
    """
    flush = config.compaction.memory_flush
    if not flush.enabled:
        return None
    now = _now_ms(now_ms)
    soft = DEFAULT_MEMORY_FLUSH_SOFT_TOKENS if flush.soft_threshold_tokens is None else int(flush.soft_threshold_tokens)
    force_bytes = (DEFAULT_MEMORY_FLUSH_FORCE_TRANSCRIPT_BYTES if flush.force_flush_transcript_bytes is None
                   else int(flush.force_flush_transcript_bytes))
    reserve = DEFAULT_AGENT_COMPACTION_RESERVE_TOKENS_FLOOR
    if context_window_tokens is not None and context_window_tokens > 0:
        window = int(context_window_tokens)
        reserve = min(reserve, math.floor(max(1, window) * MAX_COMPACTION_RESERVE_RATIO))
        soft = min(soft, (window - reserve) // 2)
    timezone = config.user_timezone or host_timezone()
    stamp = datetime.fromtimestamp(now / 1000, ZoneInfo(timezone)).strftime("%Y-%m-%d")
    prompt = _ensure_no_reply_hint(_ensure_safety_hints(DEFAULT_MEMORY_FLUSH_PROMPT))
    system_prompt = _ensure_no_reply_hint(_ensure_safety_hints(DEFAULT_MEMORY_FLUSH_SYSTEM_PROMPT))
    return MemoryFlushPlan(
        soft_threshold_tokens=soft,
        force_flush_transcript_bytes=force_bytes,
        reserve_tokens_floor=reserve,
        model=(flush.model or "").strip() or None,
        prompt=_append_current_time(prompt.replace("YYYY-MM-DD", stamp), current_time_lines(now, timezone)),
        system_prompt=system_prompt.replace("YYYY-MM-DD", stamp),
        relative_path=f"memory/{stamp}.md",
    )
