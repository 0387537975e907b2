"""Benchmarks of memory-core (``memory-core bench NAME``, memory_core/bench.py).

Every benchmark takes ``--json PATH``: the full results are also written to PATH as JSON, or,
with ``--json -``, printed as JSON on stdout instead of the table (progress goes to stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
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
    text = json.dumps(results, indent=2)
    if path == "-":
        print(text)
        return
    if table is not None:
        print(table())
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
        print(f"results written to {path}")


class Progress:
    """Periodic progress lines for a long step: ``label: done/total (rate/s)`` at most every
    ``every`` seconds, and a last line with the total time."""

    def __init__(self, label: str, total: int, log: Callable[[str], None], *, every: float = 5.0,
                 unit: str = "texts", clock: Callable[[], float] = time.monotonic) -> None:
        self.label, self.total, self.log, self.every, self.unit, self.clock = label, total, log, every, unit, clock
        self.done = 0
        self.start = self.last = clock()

    def _line(self, now: float) -> str:
        elapsed = max(now - self.start, 1e-9)
        return f"  {self.label}: {self.done}/{self.total} {self.unit} ({self.done / elapsed:.0f} {self.unit}/s)"

    def advance(self, n: int) -> None:
        self.done += n
        now = self.clock()
        if now - self.last >= self.every and self.done < self.total:
            self.last = now
            self.log(self._line(now))

    def finish(self) -> None:
        now = self.clock()
        self.log(self._line(now) + f" in {now - self.start:.1f}s")
