"""Memory Core's memory prompt section (upstream ``buildMemoryPromptSection``, OpenClaw 2026.9.6).

:func:`build_prompt_section` returns the system-prompt lines telling the agent which memory tools
exist, when to search and how to cite, from the tools the host made available and the configured
``citations`` mode; ``[]`` when neither ``memory_search`` nor ``memory_get`` is available.
"""

from __future__ import annotations

from collections.abc import Collection

OUTCOME_GUIDANCE = "Report partial, unavailable, or stale recall to the user, including returned warning and action guidance."
CITATIONS_OFF = ("Citations are disabled: do not mention file paths or line numbers in replies unless the user "
                 "explicitly asks.")
CITATIONS_ON = "Citations: include Source: <path#line> when it helps the user verify memory snippets."


def _session_guidance(tools: Collection[str]) -> list[str]:
    if "sessions_search" in tools:
        follow = (", then sessions_history with the returned sessionKey, messageId, and sessionId for a bounded "
                  "sanitized excerpt" if "sessions_history" in tools
                  else "; exact session history is unavailable with the enabled tools")
        first = ("For session hits, use sessions_search with distinctive snippet text (and sessionKey set to the "
                 f"transcript ID when known){follow}.")
    elif "sessions_history" in tools:
        first = ("For session hits, use sessions_history with a known session key or transcript ID and a small "
                 "limit; paginate its returned history metadata to locate the excerpt.")
    else:
        first = "Session hits are search snippets only; exact session history is unavailable with the enabled tools."
    return [first, "Session search line numbers are not history offsets. Never read raw transcript files to "
                   "expand session hits."]


def build_prompt_section(available_tools: Collection[str], citations_mode: str = "auto") -> list[str]:
    """The memory section's lines (the last one empty), or ``[]`` without a memory tool."""
    has_search = "memory_search" in available_tools
    has_get = "memory_get" in available_tools
    if not has_search and not has_get:
        return []
    if has_search:
        get_hint = "; for memory-file hits, use memory_get to pull only the needed lines" if has_get else ""
        guidance = ("Before answering anything about prior work, decisions, dates, people, preferences, or todos: "
                    f"run memory_search{get_hint}. If low confidence after search, say you checked.")
    else:
        guidance = ("Before answering anything about prior work, decisions, dates, people, preferences, or todos "
                    "that point to a specific memory file: run memory_get to pull only the needed lines. If low "
                    "confidence after reading, say you checked.")
    return [
        "## Memory Recall",
        guidance,
        *(_session_guidance(available_tools) if has_search else []),
        OUTCOME_GUIDANCE,
        CITATIONS_OFF if citations_mode == "off" else CITATIONS_ON,
        "",
    ]
