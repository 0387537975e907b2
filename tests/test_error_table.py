"""The one table from an error to its CLI exit code and gateway v1 error code (memory_core/errors.py)."""

from __future__ import annotations

from memory_core.errors import (
    ConfigError,
    IndexCorrupt,
    IndexPaused,
    ProviderUnavailable,
    StateDirNotWritable,
    WorkspaceMismatch,
    on_surfaces,
)
from memory_core.validation import QueryTooLarge


def test_each_error_has_one_row_and_subclasses_share_their_base_row():
    rows = {type(e).__name__: (on_surfaces(e).exit_code, on_surfaces(e).gateway) for e in [
        QueryTooLarge("q"), ConfigError("c"), WorkspaceMismatch("w"), StateDirNotWritable("s"),
        IndexCorrupt("i"), IndexPaused("p"), ProviderUnavailable("u"), ValueError("v")]}
    assert rows == {
        "QueryTooLarge": (2, "INVALID_REQUEST"), "ConfigError": (2, "UNAVAILABLE"),
        "WorkspaceMismatch": (2, "UNAVAILABLE"), "StateDirNotWritable": (2, "UNAVAILABLE"),
        "IndexCorrupt": (1, "UNAVAILABLE"), "IndexPaused": (1, "UNAVAILABLE"),
        "ProviderUnavailable": (1, "UNAVAILABLE"), "ValueError": (1, "UNAVAILABLE")}


def test_the_paused_error_names_what_changed_and_the_fix():
    assert IndexPaused.settings_changed(["model", "chunkTokens"]).message == (
        "memory search paused: the index was built with different settings (model, chunkTokens); "
        "run `memory-core index --force`")
    assert IndexPaused.settings_changed(["chunkTokens"], doing="index").message.startswith("memory index paused: ")
