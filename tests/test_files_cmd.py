"""``memory-core files [--json]`` and ``MemoryCore.files()``: the indexed files."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from memory_core.cli import main as cli_main
from memory_core.config import load_config
from memory_core.core import MemoryCore
from memory_core.files_cli import IndexedFile

LINE = b'{"type":"message","message":{"role":"user","content":"falcon"}}\n'


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\nthe falcon key\n", encoding="utf-8")
    (ws / "memory" / "empty.md").write_text("", encoding="utf-8")
    (ws / "memory" / "new\nline.md").write_text("a name with a newline\n", encoding="utf-8")
    (ws / "sessions").mkdir()
    (ws / "sessions" / "s1.jsonl").write_bytes(LINE)
    return ws


def config():
    return load_config(None, overrides={"sources": ["memory", "sessions"], "sessionsDir": "sessions",
                                        "experimental": {"sessionMemory": True}})


def test_files_lists_each_indexed_file_with_chunks_size_and_when(ws):
    with MemoryCore(str(ws), config=config()) as core:
        assert core.files() == []  # nothing indexed yet, and listing does not index
        before = int(time.time() * 1000)
        core.index()
        after = int(time.time() * 1000)
        files = core.files()
        assert [(f.source, f.path, f.chunks, f.size) for f in files] == [
            ("memory", "MEMORY.md", 1, 24), ("memory", "memory/empty.md", 0, 0),
            ("memory", "memory/new\nline.md", 1, 22), ("sessions", "sessions/s1.jsonl", 1, len(LINE))]
        assert files[1].indexed_at is None  # no chunk: never had content indexed
        assert all(before <= f.indexed_at <= after for f in files if f.chunks)
        assert [f.path for f in core.files(sources=["sessions"])] == ["sessions/s1.jsonl"]


def test_cli_files_text_and_json(ws, capsys):
    cfg = ws / "cfg.json"
    cfg.write_text(json.dumps({"sources": ["memory", "sessions"], "sessionsDir": "sessions",
                               "experimental": {"sessionMemory": True}}), encoding="utf-8")
    args = ["--workspace", str(ws), "--config", str(cfg)]
    assert cli_main(["files", *args]) == 0
    assert capsys.readouterr().out == "No files indexed (run `memory-core index`).\n"
    assert cli_main(["index", *args]) == 0
    capsys.readouterr()
    assert cli_main(["files", *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "SOURCE    CHUNKS      SIZE  LAST INDEXED         PATH"
    assert [(ln[:9].strip(), ln[10:16].strip(), ln[17:26].strip(), ln[49:]) for ln in lines[1:-1]] == [
        ("memory", "1", "24 B", "MEMORY.md"), ("memory", "0", "0 B", "memory/empty.md"),
        ("memory", "1", "22 B", "memory/new\\nline.md"), ("sessions", "1", f"{len(LINE)} B", "sessions/s1.jsonl")]
    assert lines[2][28:47] == "-" + " " * 18 and lines[-1] == "4 files, 3 chunks"
    assert cli_main(["files", "--json", "--source", "sessions", *args]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["agentId"] == "main" and [sorted(f) for f in data["files"]] == [
        ["chunks", "indexedAt", "mtimeMs", "path", "size", "source"]]
    assert (data["files"][0]["path"], data["files"][0]["chunks"]) == ("sessions/s1.jsonl", 1)


def test_indexed_file_to_dict_is_the_library_shape():
    f = IndexedFile(path="MEMORY.md", source="memory", chunks=2, size=10, mtime_ms=1.5, indexed_at=7)
    assert f.to_dict() == {"path": "MEMORY.md", "source": "memory", "chunks": 2, "size": 10, "mtime_ms": 1.5,
                           "indexed_at": 7}
