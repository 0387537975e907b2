"""The CLI is one package whose ``main`` imports its command modules directly: every command is
there, and a missing command module fails at start-up instead of silently dropping its commands."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memory_core.cli import bench, build_parser

ROOT = Path(__file__).resolve().parent.parent
COMMAND_MODULES = ["bench", "files", "forget", "index", "plugin", "search", "serve"]


def subcommands(parser):
    return next(a for a in parser._actions if a.dest in ("command", "benchmark")).choices


def test_main_knows_every_command_from_its_module_in_the_cli_package():
    commands = subcommands(build_parser())
    assert {name: p.get_default("func").__module__ for name, p in commands.items()} == {
        "index": "memory_core.cli.index", "status": "memory_core.cli.index",
        "import-embeddings": "memory_core.cli.index",
        "search": "memory_core.cli.search", "get": "memory_core.cli.search",
        "serve": "memory_core.cli.serve", "mcp": "memory_core.cli.serve",
        "forget": "memory_core.cli.forget", "watch": "memory_core.cli.forget",
        "bench": "memory_core.cli.bench",
        "files": "memory_core.cli.files",
        "plugin": "memory_core.cli.plugin",
    }
    assert list(commands) == ["index", "status", "import-embeddings", "search", "get", "serve", "mcp", "forget", "watch", "bench",
                              "files", "plugin"]
    assert list(subcommands(commands["bench"])) == ["index", "quality", "latency", "throughput", "gateway",
                                                    "freshness", "cli", "host", "agents"]


def run_python(args: list[str], root: Path) -> subprocess.CompletedProcess:
    """``python ARGS`` importing memory_core from ``root`` only (cwd and PYTHONPATH)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=root,
                          timeout=120, check=False)


@pytest.mark.parametrize("module", COMMAND_MODULES)
def test_a_command_module_that_cannot_be_imported_fails_main_loudly(module):
    code = (f"import sys; sys.modules['memory_core.cli.{module}'] = None\n"  # import -> ImportError
            "from memory_core.cli import main\nsys.exit(main(['--help']))")
    r = run_python(["-c", code], ROOT)
    assert r.returncode == 1 and "usage:" not in r.stdout
    assert r.stderr.strip().splitlines()[-1] == (
        f"ModuleNotFoundError: import of memory_core.cli.{module} halted; None in sys.modules")


def test_a_deleted_command_module_fails_memory_core_help(tmp_path):
    shutil.copytree(ROOT / "memory_core", tmp_path / "memory_core",
                    ignore=shutil.ignore_patterns("__pycache__", "data"))
    (tmp_path / "memory_core" / "cli" / "files.py").unlink()
    r = run_python(["-m", "memory_core", "--help"], tmp_path)
    assert r.returncode == 1 and "usage:" not in r.stdout
    assert r.stderr.strip().splitlines()[-1].startswith("ImportError: cannot import name 'files' from")


def test_a_listed_benchmark_that_does_not_exist_fails_the_parser(monkeypatch):
    monkeypatch.setitem(bench.BENCHMARKS, "nope", "benchmarks.bench_nope")
    with pytest.raises(ModuleNotFoundError, match="benchmarks.bench_nope"):
        build_parser()
