"""Benchmarks of memory-core (``memory-core bench NAME``, memory_core/cli/bench.py).

Every benchmark takes ``--json PATH``: the full results are also written to PATH as JSON, or,
with ``--json -``, printed as JSON on stdout instead of the table (progress goes to stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

JSON_HELP = 'also write the full results as JSON to PATH; "-" prints the JSON instead of the table'


def add_json_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", metavar="PATH", default=None, help=JSON_HELP)


def json_on_stdout(args: argparse.Namespace) -> bool:
    return getattr(args, "json", None) == "-"


def progress_log(args: argparse.Namespace) -> Callable[[str], None]:
    """Where progress lines go: stderr when stdout carries the JSON."""
    return (lambda s: print(s, file=sys.stderr)) if json_on_stdout(args) else print


def emit(args: argparse.Namespace, results: Any, table: Callable[[], str] | None) -> None:
    """Print ``table()`` (when there is one) and write ``results`` where ``--json`` says."""
    path = getattr(args, "json", None)
    from memory_core.output import camel_keys  # one JSON key style for every --json

    text = json.dumps(camel_keys(results), indent=2)
    if path == "-":
        print(text)
        return
    if table is not None:
        print(table())
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
        print(f"results written to {path}")

