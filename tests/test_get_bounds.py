"""``get``: paging at the end of a file, bounded reads and one-line errors for what cannot be read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory_core import read_file
from memory_core.cli import main as cli_main
from memory_core.config import load_config
from memory_core.core import MemoryCore
from memory_core.errors import SourceReadError
from memory_core.read_file import build_read_result, read_memory_file
from memory_core.sources import MAX_FILE_BYTES
from tests.helpers import unprivileged_prefix

ROOT = Path(__file__).resolve().parent.parent
NINE = "".join(f"line {i}\n" for i in range(1, 10))


@pytest.fixture
def ws(workspace: Path) -> Path:
    (workspace / "memory" / "nine.md").write_text(NINE, encoding="utf-8")
    return workspace


def get(ws: Path, path: str = "memory/nine.md", **kw):
    return read_memory_file(str(ws), path, **kw)


# ------------------------------------------------------------------ paging edge cases


def test_reading_the_last_line_gives_no_continuation_hint(ws):
    r = get(ws, from_=9, lines=1)
    assert r.to_dict() == {"text": "line 9\n", "path": "memory/nine.md", "from": 9, "lines": 1}
    r = get(ws, from_=8, lines=1)
    assert (r.text, r.next_from) == ("line 8\n\n[More content available. Use from=9 to continue.]", 9)


def test_paging_by_next_from_visits_every_line_once_and_stops(ws):
    (ws / "memory" / "no-final-newline.md").write_text(NINE.rstrip("\n"), encoding="utf-8")
    for path in ("memory/nine.md", "memory/no-final-newline.md"):
        seen, start = [], 1
        while start is not None:
            r = get(ws, path, from_=start, lines=4)
            seen.append((r.from_, r.lines))
            start = r.next_from
        assert seen == [(1, 4), (5, 4), (9, 1)], path


@pytest.mark.parametrize("start", [10, 500])
def test_from_past_the_end_is_an_empty_result_with_a_note(ws, start):
    assert get(ws, from_=start).to_dict() == {
        "text": "", "path": "memory/nine.md", "from": start, "lines": 0,
        "note": f"from={start} is past the end of memory/nine.md, which has 9 lines; nothing to read "
                "(use from=9 or less)"}


def test_an_empty_file_reads_as_empty_without_a_note(ws):
    (ws / "memory" / "empty.md").write_text("", encoding="utf-8")
    assert get(ws, "memory/empty.md").to_dict() == {"text": "", "path": "memory/empty.md", "from": 1, "lines": 0}


def test_cli_get_past_the_end_says_so(ws, capsys):
    args = ["--workspace", str(ws)]
    assert cli_main(["get", "memory/nine.md", "--from", "500", *args]) == 0
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", "note: --from 500 is past the end of memory/nine.md, which has 9 lines; "
                                      "nothing to read (use --from 9 or less)\n")
    assert cli_main(["get", "memory/nine.md", "--from", "9", "--lines", "1", *args]) == 0
    assert capsys.readouterr().out == "line 9\n"


lines_text = st.lists(st.text(alphabet="ab\r\t é😀", max_size=12), max_size=8).map("\n".join)


@given(content=st.one_of(lines_text, lines_text.map(lambda t: t + "\n")), start=st.integers(1, 10),
       count=st.integers(1, 10), budget=st.integers(1, 40))
def test_the_bounded_reader_returns_what_slicing_the_whole_file_returns(tmp_path_factory, content, start, count,
                                                                        budget):
    ws = tmp_path_factory.mktemp("ws")
    (ws / "memory").mkdir()
    (ws / "memory" / "x.md").write_text(content, encoding="utf-8", newline="")
    streamed = get(ws, "memory/x.md", from_=start, lines=count, max_chars=budget)
    assert streamed == build_read_result(content, "memory/x.md", from_=start, lines=count, max_chars=budget)


# ------------------------------------------------------------------ bounded reads


def _bytes_read() -> int:
    with open("/proc/self/io", encoding="ascii") as fh:
        return int(next(line for line in fh if line.startswith("rchar:")).split()[1])


def test_get_reads_only_up_to_the_requested_lines(ws):
    """A 32 MB file (sparse: the rest is one long line of NUL bytes) read from line 1: only the
    first line and one byte after it are read, not the whole file."""
    big = ws / "memory" / "big.md"
    with open(big, "wb") as fh:
        fh.write(b"first line\n")
        fh.truncate(32 << 20)
    before = _bytes_read()
    r = get(ws, "memory/big.md", from_=1, lines=1)
    assert _bytes_read() - before < (1 << 20)
    assert (r.text, r.next_from) == ("first line\n\n[More content available. Use from=2 to continue.]", 2)
    r = get(ws, "memory/big.md", from_=2, lines=1, max_chars=5)  # the 32 MB line: cut, never held whole
    assert (r.text, r.next_from) == ("\x00" * 5 + "\n\n[More content available. Requested excerpt exceeded the "
                                     "default maxChars budget. If you need the full raw line, use read on the "
                                     "source file.]", None)


def test_get_refuses_a_file_over_the_indexing_size_limit(ws):
    with open(ws / "memory" / "huge.md", "wb") as fh:
        fh.truncate(MAX_FILE_BYTES + 1)  # sparse: takes no disk space
    before = _bytes_read()
    with pytest.raises(SourceReadError) as exc:
        get(ws, "memory/huge.md")
    assert _bytes_read() - before < (1 << 20)
    assert (exc.value.code, exc.value.message) == ("too_large", (
        f"'memory/huge.md' is {MAX_FILE_BYTES + 1} bytes, over the {MAX_FILE_BYTES} byte limit for memory "
        "files (index skips it too); split it into smaller files"))


# ------------------------------------------------------------------ OS errors are one-line errors


def test_a_fifo_or_folder_named_like_a_memory_file_is_not_found_without_blocking(ws):
    os.mkfifo(ws / "memory" / "pipe.md")  # opening it for reading would wait for a writer forever
    (ws / "memory" / "folder.md").mkdir()
    assert get(ws, "memory/pipe.md").to_dict() == {"status": "not_found", "text": "", "path": "memory/pipe.md"}
    assert get(ws, "memory/folder.md").status == "not_found"


class _FailingFile:
    """An open file whose reads fail like a disk that returns EIO."""

    def __init__(self, path: str) -> None:
        self._fh = open(path, "rb")  # noqa: SIM115 - closed by __exit__

    def fileno(self) -> int:
        return self._fh.fileno()

    def readline(self, size: int = -1) -> bytes:
        raise OSError(5, "Input/output error")

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._fh.close()


@pytest.mark.parametrize("failure, message", [
    (PermissionError(13, "Permission denied"), "cannot read 'memory/nine.md' (Permission denied); fix its permissions"),
    ("eio", "cannot read 'memory/nine.md' (Input/output error)"),
])
def test_an_os_error_is_a_one_line_error_in_the_library_and_mcp(ws, monkeypatch, failure, message):
    def fake_open(path, mode="r", *a, **kw):
        if failure == "eio":
            return _FailingFile(path)
        raise failure

    monkeypatch.setattr(read_file, "open", fake_open, raising=False)
    with MemoryCore(str(ws), config=load_config(None)) as core, pytest.raises(SourceReadError) as exc:
        core.get("memory/nine.md")
    assert (exc.value.code, exc.value.message) == ("unreadable", message)

    from memory_core.mcp_server import MemoryTools

    cfg = load_config(None, overrides={"workspace": str(ws), "sync": {"watch": False}})
    tools = MemoryTools(cfg)
    try:
        assert tools.get({"path": "memory/nine.md"}) == {
            "path": "memory/nine.md", "text": "", "disabled": True, "error": message}
    finally:
        tools.close()


def test_cli_get_of_a_mode_000_file_is_a_one_line_error(ws, tmp_path):
    prefix = unprivileged_prefix()
    locked = ws / "memory" / "nine.md"
    locked.chmod(0)
    try:
        env = {**os.environ, "MEMORY_CORE_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
        r = subprocess.run([*prefix, sys.executable, "-m", "memory_core", "get", "memory/nine.md", "--workspace",
                            str(ws)], capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=120)
    finally:
        locked.chmod(0o644)
    assert (r.returncode, r.stdout, r.stderr) == (
        1, "", "error: cannot read 'memory/nine.md' (Permission denied); fix its permissions\n")


def test_cli_get_json_carries_the_note(ws, capsys):
    assert cli_main(["get", "memory/nine.md", "--from", "10", "--json", "--workspace", str(ws)]) == 0
    assert json.loads(capsys.readouterr().out)["note"].startswith("from=10 is past the end of memory/nine.md")


def test_a_transcript_read_past_its_last_message_has_a_note():
    from memory_core.read_file import build_session_read_result

    flat, line_map = "User: a\nAssistant: b", (2, 5)
    assert build_session_read_result(flat, line_map, "sessions/x.jsonl", from_=6).to_dict() == {
        "text": "", "path": "sessions/x.jsonl", "from": 6, "lines": 0,
        "note": "from=6 is past the last message of sessions/x.jsonl (JSONL line 5); nothing to read "
                "(use from=5 or less)"}
    assert "note" not in build_session_read_result(flat, line_map, "sessions/x.jsonl", from_=5).to_dict()
    assert "note" not in build_session_read_result("", (), "sessions/empty.jsonl").to_dict()
