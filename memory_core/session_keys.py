"""Session keys as the CLI and the library take them, mapped to the indexed ``sessions/<file>`` path
(pure; imported by ``forget`` at CLI start, so it stays free of the engine's dependencies)."""

from __future__ import annotations

from memory_core.errors import ForgetRefused, InvalidRequest


def session_index_path(key: str) -> str:
    """The indexed path ``sessions/<file>`` for a session key, file name or transcript path.

    Raises :class:`ForgetRefused` for a memory file and :class:`InvalidRequest` for an empty key.
    """
    raw = (key or "").strip().replace("\\", "/")
    if not raw:
        raise InvalidRequest("--session needs a session key or transcript file name, e.g. --session 3f2a.jsonl")
    base = raw.rstrip("/").rsplit("/", 1)[-1]
    lowered = raw.lower()
    if (
        lowered.endswith(".md")
        or lowered.startswith("memory/")
        or "/memory/" in lowered
        or base in ("MEMORY.md", "memory.md", "USER.md")
    ):
        raise ForgetRefused(
            f"{raw} is a memory file: memory files are not forgotten, they are edited. Edit or delete {raw} "
            "(remove the entries you want gone); the next sync removes them from the index"
        )
    if not base.endswith(".jsonl") and ".jsonl." not in base:
        base += ".jsonl"
    return f"sessions/{base}"
