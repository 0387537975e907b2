"""Freshness acceptance tests on a real MemoryCore: real workspace files, the real SQLite index,
the freshness scheduler running in-process with real watchfiles threads, real searches."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from memory_core.cli import main as cli_main
from memory_core.cli.forget import forget_session
from memory_core.config import MemoryCoreConfig
from memory_core.core import MemoryCore
from memory_core.errors import ForgetRefused
from memory_core.freshness import FreshnessSettings
from memory_core.search.engine import SearchEngine
from memory_core.session_keys import session_index_path
from tests.helpers import wait_for


class Served:
    """A MemoryCore with its freshness scheduler started, and a searcher that consults it first."""

    def __init__(self, tmp_path: Path, *, debounce_ms: int = 200, sessions: bool = False, **settings):
        self.ws = tmp_path / "ws"
        (self.ws / "memory").mkdir(parents=True, exist_ok=True)
        self.sessions_dir = tmp_path / "sessions"
        self.sessions_dir.mkdir(exist_ok=True)
        extra = {"sources": ["memory", "sessions"], "experimental": {"sessionMemory": True},
                 "sessionsDir": str(self.sessions_dir)} if sessions else {}
        self.raw = {"workspace": str(self.ws), "stateDir": str(tmp_path / "state"), "pool": {"workers": 0},
                    "sync": {"watchDebounceMs": debounce_ms}, **extra}
        self.cfg = MemoryCoreConfig.model_validate(self.raw)
        self.settings = FreshnessSettings.from_config(self.cfg, **settings)
        self.core: MemoryCore | None = None

    def start(self) -> Served:
        self.core = MemoryCore(str(self.ws), config=self.cfg)
        self.fresh = self.core.serve_freshness(self.settings)
        assert self.fresh.wait_idle(30), "the startup sync did not finish"
        self.engine = SearchEngine(self.cfg, self.core.db_path, None)
        return self

    def search(self, query: str) -> tuple[list[str], dict | None]:
        """MemoryCore.search (which runs before_search first) and the staleness it reported."""
        hits = self.core.search(query, min_score=0.0)
        return sorted({h.path for h in hits}), hits.staleness

    def paths(self, query: str) -> list[str]:
        return self.search(query)[0]

    def close(self) -> None:
        if self.core is not None:
            self.engine.close()
            self.core.close()


@pytest.fixture
def served(tmp_path):
    made = []

    def make(**kw):
        s = Served(tmp_path, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def test_edit_create_delete_rename_become_searchable_through_the_watcher(served):
    """Each change reaches the index by the watcher's debounced sync alone (the engine searched
    here does not consult freshness); how fast is `memory-core bench freshness`'s business."""
    s = served(debounce_ms=200)
    (s.ws / "MEMORY.md").write_text("# Pets\n\nThe cat is called Tibbles.\n")
    s.start()
    assert s.paths("Tibbles") == ["MEMORY.md"]
    steps = [
        (lambda: (s.ws / "MEMORY.md").write_text("# Pets\n\nThe cat is called Marmalade.\n"), "Marmalade", ["MEMORY.md"]),
        (lambda: (s.ws / "memory" / "dog.md").write_text("# Dog\n\nThe dog is called Rex.\n"), "Rex", ["memory/dog.md"]),
        (lambda: (s.ws / "memory" / "dog.md").rename(s.ws / "memory" / "hound.md"), "Rex", ["memory/hound.md"]),
        (lambda: (s.ws / "memory" / "hound.md").unlink(), "Rex", []),
    ]
    for act, word, expected in steps:
        act()
        # watch for the index (not the scheduler) to reflect the change; no search-triggered syncs
        assert wait_for(lambda word=word, expected=expected: sorted({h.path for h in s.engine.search(word, min_score=0.0)}) == expected, 30), word
    assert s.fresh.status()["watcher"]["state"] == "running"
    assert s.fresh.wait_idle(30)
    assert s.search("Marmalade") == (["MEMORY.md"], None)


