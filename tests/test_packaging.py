"""Packaging: every declared runtime dependency is one the code imports."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

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
