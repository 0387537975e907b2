"""Source discovery, entries and bad input (spec §1.1-1.2, §11.2 case 16)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memory_core import sources
from memory_core.errors import SourceReadError, WorkspaceError
from memory_core.sources import (
    build_file_entry,
    build_session_entry,
    is_memory_path,
    list_memory_files,
    list_session_files,
    scan_sources,
)
from tests.helpers import unprivileged_prefix


ROOT = Path(__file__).resolve().parent.parent


def write(path, text: str | bytes = "x"):
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def names(files, root):
    return [os.path.relpath(f, root).replace(os.sep, "/") for f in files]


# --- §11.2 case 16 -----------------------------------------------------------------------------


def test_case16_extra_directory(tmp_path):
    write(tmp_path / "MEMORY.md", "# Default memory")
    extra = tmp_path / "extra-notes"
    write(extra / "note1.md", "# Note 1")
    write(extra / "note2.md", "# Note 2")
    write(extra / "ignore.txt", "Not a markdown file")
    files = list_memory_files(str(tmp_path), [str(extra)])
    assert names(files, tmp_path) == ["MEMORY.md", "extra-notes/note1.md", "extra-notes/note2.md"]


def test_case16_single_file_relative_and_missing_extras(tmp_path):
    write(tmp_path / "MEMORY.md")
    write(tmp_path / "standalone.md")
    write(tmp_path / "subdir" / "nested.md")
    files = list_memory_files(str(tmp_path), [str(tmp_path / "standalone.md"), " subdir ", "/does/not/exist"])
    assert names(files, tmp_path) == ["MEMORY.md", "standalone.md", "subdir/nested.md"]


def test_case16_symlinks_excluded(tmp_path):
    write(tmp_path / "MEMORY.md")
    extra = tmp_path / "extra"
    write(extra / "note.md")
    write(tmp_path / "target.md")
    write(tmp_path / "target-dir" / "nested.md")
    os.symlink(tmp_path / "target.md", extra / "linked.md")
    os.symlink(tmp_path / "target-dir", extra / "linked-subdir")
    os.symlink(tmp_path / "target-dir", tmp_path / "linked-dir")
    files = list_memory_files(str(tmp_path), [str(extra), str(tmp_path / "linked-dir")])
    assert names(files, tmp_path) == ["MEMORY.md", "extra/note.md"]


def test_symlinked_memory_dir_and_root_file_skipped(tmp_path):
    ws = tmp_path / "ws"
    write(tmp_path / "elsewhere" / "a.md")
    write(tmp_path / "real.md")
    ws.mkdir()
    os.symlink(tmp_path / "elsewhere", ws / "memory")
    os.symlink(tmp_path / "real.md", ws / "MEMORY.md")
    assert list_memory_files(str(ws)) == []


def test_case16_overlapping_extras_dedupe(tmp_path):
    write(tmp_path / "MEMORY.md")
    files = list_memory_files(str(tmp_path), [str(tmp_path), ".", str(tmp_path / "MEMORY.md")])
    assert names(files, tmp_path) == ["MEMORY.md"]


def test_case16_lowercase_fallback_and_preference(tmp_path):
    write(tmp_path / "memory.md")
    assert names(list_memory_files(str(tmp_path)), tmp_path) == ["memory.md"]
    write(tmp_path / "MEMORY.md")
    assert names(list_memory_files(str(tmp_path)), tmp_path) == ["MEMORY.md"]


def test_memory_tree_user_md_ignored_dirs_and_globs(tmp_path):
    write(tmp_path / "MEMORY.md")
    write(tmp_path / "USER.md")
    write(tmp_path / "memory" / "2026-01-01.md")
    write(tmp_path / "memory" / "projects" / "acme.md")
    write(tmp_path / "memory" / "node_modules" / "pkg.md")
    write(tmp_path / "memory" / ".git" / "x.md")
    write(tmp_path / "memory" / "notes.txt")
    write(tmp_path / "docs" / "a" / "keep.md")
    write(tmp_path / "docs" / "a" / "skip.txt")
    write(tmp_path / "docs" / "b.md")
    files = list_memory_files(str(tmp_path), [{"path": "docs", "pattern": "**/keep.md"}])
    assert names(files, tmp_path) == [
        "MEMORY.md",
        "USER.md",
        "memory/2026-01-01.md",
        "memory/projects/acme.md",
        "docs/a/keep.md",
    ]


def test_is_memory_path():
    assert is_memory_path("dreams.md")
    assert is_memory_path("./MEMORY.md")
    assert is_memory_path("memory/a.md")
    assert not is_memory_path("notes/a.md")
    assert not is_memory_path("")


# --- entries -----------------------------------------------------------------------------------


def test_build_file_entry(tmp_path):
    write(tmp_path / "memory" / "note.md", "hello\n")
    entry = build_file_entry(str(tmp_path), str(tmp_path / "memory" / "note.md"))
    assert (entry.path, entry.source, entry.size, entry.content) == ("memory/note.md", "memory", 6, "hello\n")
    assert entry.hash == hashlib.sha256(b"hello\n").hexdigest()
    assert entry.mtime_ms == os.stat(tmp_path / "memory" / "note.md").st_mtime_ns / 1e6
    assert build_file_entry(str(tmp_path), str(tmp_path / "ghost.md")) is None


def test_extra_path_outside_workspace_is_stored_relative(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    write(tmp_path / "shared" / "n.md", "n")
    result = scan_sources(str(ws), extra_paths=[str(tmp_path / "shared")])
    assert [e.path for e in result.entries] == ["../shared/n.md"]


def test_bad_input_is_reported_and_loses_nothing(tmp_path):
    write(tmp_path / "MEMORY.md", "# ok")
    write(tmp_path / "memory" / "latin1.md", "caf\xe9".encode("latin-1"))
    write(tmp_path / "memory" / "image.md", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    write(tmp_path / "memory" / "good.md", "fine")
    big_line = "word " * 10_000_000  # a 50 MB single line is read and hashed
    write(tmp_path / "memory" / "huge.md", big_line)
    result = scan_sources(str(tmp_path))
    assert result.ok is True
    assert [e.path for e in result.entries] == ["MEMORY.md", "memory/good.md", "memory/huge.md"]
    assert [(p.path, p.code) for p in result.problems] == [
        ("memory/image.md", "binary"),
        ("memory/latin1.md", "invalid_utf8"),
    ]
    assert "re-save it as UTF-8" in result.problems[1].message
    assert result.entries[2].size == 50_000_000


def test_too_large_file(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "MAX_FILE_BYTES", 1000)
    write(tmp_path / "memory" / "big.md", "a" * 1001)
    with pytest.raises(SourceReadError) as info:
        build_file_entry(str(tmp_path), str(tmp_path / "memory" / "big.md"))
    assert info.value.code == "too_large"
    assert "split it into smaller files" in info.value.message


_SCAN_SCRIPT = """
import json, sys
from memory_core.sources import scan_sources
r = scan_sources(sys.argv[1])
print(json.dumps({"ok": r.ok, "entries": [e.path for e in r.entries], "codes": sorted(p.code for p in r.problems)}))
"""


def test_unreadable_file_and_folder(tmp_path):
    # Run the scan in a child; as root, drop the DAC capabilities so permissions really apply.
    prefix = unprivileged_prefix()
    write(tmp_path / "memory" / "secret.md")
    write(tmp_path / "memory" / "locked" / "x.md")
    write(tmp_path / "memory" / "ok.md")
    os.chmod(tmp_path / "memory" / "secret.md", 0)
    os.chmod(tmp_path / "memory" / "locked", 0)
    try:
        r = subprocess.run([*prefix, sys.executable, "-c", _SCAN_SCRIPT, str(tmp_path)], capture_output=True,
                           text=True, cwd=str(ROOT), env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    finally:
        os.chmod(tmp_path / "memory" / "secret.md", 0o644)
        os.chmod(tmp_path / "memory" / "locked", 0o755)
    assert r.returncode == 0, r.stderr
    # A folder could not be listed: ok is False so callers must not prune; the rest is read.
    assert json.loads(r.stdout) == {"ok": False, "entries": ["memory/ok.md"], "codes": ["enumeration_failed", "unreadable"]}


def test_missing_workspace_raises_with_fix(tmp_path):
    with pytest.raises(WorkspaceError) as info:
        scan_sources(str(tmp_path / "nope"))
    assert str(tmp_path / "nope") in info.value.message
    assert "--workspace" in info.value.message
    assert info.value.code == "invalid_workspace"


# --- sessions ----------------------------------------------------------------------------------


def session_lines(*records):
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n"


def test_session_files_and_entries(tmp_path):
    sessions = tmp_path / "sessions"
    user = {"type": "message", "message": {"role": "user", "content": "remember the blue door"}, "timestamp": 1767323045000}
    write(sessions / "a.jsonl", session_lines({"type": "session"}, user, "{oops", {"type": "message", "message": {"role": "assistant", "content": "HEARTBEAT_OK"}}))
    write(sessions / "b.jsonl.reset.2026-01-02T03-04-05.678Z", session_lines(user))
    write(sessions / "c.jsonl.bak.2026-01-02T03-04-05Z", session_lines(user))
    write(sessions / "sessions.json", "{}")
    os.symlink(sessions / "a.jsonl", sessions / "link.jsonl")
    files = list_session_files(str(sessions))
    assert [os.path.basename(f) for f in files] == ["a.jsonl", "b.jsonl.reset.2026-01-02T03-04-05.678Z"]
    entry = build_session_entry(str(sessions), files[0])
    assert (entry.path, entry.source, entry.content, entry.line_map, entry.skipped_lines) == (
        "sessions/a.jsonl", "sessions", "User: remember the blue door", (2,), 1,
    )
    expected = hashlib.sha256(b"User: remember the blue door\n2\n1767323045000").hexdigest()
    assert entry.hash == expected
    result = scan_sources(str(tmp_path), sources=("memory", "sessions"), sessions_dir=str(sessions))
    assert [e.path for e in result.entries] == ["sessions/a.jsonl", "sessions/b.jsonl.reset.2026-01-02T03-04-05.678Z"]
    assert [(p.path, p.code) for p in result.problems] == [("sessions/a.jsonl", "malformed_jsonl")]
    assert list_session_files(str(tmp_path / "missing")) == []


class PieceRecordingFile:
    """A transcript's file object that records the largest piece the reader took in one call."""

    def __init__(self, fh):
        self._fh = fh
        self.largest = 0

    def _took(self, data):
        self.largest = max(self.largest, len(data))
        return data

    def __iter__(self):
        return self

    def __next__(self):
        return self._took(next(self._fh))

    def read(self, size=-1):
        return self._took(self._fh.read(size))

    def readline(self, size=-1):
        return self._took(self._fh.readline(size))

    def readlines(self, hint=-1):
        return [self._took(line) for line in self._fh.readlines(hint)]

    def fileno(self):
        return self._fh.fileno()

    def close(self):
        self._fh.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._fh.close()


@pytest.mark.slow
def test_large_transcript_streams(tmp_path, monkeypatch):
    # ~57 MB transcript with a 50 MB single message line: flattened without reading the file whole.
    big = {"type": "message", "message": {"role": "user", "content": "z" * 50_000_000}}
    small = {"type": "message", "message": {"role": "assistant", "content": "ok"}}
    big_line = json.dumps(big) + "\n"
    line_bytes = len(big_line)
    with open(tmp_path / "big.jsonl", "w") as fh:
        fh.write(big_line)
        for _ in range(100_000):
            fh.write(json.dumps(small) + "\n")
    opened = []

    def recording_open(*args, **kwargs):
        opened.append(PieceRecordingFile(open(*args, **kwargs)))  # noqa: SIM115 - the wrapper closes it
        return opened[-1]

    monkeypatch.setattr(sources, "open", recording_open, raising=False)
    entry = build_session_entry(str(tmp_path), str(tmp_path / "big.jsonl"))
    # one line at a time: the largest piece taken is the 50 MB line, not the file
    assert [f.largest for f in opened] == [line_bytes]
    assert entry.line_map[:2] == (1, 1)
    assert entry.line_map[-1] == 100_001
    assert len(entry.line_map) == 62_500 + 100_000
