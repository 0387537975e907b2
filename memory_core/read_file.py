"""``get``: read a line range of an indexed memory file (upstream `host/read-file.ts`).

Allowed paths: workspace ``MEMORY.md``/``memory.md``/``USER.md``/``memory/**`` (``is_memory_path``),
``.md`` files under configured extra directories and explicitly configured extra files, and
``sessions/<file>`` transcripts that are indexed. A path outside those, a ``..`` traversal or a
symlink anywhere on the way raises :class:`ReferenceNotFound` (code ``not_found``). An allowed
path whose file is missing returns ``status="not_found"`` with empty text (the upstream shape).

A transcript is never returned raw: it is flattened exactly as for indexing (`host/session-files.ts`, same
filters),
and ``from``/``lines``/``nextFrom`` count JSONL lines, the numbering session hits cite
(``sessions/x.jsonl#L3-L8``). A JSONL line the flattener drops contributes no text.

Bounds: 120 lines by default and 12,000 characters; whole lines are dropped from the end until
the text fits, a single over-long line is hard-truncated, and a truncated result carries
``truncated``, ``next_from`` and the continuation notice suffix.

Lines: a final newline ends the last line, it does not start an empty one (a 9-line file written
line by line has 9 lines, so reading line 9 gives no "Use from=10" hint). The text of a range is
the file's text of those lines, each with the newline that ends it in the file: ``lines=2`` of
``"# Title\n\nBody\n"`` is ``"# Title\n\n"`` (two lines, the second blank), never a text that
reads as one line. Every surface (CLI ``get``, the ``memory_get`` tool, gateway v2 ``memory.get`` over
a chunk's text) slices by this one rule (:func:`slice_text`). A ``from`` past the last
line (for a transcript: past the JSONL line of its last message) gives an explicit empty result
(``lines`` 0, the upstream shape) with a ``note`` naming where the file ends.

Reads are bounded: a memory file over :data:`memory_core.sources.MAX_FILE_BYTES` (the limit
indexing applies) is refused, the file is read only up to the end of the requested window (one
byte more to tell whether more follows), and of each line only what the character budget can
show is kept. An OS error (permissions, I/O) is a :class:`SourceReadError` with a one-line message.
"""

from __future__ import annotations

import os
import stat
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from host_facades.retrieval.fts_query import truncate_snippet  # the same cut in UTF-16 units, no split pair
from memory_core.errors import InvalidRequest, ReferenceNotFound, SourceReadError

DEFAULT_MEMORY_READ_LINES = 120
DEFAULT_MEMORY_READ_MAX_CHARS = 12_000


@dataclass(frozen=True)
class ReadResult:
    text: str
    path: str
    from_: int = 1
    lines: int = 0
    truncated: bool = False
    next_from: int | None = None
    status: str = "ok"     # "ok" | "not_found"
    note: str | None = None  # why an ok result is empty: ``from`` is past the last line
    notice: str | None = None  # the continuation notice ending ``text`` (the CLI prints its own)

    def to_dict(self) -> dict[str, Any]:
        if self.status == "not_found":
            return {"status": "not_found", "text": "", "path": self.path}
        out: dict[str, Any] = {"text": self.text, "path": self.path, "from": self.from_, "lines": self.lines}
        if self.truncated:
            out["truncated"] = True
        if self.next_from is not None:
            out["nextFrom"] = self.next_from
        if self.note is not None:
            out["note"] = self.note
        return out


def _positive_int(value: Any, fallback: int, name: str) -> int:
    if value is None:
        return fallback
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise InvalidRequest(f"{name} must be a positive integer, got {value!r}")
    return max(1, int(value))


def _notice(next_from: int | None, suggest_read: bool, text: str) -> str:
    """Upstream's continuation notice, one blank line after ``text`` (which may end its last line)."""
    base = (f"[More content available. Use from={next_from} to continue.]" if next_from is not None
            else "[More content available. Requested excerpt exceeded the default maxChars budget.]")
    fallback = " If you need the full raw line, use read on the source file." if suggest_read else ""
    return f"{'' if text.endswith(chr(10)) else chr(10)}\n{base[:-1]}{fallback}]"


def slice_text(content: str, from_: int | None, lines: int | None) -> tuple[list[str], bool, bool]:
    """Lines ``from .. from+lines-1`` of ``content`` (lines as :func:`_file_lines`; all of them
    when ``lines`` is None), whether more lines follow, and whether the file's last line ends in a
    newline (the text of a range is its lines joined, plus the newline that ends its last line)."""
    file_lines = _file_lines(content)
    start = _positive_int(from_, 1, "from")
    count = len(file_lines) if lines is None else _positive_int(lines, 1, "lines")
    selected = file_lines[start - 1 : start - 1 + count]
    return selected, start - 1 + len(selected) < len(file_lines), content.endswith("\n")


