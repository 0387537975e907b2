"""``memory-core files [--json]`` and its library twin ``MemoryCore.files()``: the indexed files.

One row per indexed source file: path, source, chunks, size and mtime as indexed, and when its
content was last indexed (the newest ``updated_at`` of its chunks; None for a file with no chunk,
e.g. an empty one). Reads the index through a short-lived read-only connection, never the writer,
and starts no sync: it lists what the index holds now (``status`` says whether that is behind).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

_FILES_SQL = (
    "SELECT s.source, s.path, s.size, s.mtime, count(c.id), max(c.updated_at)"
    " FROM memory_index_sources s LEFT JOIN memory_index_chunks c ON c.path = s.path AND c.source = s.source"
    " {where} GROUP BY s.source, s.path ORDER BY s.source, s.path"
)


@dataclass(frozen=True)
class IndexedFile:
    """One indexed file: ``size`` in bytes and ``mtime_ms`` as indexed, ``indexed_at`` in ms since
    the epoch."""

    path: str
    source: str
    chunks: int
    size: int | None
    mtime_ms: float | None
    indexed_at: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def list_indexed_files(db_path: str, sources: list[str] | None = None) -> list[IndexedFile]:
    """The files the index at ``db_path`` holds, by source then path (``[]`` when not indexed yet)."""
    if not os.path.exists(db_path):
        return []
    import apsw

    from host_facades.engine_knn import open_readonly

    where = f"WHERE s.source IN ({','.join('?' * len(sources))})" if sources else ""
    conn = open_readonly(db_path, load_vec=False)
    try:
        rows = list(conn.execute(_FILES_SQL.format(where=where), list(sources or ())))
    except apsw.SQLError as exc:
        if "no such table" in str(exc):
            return []  # the schema is created by the first index
        raise
    finally:
        conn.close()
    return [IndexedFile(path=path, source=source, chunks=int(chunks), size=size, mtime_ms=mtime,
                        indexed_at=None if at is None else int(at))
            for source, path, size, mtime, chunks, at in rows]


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
    from memory_core.cli import open_core, print_json

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
