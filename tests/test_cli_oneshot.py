"""One-shot commands: `--help` loads no engine dependency, a one-shot search starts no worker process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memory_core.cli import build_parser
from memory_core.cli.common import open_core

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
HEAVY = ("numpy", "faiss", "apsw", "sqlite_vec", "matplotlib", "watchfiles", "multiprocess")

# Runs the CLI in this process, then reports the modules it loaded and the processes it left
# running below it (pool workers and their forkserver live until exit, so they would show).
PROBE = r"""
import json, os, sys
from memory_core.cli import main

def descendants(pid):
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d))
    found, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            found.append(c)
            todo.append(c)
    return found

try:
    rc = main(sys.argv[1:])
except SystemExit as exc:
    rc = exc.code
sys.stdout.flush()
print(json.dumps({"rc": rc, "modules": sorted(m for m in %r if m in sys.modules),
                  "descendants": descendants(os.getpid())}), file=sys.stderr)
""" % (HEAVY,)


def probe(args: list[str], home: Path) -> tuple[dict, str]:
    env = {**os.environ, "MEMORY_CORE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    env.pop("MEMORY_CORE_POOL__WORKERS", None)
    r = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, timeout=120,
                       check=False)
    return json.loads(r.stderr.strip().splitlines()[-1]), r.stdout


@pytest.mark.parametrize("args", [["--help"], ["search", "--help"], ["bench", "--help"], ["index", "--help"]])
def test_help_imports_no_engine_dependency(args, tmp_path):
    report, out = probe(args, tmp_path / "home")
    assert report["rc"] == 0 and "usage: memory-core" in out
    assert report["modules"] == []


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="walks /proc for child processes")
def test_one_shot_commands_start_no_worker_process(tmp_path):
    home = tmp_path / "home"
    example = ["--workspace", str(EXAMPLES / "workspace"), "--config", str(EXAMPLES / "memory-core.toml")]
    report, _ = probe(["index", *example], home)
    assert report["rc"] == 0
    report, out = probe(["search", "who owns billing", *example], home)
    assert report["rc"] == 0 and "memory/" in out
    assert report["descendants"] == []
    for command in (["get", "MEMORY.md"], ["status"], ["files"]):
        report, out = probe([*command, *example], home)
        assert report["rc"] == 0 and out.strip(), command
        assert report["descendants"] == [], command


def test_one_shot_commands_run_in_process_and_long_running_ones_keep_the_pool(tmp_path):
    args = build_parser().parse_args(["search", "x", "--workspace", str(tmp_path)])
    one_shot, long_running = open_core(args), open_core(args, pool=True)
    try:
        assert one_shot.config.pool.workers == 0
        assert long_running.config.pool.workers is None  # the configured default: one per CPU
    finally:
        one_shot.close()
        long_running.close()
