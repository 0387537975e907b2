"""What a new user trips on in the first hour: each message or output as the user sees it."""

from __future__ import annotations

import json
from pathlib import Path

from memory_core.cli import main
from memory_core.embeddings.registry import registered_providers


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


# --- item 2: turning on local embeddings -----------------------------------------------------------

def test_an_index_built_with_local_embeddings_says_what_differs_and_both_fixes(workspace, capsys, monkeypatch):
    write(workspace, "MEMORY.md", "# Travel plans\n\nLisbon in May.\n")
    args = ["--workspace", str(workspace)]
    monkeypatch.setenv("MEMORY_CORE_PROVIDER", "local")
    assert main(["index", *args]) == 0
    monkeypatch.delenv("MEMORY_CORE_PROVIDER")
    capsys.readouterr()
    assert main(["search", "lisbon", *args]) == 1
    assert capsys.readouterr().err == (
        "error: memory search paused: the index was built with other settings than the configuration's "
        "(index: local / all-MiniLM-L6-v2; configuration: none (keyword-only)); set `provider = \"local\"` in the "
        "config to search it as built, or run `memory-core index --force` to rebuild it with the configuration "
        "(its vectors are dropped)\n")
    assert main(["index", *args]) == 1  # a plain index does not drop the vectors either
    assert capsys.readouterr().err == (
        "error: refusing to rebuild the semantic index (local/all-MiniLM-L6-v2) as keyword-only: no embedding "
        "provider is configured now. Set `provider = \"local\"` in the config to keep it, or run "
        "`memory-core index --force` to rebuild keyword-only and drop the vectors\n")
    config = workspace.parent / "memory-core.toml"
    config.write_text('provider = "local"\n', encoding="utf-8")  # the README's recipe
    assert main(["search", "lisbon", *args, "--config", str(config)]) == 0
    assert "MEMORY.md#L1-L4" in capsys.readouterr().out


def test_a_rebuild_for_a_settings_change_says_so(workspace, capsys, monkeypatch):
    write(workspace, "MEMORY.md", "# Travel plans\n\nLisbon in May.\n")
    args = ["--workspace", str(workspace)]
    assert main(["index", *args]) == 0
    assert capsys.readouterr().out.startswith(f"Indexed {workspace} (full rebuild: new index, none/fts-only) in ")
    monkeypatch.setenv("MEMORY_CORE_CHUNKING__TOKENS", "300")
    assert main(["index", *args]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"Indexed {workspace} (full rebuild: settings changed (chunking.tokens 400 -> 300), "
                             "none/fts-only) in ")
    assert out[1] == "  files 1, chunks 1; added 0, changed 0, removed 0, unchanged 1"


# --- item 3: one misspelling, one behaviour --------------------------------------------------------

def test_a_misspelt_provider_is_exit_2_with_the_same_line_on_every_command(workspace, tmp_path, capsys):
    # the names come from the registry (auto, local, none, openai-compatible, and any a test registered)
    LOCALL = (f"provider: unknown embedding provider 'locall' (did you mean 'local'?); use one of "
              f"{', '.join(registered_providers())}")
    write(workspace, "MEMORY.md", "# Travel plans\n\nLisbon in May.\n")
    config = tmp_path / "memory-core.toml"
    config.write_text('provider = "locall"\n', encoding="utf-8")
    args = ["--workspace", str(workspace), "--config", str(config)]
    for command in (["search", "lisbon"], ["index"], ["get", "MEMORY.md"], ["files"], ["forget", "--session", "x"],
                    ["watch"], ["serve", "--auth", "none", "--port", "0"], ["mcp"], ["status"], ["status", "--json"]):
        assert main([*command, *args]) == 2, command
        out = capsys.readouterr()
        assert out.err == f"error: {LOCALL}\n", command
    assert main(["status", *args]) == 2
    assert f"\nProblem: configuration: {LOCALL}\n" in capsys.readouterr().out
    assert main(["status", "--json", *args]) == 2
    assert json.loads(capsys.readouterr().out)[0]["configError"] == LOCALL


# --- item 4: the key as written, and the nearest known key path ------------------------------------

