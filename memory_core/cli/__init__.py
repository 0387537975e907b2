"""The ``memory-core`` command line.

The CLI is a registry: this module defines the global options, the error -> exit code mapping and
the commands it owns (``index``, ``status``). Other modules add their commands without editing this
file by exposing ``register(subparsers, common)`` and being listed in ``COMMAND_MODULES``; each is
imported inside ``try/except ImportError``, so a module that does not exist yet simply adds nothing.

``register(subparsers, common)`` receives argparse's sub-parsers object and a parent parser holding
the global options; it must call ``subparsers.add_parser(name, parents=[common], ...)`` and set
``func=handler`` with ``handler(args) -> int``. ``open_core(args)`` builds the MemoryCore for the
global options. Handlers raise :class:`MemoryCoreError` for failures; :func:`main` prints one line
``error: <message>`` on stderr and exits 2 (configuration/usage) or 1 (everything else).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, NoReturn

from memory_core.errors import (
    ConfigError,
    InvalidRequest,
    MemoryCoreError,
    StateDirNotWritable,
    WorkspaceError,
)
from memory_core.output import escape_control
from memory_core.progress import Progress

# Modules that may contribute sub-commands (owner in parentheses). Missing modules are skipped.
COMMAND_MODULES = (
    "memory_core.cli.search",  # search, get (H4)
    "memory_core.cli.serve",  # serve, mcp (H6)
    "memory_core.cli.forget",  # forget, watch (H8)
    "memory_core.cli.bench",  # bench and the benchmarks registered with it
    "memory_core.cli.files",  # files
    "memory_core.manifest",  # plugin manifest
)

# exit 2: the command line or the configuration must change (including a state dir that cannot
# be written); exit 1: everything else (e.g. IndexCorrupt: run `memory-core index --force`)
USAGE_ERRORS = (ConfigError, WorkspaceError, InvalidRequest, StateDirNotWritable)
EXIT_USAGE = 2
EXIT_FAILURE = 1


def common_parser() -> argparse.ArgumentParser:
    """The global options every command takes."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("global options")
    g.add_argument("--workspace", metavar="PATH", help="agent workspace (default: configured workspace, else cwd)")
    g.add_argument("--agent", metavar="ID", default=None, help="agent id (default: main)")
    g.add_argument("--config", metavar="FILE", help="TOML or JSON config file")
    return p


def load_cli_config(args: argparse.Namespace) -> Any:
    from memory_core.config import load_config

    cfg = load_config(getattr(args, "config", None))
    agent = getattr(args, "agent", None)
    if agent and agent != cfg.agent_id:
        cfg = cfg.for_agent(agent)
    for notice in cfg.notices:
        print(f"warning: {notice}", file=sys.stderr)
    return cfg


def open_core(args: argparse.Namespace, *, pool: bool = False, **kwargs: Any) -> Any:
    """The MemoryCore for ``--workspace/--agent/--config``.

    A one-shot command (the default) runs in-process (``pool.workers = 0``): starting worker
    processes costs more than the one query they would answer. ``pool=True`` keeps the configured
    pool, for long-running commands and for ``index`` (which hands work to it only when it pays)."""
    from memory_core.core import MemoryCore

    cfg = load_cli_config(args)
    return MemoryCore(getattr(args, "workspace", None), agent_id=cfg.agent_id, config=cfg,
                      pool=None if pool else False, **kwargs)


def print_json(data: Any) -> None:
    """Every ``--json`` output: camelCase keys (memory_core.output.camel_keys), sorted."""
    from memory_core.output import camel_keys

    sys.stdout.write(json.dumps(camel_keys(data), indent=2, sort_keys=True, default=str) + "\n")


# ---------------------------------------------------------------------- index / status


def _cmd_index(args: argparse.Namespace) -> int:
    core = open_core(args, pool=True, repoint=args.repoint)
    try:
        with Progress("Indexing", unit="files") as progress:
            summary = core.index(force=args.force, progress=progress)
    finally:
        core.close()
    if args.json:
        print_json(summary.to_json())
    else:
        if summary.moved_aside:
            print(f"The index file was not a readable database: moved it aside to {summary.moved_aside} "
                  "(with its -wal/-shm, if any) and rebuilt from scratch")
        mode = "full rebuild" if summary.full else "incremental"
        print(f"Indexed {escape_control(core.workspace)} ({mode}, {summary.provider}/{summary.model}) in {summary.seconds:.2f}s")
        print(f"  files {summary.files}, chunks {summary.chunks}; added {summary.added}, changed {summary.changed},"
              f" removed {summary.removed}, unchanged {summary.unchanged}"
              + (f", forgotten {summary.forgotten}" if summary.forgotten else ""))
        for p in summary.problems[:20]:
            print(f"  skipped {escape_control(p['path'])}: {escape_control(p['message'])}", file=sys.stderr)
        if len(summary.problems) > 20:
            print(f"  ... and {len(summary.problems) - 20} more problems (see --json)", file=sys.stderr)
    return EXIT_FAILURE if summary.failed else 0


