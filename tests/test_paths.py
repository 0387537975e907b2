"""``real_path`` answers what ``os.path.realpath`` answers (the kernel resolves the paths that exist)."""

from __future__ import annotations

import os

from memory_core.paths import real_path


def test_real_path_is_os_path_realpath(tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    (ws / "notes" / "deep").mkdir(parents=True)
    (ws / "notes" / "a.md").write_text("a\n")
    os.symlink(ws / "notes", ws / "memory")             # a symlinked memory/ folder
    os.symlink(tmp_path / "gone", ws / "dangling")      # a symlink to nothing
    os.symlink(ws / "loop", ws / "loop")                # a symlink loop
    os.symlink("notes/deep/..", ws / "relative")        # a relative target with ..
    monkeypatch.chdir(ws)
    paths = [str(ws), str(ws) + "/", str(ws / "memory"), str(ws / "memory" / "a.md"), str(ws / "memory" / "deep" / ".."),
             str(ws / "relative"), str(ws / "dangling"), str(ws / "dangling" / "x.md"), str(ws / "loop"),
             str(ws / "missing" / "memory"), "memory", "./memory/a.md", "missing.sqlite", "/"]
    assert [real_path(p) for p in paths] == [os.path.realpath(p) for p in paths]
