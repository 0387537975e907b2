"""``memory-core bench NAME``: a registry of benchmarks living in the ``benchmarks/`` folder.

Each benchmark module exposes ``add_arguments(parser)`` and ``run(args) -> int`` and its docstring's
first line is the help text (read from the source: a module is imported only when its benchmark
runs or shows its help). ``BENCHMARKS`` maps names to modules; one that cannot be found is a
ModuleNotFoundError when the parser is built, like a missing command module. ``benchmarks`` ships
with the distribution; in a source checkout that is not installed, the checkout that holds this
package (or the current directory) is put on ``sys.path``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import re
import sys
from types import ModuleType
from typing import Any

BENCHMARKS: dict[str, str] = {
    "index": "benchmarks.bench_index",
    "quality": "benchmarks.bench_quality",
    "latency": "benchmarks.bench_latency",
    "throughput": "benchmarks.bench_throughput",
    "gateway": "benchmarks.bench_gateway",
    "freshness": "benchmarks.bench_freshness",
    "cli": "benchmarks.bench_cli",  # start-up of one-shot commands
    "host": "benchmarks.bench_host",  # through a real OpenClaw gateway: the plugin vs its own Memory Core
    "agents": "benchmarks.bench_agents",  # many agents in one serve
}


def _benchmarks_on_path() -> None:
    try:
        importlib.import_module("benchmarks")
        return
    except ImportError:
        pass
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for root in (here, os.getcwd()):
        if os.path.isfile(os.path.join(root, "benchmarks", "__init__.py")):
            sys.path.insert(0, root)
            return


def load_benchmark(module_name: str) -> ModuleType:
    _benchmarks_on_path()
    return importlib.import_module(module_name)


def _first_doc_line(module_name: str) -> str:
    """The first line of ``module_name``'s docstring, read from its source without importing it
    (benchmarks import numpy and more at the top); ModuleNotFoundError when there is no such module."""
    _benchmarks_on_path()
    spec = importlib.util.find_spec(module_name)
    if spec is None:
        raise ModuleNotFoundError(f"No module named {module_name!r} (a benchmark of memory-core bench)",
                                  name=module_name)
    name = module_name.rsplit(".", 1)[-1]
    if not spec.origin or not spec.origin.endswith(".py"):
        return name
    try:
        with open(spec.origin, encoding="utf-8") as fh:
            head = fh.read(4096)
    except OSError:
        return name
    match = _DOCSTRING.match(head)
    if not match or not match.group(2).strip():
        return name
    return match.group(2).strip().splitlines()[0].strip().replace("``", "")  # plain help: no reST markup


_DOCSTRING = re.compile(r'\s*(?:#[^\n]*\n\s*)*[rRuU]?("""|\'\'\')(.*?)(?:\1|$)', re.DOTALL)


class LazyBenchmarkParser(argparse.ArgumentParser):
    """A benchmark's sub-parser whose module is imported (and its options added) only when that
    benchmark is parsed or its help shown, so ``memory-core --help`` or ``search`` never pay for it.
    Mixed in front of the CLI's own parser class (its one-line usage errors)."""

    def __init__(self, *args: Any, module_name: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._module_name = module_name
        self._loaded = not module_name

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        mod = load_benchmark(self._module_name)
        mod.add_arguments(self)
        self.set_defaults(func=mod.run)

    def parse_known_args(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        self._load()  # before argparse applies the defaults (func, option defaults)
        return super().parse_known_args(*args, **kwargs)

    def format_help(self) -> str:
        self._load()
        return super().format_help()

    def format_usage(self) -> str:
        self._load()
        return super().format_usage()


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add ``bench`` with one sub-command per benchmark module (imported when run)."""
    found = {name: (modname, _first_doc_line(modname)) for name, modname in BENCHMARKS.items()}
    # no global options (--workspace/--agent/--config): benchmarks build their own data and ignore them
    p = subparsers.add_parser("bench", help="run a benchmark (" + ", ".join(found) + ")",
                              description="Benchmarks; each prints a table and can write JSON.")
    lazy = type("LazyBenchmarkParser", (LazyBenchmarkParser, type(p)), {})
    sub = p.add_subparsers(dest="benchmark", metavar="NAME", parser_class=lazy)
    for name, (modname, doc) in found.items():
        sub.add_parser(name, help=doc, description=doc, module_name=modname)
    p.set_defaults(func=lambda args: (p.print_help(sys.stderr), 2)[1])