def _status_json(st: dict[str, Any]) -> dict[str, Any]:
    """The status for ``--json``: the scheduler's ``lastSync*`` fields of a process that has not
    synced itself (a one-shot CLI) come from the last sync the index records, not null beside it."""
    fresh, last = st.get("freshness"), st.get("last_sync")
    if isinstance(fresh, dict) and fresh.get("lastSyncAt") is None and last and last.get("time"):
        fresh = {**fresh, "lastSyncAt": last["time"] / 1000, "lastSyncReason": last.get("reason")}
        if last.get("error") and fresh.get("lastSyncError") is None:
            fresh.update(lastSyncError=last["error"], lastSyncErrorAt=last["time"] / 1000)
        st = {**st, "freshness": fresh}
    return st


def _cmd_status(args: argparse.Namespace) -> int:
    core = open_core(args)
    try:
        st = core.status(deep=args.deep)
    finally:
        core.close()
    loose = st.get("loose_permissions") or []
    if loose:
        shown = ", ".join(f"{escape_control(item['path'])} ({item['mode']})" for item in loose[:3])
        print(f"warning: other users can read the index: {shown}{' ...' if len(loose) > 3 else ''}; run "
              "`memory-core index` to make it private (files 0600, state dir 0700)", file=sys.stderr)
    if args.json:
        print_json(_status_json(st))
        return 0
    vec = st["vector"]
    fts = st["fts"]
    lines = [
        f"Agent: {st['agent']}",
        f"Workspace: {escape_control(st['workspace'])}",
        f"Database: {escape_control(st['db_path'])}{'' if st['db_exists'] else ' (not indexed yet: run `memory-core index`)'}"
        + (f" (state dir not writable: {st['state_dir_problem']}; it can be searched, not updated)"
           if st.get("state_dir_problem") else ""),
        f"Sources: {', '.join(st['sources'])}",
        f"Files: {st['files']}  Chunks: {st['chunks']}  "
        + "  ".join(f"{k}: {v}" for k, v in sorted(st["chunks_by_source"].items())),
        f"Provider: {st['provider']}  Model: {st['model'] or '-'}  Dims: {st['dims'] or '-'}",
        f"FTS: {'available' if fts['available'] else 'unavailable'} ({fts['tokenizer']})",
        "Vector store: " + (
            f"available (sqlite-vec {vec['sqlite_vec_version']}, backend {vec['backend']})" if vec["available"]
            else ("disabled (keyword-only)" if not vec["enabled"] else f"unavailable ({vec['error']})")),
        f"Revision: {st['revision']}  Dirty: {'yes' if st['dirty'] else 'no'}",
    ]
    ident = st.get("identity") or {}
    if ident.get("state") == "mismatch":
        lines.append(f"Index identity: paused ({', '.join(ident['mismatch'])} changed); "
                     "run `memory-core index --force`")
    elif ident.get("state"):
        lines.append(f"Index identity: {ident['state']}")
    last = st.get("last_sync")
    if last:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(last["time"] / 1000))
        lines.append(f"Last sync: {when} ({last.get('reason')}){' error: ' + last['error'] if last.get('error') else ''}")
        if last.get("problems"):
            lines.append(f"Problems: {len(last['problems'])} file(s) skipped, e.g. "
                         f"{escape_control(last['problems'][0]['path'])}: "
                         f"{escape_control(last['problems'][0]['message'])}")
    if args.deep:
        pc = st.get("provider_check") or {}
        if pc.get("mode") == "fts-only":
            lines.append(f"Embeddings: none ({pc.get('reason')})")
        else:
            lines.append("Embeddings: " + (
                "available" if pc.get("available") else f"unavailable ({pc.get('error')})"))
        if "integrity" in st:
            lines.append(f"Integrity: {st['integrity']}" + (
                "" if st["integrity"] == "ok" else " (run `memory-core index --force` to rebuild the index)"))
    print("\n".join(lines))
    return 0


def _register_builtin(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("index", parents=[common], help="index the workspace (incremental; --force rebuilds)",
                       description="Index the agent workspace into its SQLite file. Incremental by default; "
                                   "--force (or a settings change) rebuilds atomically.")
    p.add_argument("--force", action="store_true", help="full rebuild into a temp database, swapped in atomically")
    p.add_argument("--repoint", action="store_true",
                   help="the index was built from another workspace: re-point it to --workspace (files not in "
                        "the new workspace are removed from the index)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=_cmd_index)

    p = sub.add_parser("status", parents=[common], help="show index facts",
                       description="Files, chunks, provider, FTS/vector availability, revision and last sync.")
    p.add_argument("--deep", action="store_true", help="also check the embedding provider and database integrity")
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.set_defaults(func=_cmd_status)


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line, like every other error: ``error: <command>: <problem> (see --help)``."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"error: {self.prog}: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    common = common_parser()
    parser = _Parser(
        prog="memory-core",
        description="Index and search an agent's Markdown memory and session transcripts (OpenClaw Memory Core).",
    )
    from memory_core import __version__

    parser.add_argument("--version", action="version", version=f"memory-core {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _register_builtin(sub, common)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            if exc.name and (exc.name == name or name.startswith(exc.name + ".")):
                continue  # the module does not exist (yet)
            raise
        register = getattr(module, "register", None)
        if register is not None:
            register(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(args) or 0)
    except MemoryCoreError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, USAGE_ERRORS) else EXIT_FAILURE
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        except OSError:
            pass
        return EXIT_FAILURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
