"""The ``memory-core`` command line: :func:`main` and the parser it builds from its commands.

Each command module of this package is imported here directly (a missing or broken one fails at
start-up with its ImportError) and exposes ``register(subparsers, common)``: it calls
``subparsers.add_parser(name, parents=[common], ...)`` and sets ``func=handler`` with
``handler(args) -> int``. What commands share (global options, ``open_core``, ``print_json``, the
exit codes) is in :mod:`memory_core.cli.common`. Handlers raise :class:`MemoryCoreError` for
failures; :func:`main` prints one line ``error: <message>`` on stderr and exits 2
(configuration/usage) or 1 (everything else). Command modules import nothing heavy at the top, so
``memory-core --help`` loads no numpy, apsw or faiss.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from memory_core.cli import bench, files, forget, index, plugin, search, serve
from memory_core.cli.common import EXIT_FAILURE, EXIT_USAGE, common_parser
from memory_core.errors import MemoryCoreError, on_surfaces

# in the order `memory-core --help` lists them
COMMANDS = (index, search, serve, forget, bench, files, plugin)


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
    for command in COMMANDS:
        command.register(sub, common)
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
        return on_surfaces(exc).exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        except OSError:
            pass
        return EXIT_FAILURE
