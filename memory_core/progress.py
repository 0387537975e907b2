"""Progress of long runs on stderr: a bar with an ETA on a terminal, a plain line every few seconds otherwise.

:class:`Progress` is a ``ProgressFn`` (``progress(done, total, item)``, the indexer's callback) and
also counts by itself (:meth:`Progress.advance`). Without a terminal (CI logs, pipes) it writes one
line per ``interval_s`` (``Indexing: 1200/3000 files (40%), 85.3 files/s, ETA 21s``), so a long run
is never silent; :meth:`Progress.finish` closes the bar, or prints a last line when lines were printed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

TTY_REDRAW_S = 0.1  # a bar redraws at most this often
LINE_INTERVAL_S = 3.0  # without a terminal: one line this often


def format_duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``2h01m``."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _rate(rate: float) -> str:
    return f"{rate:.1f}" if rate >= 1 else f"{rate:.2g}"  # a slow run shows 0.046, not 0.0


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class Progress:
    """Progress of ``total`` units of work named ``unit``, drawn on ``stream`` (default stderr).

    ``tty`` (default: ``stream.isatty()``) picks the in-place bar over periodic lines; ``clock`` is
    injectable so tests can step time. ``total`` may be None (a count and a rate, no ETA) or change
    with each call.
    """

    def __init__(self, label: str = "Progress", total: int | None = None, *, unit: str = "files",
                 stream: TextIO | None = None, tty: bool | None = None, interval_s: float | None = None,
                 width: int = 30, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = _isatty(self.stream) if tty is None else tty
        self.interval_s = interval_s if interval_s is not None else (TTY_REDRAW_S if self.tty else LINE_INTERVAL_S)
        self.label, self.unit, self.width, self.total = label, unit, width, total
        self.clock = clock
        self.done = 0
        self.item = ""
        self.started = clock()
        self._last = self.started  # a line is due interval_s after the start, not at once
        self._drawn = False  # the bar is on screen
        self.lines = 0  # periodic lines printed
        self._finished = False

    # -- feeding ---------------------------------------------------------------------------------

    def __call__(self, done: int, total: int | None = None, item: str = "") -> None:
        self.done = done
        if total is not None:
            self.total = total
        self.item = item
        self._maybe_report()

    def advance(self, n: int = 1, item: str = "") -> None:
        self(self.done + n, None, item)

    # -- figures ---------------------------------------------------------------------------------

    def elapsed_s(self) -> float:
        return max(0.0, self.clock() - self.started)

    def rate(self) -> float | None:
        """Units per second so far (None before any time has passed)."""
        elapsed = self.elapsed_s()
        return self.done / elapsed if elapsed > 0 and self.done > 0 else None

    def eta_s(self) -> float | None:
        """Seconds left at the average rate so far; None without a total or a rate."""
        rate = self.rate()
        if self.total is None or rate is None:
            return None
        return max(0, self.total - self.done) / rate

    def line(self) -> str:
        """The periodic line: ``label: done/total unit (pct%), rate unit/s, ETA``."""
        parts = [f"{self.label}: {self.done}" + (f"/{self.total}" if self.total is not None else "") + f" {self.unit}"]
        if self.total:
            parts[0] += f" ({100 * self.done // self.total}%)"
        rate = self.rate()
        if rate is not None:
            parts.append(f"{_rate(rate)} {self.unit}/s")
        eta = self.eta_s()
        if eta is not None and self.done < (self.total or 0):
            parts.append(f"ETA {format_duration(eta)}")
        return ", ".join(parts)

    def bar(self) -> str:
        """The terminal bar: ``label [####....] done/total ETA 12s item``."""
        total = self.total or 0
        frac = min(1.0, self.done / total) if total else 0.0
        filled = int(frac * self.width)
        count = f"{self.done}/{total}" if self.total is not None else str(self.done)
        eta = self.eta_s()
        eta_text = f"ETA {format_duration(eta)}" if eta is not None and self.done < total else ""
        name = self.item if len(self.item) <= 40 else "..." + self.item[-37:]
        return f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {count} {eta_text:<9} {name:<40}"

    # -- output ----------------------------------------------------------------------------------

    def _maybe_report(self) -> None:
        now = self.clock()
        complete = self.total is not None and self.done >= self.total
        if self.tty:
            if complete or now - self._last >= self.interval_s:
                self._last = now
                self._write("\r" + self.bar())
                self._drawn = True
        elif now - self._last >= self.interval_s and not complete:
            self._last = now
            self._write(self.line() + "\n")
            self.lines += 1

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stderr must not fail the work
            pass

    def finish(self) -> None:
        """End the bar with a newline, or (lines mode) say the total and the time when lines were printed."""
        if self._finished:
            return
        self._finished = True
        if self._drawn:
            self._write("\n")
        elif self.lines:
            rate = self.rate()
            self._write(f"{self.label}: {self.done}" + (f"/{self.total}" if self.total is not None else "")
                        + f" {self.unit} in {format_duration(self.elapsed_s())}"
                        + (f" ({_rate(rate)} {self.unit}/s)" if rate is not None else "") + "\n")

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.finish()