def test_an_edit_is_synced_once_the_default_debounce_has_passed(served):
    """The sync that publishes an edit starts no earlier than the 1.5 s debounce after it (a lower
    bound load cannot break); the latency itself is measured by `memory-core bench freshness`."""
    s = served(debounce_ms=1500)
    (s.ws / "memory" / "a.md").write_text("first version\n")
    s.start()
    synced = len(s.fresh.sync_log)
    written = time.time()
    (s.ws / "memory" / "a.md").write_text("second version mentions quokkas\n")
    # the index may show the edit a moment before the sync that published it is logged
    assert wait_for(lambda: s.engine.search("quokkas", min_score=0.0) != [] and len(s.fresh.sync_log) > synced, 30)
    first = list(s.fresh.sync_log)[synced]
    assert first["at"] - first["ms"] / 1000 - written >= 1.5 - 0.05, list(s.fresh.sync_log)


def test_a_burst_of_1000_edits_in_2s_causes_a_few_syncs(served):
    s = served(debounce_ms=200)
    s.start()
    n0 = s.fresh.sync_count
    f = s.ws / "memory" / "burst.md"
    t0 = time.monotonic()
    written = []
    for i in range(1000):
        f.write_text(f"burst edit number{i}\n")
        written.append(time.monotonic())
        time.sleep(max(0.0, t0 + (i + 1) * 0.002 - time.monotonic()))
    assert wait_for(lambda: s.engine.search("number999", min_score=0.0) != [], 30)
    assert s.fresh.wait_idle(30)
    # a busy machine can stall the writing loop past the debounce: each such pause may end in a sync
    # (the debounce did its job there), so the bound counts them; on a quiet machine there are none
    pauses = sum(1 for a, b in zip(written, written[1:]) if b - a >= 0.2)
    assert 1 <= s.fresh.sync_count - n0 <= 3 + pauses, (pauses, list(s.fresh.sync_log))


def _msg(role: str, text: str) -> str:
    return json.dumps({"type": "message", "timestamp": "2026-11-01T10:00:00Z",
                       "message": {"role": role, "content": text}}) + "\n"


def test_60_appended_messages_trigger_a_session_sync_and_10_do_not(served):
    s = served(debounce_ms=200, sessions=True)
    t = s.sessions_dir / "chat1.jsonl"
    t.write_text(_msg("user", "we talked about the lighthouse"))
    s.start()
    assert s.paths("lighthouse") == ["sessions/chat1.jsonl"]
    n0 = s.fresh.sync_count
    with t.open("a") as fh:
        for i in range(10):
            fh.write(_msg("assistant", f"reply about penguins {i}"))
            fh.flush()
    time.sleep(1.0)
    assert s.fresh.sync_count == n0
    assert s.engine.search("penguins", min_score=0.0) == []
    with t.open("a") as fh:
        for i in range(60):
            fh.write(_msg("user", f"more about penguins {i}"))
            fh.flush()
    assert wait_for(lambda: s.engine.search("penguins", min_score=0.0) != [], 30)
    assert s.fresh.wait_idle(30) and s.fresh.sync_count == n0 + 1
    assert s.fresh.sync_log[-1]["full"] is False and s.fresh.sync_log[-1]["paths"] == 1


def test_a_killed_watcher_is_detected_at_the_next_search(served):
    s = served(debounce_ms=200, reconcile_min_interval_s=3600)
    (s.ws / "memory" / "notes.md").write_text("the meeting is on Monday\n")
    s.start()
    s.fresh.watcher.kill()
    assert s.core.status()["freshness"]["watcher"]["state"] == "dead"
    (s.ws / "memory" / "notes.md").write_text("the meeting moved to Thursday afternoon\n")
    time.sleep(0.6)
    _paths, stale = s.search("Thursday")
    assert stale == {"stale": True, "warning": "Memory index is dirty: memory/notes.md changed since the last sync. "
                                                "Search results may be incomplete.",
                     "action": "Run: memory-core index --agent main"}
    assert s.fresh.status()["watcher"]["state"] == "running"
    assert s.fresh.wait_idle(30)
    assert s.search("Thursday") == (["memory/notes.md"], None)