def _file_lines(content: str) -> list[str]:
    """The lines of ``content``: split on ``\\n``, a final newline ending the last line."""
    if not content:
        return []
    return content[:-1].split("\n") if content.endswith("\n") else content.split("\n")


def _past_end_note(rel_path: str, start: int, total: int) -> str:
    return (f"from={start} is past the end of {rel_path}, which has {total} line{'' if total == 1 else 's'}; "
            f"nothing to read (use from={max(total, 1)} or less)")


def build_read_result(content: str, rel_path: str, *, from_: int | None = None, lines: int | None = None,
                      max_chars: int | None = None, suggest_read_fallback: bool = True) -> ReadResult:
    """Slice ``content`` like upstream ``buildMemoryReadResult`` (lines as :func:`_file_lines`)."""
    start = _positive_int(from_, 1, "from")
    budget = _positive_int(max_chars, DEFAULT_MEMORY_READ_MAX_CHARS, "max_chars")
    selected, more_source, last_ended = slice_text(content, start,
                                                   _positive_int(lines, DEFAULT_MEMORY_READ_LINES, "lines"))
    total = len(_file_lines(content))
    note = _past_end_note(rel_path, start, total) if start > max(total, 1) else None
    return build_slice_result(selected, rel_path, start=start, more_source=more_source, max_chars=budget,
                              suggest_read_fallback=suggest_read_fallback, note=note, last_ended=last_ended)


def build_slice_result(selected: Sequence[str], rel_path: str, *, start: int, more_source: bool, max_chars: int,
                       suggest_read_fallback: bool = True, note: str | None = None,
                       last_ended: bool = False) -> ReadResult:
    """Fit already-selected lines (from line ``start``) to ``max_chars`` like upstream
    ``buildMemoryReadResultFromSlice``; ``more_source``: the file has lines after ``selected``;
    ``last_ended``: the file's last line ends in a newline. Every whole line shown keeps the newline
    that ends it in the file."""
    budget = max_chars
    included = len(selected)
    text = "\n".join(selected)
    while included > 1 and len(text) > budget:
        included -= 1
        text = "\n".join(selected[:included])
    hard = False
    if selected and len(text) > budget:
        text, included, hard = truncate_snippet(text, budget), 1, True
    char_cut = hard or included < len(selected)
    next_from = start + included if (not hard and (more_source or included < len(selected))) else None
    if included and not hard and (next_from is not None or last_ended):
        text += "\n"  # the newline that ends the last line shown
    truncated = char_cut or more_source
    notice = None
    if truncated and (text or hard):
        notice = _notice(next_from, hard and suggest_read_fallback, text)
        text += notice
    return ReadResult(text=text, path=rel_path, from_=start, lines=included, truncated=truncated,
                      next_from=next_from, note=note, notice=notice)


def build_session_read_result(content: str, line_map: Sequence[int], rel_path: str, *, from_: int | None = None,
                               lines: int | None = None, max_chars: int | None = None) -> ReadResult:
    """Slice a flattened transcript by JSONL line numbers (``line_map[i]`` is the JSONL line of
    content line ``i + 1``): the text of the messages on JSONL lines ``from .. from+lines-1``.

    Budget and notices as :func:`build_read_result`, with a message (all its wrapped lines) as the
    unit that is dropped from the end. ``lines`` is the number of JSONL lines covered: ``nextFrom -
    from`` when there is a ``nextFrom``, otherwise up to the line of the last message shown.
    """
    start = _positive_int(from_, 1, "from")
    count = _positive_int(lines, DEFAULT_MEMORY_READ_LINES, "lines")
    budget = _positive_int(max_chars, DEFAULT_MEMORY_READ_MAX_CHARS, "max_chars")
    flat = content.split("\n") if content else []
    end = start + count - 1
    lo, hi = bisect_left(line_map, start), bisect_right(line_map, end)
    messages: list[tuple[int, str]] = []   # (JSONL line, its flattened text)
    for i in range(lo, hi):
        if messages and messages[-1][0] == line_map[i]:
            messages[-1] = (line_map[i], messages[-1][1] + "\n" + flat[i])
        else:
            messages.append((line_map[i], flat[i]))
    more_source = hi < len(line_map)
    included = len(messages)
    text = "\n".join(m[1] for m in messages)
    while included > 1 and len(text) > budget:
        included -= 1
        text = "\n".join(m[1] for m in messages[:included])
    hard = False
    if messages and len(text) > budget:
        text, included, hard = truncate_snippet(text, budget), 1, True
    char_cut = hard or included < len(messages)
    next_from: int | None = None
    if not hard and char_cut:
        next_from = messages[included][0]   # the first message that did not fit
    elif not hard and more_source:
        next_from = end + 1
    if next_from is not None:
        covered = next_from - start
    else:
        covered = messages[included - 1][0] - start + 1 if included else 0
    truncated = char_cut or more_source
    notice = None
    if truncated and (text or hard):
        # never suggest reading the raw transcript: it holds what indexing filters out
        notice = _notice(next_from, False, text)
        text += notice
    last = line_map[-1] if line_map else 0
    note = None
    if start > max(last, 1):
        note = (f"from={start} is past the last message of {rel_path} (JSONL line {last}); nothing to read"
                f" (use from={max(last, 1)} or less)")
    return ReadResult(text=text, path=rel_path, from_=start, lines=covered, truncated=truncated,
                      next_from=next_from, note=note, notice=notice)


