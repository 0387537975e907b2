"""``memory-core bench NAME``: a registry of benchmarks living in the ``benchmarks/`` folder.

Each benchmark module exposes ``add_arguments(parser)`` and ``run(args) -> int`` and its docstring's
first line is the help text. ``BENCHMARKS`` maps names to modules; a module that is not present
(yet) adds nothing. ``benchmarks`` ships with the distribution; in a source checkout that is not
installed, the checkout next to this package (or the current directory) is put on ``sys.path``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from types import ModuleType
from typing import Any

BENCHMARKS: dict[str, str] = {
    "index": "benchmarks.bench_index",  # H2
    "quality": "benchmarks.bench_quality",  # H4
    "latency": "benchmarks.bench_latency",  # H4
    "throughput": "benchmarks.bench_throughput",  # H7
    "gateway": "benchmarks.bench_gateway",  # H6
    "freshness": "benchmarks.bench_freshness",  # H8
}


def _benchmarks_on_path() -> None:
    try:
        importlib.import_module("benchmarks")
        return
    except ImportError:
        pass
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for root in (here, os.getcwd()):
        if os.path.isfile(os.path.join(root, "benchmarks", "__init__.py")):
            sys.path.insert(0, root)
            return


def load_benchmark(module_name: str) -> ModuleType | None:
    _benchmarks_on_path()
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        if exc.name and (exc.name == module_name or module_name.startswith(exc.name + ".")):
            return None
        raise


def help_text(doc: str) -> str:
    """A module docstring's first line as plain help text (no reST inline-literal markup)."""
    return doc.strip().splitlines()[0].replace("``", "")


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add ``bench`` with one sub-command per benchmark module that exists."""
    found = {name: mod for name, modname in BENCHMARKS.items() if (mod := load_benchmark(modname)) is not None}
    if not found:
        return
    # no global options (--workspace/--agent/--config): benchmarks build their own data and ignore them
    p = subparsers.add_parser("bench", help="run a benchmark (" + ", ".join(found) + ")",
                              description="Benchmarks; each prints a table and can write JSON.")
    sub = p.add_subparsers(dest="benchmark", metavar="NAME")
    for name, mod in found.items():
        doc = help_text(mod.__doc__ or name)
        bp = sub.add_parser(name, help=doc, description=doc)
        mod.add_arguments(bp)
        bp.set_defaults(func=mod.run)
    p.set_defaults(func=lambda args: (p.print_help(sys.stderr), 2)[1])
