"""``python -m benchmarks.gateway_hops``: a keyword search through a real ``memory-core serve``, a
bare websockets echo and the in-process FTS5 anchor, interleaved, with ``--gap-ms`` idle gaps."""

from __future__ import annotations

import argparse
import json

import pytest

from benchmarks.gateway_hops import ROWS, main, parse_gaps, summary


def test_gaps_are_distinct_non_negative_numbers():
    assert parse_gaps("0") == [0.0]
    assert parse_gaps("0,2.5,30") == [0.0, 2.5, 30.0]
    for bad in ("", "3,x", "-1", "2,2", "10000"):
        with pytest.raises(argparse.ArgumentTypeError, match="--gap-ms|gaps|numbers"):
            parse_gaps(bad)


def test_summary_gives_each_gap_its_own_ratios_to_its_own_anchor():
    rows = {0.0: {"anchor FTS5 OR": [1.0, 2.0, 3.0], "keyword gateway": [2.0, 3.0, 4.0],
                  "websockets echo": [1.0]},
            30.0: {"anchor FTS5 OR": [4.0], "keyword gateway": [10.0], "websockets echo": [2.0]}}
    out = summary(rows)
    assert [g["gap_ms"] for g in out] == [0.0, 30.0]
    first = {r["row"]: r for r in out[0]["rows"]}
    assert first["anchor FTS5 OR"]["over_anchor"] == 1.0
    assert first["keyword gateway"]["p50_ms"] == 3.0 and first["keyword gateway"]["over_anchor"] == 1.5
    assert first["keyword gateway"]["n"] == 3
    assert {r["row"]: r["over_anchor"] for r in out[1]["rows"]} == {
        "anchor FTS5 OR": 1.0, "keyword gateway": 2.5, "websockets echo": 0.5}


@pytest.mark.slow
def test_a_short_run_measures_every_row_at_every_gap(tmp_path, capsys):
    out = tmp_path / "hops.json"
    assert main(["--docs", "40", "--seconds", "1", "--gap-ms", "0,5", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "idle gap 0 ms before each request" in printed and "idle gap 5 ms before each request" in printed
    results = json.loads(out.read_text(encoding="utf-8"))
    assert results["docs"] == 40 and results["samples"] >= 2
    assert [g["gapMs"] for g in results["gaps"]] == [0.0, 5.0]
    for gap in results["gaps"]:
        assert [r["row"] for r in gap["rows"]] == list(ROWS)
        for row in gap["rows"]:
            assert row["n"] >= 1 and row["p50Ms"] > 0
    # the server's event loop and its worker ran on a CPU for every search
    processes = {r["process"]: r for r in results["perSearch"]}
    assert processes["server event loop"]["onCpuUs"] > 0
    assert any(name.startswith("server child") and r["onCpuUs"] > 0 for name, r in processes.items())