def _inside(root: str, path: str) -> bool:
    try:
        return os.path.commonpath([root, path]) == root
    except ValueError:
        return False


def _no_symlinks(root: str, target: str) -> bool:
    """No component from ``root`` (exclusive) down to ``target`` is a symlink; realpath stays inside."""
    rel = os.path.relpath(target, root)
    cur = root
    for part in rel.split(os.sep):
        cur = os.path.join(cur, part)
        try:
            if stat.S_ISLNK(os.lstat(cur).st_mode):
                return False
        except FileNotFoundError:
            return True  # missing is reported as not_found by the caller
        except OSError:
            return False
    return _inside(os.path.realpath(root), os.path.realpath(target))


def _extra_entries(workspace: str, extra_paths: Sequence[Any]) -> list[tuple[str, str | None]]:
    out = []
    for item in extra_paths or ():
        raw = item if isinstance(item, str) else (item.get("path") if isinstance(item, dict) else getattr(item, "path", None))
        pattern = None if isinstance(item, str) else (item.get("pattern") if isinstance(item, dict) else getattr(item, "pattern", None))
        if not raw or not str(raw).strip():
            continue
        out.append((os.path.abspath(os.path.join(workspace, os.path.expanduser(str(raw).strip()))), pattern))
    return out


_PIECE = 1 << 16  # bytes read at a time, so no line is ever read whole just to be skipped


def _next_line(fh: Any, keep: int) -> tuple[bytes, bool] | None:
    """The next line of ``fh`` (None at the end of the file) cut to its first ``keep`` bytes, and
    whether a newline ended it; the rest of the line is read in pieces and dropped."""
    kept: list[bytes] = []
    size = 0
    seen = False
    while True:
        piece = fh.readline(_PIECE)
        if not piece:
            return (b"".join(kept), False) if seen else None
        seen = True
        if size < keep:
            kept.append(piece[: keep - size])
            size += len(kept[-1])
        if piece.endswith(b"\n"):
            data = b"".join(kept)
            return (data[:-1] if data.endswith(b"\n") else data), True


def _open_nonblocking(path: str, flags: int) -> int:
    return os.open(path, flags | getattr(os, "O_NONBLOCK", 0))


def _read_window(abs_path: str, shown: str, start: int, count: int, budget: int,
                 ) -> tuple[list[str], bool, int, bool] | None:
    """Lines ``start .. start+count-1`` of a memory file (fewer once they exceed ``budget``
    characters), whether more lines follow, the number of lines read and whether the last line
    read ends in a newline; None when the file is
    missing or not a regular file. Raises :class:`SourceReadError` for an OS error or a file over
    the indexing size limit."""
    from memory_core.sources import MAX_FILE_BYTES

    try:
        # non-blocking open: a FIFO named like a memory file must not hang the read (fstat refuses it)
        fh = open(abs_path, "rb", opener=_open_nonblocking)  # noqa: SIM115 - closed below, after fstat
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    except OSError as exc:
        fix = "; fix its permissions" if isinstance(exc, PermissionError) else ""
        raise SourceReadError(f"cannot read {shown!r} ({exc.strerror or exc}){fix}",
                              code="unreadable") from exc
    # a line longer than this many UTF-8 bytes holds more than ``budget`` characters: it is cut anyway
    keep = 4 * budget + 4
    with fh:
        try:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                return None
            if st.st_size > MAX_FILE_BYTES:
                raise SourceReadError(
                    f"{shown!r} is {st.st_size} bytes, over the {MAX_FILE_BYTES} byte limit for memory files "
                    "(index skips it too); split it into smaller files", code="too_large")
            selected: list[str] = []
            chars = -1
            line_no = 0
            while len(selected) < count and chars <= budget:
                got = _next_line(fh, keep if line_no + 1 >= start else 0)
                if got is None:
                    return selected, False, line_no, True
                line_no += 1
                data, ended = got
                if line_no >= start:
                    selected.append(data.decode("utf-8", errors="replace"))
                    chars += len(selected[-1]) + 1
                if not ended:
                    return selected, False, line_no, False
            return selected, bool(fh.read(1)), line_no, True
        except OSError as exc:
            raise SourceReadError(f"cannot read {shown!r} ({exc.strerror or exc})", code="unreadable") from exc


