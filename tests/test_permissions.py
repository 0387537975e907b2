"""Index files are private whatever the umask: the state dir 0700, the database, its -wal/-shm, the
reindex lock, rebuilt databases and vector state files 0600; looser ones are reported by ``status``
and made private by ``index``. The CLI runs as a real subprocess under umask 022."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from memory_core.store.perms import loose_files, tighten
from tests.gateway_fixtures import ROOT, make_workspace

pytestmark = pytest.mark.timeout(120)


def mode(path) -> str:
    return f"{stat.S_IMODE(os.stat(path).st_mode):04o}"


def cli(tmp_path, *args, state=None, **env):
    full_env = {"MEMORY_CORE_HOME": str(state or tmp_path / "state"), "PYTHONPATH": str(ROOT),
                "PATH": "/usr/bin:/bin", "MEMORY_CORE_POOL__WORKERS": "0", **env}
    return subprocess.run([sys.executable, "-m", "memory_core", *args, "--workspace", str(tmp_path / "workspace")],
                          cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: os.umask(0o022))


def modes_in(folder) -> dict[str, str]:
    return {name: mode(folder / name) for name in sorted(os.listdir(folder))}


def test_index_under_umask_022_is_private(tmp_path):
    make_workspace(tmp_path)
    for args in (["index"], ["index", "--force"], ["search", "coffee"]):
        out = cli(tmp_path, *args)
        assert out.returncode == 0, out.stderr
    state = tmp_path / "state"
    assert mode(state) == "0700"
    assert modes_in(state) == {"main.sqlite": "0600", "main.sqlite-shm": "0600", "main.sqlite-wal": "0600",
                               "main.sqlite.reindex.lock": "0600"}


def test_status_warns_about_loose_files_and_index_fixes_them(tmp_path):
    make_workspace(tmp_path)
    assert cli(tmp_path, "index", "--force").returncode == 0  # a rebuild leaves its lock file
    state = tmp_path / "state"
    os.chmod(state, 0o755)
    for name in ("main.sqlite", "main.sqlite.reindex.lock"):
        os.chmod(state / name, 0o644)
    (state / "main.sqlite-vectors").mkdir(mode=0o755)
    (state / "main.sqlite-vectors" / "a.f32").write_bytes(b"")
    os.chmod(state / "main.sqlite-vectors", 0o755)
    os.chmod(state / "main.sqlite-vectors" / "a.f32", 0o644)

    out = cli(tmp_path, "status", "--json")
    assert out.returncode == 0, out.stderr
    loose = [item for item in json.loads(out.stdout)[0]["loosePermissions"]
             if not item["path"].endswith(("-wal", "-shm"))]  # status's own read made them, as loose as the file
    assert loose == [
        {"path": str(state), "mode": "0755"},
        {"path": str(state / "main.sqlite"), "mode": "0644"},
        {"path": str(state / "main.sqlite.reindex.lock"), "mode": "0644"},
        {"path": str(state / "main.sqlite-vectors"), "mode": "0755"},
        {"path": str(state / "main.sqlite-vectors" / "a.f32"), "mode": "0644"},
    ]
    assert out.stderr.startswith(f"warning: other users can read the index: {state} (0755), {state / 'main.sqlite'} "
                                 "(0644), ")
    assert out.stderr.endswith(" ...; run `memory-core index` to make it private (files 0600, state dir 0700)\n")
    assert out.stderr.count("\n") == 1

    assert cli(tmp_path, "index").returncode == 0
    assert mode(state) == "0700" and mode(state / "main.sqlite") == "0600"
    assert mode(state / "main.sqlite-vectors" / "a.f32") == "0600"
    out = cli(tmp_path, "status", "--json")
    assert json.loads(out.stdout)[0]["loosePermissions"] == [] and "warning" not in out.stderr


def test_a_shared_folder_is_never_tightened(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # like /tmp
    db = shared / "main.sqlite"
    db.write_bytes(b"")
    os.chmod(db, 0o644)
    assert loose_files(str(db), state_dir_owned=True) == [{"path": str(db), "mode": "0644"}]
    assert tighten(str(db), state_dir_owned=True) == [str(db)]
    assert mode(shared) == "1777" and mode(db) == "0600"


def test_a_store_path_folder_is_left_alone(tmp_path):
    make_workspace(tmp_path)
    folder = tmp_path / "project"
    folder.mkdir()
    os.chmod(folder, 0o755)
    out = cli(tmp_path, "index", MEMORY_CORE_STORE__PATH=str(folder / "{agentId}.sqlite"))
    assert out.returncode == 0, out.stderr
    assert mode(folder) == "0755" and mode(folder / "main.sqlite") == "0600"
