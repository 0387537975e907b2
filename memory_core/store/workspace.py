"""What the index remembers about its workspace: the realpath it was built from.

A sync compares the workspace's files with the index and prunes what is gone, so an index synced
against the wrong folder loses everything. The owner refuses to open an index recorded for another
workspace unless asked to re-point it (``memory-core index --workspace NEW --repoint``).
"""

from __future__ import annotations

from typing import Any

from memory_core.errors import WorkspaceMismatch
from memory_core.paths import real_path

WORKSPACE_KEY = "memory_index_workspace_v1"


def workspace_realpath(workspace: str) -> str:
    return real_path(workspace)


def record_workspace(writer: Any, workspace: str) -> None:
    """Store the workspace realpath in the index meta (written with every sync that publishes)."""
    real = workspace_realpath(workspace)
    if writer.get_meta_value(WORKSPACE_KEY) != real:
        writer.set_meta_value(WORKSPACE_KEY, real)


def mismatch_error(agent_id: str, recorded: str, workspace: str) -> WorkspaceMismatch:
    """The one-line error for opening an index recorded for ``recorded`` on ``workspace``."""
    return WorkspaceMismatch(
        f"the index of agent {agent_id!r} was built from workspace {recorded}, not {workspace}; nothing was "
        f"synced or removed. Pass --workspace {recorded} (or set `workspace` in the config), or re-point the "
        f"index to this folder with `memory-core index --agent {agent_id} --workspace {workspace} --repoint`"
    )


def check_workspace(recorded: str | None, workspace: str, agent_id: str) -> None:
    """Raise :class:`WorkspaceMismatch` when the index records another workspace realpath."""
    if recorded and recorded != workspace_realpath(workspace):
        raise mismatch_error(agent_id, recorded, workspace)