def read_memory_file(
    workspace: str,
    rel_path: str,
    *,
    from_: int | None = None,
    lines: int | None = None,
    extra_paths: Sequence[Any] = (),
    max_chars: int | None = None,
    sessions_dir: str | None = None,
    is_indexed_session: Callable[[str], bool] | None = None,
) -> ReadResult:
    """Read ``rel_path`` (workspace-relative, absolute inside an extra path, or ``sessions/<file>``)."""
    from memory_core.sources import build_session_entry, is_memory_path

    if not isinstance(rel_path, str) or not rel_path.strip() or "\x00" in rel_path:
        raise InvalidRequest("path required: pass a workspace-relative memory path such as MEMORY.md or memory/notes.md")
    raw = rel_path.strip().replace("\\", "/")
    workspace = os.path.abspath(workspace)
    not_allowed = ReferenceNotFound(
        f"{raw!r} is not an indexed memory file; use a path from a search hit (MEMORY.md, memory/**, "
        "configured extra paths, or an indexed sessions/<file>)"
    )
    # sessions/<file>: only transcripts that are indexed, only directly inside the sessions dir
    if raw.startswith("sessions/") and sessions_dir and is_indexed_session is not None:
        name = raw[len("sessions/"):]
        if not name or "/" in name or name in (".", ".."):
            raise not_allowed
        if not is_indexed_session(raw):
            raise not_allowed
        root = os.path.abspath(sessions_dir)
        abs_path = os.path.join(root, name)
        if not _no_symlinks(root, abs_path):
            raise not_allowed
        try:
            regular = stat.S_ISREG(os.lstat(abs_path).st_mode)
        except FileNotFoundError:
            regular = False
        # the same flattening (and whole-transcript skips) as indexing, never the raw JSONL
        entry = build_session_entry(root, abs_path) if regular else None
        if entry is None:
            return ReadResult(text="", path=raw, status="not_found")
        return build_session_read_result(entry.content, entry.line_map or (), raw, from_=from_, lines=lines,
                                         max_chars=max_chars)

    abs_path = os.path.normpath(raw if os.path.isabs(raw) else os.path.join(workspace, raw))
    rel = os.path.relpath(abs_path, workspace).replace(os.sep, "/")
    in_workspace = not rel.startswith("..") and not os.path.isabs(rel) and rel != "."
    allowed = "workspace" if in_workspace and is_memory_path(rel) and ".." not in raw.split("/") else None
    root = workspace
    if allowed is None:
        for extra, _pattern in _extra_entries(workspace, extra_paths):
            try:
                st = os.lstat(extra)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                continue
            if stat.S_ISDIR(st.st_mode) and _inside(extra, abs_path) and abs_path != extra and abs_path.endswith(".md"):
                allowed, root = "directory", extra
                break
            if stat.S_ISREG(st.st_mode) and abs_path == extra:
                allowed, root = "file", os.path.dirname(extra)
                break
    if allowed is None:
        raise not_allowed
    if allowed != "file" and not abs_path.endswith(".md"):
        raise not_allowed
    if not _no_symlinks(root, abs_path):
        raise not_allowed
    shown = rel if in_workspace else abs_path
    start = _positive_int(from_, 1, "from")
    budget = _positive_int(max_chars, DEFAULT_MEMORY_READ_MAX_CHARS, "max_chars")
    window = _read_window(abs_path, shown, start, _positive_int(lines, DEFAULT_MEMORY_READ_LINES, "lines"), budget)
    if window is None:
        return ReadResult(text="", path=shown, status="not_found")
    selected, more_source, seen, last_ended = window
    note = _past_end_note(shown, start, seen) if start > max(seen, 1) else None
    return build_slice_result(selected, shown, start=start, more_source=more_source, max_chars=budget,
                              suggest_read_fallback=in_workspace, note=note, last_ended=last_ended)
