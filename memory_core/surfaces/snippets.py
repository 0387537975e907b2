"""How the CLI shows a hit's text: the lines around the query's matches, cuts marked with "…",
query terms highlighted on a terminal. Pure functions; the hit's wire ``snippet`` is unchanged."""

from __future__ import annotations

import os
import re
import sys
from typing import IO

ELLIPSIS = "…"
MAX_LINES = 8
MAX_LINE_CHARS = 160
HIGHLIGHT = ("\x1b[1;33m", "\x1b[0m")


def match_pattern(query: str) -> re.Pattern[str] | None:
    """Words that start with a query term (case-insensitive; stop words only when nothing else is
    left), or None when the query has no terms."""
    from host_facades.retrieval.fts_query import query_terms
    from host_facades.retrieval.keywords import is_stop_word

    terms = list(dict.fromkeys(t.lower() for t in query_terms(query or "")))
    useful = [t for t in terms if not is_stop_word(t)] or terms
    if not useful:
        return None
    alternatives = "|".join(re.escape(t) for t in sorted(useful, key=len, reverse=True))
    return re.compile(rf"(?<!\w)(?:{alternatives})\w*", re.IGNORECASE)


def _best_window(lines: list[str], pattern: re.Pattern[str] | None, size: int) -> int:
    """The first line of the ``size``-line window holding the most distinct matched terms (earliest
    on ties); 0 without matches."""
    if pattern is None or len(lines) <= size:
        return 0
    per_line = [{m.group(0).lower() for m in pattern.finditer(line)} for line in lines]
    best, best_start = 0, 0
    for start in range(0, len(lines) - size + 1):
        found = len(set().union(*per_line[start : start + size]))
        if found > best:
            best, best_start = found, start
    # centre the first matching line of the best window when the window has room above it
    first = next((i for i in range(best_start, best_start + size) if per_line[i]), best_start)
    return max(0, min(first - 1, len(lines) - size)) if best else 0


def _cut_line(line: str, pattern: re.Pattern[str] | None, width: int) -> str:
    if len(line) <= width:
        return line
    m = pattern.search(line) if pattern is not None else None
    start = 0 if m is None else max(0, min(m.start() - width // 4, len(line) - width))
    out = line[start : start + width]
    return (ELLIPSIS if start > 0 else "") + out + (ELLIPSIS if start + width < len(line) else "")


def render_snippet(text: str, query: str, *, max_lines: int = MAX_LINES, color: bool = False,
                   width: int = MAX_LINE_CHARS) -> list[str]:
    """At most ``max_lines`` lines of ``text`` around the query's matches (plus "…" lines where lines
    were left out above or below), long lines cut around their match, matches highlighted with
    ``color``."""
    lines = text.strip("\n").splitlines()
    pattern = match_pattern(query)
    start = _best_window(lines, pattern, max_lines)
    window = [_cut_line(line, pattern, width) for line in lines[start : start + max_lines]]
    if color and pattern is not None:
        on, off = HIGHLIGHT
        window = [pattern.sub(lambda m: f"{on}{m.group(0)}{off}", line) for line in window]
    return ([ELLIPSIS] if start > 0 else []) + window + ([ELLIPSIS] if start + max_lines < len(lines) else [])


def use_color(stream: IO[str] | None = None) -> bool:
    """Highlight on a terminal, unless ``NO_COLOR`` is set or the terminal is dumb."""
    stream = stream or sys.stdout
    return bool(getattr(stream, "isatty", lambda: False)()) and "NO_COLOR" not in os.environ \
        and os.environ.get("TERM") != "dumb"


def chunk_texts(db_path: str, ids: list[str]) -> dict[str, str]:
    """The full text of the chunks ``ids`` (the wire snippet holds only their first 700 characters);
    ``{}`` when the index cannot be read."""
    if not ids:
        return {}
    import apsw

    from host_facades.db.sqlite_read import DatabaseUnreadable, open_readonly

    try:
        conn = open_readonly(db_path, load_vec=False)
    except (DatabaseUnreadable, apsw.Error, OSError):  # the hits' own snippets are shown instead
        return {}
    try:
        marks = ",".join("?" * len(ids))
        return dict(conn.execute(f"SELECT id, text FROM memory_index_chunks WHERE id IN ({marks})", ids))
    finally:
        conn.close()
