"""Packaging: every declared runtime dependency is one the code imports."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import site
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("memory_core", "workers", "host_facades", "benchmarks")
# distribution name -> the module it provides, where they differ
IMPORT_NAMES = {"faiss-cpu": "faiss", "sqlite-vec": "sqlite_vec"}


def _imported_top_level_modules() -> set[str]:
    names: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names.add(node.module.split(".")[0])
    return names


def test_every_declared_dependency_is_imported():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    dists = [re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].strip().lower() for d in deps]
    imported = _imported_top_level_modules()
    unused = [d for d in dists if IMPORT_NAMES.get(d, d.replace("-", "_")) not in imported]
    assert unused == []


def _built_wheel(tmp_path: Path) -> Path:
    """A wheel of this checkout, built from a copy of it (the build leaves build/ and egg-info there)."""
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", "__pycache__", "build", "dist", "*.egg-info", ".venv", "node_modules", ".pytest_cache"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"),
                        str(src)], capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stderr
    (wheel,) = (tmp_path / "dist").glob("memory_core-*.whl")
    return wheel


@pytest.mark.slow
def test_bench_cli_runs_from_a_wheel_installed_in_a_fresh_venv_outside_the_checkout(tmp_path):
    """`pip install .` then `memory-core bench cli` from another folder: the example it searches
    ships inside the package (memory_core/example), so the benchmark runs instead of failing on
    a missing site-packages/examples/memory-core.toml."""
    wheel = _built_wheel(tmp_path)
    venv = tmp_path / "venv"
    # --system-site-packages: the dependencies come from this interpreter (offline, fast);
    # --ignore-installed: into the venv even where this interpreter has memory-core installed
    # (as CI does), which pip would otherwise take as already satisfied
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    # where this interpreter is itself a venv (the README's command run in one), "system" is the
    # base interpreter's, without the dependencies: this one's site-packages go after the venv's own
    inner = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    Path(inner, "outer-site-packages.pth").write_text("\n".join(site.getsitepackages()) + "\n", encoding="utf-8")
    r = subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", "-q",
                        str(wheel)],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["MEMORY_CORE_HOME"] = str(tmp_path / "home")
    r = subprocess.run([str(venv / "bin" / "memory-core"), "bench", "cli", "--runs", "1", "--json", "-"],
                       capture_output=True, text=True, env=env, cwd=elsewhere, timeout=600, check=False)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["command"] == str(venv / "bin" / "memory-core")
    assert out["search"]["runs"] == 1 and out["help"]["runs"] == 1
    installed = subprocess.run([str(py), "-c", "import memory_core; print(memory_core.__file__)"],
                               capture_output=True, text=True, env=env, cwd=elsewhere, check=True).stdout
    assert installed.startswith(str(venv))  # the wheel's package ran, not this checkout
