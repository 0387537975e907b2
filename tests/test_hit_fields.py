"""A hit's fields are declared once (``host_facades/search/hit.py``): adding one is one edit plus the goldens.

The repository is copied, ``SearchHit`` gains ``model: str | None = None`` (a chunk column, so no
storage change) in the copy, and the copy's keyword golden test is run with
``MEMORY_CORE_UPDATE_GOLDEN=1``. Every dict surface's hits must then be the committed goldens' hits
with ``"model"`` added, and nothing else may change: the CLI's JSON and ``--explain`` results, the
gateway v1 ``results[]`` and the MCP tool's entries carry it; gateway v2 keeps the provider
contract's ``MemorySearchHit`` shape and the CLI's text shows no per-hit fields, so both stay as
they were.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from host_facades.search.hit import surface_fields

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
ANCHOR = "    # the chunk's content hash: the provider reference's revision, on no dict surface\n"
NEW_FIELD = "    model: str | None = None\n"
MODEL = "fts-only"  # the chunks' model column in keyword mode


def _results(surface: str, text: str) -> list[list[dict]]:
    """Each query's hit dicts on ``surface`` (a golden file's text)."""
    out = []
    for payload in json.loads(text).values():
        data = json.loads(payload)
        out.append(data["results"])
    return out


def test_a_search_hit_field_added_in_one_place_reaches_every_dict_surface(tmp_path):
    copy = tmp_path / "repo"
    copy.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("memory_core", "host_facades", "workers", "benchmarks", "examples"):
        shutil.copytree(ROOT / name, copy / name, ignore=ignore)
    (copy / "tests").mkdir()
    for name in ("conftest.py", "test_golden_search.py"):
        shutil.copyfile(ROOT / "tests" / name, copy / "tests" / name)
    shutil.copytree(GOLDEN, copy / "tests" / "golden")
    shutil.copyfile(ROOT / "pyproject.toml", copy / "pyproject.toml")

    hit_py = copy / "host_facades" / "search" / "hit.py"
    source = hit_py.read_text(encoding="utf-8")
    assert source.count(ANCHOR) == 1
    hit_py.write_text(source.replace(ANCHOR, NEW_FIELD + ANCHOR), encoding="utf-8")  # the one edit

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MEMORY_CORE_NO_SKIPS")}
    env.update(MEMORY_CORE_UPDATE_GOLDEN="1", MEMORY_CORE_HOME=str(tmp_path / "home"))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "keyword",
                          "tests/test_golden_search.py"], cwd=copy, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    def golden(root: Path, name: str) -> str:
        return (root / "tests" / "golden" / f"{name}.json").read_text(encoding="utf-8")

    carried = 0
    for name in ("cli_search", "cli_search_explain", "gateway_v1_search", "mcp_search"):
        before, after = _results(name, golden(ROOT, name)), _results(name, golden(copy, name))
        assert len(before) == len(after)
        for old_hits, new_hits in zip(before, after):
            assert [{k: v for k, v in h.items() if k != "model"} for h in new_hits] == old_hits, name
            assert all(h["model"] == MODEL for h in new_hits), name
            carried += len(new_hits)
    assert carried > 0
    for name in ("cli_search_text", "gateway_v2_search"):
        assert golden(copy, name) == golden(ROOT, name), name
    assert "model" not in dict(surface_fields("wire"))  # this checkout's declaration is untouched
