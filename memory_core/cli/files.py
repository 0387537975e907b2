"""``memory-core files [--json]``: the indexed files (``memory_core.store.files``; the library
twin is ``MemoryCore.files()``), as a text table or JSON."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from memory_core.cli.common import open_core, print_json
from memory_core.store.files import IndexedFile


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB"):
        if n < 1024 or unit == "MB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return "-"  # pragma: no cover


def format_files(files: list[IndexedFile]) -> str:
    """The text table: source, chunks, size, last indexed (local time) and the escaped path."""
    from memory_core.output import escape_control

    if not files:
        return "No files indexed (run `memory-core index`).\n"
    lines = [f"{'SOURCE':<9} {'CHUNKS':>6} {'SIZE':>9}  {'LAST INDEXED':<19}  PATH"]
    for f in files:
        when = "-" if not f.indexed_at else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(f.indexed_at / 1000))
        lines.append(f"{f.source:<9} {f.chunks:>6} {_size(f.size):>9}  {when:<19}  {escape_control(f.path)}")
    total = sum(f.chunks for f in files)
    plural = ("" if len(files) == 1 else "s", "" if total == 1 else "s")
    lines.append(f"{len(files)} file{plural[0]}, {total} chunk{plural[1]}")
    return "\n".join(lines) + "\n"


def _cmd_files(args: argparse.Namespace) -> int:
    core = open_core(args)
    try:
        files = core.files(sources=args.source)
        if args.json:
            print_json({"agentId": core.agent_id, "files": [f.to_dict() for f in files]})
        else:
            sys.stdout.write(format_files(files))
    finally:
        core.close()
    return 0


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser("files", parents=[common], help="list the indexed files",
                              description="The files the index holds: source, chunks, size and when each "
                                          "was last indexed. Lists the index as it is; `memory-core index` "
                                          "updates it.")
    p.add_argument("--source", action="append", choices=["memory", "sessions"], default=None,
                   help="only this source (repeatable; default: all)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_files)
