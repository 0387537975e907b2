"""The README's "One search, room by room" names rooms that exist: every repository path in it
(``memory_core/...``, ``host_facades/...``, ``workers/...``, ``tests/...``) is a file or folder."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROOTS = ("memory_core/", "host_facades/", "workers/", "tests/")


def _section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("### One search, room by room")
    return text[start:text.index("\n### ", start + 1)]


def test_every_room_the_readme_names_exists():
    named = re.findall(r"`([\w./]+)`", _section())
    paths = [n for n in named if n.startswith(ROOTS)]
    assert len(paths) > 20
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert missing == []


def test_the_walk_names_each_stage_folder():
    section = _section()
    for folder in ("host_facades/retrieval/", "host_facades/ranking/", "host_facades/chunking/",
                   "host_facades/search/", "host_facades/db/", "memory_core/surfaces/", "memory_core/contract/"):
        assert folder.rstrip("/") in section, folder
        assert (ROOT / folder).is_dir(), folder
