"""Source discovery and per-file entries (upstream `host/internal.ts`, `host/session-files.ts`).

Memory files: ``MEMORY.md`` (``memory.md`` only when no file is named exactly ``MEMORY.md`` in
the workspace listing, so case-insensitive filesystems behave like case-sensitive ones),
``USER.md``, ``memory/**/*.md`` and ``extraPaths`` (folders walked for ``.md``, single ``.md``
files, ``{"path", "pattern"}`` glob entries; missing ones ignored). Symlinks are skipped (files,
folders and a symlinked ``memory/``), results are de-duplicated by realpath, and the folders
``.git node_modules .pnpm-store .venv venv .tox __pycache__`` are never walked.

Stored paths are workspace-relative with forward slashes. A file outside the workspace (an extra
path) is stored like upstream's ``path.relative``: ``../notes/a.md``; when no relative form exists
(another drive on Windows) the absolute path with forward slashes is used.

Bad input never loses other files: a file that cannot be read, is not UTF-8, contains NUL bytes
(binary) or exceeds :data:`MAX_FILE_BYTES` is skipped and reported as a :class:`SourceProblem`, and
so is a file or folder whose *name* is not valid UTF-8 (it could not be stored or cited; the problem
shows the bad bytes as ``\\xNN``); malformed JSONL lines are skipped and counted. ``ScanResult.ok`` is False only when an
enumeration itself failed (a folder could not be listed), so callers must not prune then.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat as stat_mod
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from host_facades.chunking.pipeline import hash_text
from host_facades.chunking.transcripts import (
    EMPTY_SESSION_HASH,
    flatten_session_lines,
    is_compaction_checkpoint_name,
    is_session_archive_name,
    is_usage_counted_archive_name,
    is_usage_counted_transcript_name,
)
from memory_core.errors import SourceReadError, WorkspaceError
from memory_core.paths import real_path

__all__ = [
    "IGNORED_DIRS",
    "MAX_FILE_BYTES",
    "SourceEntry",
    "SourceProblem",
    "ScanResult",
    "list_memory_files",
    "list_session_files",
    "build_file_entry",
    "build_session_entry",
    "scan_sources",
    "skipped_problem",
    "is_memory_path",
    "relative_source_path",
    "valid_name",
    "shown_name",
]

IGNORED_DIRS = frozenset({".git", "node_modules", ".pnpm-store", ".venv", "venv", ".tox", "__pycache__"})
MAX_FILE_BYTES = 64 * 1024 * 1024  # memory Markdown larger than this is reported as too_large


def stat_matches(indexed: tuple[float | None, int | None], current: tuple[float, int]) -> bool:
    """Whether an indexed source row's ``(mtime_ms, size)`` still describes a file whose stat is
    ``current``: the size is the same and the mtime within 1 ms (what each of them records); a
    row that records neither never matches."""
    mtime, size = indexed
    if size is not None and int(size) != current[1]:
        return False
    if mtime is not None and abs(float(mtime) - current[0]) > 1.0:
        return False
    return size is not None or mtime is not None


def valid_name(path: str) -> bool:
    """Whether ``path`` is valid UTF-8 text: the OS hands a name whose bytes are not UTF-8 to
    Python as lone surrogates (``surrogateescape``), which SQLite and JSON cannot store."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown_name(path: str) -> str:
    """``path`` as valid text: bytes that are not UTF-8 become ``\\xNN``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _invalid_name_problem(rel: str, source: str, kind: str = "file") -> SourceProblem:
    shown = shown_name(rel)
    return SourceProblem(
        shown,
        "invalid_name",
        f'the {kind} name "{shown}" is not valid UTF-8, so it cannot be stored or cited; rename it to a '
        f"UTF-8 name; the {kind} is skipped",
        source,
    )


def _stat_pair(st: os.stat_result) -> tuple[float, int]:
    return (st.st_mtime_ns / 1e6, st.st_size)


def skipped_problem(path: str, source: str, abs_path: str, exc: SourceReadError) -> SourceProblem:
    """The problem for a file that :func:`build_file_entry`/:func:`build_session_entry` refused,
    with the stat it was read under (or, when it could not even be opened, its stat now)."""
    st = exc.stat
    if st is None:
        try:
            raw = os.stat(abs_path)
        except OSError:
            raw = None
        st = None if raw is None else _stat_pair(raw)
    return SourceProblem(path, exc.code, exc.message, source, st)


@dataclass(frozen=True)
class SourceEntry:
    """One source file as indexed: path, stat, content sha256 and the text to chunk."""

    path: str
    abs_path: str
    source: str
    mtime_ms: float
    size: int
    hash: str
    content: str
    line_map: tuple[int, ...] | None = None
    timestamps: tuple[int, ...] | None = None
    skipped_lines: int = 0


@dataclass
class SourceProblem:
    """A file that was skipped (or partly read), with a stable code and what to do about it.

    ``stat`` is the ``(mtime_ms, size)`` the file had when it was skipped (None for a problem that
    is not a skipped file), so freshness can tell "unchanged since skipped" from "changed again".
    """

    path: str
    code: str  # unreadable | invalid_utf8 | invalid_name | binary | too_large | malformed_jsonl | enumeration_failed
    message: str
    source: str = "memory"
    stat: tuple[float, int] | None = None


@dataclass
class ScanResult:
    ok: bool
    entries: list[SourceEntry] = field(default_factory=list)
    problems: list[SourceProblem] = field(default_factory=list)


class _Listing:
    """Collects files in order plus enumeration failures (folders that could not be listed) and the
    files or folders skipped for a name that is not UTF-8 (a problem, not a failed listing)."""

    def __init__(self) -> None:
        self.files: list[str] = []
        self.errors: list[SourceProblem] = []
        self.bad_names: list[tuple[str, str]] = []  # (path, "file" | "folder")
        self.not_markdown: list[str] = []  # other files in memory/ (walked with others=True)

    def walk(self, folder: str, pattern: re.Pattern[str] | None = None, base: str | None = None,
             others: bool = False) -> None:
        try:
            with os.scandir(folder) as it:
                items = sorted(it, key=lambda e: e.name)
        except FileNotFoundError:
            return
        except OSError as exc:
            self.errors.append(
                SourceProblem(
                    folder,
                    "enumeration_failed",
                    f"cannot list folder {folder!r} ({exc.strerror or exc}); fix its permissions; "
                    "stale rows are kept until a scan succeeds",
                )
            )
            return
        for entry in items:
            try:
                if entry.is_symlink():
                    continue
                if entry.is_dir(follow_symlinks=False):
                    if entry.name in IGNORED_DIRS:
                        continue
                    if not valid_name(entry.name):
                        self.bad_names.append((entry.path, "folder"))
                        continue
                    self.walk(entry.path, pattern, base, others)
                    continue
                if not entry.is_file(follow_symlinks=False):
                    continue
                if not entry.name.endswith(".md"):
                    if others and not entry.name.startswith("."):  # dotfiles (.DS_Store) are no notes
                        self.not_markdown.append(entry.path)
                    continue
            except OSError:
                continue
            if not valid_name(entry.name):
                self.bad_names.append((entry.path, "file"))
                continue
            if pattern is not None and base is not None:
                rel = os.path.relpath(entry.path, base).replace(os.sep, "/")
                if not pattern.match(rel):
                    continue
            self.files.append(entry.path)

    def add_file(self, path: str) -> None:
        try:
            st = os.lstat(path)
        except OSError:
            return
        if stat_mod.S_ISREG(st.st_mode) and path.endswith(".md"):
            self.files.append(path)


def _glob_to_regex(pattern: str) -> re.Pattern[str]:
    """Translate a glob with ``**`` (any folders), ``*``, ``?`` and ``[...]`` to a regex on posix paths."""
    out: list[str] = []
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                i += 2
                if i < n and pattern[i] == "/":
                    i += 1
                    out.append("(?:.*/)?")
                else:
                    out.append(".*")
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pattern.find("]", i + 1)
            if j < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : j]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


def _root_names(workspace: str) -> set[str]:
    with os.scandir(workspace) as it:
        return {e.name for e in it}


def _normalize_extra_entries(workspace: str, extra_paths: Sequence[Any]) -> list[tuple[str, str | None]]:
    seen: set[tuple[str, str | None]] = set()
    out: list[tuple[str, str | None]] = []
    for raw in extra_paths or ():
        if isinstance(raw, dict):
            value = str(raw.get("path") or "").strip()
            pattern = raw.get("pattern")
            pattern = str(pattern).strip() or None if pattern is not None else None
        else:
            value = str(raw).strip()
            pattern = None
        if not value:
            continue
        value = os.path.expanduser(value)
        resolved = os.path.normpath(value if os.path.isabs(value) else os.path.join(workspace, value))
        key = (resolved, pattern)
        if key not in seen:
            seen.add(key)
            out.append(key)
    return out


def _enumerate_memory(workspace: str, extra_paths: Sequence[Any]) -> _Listing:
    ws = os.path.abspath(workspace)
    if not os.path.isdir(ws):
        raise WorkspaceError(
            f"workspace {ws!r} does not exist or is not a folder; pass --workspace with an existing "
            "folder or set `workspace` in the config"
        )
    listing = _Listing()
    try:
        names = _root_names(ws)
    except OSError as exc:
        raise WorkspaceError(
            f"cannot list workspace {ws!r} ({exc.strerror or exc}); fix its permissions"
        ) from exc
    if "MEMORY.md" in names:
        listing.add_file(os.path.join(ws, "MEMORY.md"))
    elif "memory.md" in names:
        listing.add_file(os.path.join(ws, "memory.md"))
    if "USER.md" in names:
        listing.add_file(os.path.join(ws, "USER.md"))
    if "memory" in names:
        memory_dir = os.path.join(ws, "memory")
        try:
            st = os.lstat(memory_dir)
            if stat_mod.S_ISDIR(st.st_mode):
                listing.walk(memory_dir, others=True)
        except OSError:
            pass
    for resolved, pattern in _normalize_extra_entries(ws, extra_paths):
        try:
            st = os.lstat(resolved)
        except OSError:
            continue  # missing extra paths are ignored
        if stat_mod.S_ISLNK(st.st_mode):
            continue
        if stat_mod.S_ISDIR(st.st_mode):
            # An explicitly configured folder is walked even if its own name is an ignored one.
            listing.walk(resolved, _glob_to_regex(pattern) if pattern else None, resolved)
        elif stat_mod.S_ISREG(st.st_mode) and resolved.endswith(".md"):
            if pattern is None or fnmatch.fnmatchcase(os.path.basename(resolved), pattern):
                listing.files.append(resolved)
    seen: set[str] = set()
    deduped: list[str] = []
    real_dirs: dict[str, str] = {}
    for path in listing.files:
        # every listed file is a regular file, no symlink (lstat-checked): its real path is its
        # folder's (resolved once per folder) joined with its name
        folder, name = os.path.split(path)
        try:
            real = real_dirs.get(folder)
            if real is None:
                real = real_dirs[folder] = real_path(folder)
            key = os.path.join(real, name)
        except OSError:
            key = path
        if key in seen:
            continue
        seen.add(key)
        deduped.append(path)
    listing.files = deduped
    return listing


def list_memory_files(workspace: str, extra_paths: Sequence[str | dict] = ()) -> list[str]:
    """Absolute paths of the memory source files, in a stable order (upstream `host/internal.ts`)."""
    return _enumerate_memory(workspace, extra_paths).files


def not_markdown_files(workspace: str) -> list[str]:
    """Workspace-relative paths of the files under ``memory/`` that are skipped for not being
    Markdown (``.md``), dotfiles aside: ``status`` reports them, so a note saved as ``.txt`` is not
    missing from search without a word."""
    listing = _enumerate_memory(workspace, ())
    return [relative_source_path(workspace, p) for p in listing.not_markdown]


def list_session_files(sessions_dir: str) -> list[str]:
    """Transcripts in ``sessions_dir``: ``*.jsonl`` plus ``.jsonl.reset.<iso>``/``.jsonl.deleted.<iso>``
    (not those whose name is not UTF-8: see :func:`_session_listing`)."""
    return _session_listing(sessions_dir)[0]


def _session_listing(sessions_dir: str) -> tuple[list[str], list[SourceProblem]]:
    """The transcripts of ``sessions_dir`` and the problems of those skipped for their name."""
    try:
        with os.scandir(sessions_dir) as it:
            items = sorted(it, key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return [], []
    out: list[str] = []
    bad: list[SourceProblem] = []
    for entry in items:
        try:
            if entry.is_symlink() or not entry.is_file(follow_symlinks=False):
                continue
        except OSError:
            continue
        if is_usage_counted_transcript_name(entry.name):
            if valid_name(entry.name):
                out.append(entry.path)
            else:
                bad.append(_invalid_name_problem(f"sessions/{entry.name}", "sessions"))
    return out, bad


def relative_source_path(workspace: str, abs_path: str) -> str:
    """Workspace-relative forward-slash path (``../x.md`` outside it; absolute if no relative form)."""
    try:
        rel = os.path.relpath(os.path.abspath(abs_path), os.path.abspath(workspace))
    except ValueError:
        rel = os.path.abspath(abs_path)
    return rel.replace(os.sep, "/")


def _read_bytes(abs_path: str, display: str) -> tuple[bytes, os.stat_result] | None:
    try:
        fd = os.open(abs_path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise SourceReadError(
            f"cannot read {display!r} ({exc.strerror or exc}); fix its permissions; the file is skipped",
            code="unreadable",
        ) from exc
    try:
        st = os.fstat(fd)
        if not stat_mod.S_ISREG(st.st_mode):
            return None
        if st.st_size > MAX_FILE_BYTES:
            raise SourceReadError(
                f"{display!r} is {st.st_size} bytes, over the {MAX_FILE_BYTES} byte limit for memory "
                "files; split it into smaller files; the file is skipped",
                code="too_large", stat=_stat_pair(st),
            )
        chunks = []
        while True:
            block = os.read(fd, 1 << 20)
            if not block:
                break
            chunks.append(block)
            if sum(map(len, chunks)) > MAX_FILE_BYTES:
                raise SourceReadError(
                    f"{display!r} grew over the {MAX_FILE_BYTES} byte limit while being read; "
                    "split it into smaller files; the file is skipped",
                    code="too_large", stat=_stat_pair(st),
                )
        return b"".join(chunks), st
    except SourceReadError:
        raise
    except OSError as exc:
        raise SourceReadError(
            f"cannot read {display!r} ({exc.strerror or exc}); the file is skipped", code="unreadable"
        ) from exc
    finally:
        os.close(fd)


def build_file_entry(workspace: str, abs_path: str) -> SourceEntry | None:
    """Read one memory file: None if it vanished; raises SourceReadError if it cannot be used."""
    rel = relative_source_path(workspace, abs_path)
    got = _read_bytes(abs_path, rel)
    if got is None:
        return None
    data, st = got
    nul = data.find(b"\x00")
    if nul >= 0:
        raise SourceReadError(
            f"{rel!r} contains NUL bytes (offset {nul}), so it is binary, not Markdown; rename it "
            "away from .md or move it out of the memory folders; the file is skipped",
            code="binary", stat=_stat_pair(st),
        )
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SourceReadError(
            f"{rel!r} is not valid UTF-8 (byte offset {exc.start}, line {line}); re-save it as "
            "UTF-8; the file is skipped",
            code="invalid_utf8", stat=_stat_pair(st),
        ) from exc
    return SourceEntry(
        path=rel,
        abs_path=abs_path,
        source="memory",
        mtime_ms=st.st_mtime_ns / 1e6,
        size=st.st_size,
        hash=hash_text(content),
        content=content,
    )


def _iter_binary_lines(fh: Any) -> Iterator[bytes]:
    # Split on b"\n" only (as upstream does); never read the whole file at once.
    yield from fh


def build_session_entry(sessions_dir: str, abs_path: str) -> SourceEntry | None:
    """Flatten one transcript, streaming its lines; None if it vanished (path ``sessions/<name>``)."""
    name = os.path.basename(abs_path)
    rel = f"sessions/{name}"
    try:
        fh = open(abs_path, "rb")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise SourceReadError(
            f"cannot read transcript {rel!r} ({exc.strerror or exc}); fix its permissions; the file is skipped",
            code="unreadable",
        ) from exc
    with fh:
        try:
            st = os.fstat(fh.fileno())
            if not stat_mod.S_ISREG(st.st_mode):
                return None
            if is_compaction_checkpoint_name(name) or (
                is_session_archive_name(name) and not is_usage_counted_transcript_name(name)
            ):
                # Checkpoints and .bak rotations are derived copies: indexed as empty entries.
                return SourceEntry(rel, abs_path, "sessions", st.st_mtime_ns / 1e6, st.st_size, EMPTY_SESSION_HASH, "", ())
            flat = flatten_session_lines(_iter_binary_lines(fh), archive=is_usage_counted_archive_name(name))
        except OSError as exc:
            raise SourceReadError(
                f"cannot read transcript {rel!r} ({exc.strerror or exc}); the file is skipped", code="unreadable"
            ) from exc
    if flat.generated_by_dreaming_narrative or flat.generated_by_cron_run:
        # Whole transcripts generated by a dreaming-narrative or cron run are not indexed.
        return SourceEntry(rel, abs_path, "sessions", st.st_mtime_ns / 1e6, st.st_size, EMPTY_SESSION_HASH, "", (), (), flat.skipped_lines)
    return SourceEntry(
        path=rel,
        abs_path=abs_path,
        source="sessions",
        mtime_ms=st.st_mtime_ns / 1e6,
        size=st.st_size,
        hash=flat.hash,
        content=flat.content,
        line_map=flat.line_map,
        timestamps=flat.timestamps,
        skipped_lines=flat.skipped_lines,
    )


def scan_sources(
    workspace: str,
    *,
    sources: Sequence[str] = ("memory",),
    extra_paths: Sequence[Any] = (),
    sessions_dir: str | None = None,
) -> ScanResult:
    """Enumerate and read every source; problems are collected, never raised (except WorkspaceError)."""
    result = ScanResult(ok=True)
    if "memory" in sources:
        listing = _enumerate_memory(workspace, extra_paths)
        if listing.errors:
            result.ok = False
            result.problems.extend(listing.errors)
        result.problems.extend(_invalid_name_problem(relative_source_path(workspace, path), "memory", kind)
                               for path, kind in listing.bad_names)
        for path in listing.files:
            try:
                entry = build_file_entry(workspace, path)
            except SourceReadError as exc:
                result.problems.append(skipped_problem(relative_source_path(workspace, path), "memory", path, exc))
                continue
            if entry is not None:
                result.entries.append(entry)
    elif not os.path.isdir(workspace):
        raise WorkspaceError(
            f"workspace {os.path.abspath(workspace)!r} does not exist or is not a folder; pass "
            "--workspace with an existing folder or set `workspace` in the config"
        )
    if "sessions" in sources and sessions_dir:
        if os.path.exists(sessions_dir) and not os.access(sessions_dir, os.R_OK | os.X_OK):
            result.ok = False
            result.problems.append(
                SourceProblem(sessions_dir, "enumeration_failed", f"cannot list sessions folder {sessions_dir!r}; fix its permissions")
            )
        else:
            try:
                files, bad_names = _session_listing(sessions_dir)
                result.problems.extend(bad_names)
            except OSError as exc:
                result.ok = False
                result.problems.append(
                    SourceProblem(sessions_dir, "enumeration_failed", f"cannot list sessions folder {sessions_dir!r} ({exc})")
                )
                files = []
            for path in files:
                try:
                    entry = build_session_entry(sessions_dir, path)
                except SourceReadError as exc:
                    result.problems.append(skipped_problem(f"sessions/{os.path.basename(path)}", "sessions", path, exc))
                    continue
                if entry is None:
                    continue
                if entry.skipped_lines:
                    result.problems.append(
                        SourceProblem(
                            entry.path,
                            "malformed_jsonl",
                            f"{entry.skipped_lines} malformed JSON line(s) in {entry.path!r} were skipped; "
                            "the other lines are indexed",
                        )
                    )
                result.entries.append(entry)
    return result


def is_memory_path(rel_path: str) -> bool:
    """True for paths the memory tools may read: the root files and anything under ``memory/``."""
    normalized = re.sub(r"^[./]+", "", rel_path.strip()).replace("\\", "/")
    if not normalized:
        return False
    if normalized in ("MEMORY.md", "memory.md", "USER.md", "dreams.md"):
        return True
    return normalized.startswith("memory/")
