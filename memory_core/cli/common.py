"""What every command of the ``memory-core`` CLI shares: the global options, the MemoryCore they
open, ``--json`` output and the exit codes (:func:`memory_core.cli.main` maps errors to them)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from memory_core.errors import EXIT_FAILURE, EXIT_USAGE

__all__ = ["EXIT_FAILURE", "EXIT_USAGE", "common_parser", "open_core", "print_json"]


def common_parser() -> argparse.ArgumentParser:
    """The global options every command takes."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("global options")
    g.add_argument("--workspace", metavar="PATH", help="agent workspace (default: configured workspace, else cwd)")
    g.add_argument("--agent", metavar="ID", default=None,
                   help="agent id (default: every configured agent for status and index, else the default agent)")
    g.add_argument("--config", metavar="FILE", help="TOML or JSON config file (an openclaw.json as it is: JSON5)")
    return p


def load_cli_config(args: argparse.Namespace, overrides: dict[str, Any] | None = None) -> Any:
    """The configuration of ``--config`` (with ``overrides``) for ``--agent``; its notices go to stderr."""
    from memory_core.config import load_config

    cfg = load_config(getattr(args, "config", None), overrides=overrides or None)
    agent = getattr(args, "agent", None)
    if agent and agent != cfg.agent_id:
        cfg = cfg.for_agent(agent)
    for notice in cfg.notices:
        print(f"warning: {notice}", file=sys.stderr)
    return cfg


def agent_configs(args: argparse.Namespace) -> list[Any]:
    """The configurations of the agents a command covers (upstream ``memory status`` / ``index``):
    ``--agent ID`` that one; ``--workspace`` the default agent (one workspace is one agent's);
    else every configured agent. The config's notices go to stderr once."""
    from memory_core.config import load_config

    cfg = load_config(getattr(args, "config", None))
    agent = getattr(args, "agent", None)
    if agent:
        ids = [agent]
    elif getattr(args, "workspace", None):
        ids = [cfg.agent_id]
    else:
        ids = cfg.agent_ids
    out = [cfg if aid == cfg.agent_id else cfg.for_agent(aid) for aid in ids]
    for notice in cfg.notices:
        print(f"warning: {notice}", file=sys.stderr)
    return out


def open_core(args: argparse.Namespace, *, pool: bool = False, config: Any = None, **kwargs: Any) -> Any:
    """The MemoryCore for ``--workspace/--agent/--config``.

    A one-shot command (the default) runs in-process (``pool.workers = 0``): starting worker
    processes costs more than the one query they would answer. ``pool=True`` keeps the configured
    pool, for long-running commands and for ``index`` (which hands work to it only when it pays)."""
    from memory_core.core import MemoryCore

    cfg = config if config is not None else load_cli_config(args)
    return MemoryCore(getattr(args, "workspace", None), agent_id=cfg.agent_id, config=cfg,
                      pool=None if pool else False, **kwargs)


def no_sources_note(core: Any) -> str | None:
    """Why every search of this workspace answers "No matches.": it holds no memory sources (say,
    the command ran outside the agent's workspace). None when it has some."""
    from memory_core.status import source_file_count

    if source_file_count(core.config, core.workspace):
        return None
    from memory_core.output import escape_control

    cfg = core.config
    looked = "MEMORY.md, memory.md, USER.md and memory/**/*.md" + (" and the extraPaths" if cfg.extra_paths else "")
    if "memory" not in cfg.sources:
        looked = "session transcripts"
    elif "sessions" in cfg.sources:
        looked += ", and session transcripts"
    return (f"no memory sources in {escape_control(core.workspace)} (looked for {looked}); run it in the agent's "
            "workspace or pass --workspace PATH")


def print_json(data: Any) -> None:
    """Every ``--json`` output: camelCase keys (memory_core.output.camel_keys), sorted."""
    from memory_core.output import camel_keys

    sys.stdout.write(json.dumps(camel_keys(data), indent=2, sort_keys=True, default=str) + "\n")
