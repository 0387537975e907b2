"""What the CLI prints: names that are not UTF-8 or hold control characters, and one JSON key style."""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

import pytest

from memory_core.cli import main as cli_main
from memory_core.config import load_config
from memory_core.core import MemoryCore
from memory_core.output import camel_keys, escape_control

BAD = b"memory/bad\xffname.md"
SNAKE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "ok.md").write_text("# Notes\nthe falcon deploy key\n", encoding="utf-8")
    return ws


def add_bad_name(ws: Path) -> None:
    with open(os.path.join(os.fsencode(ws), BAD), "wb") as fh:
        fh.write(b"the falcon nest\n")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli_main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


# ------------------------------------------------------------------ names that are not UTF-8


@pytest.mark.parametrize("force", [False, True])
def test_a_file_name_that_is_not_utf8_is_skipped_as_a_problem(ws, force):
    add_bad_name(ws)
    problem = {"path": "memory/bad\\xffname.md", "code": "invalid_name",
               "message": 'the file name "memory/bad\\xffname.md" is not valid UTF-8, so it cannot be stored or '
                          "cited; rename it to a UTF-8 name; the file is skipped"}
    with MemoryCore(str(ws), config=load_config(None)) as core:
        summary = core.index(force=force)
        assert (summary.files, summary.failed, summary.error, summary.problems) == (1, 0, None, [problem])
        assert core.status()["last_sync"]["problems"] == [problem]
        assert [h.path for h in core.search("falcon")] == ["memory/ok.md"]


def test_a_folder_name_that_is_not_utf8_is_skipped_with_its_files(ws):
    folder = os.path.join(os.fsencode(ws), b"memory/dir\xfe")
    os.mkdir(folder)
    with open(os.path.join(folder, b"x.md"), "wb") as fh:
        fh.write(b"the falcon egg\n")
    with MemoryCore(str(ws), config=load_config(None)) as core:
        summary = core.index()
        assert (summary.files, [(p["path"], p["code"]) for p in summary.problems]) == (
            1, [("memory/dir\\xfe", "invalid_name")])


def test_a_transcript_name_that_is_not_utf8_is_skipped_as_a_problem(ws, tmp_path):
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    line = b'{"type":"message","message":{"role":"user","content":"falcon"}}\n'
    (sessions / "good.jsonl").write_bytes(line)
    with open(os.path.join(os.fsencode(sessions), b"bad\xff.jsonl"), "wb") as fh:
        fh.write(line)
    cfg = load_config(None, overrides={"sources": ["memory", "sessions"], "sessionsDir": str(sessions),
                                            "experimental": {"sessionMemory": True}})
    with MemoryCore(str(ws), config=cfg) as core:
        summary = core.index()
        assert (summary.files, [(p["path"], p["code"]) for p in summary.problems]) == (
            2, [("sessions/bad\\xff.jsonl", "invalid_name")])


def test_a_sync_of_a_path_that_is_not_utf8_skips_it(ws):
    """What a watcher reports for such a file: a targeted sync with its name does not fail."""
    add_bad_name(ws)
    with MemoryCore(str(ws), config=load_config(None)) as core:
        core.index()
        summary = core.sync(reason="watch", paths=[os.fsdecode(BAD), "memory/ok.md"])
        assert (summary.error, summary.unchanged, summary.files) == (None, 1, 1)


# ------------------------------------------------------------------ control characters in text output


def test_escape_control_writes_controls_and_bad_bytes_as_escapes():
    assert escape_control("memory/new\nline.md") == "memory/new\\nline.md"
    assert escape_control("a\x1b[31m\tb\r\x7f\x85\u2028") == "a\\x1b[31m\\tb\\r\\x7f\\x85\\u2028"
    assert escape_control(os.fsdecode(b"bad\xffname")) == "bad\\xffname"
    assert escape_control("Zürich 日本") == "Zürich 日本"