def test_a_forgotten_session_never_comes_back_after_three_syncs(served):
    s = served(debounce_ms=100, sessions=True)
    secret = s.sessions_dir / "secret.jsonl"
    secret.write_text(_msg("user", "my locker code is zanzibar"))
    (s.sessions_dir / "other.jsonl").write_text(_msg("user", "zanzibar is also an island"))
    s.start()
    assert s.paths("zanzibar") == ["sessions/other.jsonl", "sessions/secret.jsonl"]
    assert forget_session(s.core, "secret") == {"path": "sessions/secret.jsonl", "chunksRemoved": 1,
                                                "forgotten": True}
    assert s.paths("zanzibar") == ["sessions/other.jsonl"]
    s.fresh.sync_now(None, reason="manual")                       # full enumeration
    s.fresh.sync_now([str(secret)], reason="manual")              # targeted at the file
    with secret.open("a") as fh:                                  # the transcript keeps growing
        for i in range(60):
            fh.write(_msg("user", f"zanzibar again {i}"))
    s.fresh.sync_now(None, reason="manual", force=True)           # and a forced rebuild
    assert s.fresh.wait_idle(30)
    assert s.paths("zanzibar") == ["sessions/other.jsonl"]
    assert s.search("zanzibar")[1] is None


def test_forget_cli_removes_a_session_and_refuses_memory_files(served, capsys, monkeypatch):
    s = served(sessions=True)
    monkeypatch.setenv("MEMORY_CORE_HOME", s.raw["stateDir"])  # the env wins over the file's stateDir
    (s.sessions_dir / "s9.jsonl").write_text(_msg("user", "the password hint is kumquat"))
    s.start()
    assert s.paths("kumquat") == ["sessions/s9.jsonl"]
    s.close()
    args = ["--workspace", str(s.ws)]
    cfg_file = s.ws.parent / "cfg.json"
    cfg_file.write_text(json.dumps(s.raw))
    assert cli_main(["forget", "--session", "sessions/s9.jsonl", "--json", "--config", str(cfg_file), *args]) == 0
    assert json.loads(capsys.readouterr().out) == {"path": "sessions/s9.jsonl", "chunksRemoved": 1, "forgotten": True}
    assert cli_main(["forget", "--session", "memory/notes.md", "--config", str(cfg_file), *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: memory/notes.md is a memory file: memory files are not forgotten, they are edited.")
    with pytest.raises(ForgetRefused):
        session_index_path("MEMORY.md")
    assert session_index_path("/x/y/abc") == "sessions/abc.jsonl"


def test_status_shows_dirty_pending_paths_and_the_watcher(served):
    s = served(debounce_ms=60_000)
    s.start()
    (s.ws / "memory" / "pending.md").write_text("not yet indexed\n")
    assert wait_for(lambda: s.core.status()["dirty"], 30)
    st = s.core.status()["freshness"]
    assert st["pendingPaths"] == ["memory/pending.md"]
    assert st["watcher"]["state"] == "running" and st["watcher"]["roots"] == [str(s.ws), str(s.ws / "memory")]
    assert (st["lastSyncError"], st["lastSyncAt"], st["syncCount"]) == (None, None, 0)  # nothing to sync yet


def test_one_shot_status_notices_an_edit_without_a_watcher(tmp_path, monkeypatch, capsys):
    """``memory-core status`` in a fresh process (no watcher, nothing in memory): an edit since
    the last index is reported as dirty, and the next index clears it."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "a.md").write_text("first\n")
    monkeypatch.setenv("MEMORY_CORE_HOME", str(tmp_path / "home"))
    args = ["--workspace", str(ws), "--json"]

    def dirty() -> bool:
        assert cli_main(["status", *args]) == 0
        return json.loads(capsys.readouterr().out)[0]["dirty"]

    assert cli_main(["index", *args]) == 0
    capsys.readouterr()
    assert dirty() is False
    (ws / "memory" / "a.md").write_text("first, then edited\n")
    assert dirty() is True
    assert dirty() is True  # status does not sync
    assert cli_main(["index", *args]) == 0
    capsys.readouterr()
    assert dirty() is False


def test_a_paused_index_is_reported_stale(served, tmp_path):
    s = served()
    (s.ws / "MEMORY.md").write_text("alpha\n")
    s.start()
    s.close()
    cfg = s.cfg.model_copy(update={"chunking": s.cfg.chunking.model_copy(update={"tokens": 200})})
    core = MemoryCore(str(s.ws), config=cfg)
    try:
        stale = core.before_search()
        assert stale["stale"] is True
        assert stale["warning"].startswith("Memory index is stale: the index was built with different settings (")
        assert stale["action"] == "Run: memory-core index --agent main --force"
    finally:
        core.close()


def test_a_targeted_sync_reads_only_the_dirty_files(served):
    s = served(debounce_ms=60_000)  # the watcher marks, but does not sync during the test
    (s.ws / "memory" / "bad.md").write_bytes(b"\xff\xfe not utf-8 \xff")
    (s.ws / "memory" / "a.md").write_text("apricot\n")
    s.start()
    full = s.core.sync(reason="manual", paths=None)
    assert [p["path"] for p in full.problems] == ["memory/bad.md"]
    (s.ws / "memory" / "a.md").write_text("apricot and banana\n")
    (s.ws / "memory" / "gone.md").write_text("x\n")
    s.core.sync(reason="manual", paths=["memory/gone.md"])
    (s.ws / "memory" / "gone.md").unlink()
    targeted = s.core.sync(reason="manual", paths=["memory/a.md", "memory/gone.md"])
    assert (targeted.problems, targeted.changed, targeted.removed, targeted.unchanged) == ([], 1, 1, 0)


def test_memory_core_refuses_to_forget_a_memory_file(served):
    s = served()
    (s.ws / "MEMORY.md").write_text("keep me\n")
    s.start()
    for key in ("MEMORY.md", "memory/2026-01-01.md", "USER.md"):
        with pytest.raises(ForgetRefused, match="memory files are not forgotten, they are edited"):
            s.core.forget_session(key)
    assert s.paths("keep") == ["MEMORY.md"]


def test_an_answer_is_stale_only_when_a_file_it_could_depend_on_is_behind(served):
    s = served(debounce_ms=60_000, on_search=False)  # the edits stay unpublished for the whole test
    (s.ws / "memory" / "fruit.md").write_text("bananas are yellow\n")
    (s.ws / "memory" / "pets.md").write_text("the cat sleeps\n")
    s.start()
    (s.ws / "memory" / "pets.md").write_text("the cat sleeps; the parrot eats kiwis\n")
    assert wait_for(lambda: s.fresh.pending_paths() == [str(s.ws / "memory" / "pets.md")], 30)
    dirty = {"stale": True, "warning": "Memory index is dirty: memory/pets.md changed since the last sync. "
                                       "Search results may be incomplete.",
             "action": "Run: memory-core index --agent main"}
    assert s.search("bananas") == (["memory/fruit.md"], None)   # no file behind holds the word or is a hit
    assert s.search("kiwis") == ([], dirty)                      # the file behind holds the query's word
    assert s.search("cat") == (["memory/pets.md"], dirty)        # a hit's own file is behind
    (s.ws / "memory" / "fruit.md").unlink()
    assert wait_for(lambda: len(s.fresh.pending_paths()) == 2, 30)
    assert s.search("parrot")[1]["warning"].startswith("Memory index is dirty: memory/pets.md changed")
    assert s.search("bananas")[1]["warning"].startswith("Memory index is dirty: memory/fruit.md changed")
    assert s.search("sleeps")[1]["warning"].startswith("Memory index is dirty: memory/pets.md changed")
