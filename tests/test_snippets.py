"""The CLI shows the lines around a hit's match, marks cuts with "…" and highlights on a terminal."""

from __future__ import annotations

from memory_core.surfaces.snippets import render_snippet

TEXT = "\n".join(f"line {i} filler" for i in range(1, 21)).replace("line 15 filler", "line 15 code freeze is Friday")


def test_the_matching_line_is_shown_and_cuts_marked():
    # the window ends with the text, so it shows more than the one line above the match
    assert render_snippet(TEXT, "when is code freeze") == [
        "…", "line 13 filler", "line 14 filler", "line 15 code freeze is Friday",
        *[f"line {i} filler" for i in range(16, 21)]]


def test_a_match_in_the_middle_is_cut_on_both_sides():
    text = TEXT.replace("line 15 code freeze is Friday", "line 15 filler").replace("line 9 filler", "line 9 freeze")
    assert render_snippet(text, "freeze") == ["…", *[f"line {i} filler" if i != 9 else "line 9 freeze"
                                                     for i in range(8, 16)], "…"]


def test_short_text_and_no_match_show_the_start():
    assert render_snippet("a\nb\n", "zzz") == ["a", "b"]
    assert render_snippet(TEXT, "zzz") == [f"line {i} filler" for i in range(1, 9)] + ["…"]


def test_the_window_holding_most_query_terms_wins():
    text = TEXT.replace("line 3 filler", "line 3 budget").replace("line 18 filler", "line 18 budget freeze")
    assert render_snippet(text, "budget freeze", max_lines=3) == ["…", "line 17 filler", "line 18 budget freeze",
                                                                   "line 19 filler", "…"]


def test_query_terms_are_highlighted_on_a_terminal_only():
    assert render_snippet("The Deployment went fine", "deploy", color=True) == [
        "The \x1b[1;33mDeployment\x1b[0m went fine"]
    assert render_snippet("The Deployment went fine", "deploy") == ["The Deployment went fine"]


def test_a_long_line_is_cut_around_its_match():
    line = "x" * 300 + " needle " + "y" * 300
    assert render_snippet(line, "needle", width=40) == ["…" + "x" * 9 + " needle " + "y" * 23 + "…"]


def test_cli_search_shows_the_matching_line_of_a_long_chunk(tmp_path, monkeypatch, capsys):
    from memory_core.cli import main

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "notes.md").write_text(TEXT + "\n", encoding="utf-8")
    monkeypatch.setenv("MEMORY_CORE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MEMORY_CORE_POOL__WORKERS", "0")
    assert main(["index", "--workspace", str(ws)]) == 0
    capsys.readouterr()
    assert main(["search", "code freeze", "--workspace", str(ws)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[1].startswith("memory/notes.md#L1-")
    assert out[1:5] == ["    …", "    line 13 filler", "    line 14 filler", "    line 15 code freeze is Friday"]


def test_cli_search_finds_the_match_past_the_wire_snippet(tmp_path, monkeypatch, capsys):
    """The match sits beyond the 700 characters a hit's own snippet carries: only the chunk's
    full text, read from the index, can show it."""
    from memory_core.cli import main

    lines = [f"line {i} filler words to pad the chunk out" for i in range(1, 31)]
    lines[24] = "line 25 code freeze is Friday"
    assert len("\n".join(lines[:24])) > 700
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "notes.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setenv("MEMORY_CORE_HOME", str(tmp_path / "home"))
    assert main(["index", "--workspace", str(ws)]) == 0
    capsys.readouterr()
    assert main(["search", "code freeze", "--workspace", str(ws)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[1].startswith("memory/notes.md#L1-")
    assert "    line 25 code freeze is Friday" in out[1:9]
