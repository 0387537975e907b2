"""The import contracts in pyproject.toml (``[tool.importlinter]``), run by import-linter.

They say: the layers go from the CLI / gateway / MCP down to host_facades; workers' process-side
modules and host_facades never import memory_core; no two sibling modules or packages import each
other (the few known exceptions are listed there with what removes them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("memory_core", "workers", "host_facades")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on the packages under ``root`` with ``root/pyproject.toml``."""
    env = dict(os.environ, PYTHONPATH=str(root))
    code = ("import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))")
    return subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def test_the_import_contracts_hold():
    out = lint_imports(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "4 kept, 0 broken" in out.stdout


@pytest.fixture
def tree_copy(tmp_path):
    """The three packages and pyproject.toml copied to ``tmp_path`` (to add a bad import to)."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "data"))
    shutil.copyfile(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("workers/runtime.py", "import workers.pool", "no import cycles between siblings"),
    ("workers/tasks.py", "import workers.slot", "the worker process side never imports the owner-side pool"),
    ("host_facades/db/sqlite_read.py", "import host_facades.retrieval.vector_cache", "no import cycles between siblings"),
    ("host_facades/db/vectors.py", "import memory_core.errors", "worker processes never import memory_core"),
    ("memory_core/store/access.py", "import memory_core.core", "layers from the CLI"),
])
def test_a_new_cycle_or_upward_import_breaks_a_contract(tree_copy, module, line, contract):
    path = tree_copy / module
    path.write_text(path.read_text(encoding="utf-8") + f"\n{line}  # added by the test\n", encoding="utf-8")
    out = lint_imports(tree_copy)
    assert out.returncode == 1, out.stdout + out.stderr
    broken = [ln for ln in out.stdout.splitlines() if " BROKEN" in ln]
    assert any(contract in ln for ln in broken), out.stdout


# No module imports its package back (memory_core.freshness.binding reads its settings from
# memory_core.freshness.settings, not from the package).
PACKAGE_BACK_IMPORTS_LEFT: set[tuple[str, str]] = set()


def test_no_module_imports_its_own_package_back():
    """A module importing its package's ``__init__`` while that ``__init__`` imports the module (or a
    chain to it) is a package cycle the sibling contract cannot see."""
    import grimp

    found = set()
    for root in ("memory_core", "host_facades", "workers"):
        graph = grimp.build_graph(root)
        for module in graph.modules:
            parts = module.split(".")
            for i in range(1, len(parts)):
                package = ".".join(parts[:i])
                if (package in graph.find_modules_directly_imported_by(module)
                        and graph.chain_exists(importer=package, imported=module)):
                    found.add((module, package))
    assert found - PACKAGE_BACK_IMPORTS_LEFT == set()
