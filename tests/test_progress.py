"""memory_core.progress: periodic lines without a terminal, a bar with an ETA on one (stepped clock)."""

from __future__ import annotations

import io

import pytest

from memory_core import progress as progress_mod
from memory_core.cli import main
from memory_core.progress import Progress, format_duration


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_without_a_terminal_one_line_per_interval_with_rate_and_eta():
    clock, out = Clock(), io.StringIO()
    p = Progress("Indexing", 3000, unit="files", stream=out, clock=clock)  # StringIO is no terminal
    for done in range(1, 101):  # 100 files/s for 1 s: under the 3 s interval, nothing yet
        clock.t += 0.01
        p(done, 3000, f"memory/{done}.md")
    assert out.getvalue() == ""
    clock.t += 4.0  # 5 s after the start
    p(500, 3000, "memory/500.md")
    assert out.getvalue() == "Indexing: 500/3000 files (16%), 100.0 files/s, ETA 25s\n"
    clock.t += 1.0  # 1 s later: no new line
    p(600, 3000, "memory/600.md")
    assert out.getvalue().count("\n") == 1
    clock.t += 4.0
    p(1400, 3000, "x")
    assert out.getvalue().splitlines()[-1] == "Indexing: 1400/3000 files (46%), 140.0 files/s, ETA 11s"
    clock.t += 1.0
    p(3000, 3000, "x")
    p.finish()
    assert out.getvalue().splitlines()[-1] == "Indexing: 3000/3000 files in 11s (272.7 files/s)"


def test_a_short_run_without_a_terminal_prints_nothing():
    clock, out = Clock(), io.StringIO()
    with Progress("Indexing", stream=out, clock=clock) as p:
        clock.t += 0.5
        p(2, 2, "b.md")
    assert out.getvalue() == ""


def test_terminal_bar_shows_eta_and_ends_with_a_newline():
    clock, out = Clock(), io.StringIO()
    p = Progress("Indexing", 4, stream=out, tty=True, width=8, clock=clock)
    clock.t += 1.0
    p(1, 4, "memory/a.md")
    assert out.getvalue() == "\rIndexing [##......] 1/4 " + "ETA 3s".ljust(9) + " " + "memory/a.md".ljust(40)
    clock.t += 0.05  # under the redraw interval: not drawn
    p(2, 4, "memory/b.md")
    assert out.getvalue().count("\r") == 1
    clock.t += 1.0
    p(4, 4, "memory/d.md")  # the complete state is always drawn, without an ETA
    p.finish()
    assert out.getvalue().endswith("\rIndexing [########] 4/4" + " " * 11 + "memory/d.md".ljust(40) + "\n")


def test_a_slow_rate_keeps_its_digits():
    clock, out = Clock(), io.StringIO()
    p = Progress("index", 9, unit="runs", stream=out, clock=clock)
    clock.t += 21.5
    p(1)
    assert out.getvalue() == "index: 1/9 runs (11%), 0.047 runs/s, ETA 2m52s\n"


def test_advance_counts_without_a_total():
    clock, out = Clock(), io.StringIO()
    p = Progress("Queries", unit="queries", stream=out, interval_s=1.0, clock=clock)
    clock.t += 2.0
    p.advance(10)
    assert out.getvalue() == "Queries: 10 queries, 5.0 queries/s\n"
    assert p.eta_s() is None


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (42.4, "42s"), (185, "3m05s"), (7260, "2h01m")])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_index_command_prints_progress_lines_without_a_terminal(tmp_path, monkeypatch, capsys):
    """`memory-core index` with stderr on a pipe reports progress as lines (interval 0 here)."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    for i in range(5):
        (ws / "memory" / f"n{i}.md").write_text(f"# Note {i}\n\nfalcon staging {i}\n", encoding="utf-8")
    monkeypatch.setattr(progress_mod, "LINE_INTERVAL_S", 0.0)
    monkeypatch.setenv("MEMORY_CORE_POOL__WORKERS", "0")
    assert main(["index", "--workspace", str(ws)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert [line.split(",")[0] for line in err[:4]] == [f"Indexing: {i}/5 files ({20 * i}%)" for i in range(1, 5)]
    assert err[4].startswith("Indexing: 5/5 files in ")
