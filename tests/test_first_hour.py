"""Issue 28, what a new user trips on in the first hour: each message or output as the user sees it."""

from __future__ import annotations

from pathlib import Path

from memory_core.cli import main


def write(ws: Path, rel: str, text: str) -> None:
    p = ws / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")


# --- item 6: `get` in text mode names the CLI's flag ---------------------------------------------

def test_cli_get_suggests_the_from_flag_to_continue(workspace, capsys):
    write(workspace, "MEMORY.md", "# Travel plans\n\nLisbon in May.\nPorto in June.\n")
    args = ["--workspace", str(workspace)]
    assert main(["index", *args]) == 0
    capsys.readouterr()
    assert main(["get", "MEMORY.md", "--lines", "2", *args]) == 0
    out = capsys.readouterr()
    assert (out.out, out.err) == ("# Travel plans\n\n", "note: more lines follow; use --from 3 to continue\n")
    assert main(["get", "MEMORY.md", "--from", "3", *args]) == 0
    out = capsys.readouterr()
    assert (out.out, out.err) == ("Lisbon in May.\nPorto in June.\n", "")
