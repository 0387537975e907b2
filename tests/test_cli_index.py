"""``memory-core index`` and ``status`` through a real subprocess, plus the CLI plumbing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memory_core.cli import build_parser, main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def run(args: list[str], home: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "MEMORY_CORE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "memory_core", *args], capture_output=True, text=True,
                          env=env, cwd=str(cwd), timeout=120)


@pytest.fixture
def example_ws(tmp_path) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(EXAMPLES / "workspace", ws)
    return ws


def test_index_and_status_json_on_example_workspace(tmp_path, example_ws):
    home = tmp_path / "home"
    cfg = str(EXAMPLES / "memory-core.toml")
    r = run(["index", "--workspace", str(example_ws), "--config", cfg, "--json"], home)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # no progress bar when stderr is not a terminal
    s = json.loads(r.stdout)
    assert {k: s[k] for k in ("files", "chunks", "added", "changed", "removed", "full", "provider", "model",
                              "problems", "failed")} == {
        "files": 19, "chunks": 39, "added": 19, "changed": 0, "removed": 0, "full": True, "provider": "none",
        "model": "fts-only", "problems": [], "failed": 0}
    assert s["seconds"] > 0 and s["revision"] > 0
    r = run(["index", "--workspace", str(example_ws), "--config", cfg, "--json"], home)
    assert json.loads(r.stdout)["unchanged"] == 19 and json.loads(r.stdout)["full"] is False

    r = run(["status", "--workspace", str(example_ws), "--config", cfg, "--json"], home)
    assert r.returncode == 0, r.stderr
    [st] = json.loads(r.stdout)  # one entry per agent
    assert st["dbPath"] == str(home / "example.sqlite")  # the example is its own agent
    assert (st["agent"], st["files"], st["chunks"], st["chunksBySource"]) == (
        "example", 19, 39, {"memory": 37, "sessions": 2})
    assert (st["provider"], st["model"], st["dims"], st["dirty"]) == ("none", "fts-only", None, False)
    assert st["fts"] == {"available": True, "tokenizer": "unicode61", "error": None}
    assert st["vector"]["enabled"] is False and st["identity"] == {"state": "ok", "mismatch": []}
    assert st["lastSync"]["error"] is None and st["lastSync"]["reason"] == "cli"

    r = run(["status", "--workspace", str(example_ws), "--config", cfg, "--deep"], home)
    assert r.returncode == 0, r.stderr
    assert "Files: 19  Chunks: 39" in r.stdout and "Integrity: ok" in r.stdout


def test_workspace_defaults_to_cwd_and_agent_selects_db(tmp_path, example_ws):
    home = tmp_path / "home"
    r = run(["index", "--agent", "ops", "--json"], home, cwd=example_ws)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["files"] == 17  # sessions are not enabled without the config
    assert (home / "ops.sqlite").exists() and not (home / "main.sqlite").exists()


def test_force_rebuild_reports_full(tmp_path, example_ws):
    home = tmp_path / "home"
    assert run(["index", "--workspace", str(example_ws)], home).returncode == 0
    r = run(["index", "--workspace", str(example_ws), "--force"], home)
    assert r.returncode == 0, r.stderr
    assert "full rebuild" in r.stdout and "files 17, chunks 37" in r.stdout


def test_parser_registers_only_working_commands(capsys):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert {"index", "status"} <= set(sub.choices)
    for name, p in sub.choices.items():
        assert p.get_default("func") is not None, name
    assert main([]) == 2
    assert "usage: memory-core" in capsys.readouterr().err


def test_bench_index_small_run_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    args = ["bench", "index", "--files", "60", "--mb", "0.2", "--embed-files", "0"]
    r = run([*args, "--json", str(out)], tmp_path / "home", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "keyword_only" in r.stdout and "target: keyword-only < 60s -> met" in r.stdout
    assert f"results written to {out}" in r.stdout
    result = json.loads(out.read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.json"]  # nothing else left behind
    stdout_json = run([*args, "--json", "-"], tmp_path / "home", cwd=tmp_path)  # JSON instead of the table
    assert stdout_json.returncode == 0, stdout_json.stderr
    assert json.loads(stdout_json.stdout)["workspace"]["files"] == 61
    assert result["workspace"]["files"] == 61
    kw = result["results"]["keywordOnly"]
    assert kw["files"] == 61 and kw["chunks"] > 0 and kw["mbPerS"] > 0
    assert result["results"]["diskRead"]["files"] == 61


def test_a_skipped_binary_md_does_not_make_every_search_warn(tmp_path, example_ws):
    # The audit's reproduction: each command is a new process, so only the index can tell search
    # that the last sync already skipped memory/bin.md exactly as it is now.
    home = tmp_path / "home"
    (example_ws / "memory" / "bin.md").write_bytes(b"\xff\x00")
    ws = ["--workspace", str(example_ws)]
    for force in ([], ["--force"]):
        r = run(["index", *ws, *force], home)
        assert r.returncode == 0 and "skipped memory/bin.md" in r.stderr, r.stderr
        r = run(["search", "x", *ws], home)
        assert (r.returncode, r.stderr) == (0, "")
    assert "Dirty: no" in run(["status", *ws], home).stdout


def test_index_counts_a_forgotten_session_as_forgotten_not_added(tmp_path, example_ws):
    home = tmp_path / "home"
    args = ["--workspace", str(example_ws), "--config", str(EXAMPLES / "memory-core.toml")]
    assert run(["index", *args], home).returncode == 0
    r = run(["forget", "--session", "0a6c2f0e-4a8e-4f55-9d43-5f6c1b7d2e11", *args], home)
    assert r.stdout.startswith("Forgot sessions/0a6c2f0e-4a8e-4f55-9d43-5f6c1b7d2e11.jsonl: 1 chunk(s) removed;")
    for _ in range(2):
        r = run(["index", *args], home)
        assert "  files 18, chunks 38; added 0, changed 0, removed 0, unchanged 18, forgotten 1\n" in r.stdout
    s = json.loads(run(["index", *args, "--json"], home).stdout)
    assert {k: s[k] for k in ("added", "unchanged", "forgotten", "skipped", "chunksWritten")} == {
        "added": 0, "unchanged": 18, "forgotten": 1, "skipped": 0, "chunksWritten": 0}


def test_forget_of_an_unknown_session_fails_and_writes_no_tombstone(tmp_path, example_ws):
    home = tmp_path / "home"
    args = ["--workspace", str(example_ws), "--config", str(EXAMPLES / "memory-core.toml")]
    assert run(["index", *args], home).returncode == 0
    sessions = example_ws / "sessions"
    r = run(["forget", "--session", "doesnotexist", *args], home)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == (
        "error: no session sessions/doesnotexist.jsonl: nothing is indexed under it and there is no transcript "
        f"doesnotexist.jsonl in {sessions} (list the sessions with `ls {sessions}`); pass --force to record a "
        "tombstone for it anyway\n")
    r = run(["index", *args, "--json"], home)
    assert json.loads(r.stdout)["forgotten"] == 0  # no tombstone was written
    r = run(["forget", "--session", "doesnotexist", "--force", *args], home)
    assert (r.returncode, r.stdout) == (0, ("Forgot sessions/doesnotexist.jsonl: nothing was indexed under it; "
                                            "a tombstone was recorded, so later syncs never index it\n"))
