"""The index owner (``MemoryCore``) on real files, a real SQLite index, real worker
processes and a real gateway: the workspace the index remembers, crash leftovers, failed and
mid-sync changes, the bounded reconcile of a library search, v2 through the owner's pool, warm serve."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memory_core.config import MemoryCoreConfig, load_config
from memory_core.core import MemoryCore
from memory_core.errors import WorkspaceMismatch
from memory_core.freshness import FreshnessSettings
from memory_core.gateway import protocol as p
from memory_core.gateway.client import GatewayClient
from memory_core.gateway.handlers import MemoryService
from memory_core.gateway.server import GatewayServer
from memory_core.sources import hash_text
from memory_core.store.writer import IndexWriter
from tests.gateway_fixtures import ROOT, TOKEN, child_env, make_workspace, serve_process, write_config
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(180)


def cli(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, MEMORY_CORE_HOME=str(home), PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "memory_core", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def config(tmp_path: Path, ws: Path, **extra) -> MemoryCoreConfig:
    return MemoryCoreConfig.model_validate({"workspace": str(ws), "stateDir": str(tmp_path / "state"),
                                            "pool": {"workers": 0}, **extra})


# ---------------------------------------------------------------------------------------------- workspace


def test_searching_from_another_folder_fails_and_keeps_the_index(tmp_path):
    home = tmp_path / "home"
    ws = make_workspace(tmp_path, files={"MEMORY.md": "- flaky tests are quarantined on Fridays\n"})
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli("index", "--workspace", str(ws), cwd=tmp_path, home=home).returncode == 0
    out = cli("search", "flaky tests", cwd=empty, home=home)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == (
        f"error: the index of agent 'main' was built from workspace {ws}, not {empty}; nothing was synced or "
        f"removed. Pass --workspace {ws} (or set `workspace` in the config), or re-point the index to this "
        f"folder with `memory-core index --agent main --workspace {empty} --repoint`\n")
    [status] = json.loads(cli("status", "--json", "--workspace", str(ws), cwd=empty, home=home).stdout)
    assert (status["files"], status["chunks"]) == (1, 1)
    found = cli("search", "flaky tests", "--workspace", str(ws), cwd=empty, home=home)
    assert "MEMORY.md" in found.stdout


def test_index_repoint_moves_the_index_to_another_workspace_only_when_asked(tmp_path):
    home = tmp_path / "home"
    old = make_workspace(tmp_path, "old", {"MEMORY.md": "- the old notes\n"})
    new = make_workspace(tmp_path, "new", {"MEMORY.md": "- the new notes\n", "memory/n.md": "more notes\n"})
    assert cli("index", "--workspace", str(old), cwd=tmp_path, home=home).returncode == 0
    refused = cli("index", "--workspace", str(new), cwd=tmp_path, home=home)
    assert refused.returncode == 2 and "--repoint" in refused.stderr
    moved = cli("index", "--workspace", str(new), "--repoint", cwd=tmp_path, home=home)
    assert moved.returncode == 0, moved.stderr
    [status] = json.loads(cli("status", "--json", "--workspace", str(new), cwd=tmp_path, home=home).stdout)
    assert status["files"] == 2
    with pytest.raises(WorkspaceMismatch):
        MemoryCore(str(old), config=load_config(None, env={"MEMORY_CORE_HOME": str(home)}))


def test_a_symlinked_workspace_is_the_same_workspace(tmp_path):
    ws = make_workspace(tmp_path, files={"MEMORY.md": "- linked\n"})
    link = tmp_path / "link"
    link.symlink_to(ws)
    with MemoryCore(str(ws), config=config(tmp_path, ws)) as core:
        core.index()
    with MemoryCore(str(link), config=config(tmp_path, link)) as core:
        assert [h.path for h in core.search("linked")] == ["MEMORY.md"]


# ---------------------------------------------------------------------------------------------- crash leftovers


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_writer_start_removes_temp_files_of_dead_rebuilds_whatever_their_age(tmp_path):
    ws = make_workspace(tmp_path, files={"MEMORY.md": "- fact\n"})
    cfg = config(tmp_path, ws)
    db = cfg.db_path("main")
    os.makedirs(os.path.dirname(db), exist_ok=True)
    leftovers = [f"{db}.tmp-{_dead_pid()}-abc{suffix}" for suffix in ("", "-wal", "-shm")] + [f"{db}.tmp-0123abcd"]
    for path in leftovers:
        Path(path).write_bytes(b"x" * 1000)  # written just now: an age rule would keep them
    with MemoryCore(str(ws), config=cfg) as core:
        core.index()
    assert [p for p in leftovers if os.path.exists(p)] == []


def test_a_running_rebuild_keeps_its_temp_file(tmp_path):
    ws = make_workspace(tmp_path, files={"MEMORY.md": "- fact\n"})
    cfg = config(tmp_path, ws)
    db = cfg.db_path("main")
    with MemoryCore(str(ws), config=cfg) as core:
        core.index()
    code = (f"import fcntl, os, time\nfd = os.open({db + '.reindex.lock'!r}, os.O_RDWR | os.O_CREAT)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "locked\n"
        live = f"{db}.tmp-{holder.pid}-live"
        dead = f"{db}.tmp-{_dead_pid()}-dead"
        for path in (live, dead):
            Path(path).write_bytes(b"x")
        with MemoryCore(str(ws), config=cfg) as core:
            core.sync()  # an incremental sync starts the writer while the rebuild holds the lock
        assert (os.path.exists(live), os.path.exists(dead)) == (True, False)
    finally:
        holder.kill()
        holder.wait()


# ---------------------------------------------------------------------------------------------- never "verified" by mistake


def served_core(tmp_path: Path, ws: Path, **settings) -> MemoryCore:
    core = MemoryCore(str(ws), config=config(tmp_path, ws, sync={"watchDebounceMs": 100}))
    core.index()
    core.serve_freshness(FreshnessSettings.from_config(core.config, retry_backoff_s=(0.3, 1.0), **settings))
    return core


def test_a_failed_publish_stays_dirty_is_reported_and_retried(tmp_path, monkeypatch):
    ws = make_workspace(tmp_path, files={"MEMORY.md": "- first fact\n"})
    core = served_core(tmp_path, ws)
    real = IndexWriter.replace_source
    broken = {"on": True}

    def replace_source(self, entry, *args, **kwargs):
        if broken["on"] and entry.path == "memory/new.md":
            raise OSError("disk hiccup")
        return real(self, entry, *args, **kwargs)

    monkeypatch.setattr(IndexWriter, "replace_source", replace_source)
    try:
        (ws / "memory" / "new.md").write_text("the zeppelin arrives at noon\n")
        assert wait_for(lambda: core.freshness.status()["problemCount"] == 1, 10)
        assert core.last_sync_error == "1 file(s) could not be indexed (retrying)"  # health: degraded
        stale = core.before_search()
        assert stale["stale"] is True
        assert stale["warning"].startswith("Memory index is stale: memory/new.md could not be indexed: could not "
                                           "store memory/new.md: disk hiccup")
        status = core.status()
        assert [(p["path"], p["code"]) for p in status["problems"]] == [("memory/new.md", "publish_failed")]
        assert status["dirty"] is False or status["problems"]
        n = core.freshness.sync_count
        assert wait_for(lambda: core.freshness.sync_count >= n + 1, 10)  # retried without any new event
        broken["on"] = False
        assert wait_for(lambda: [h.path for h in core.search("zeppelin")] == ["memory/new.md"], 15)
        assert wait_for(lambda: core.before_search() is None, 10)
        assert core.status()["problems"] == []
    finally:
        core.close()


def test_a_file_changed_during_its_own_sync_is_synced_again(tmp_path, monkeypatch):
    ws = make_workspace(tmp_path, files={"MEMORY.md": "- first fact\n"})
    core = served_core(tmp_path, ws, watch=False, reconcile_interval_s=3600)  # no event, no reconcile
    real = IndexWriter.replace_source
    note = ws / "memory" / "moving.md"

    def replace_source(self, entry, *args, **kwargs):
        if entry.path == "memory/moving.md" and "version one" in note.read_text():
            note.write_text("version two: the walrus\n")  # lands after the sync read version one
        return real(self, entry, *args, **kwargs)

    monkeypatch.setattr(IndexWriter, "replace_source", replace_source)
    try:
        note.write_text("version one: the narwhal\n")
        core.freshness.mark_dirty([str(note)], reason="test")  # what the watcher would report
        assert wait_for(lambda: [h.path for h in core.search("walrus")] == ["memory/moving.md"], 15)
        assert core.freshness.wait_idle(10)
        assert core.search("narwhal") == [] and core.before_search() is None
    finally:
        core.close()


def test_a_swap_by_another_process_makes_the_owner_recheck_every_file(tmp_path):
    ws = make_workspace(tmp_path, files={"MEMORY.md": "- first fact\n"})
    core = served_core(tmp_path, ws, watch=False)  # no watcher: only the swap can tell
    late = ws / "memory" / "late.md"
    try:
        late.write_text("the okapi\n")
        assert wait_for(lambda: [h.path for h in core.search("okapi")] == ["memory/late.md"], 10)
        assert core.freshness.wait_idle(10)
        # another process rebuilds (what `index --force` runs) while late.md is away; the file comes
        # back unchanged (a rename keeps its stat), so nothing but the swap says it is missing now
        late.rename(tmp_path / "late.md")
        with MemoryCore(str(ws), config=config(tmp_path, ws)) as other:
            other.index(force=True)
        (tmp_path / "late.md").rename(late)
        assert wait_for(lambda: [h.path for h in core.search("okapi")] == ["memory/late.md"], 15)
    finally:
        core.close()


# ---------------------------------------------------------------------------------------------- library search cost


def library_core(tmp_path: Path, reconcile_ms: int) -> tuple[Path, MemoryCore]:
    """An indexed library ``MemoryCore`` (no watcher) reconciling at most every ``reconcile_ms``."""
    ws = make_workspace(tmp_path, files={"MEMORY.md": "- first fact\n"})
    core = MemoryCore(str(ws), config=config(tmp_path, ws, sync={"reconcileIntervalMs": reconcile_ms}))
    core.index()
    return ws, core


def test_a_library_search_reconciles_at_most_once_per_interval(tmp_path):
    _ws, core = library_core(tmp_path, 3_600_000)
    with core:
        fresh = core.freshness
        listings = []
        real = fresh._list_fn  # counting the walks
        fresh._list_fn = lambda: (listings.append(1), real())[1]
        for _ in range(5):
            assert [h.path for h in core.search("first fact")] == ["MEMORY.md"]
        assert len(listings) == 1  # the first search of the process walked; the next four only read


def test_a_changed_file_is_found_by_a_library_search_after_the_interval(tmp_path):
    ws, core = library_core(tmp_path, 200)
    with core:
        assert core.search("first fact") != []
        (ws / "memory" / "new.md").write_text("the capybara\n")
        written = time.monotonic()
        misses = []
        last: list = []

        def found() -> bool:
            started = time.monotonic()
            hits = core.search("capybara")
            last[:] = [hits.staleness]
            if not hits:
                misses.append((started - written, hits.staleness))
            return bool(hits)

        assert wait_for(found, 15, step=0.05)
        assert last[0] is None or last[0]["stale"] is True
        # once the interval had passed, the reconcile saw the change: no miss after it was silent
        assert [m for m in misses if m[0] > 0.2 and m[1] is None] == []


# ---------------------------------------------------------------------------------------------- every surface, one engine


def test_v2_search_runs_on_the_owners_pool_and_never_misses_an_edit_silently(tmp_path):
    # no watcher and a reconcile before every search: the edit made right before the search is
    # seen by that search's reconcile (with a watcher, by the watcher, once it reported it)
    from workers.shared import close_all, pools_for

    ws = make_workspace(tmp_path, files={"MEMORY.md": "- the first fact\n"})
    cfg = load_config(None, env={"MEMORY_CORE_HOME": str(tmp_path / "state")},
                      overrides={"workspace": str(ws), "pool": {"workers": 1},
                                "sync": {"watch": False, "reconcileIntervalMs": 0}})
    with MemoryCore(config=cfg) as core:
        core.index()
    service = MemoryService(cfg)

    async def main():
        async with GatewayServer(service, auth=p.AuthSettings("token", TOKEN)) as server, \
                await GatewayClient.open(server.url, token=TOKEN) as client:
            first = await client.call("memory.search", {"query": "first fact", "version": 2})
            before = pools_for(cfg)["retrieval"].stats["completed"]
            (ws / "memory" / "edit.md").write_text("the pangolin\n")
            edited = await client.call("memory.search", {"query": "pangolin", "version": 2, "minScore": 0})
            after = pools_for(cfg)["retrieval"].stats["completed"]
            return first, edited, after - before

    try:
        first, edited, ran = asyncio.run(main())
    finally:
        service.close()
        close_all()
    assert len(first["hits"]) == 1 and ran >= 1  # the v2 search ran as a retrieval-pool task
    found = [h["citations"][0]["label"] for h in edited["hits"]]
    assert found == ["memory/edit.md#L1"] or "Memory index is dirty" in (edited.get("warning") or "")


def test_serve_opens_syncs_and_watches_every_agent_at_start(tmp_path):
    ws = make_workspace(tmp_path)
    ops = make_workspace(tmp_path, "ops", {"MEMORY.md": "- deploys on Tuesday\n"})
    cfg_path = write_config(tmp_path, ws, agents={"ops": {"workspace": str(ops)}})
    env = child_env(tmp_path, MEMORY_CORE_GATEWAY_TOKEN=TOKEN)
    log = tmp_path / "serve.err"

    def status(agent: str) -> dict:
        out = subprocess.run([sys.executable, "-m", "memory_core", "status", "--json", "--config", str(cfg_path),
                              "--agent", agent], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
                             check=False)
        return json.loads(out.stdout)[0] if out.returncode == 0 else {}

    with log.open("w") as err, serve_process(cfg_path, env=env, stderr=err):
        # no request is sent: the server indexes both agents and keeps watching them
        assert wait_for(lambda: status("main").get("files") == 2 and status("ops").get("files") == 1, 60, step=0.5)
        (ops / "memory" / "later.md").write_text("the release train leaves at noon\n")
        assert wait_for(lambda: status("ops").get("files") == 2, 60, step=0.5)
        assert wait_for(lambda: log.read_text().count("in sync") >= 2, 30)
    lines = log.read_text().splitlines()
    assert any(line.startswith("memory-core: agent main: opened ") and "watcher running" in line for line in lines)
    assert any(line.startswith("memory-core: agent ops: opened ") for line in lines)


# ---------------------------------------------------------------------------------------------- structure


def test_the_owner_holds_all_its_state_from_the_start(tmp_path):
    """Nothing attaches state to a MemoryCore from outside: searching, serving, paging and status
    add no attribute to the object."""
    ws = make_workspace(tmp_path, files={"MEMORY.md": "- the owner fact\n"})
    cfg = load_config(None, env={"MEMORY_CORE_HOME": str(tmp_path / "state")},
                      overrides={"workspace": str(ws), "pool": {"workers": 1}})
    core = MemoryCore(config=cfg)
    try:
        before = set(vars(core))
        core.index()
        assert [h.path for h in core.search("owner fact")] == ["MEMORY.md"]
        assert core.retriever is core.search_engine.retriever
        core.serve_freshness(watch=False)
        core.status()
        assert set(vars(core)) == before
    finally:
        core.close()
        from workers.shared import close_all

        close_all()


def test_cli_core_and_freshness_import_no_cycle():
    import grimp

    graph = grimp.build_graph("memory_core")
    mods = ["memory_core.cli", "memory_core.core", "memory_core.freshness"]
    both_ways = [(a, b) for a in mods for b in mods if a < b
                 and graph.chain_exists(importer=a, imported=b, as_packages=True)
                 and graph.chain_exists(importer=b, imported=a, as_packages=True)]
    assert both_ways == []


# ---------------------------------------------------------------------------------------------- two writers


def _interleave(monkeypatch, after_listing) -> None:
    """Run ``after_listing()`` right after the next full listing of a sync (another writer acting
    between a sync's listing and its publishing, as a serving process does during a CLI `index`)."""
    from memory_core import indexer

    real = indexer.scan
    calls = {"n": 0}

    def scan(cfg, workspace):
        result = real(cfg, workspace)
        calls["n"] += 1
        if calls["n"] == 1:
            after_listing()
        return result

    monkeypatch.setattr(indexer, "scan", scan)


def test_an_index_run_does_not_prune_a_file_another_writer_published_after_its_listing(tmp_path, monkeypatch):
    ws = make_workspace(tmp_path, files={"MEMORY.md": "- first fact\n"})
    serving = MemoryCore(str(ws), config=config(tmp_path, ws))
    cli_run = MemoryCore(str(ws), config=config(tmp_path, ws))
    try:
        serving.index()

        def created_and_published() -> None:
            (ws / "memory" / "new.md").write_text("the quokka\n")
            serving.sync(paths=["memory/new.md"])

        _interleave(monkeypatch, created_and_published)
        assert cli_run.sync().removed == 0
        assert serving.writer.is_indexed("memory/new.md", "memory")
    finally:
        cli_run.close()
        serving.close()


def test_an_index_run_does_not_overwrite_a_newer_publish_with_what_it_read_before(tmp_path, monkeypatch):
    ws = make_workspace(tmp_path, files={"MEMORY.md": "- first fact\n", "memory/n.md": "the old tapir\n"})
    serving = MemoryCore(str(ws), config=config(tmp_path, ws))
    cli_run = MemoryCore(str(ws), config=config(tmp_path, ws))
    try:
        serving.index()
        (ws / "memory" / "n.md").write_text("the middle tapir\n")

        def rewritten_and_published() -> None:  # the CLI run has read "middle" already
            (ws / "memory" / "n.md").write_text("the newest tapir of all\n")
            serving.sync(paths=["memory/n.md"])

        _interleave(monkeypatch, rewritten_and_published)
        summary = cli_run.sync()
        assert summary.superseded == 1
        assert serving.writer.indexed_hashes("memory")["memory/n.md"] == hash_text("the newest tapir of all\n")
    finally:
        cli_run.close()
        serving.close()
