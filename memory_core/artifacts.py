"""The files memory-core owns and a host may export (upstream ``publicArtifacts.listArtifacts``).

:func:`list_artifacts` lists the workspace's memory files with kind, workspace-relative path, size
and mtime. Kinds follow upstream's ``listMemoryWorkspacePublicArtifacts``: ``memory-root`` (MEMORY.md),
``daily-note`` (``memory/YYYY-MM-DD*.md``), ``dream-report`` (``memory/dreaming/**``); memory-core
adds ``memory-file`` for the other memory files it indexes (USER.md, topic notes under memory/),
which upstream labels ``daily-note``. Only regular files inside the workspace are listed: symlinks
(to anywhere) and configured extra paths are not.
"""

from __future__ import annotations

import os
import re
import stat
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from memory_core.sources import list_memory_files

ArtifactKind = Literal["memory-root", "daily-note", "dream-report", "memory-file"]
_DAILY = re.compile(r"^memory/\d{4}-\d{2}-\d{2}[^/]*\.md$")


class MemoryArtifact(BaseModel):
    """One exportable file (camelCase on the wire)."""

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)

    kind: ArtifactKind
    relative_path: str
    absolute_path: str
    agent_ids: tuple[str, ...]
    content_type: Literal["markdown"] = "markdown"
    size: int
    mtime_ms: int

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


def artifact_kind(relative_path: str) -> ArtifactKind:
    if relative_path in ("MEMORY.md", "memory.md"):
        return "memory-root"
    if relative_path.startswith("memory/dreaming/"):
        return "dream-report"
    if _DAILY.match(relative_path):
        return "daily-note"
    return "memory-file"


def list_artifacts(workspace: str, agent_ids: tuple[str, ...] = ("main",)) -> list[MemoryArtifact]:
    """The workspace's memory files, MEMORY.md first, then by path; never a path outside ``workspace``."""
    root = os.path.realpath(workspace)
    out: list[MemoryArtifact] = []
    for path in list_memory_files(workspace):
        try:
            st = os.lstat(path)
            real = os.path.realpath(path)
        except OSError:
            continue  # deleted since the listing
        if not stat.S_ISREG(st.st_mode) or os.path.commonpath([root, real]) != root:
            continue
        rel = os.path.relpath(real, root).replace(os.sep, "/")
        out.append(MemoryArtifact(kind=artifact_kind(rel), relative_path=rel, absolute_path=real,
                                  agent_ids=tuple(agent_ids), size=st.st_size, mtime_ms=int(st.st_mtime * 1000)))
    out.sort(key=lambda a: (a.kind != "memory-root", a.relative_path))
    return out