def test_an_unknown_key_is_named_as_written_with_the_nearest_known_key(workspace, tmp_path, capsys, monkeypatch):
    config = tmp_path / "memory-core.toml"
    config.write_text("max_results = 5\n", encoding="utf-8")
    assert main(["search", "lisbon", "--workspace", str(workspace), "--config", str(config)]) == 2
    assert capsys.readouterr().err == (
        "error: invalid configuration: max_results: is not a known setting (did you mean query.maxResults?) "
        f"(got 5); set in config file {config}\n")
    config.write_text("[query]\nmin_scor = 0.2\n", encoding="utf-8")
    assert main(["search", "lisbon", "--workspace", str(workspace), "--config", str(config)]) == 2
    assert capsys.readouterr().err == (
        "error: invalid configuration: query.min_scor: is not a known setting (did you mean query.minScore?) "
        f"(got 0.2); set in config file {config}\n")
    monkeypatch.setenv("MEMORY_CORE_MAX_RESULTS", "5")
    assert main(["search", "lisbon", "--workspace", str(workspace)]) == 2
    assert capsys.readouterr().err == (
        "error: environment variable MEMORY_CORE_MAX_RESULTS is not a memory-core setting; did you mean "
        "MEMORY_CORE_QUERY__MAX_RESULTS? (rename or unset it)\n")
    monkeypatch.delenv("MEMORY_CORE_MAX_RESULTS")
    monkeypatch.setenv("MEMORY_CORE_QUERY__MAX_RESULT", "5")
    assert main(["search", "lisbon", "--workspace", str(workspace)]) == 2
    assert capsys.readouterr().err == (
        "error: invalid configuration: MEMORY_CORE_QUERY__MAX_RESULT: is not a known setting (did you mean "
        "MEMORY_CORE_QUERY__MAX_RESULTS?) (got '5')\n")


# --- item 5: an empty workspace, and files that are not Markdown ----------------------------------

def test_a_search_where_there_are_no_memory_sources_says_so_and_where_it_looked(tmp_path, capsys):
    empty = tmp_path / "not-a-workspace"
    empty.mkdir()
    note = (f"note: no memory sources in {empty} (looked for MEMORY.md, memory.md, USER.md and memory/**/*.md); "
            "run it in the agent's workspace or pass --workspace PATH\n")
    assert main(["search", "lisbon", "--workspace", str(empty)]) == 0
    out = capsys.readouterr()
    assert (out.out, out.err) == ("No matches.\n", note)
    assert main(["search", "lisbon", "--json", "--workspace", str(empty)]) == 0
    assert json.loads(capsys.readouterr().out)["note"] == note[len("note: "):-1]
    write(empty, "MEMORY.md", "# Travel plans\n")  # a workspace with notes: no match is just no match
    assert main(["search", "zzzqqq", "--workspace", str(empty)]) == 0
    out = capsys.readouterr()
    assert (out.out, out.err) == ("No matches.\n", "")


def test_status_lists_files_skipped_for_not_being_markdown(workspace, capsys):
    write(workspace, "MEMORY.md", "# Travel plans\n")
    for name in ("memory/flights.txt", "memory/trip/visa.pdf", "memory/.DS_Store"):
        write(workspace, name, "x")
    args = ["--workspace", str(workspace)]
    assert main(["index", *args]) == 0
    assert capsys.readouterr().err == (
        "  2 files skipped: not Markdown (only .md files are indexed): memory/flights.txt, memory/trip/visa.pdf\n")
    assert main(["status", *args]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "Problems: 2 files skipped: not Markdown (only .md files are indexed): memory/flights.txt, "
        "memory/trip/visa.pdf")
    assert main(["status", "--json", *args]) == 0
    assert json.loads(capsys.readouterr().out)[0]["skippedFiles"] == [
        {"code": "not_markdown", "message": "not Markdown (only .md files are indexed)", "path": p}
        for p in ("memory/flights.txt", "memory/trip/visa.pdf")]


def test_a_first_search_in_a_folder_without_notes_does_not_tie_the_agent_to_it(tmp_path, capsys):
    """The index that search bootstrapped in the wrong folder holds no file: the agent's real
    workspace takes it over instead of being refused as "built from workspace <wrong folder>"."""
    wrong, ws = tmp_path / "downloads", tmp_path / "my-agent"
    wrong.mkdir()
    write(ws, "MEMORY.md", "# Travel plans\n\nLisbon in May.\n")
    assert main(["search", "lisbon", "--workspace", str(wrong)]) == 0
    assert capsys.readouterr().out == "No matches.\n"
    assert main(["search", "lisbon", "--workspace", str(ws)]) == 0
    assert capsys.readouterr().out.splitlines()[0].split()[1] == "MEMORY.md#L1-L4"
    assert main(["search", "lisbon", "--workspace", str(wrong)]) == 2  # now it holds notes: refused
    assert capsys.readouterr().err.startswith(f"error: the index of agent 'main' was built from workspace {ws}, "
                                              f"not {wrong}; nothing was synced or removed.")
