"""A worker runs the code its owner runs, wherever the owner was started from and whatever other
copy of memory-core is installed (the forkserver ignores the owner's sys.path)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PROBE = '''
import os
import workers
from workers import tasks


@tasks.task("code_root")
def code_root(payload, ctx):
    return os.path.dirname(os.path.dirname(os.path.abspath(workers.__file__)))
'''

OWNER = '''
import sys
sys.path.insert(0, {root!r})  # a checkout put on the path, as a script or an embedding host does
from workers.pool import WorkerPool

pool = WorkerPool("retrieval", 1, task_modules=("probe_task",), start_method={method!r})
try:
    print(pool.run("code_root"))
finally:
    pool.close()
'''


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_workers_import_the_owners_code_not_another_installed_copy(tmp_path, method):
    other = tmp_path / "installed"  # another copy on the interpreter's path (an older install, say)
    for package in ("workers", "host_facades"):
        shutil.copytree(ROOT / package, other / package, ignore=shutil.ignore_patterns("__pycache__"))
    (other / "probe_task.py").write_text(PROBE, encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"  # the owner's working folder holds no copy
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(other)}
    r = subprocess.run([sys.executable, "-c", OWNER.format(root=str(ROOT), method=method)], cwd=elsewhere,
                       env=env, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(ROOT)