def test_names_with_control_characters_print_on_one_line(ws, capsys):
    (ws / "memory" / "new\nline.md").write_text("the falcon line\n", encoding="utf-8")
    (ws / "memory" / "esc\x1b[2J.md").write_bytes(b"\xff not utf-8 content\n")
    args = ["--workspace", str(ws)]
    rc, out, err = run(capsys, "index", *args)
    assert rc == 0 and "  skipped memory/esc\\x1b[2J.md: 'memory/esc\\x1b[2J.md' is not valid UTF-8" in err
    rc, out, _ = run(capsys, "search", "falcon line", *args)
    assert rc == 0 and re.fullmatch(r"\d\.\d{3} memory/new\\nline\.md#L1-L2  \(text (\d\.\d{3}|\d\.\d\de-0\d)\)",
                                      out.splitlines()[0])
    rc, out, _ = run(capsys, "status", *args)
    assert "Problems: 1 file(s) skipped, e.g. memory/esc\\x1b[2J.md: " in out and "\x1b" not in out
    rc, _, err = run(capsys, "get", "memory/gone\r.md", *args)
    assert (rc, err) == (1, "error: memory/gone\\r.md not found\n")


# ------------------------------------------------------------------ one JSON key style


def snake_keys(data: object) -> list[str]:
    if isinstance(data, dict):
        return [k for k in data if SNAKE.fullmatch(k)] + [k for v in data.values() for k in snake_keys(v)]
    if isinstance(data, list):
        return [k for v in data for k in snake_keys(v)]
    return []


def test_camel_keys_renames_field_names_and_keeps_data_keys():
    data = {"db_path": 1, "runs": [{"p50_ms": 2}], "pendingPaths": ["a_b.md"],
            "sessionDeltas": {"sessions/a_b.jsonl": {"delta_bytes": 3}}, "memory": 4}
    assert camel_keys(data) == {"dbPath": 1, "runs": [{"p50Ms": 2}], "pendingPaths": ["a_b.md"],
                                "sessionDeltas": {"sessions/a_b.jsonl": {"deltaBytes": 3}}, "memory": 4}


def test_every_cli_json_output_is_camel_case(ws, capsys):
    args = ["--workspace", str(ws), "--json"]
    outputs = {}
    for name, argv in {"index": ["index"], "index --force": ["index", "--force"], "status": ["status"],
                       "status --deep": ["status", "--deep"], "search": ["search", "falcon"],
                       "search --explain": ["search", "falcon", "--explain"],
                       "get": ["get", "memory/ok.md", "--lines", "1"]}.items():
        rc, out, err = run(capsys, *argv, *args)
        assert rc == 0, (name, err)
        outputs[name] = json.loads(out)
    assert {name: snake_keys(data) for name, data in outputs.items()} == {name: [] for name in outputs}
    assert outputs["status"][0]["lastSync"]["reason"] == "cli" and outputs["index --force"]["chunksWritten"] == 1


def test_status_json_last_sync_at_is_the_recorded_sync(ws, capsys):
    """A one-shot ``status`` did not sync itself: ``freshness.lastSyncAt`` is the sync the index
    records (``lastSync.time``, ms), not null beside it."""
    args = ["--workspace", str(ws), "--json"]
    run(capsys, "index", *args)
    _, out, _ = run(capsys, "status", *args)
    [st] = json.loads(out)
    assert st["lastSync"]["time"] > 0
    assert (st["freshness"]["lastSyncAt"], st["freshness"]["lastSyncReason"]) == (
        st["lastSync"]["time"] / 1000, "cli")


def test_benchmark_json_is_camel_case(capsys):
    from benchmarks import emit

    emit(argparse.Namespace(json="-"), {"in_process": {"p50_ms": 1.5}, "label": "x"}, None)
    assert json.loads(capsys.readouterr().out) == {"inProcess": {"p50Ms": 1.5}, "label": "x"}


def test_status_deep_does_not_call_embeddings_available_without_a_provider(ws, capsys):
    args = ["--workspace", str(ws), "--config", str(ws / "none.json")]
    (ws / "none.json").write_text('{"provider": "none"}', encoding="utf-8")
    rc, out, _ = run(capsys, "status", "--deep", *args)
    assert rc == 0 and "Embeddings: none (no embedding provider (provider = 'none'); search is keyword-only)" in out
    rc, out, _ = run(capsys, "status", "--deep", "--json", *args)
    assert json.loads(out)[0]["providerCheck"] == {
        "available": False, "mode": "fts-only",
        "reason": "no embedding provider (provider = 'none'); search is keyword-only"}
