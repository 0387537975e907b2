"""Many agents in one server: at most ``gateway.maxOpenAgents`` open at a time (least recently used
closed first, never one in use), an agent opened by a request syncs what changed while it was closed
before answering, and no answer carries another agent's memory. Real workspaces, real SQLite indexes,
the real shared watcher and freshness threads; the time-based LRU parts run on a fake clock."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import pytest

from memory_core import open_agents
from memory_core.config import MemoryCoreConfig
from memory_core.gateway.client import GatewayClient
from memory_core.gateway.handlers import MemoryService
from memory_core.gateway.server import GatewayServer
from memory_core.gateway import protocol as p
from memory_core.open_agents import OpenAgents
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(180)


class FakeCore:
    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_the_least_recently_used_agent_is_closed_past_the_cap_never_one_in_use():
    now = [0.0]
    closed: list[str] = []
    agents = OpenAgents(2, grace_s=5.0, clock=lambda: now[0], close=lambda c: closed.append(c.name))
    agents["a"] = FakeCore("a")
    agents["b"] = FakeCore("b")
    now[0] = 10.0
    agents.get("a")          # a is used again: b is now the least recently used
    agents["c"] = FakeCore("c")
    assert (list(agents), closed) == (["a", "c"], ["b"])
    agents["d"] = FakeCore("d")  # a and c were used within the grace: over the cap for now
    assert (list(agents), closed) == (["a", "c", "d"], ["b"])
    now[0] = 16.0
    agents["e"] = FakeCore("e")
    assert (list(agents), closed) == (["d", "e"], ["b", "a", "c"])
    assert agents.stats() == {"open": 2, "cap": 2, "evicted": 3}


def test_evicted_agents_are_all_closed_and_the_closer_is_woken_once_per_empty_queue(monkeypatch):
    """Every evicted agent is closed by the one closer thread; only an eviction that finds nothing
    queued wakes it (with a queue it already wakes at its head's time, earlier than the new one's)."""
    import threading

    class Counting(threading.Condition):
        notified = 0

        def notify(self, n: int = 1) -> None:
            Counting.notified += 1
            super().notify(n)

    monkeypatch.setattr(open_agents, "_closing_cond", Counting())
    monkeypatch.setattr(open_agents, "_closing", [])
    monkeypatch.setattr(open_agents, "_closer", None)
    cores = [FakeCore(f"c{i}") for i in range(5)]
    for core in cores:
        open_agents._close_later(core)
    assert Counting.notified == 1
    assert wait_for(lambda: all(c.closed for c in cores), timeout=10)
    open_agents._close_later(FakeCore("late"))  # the queue is empty again: this one wakes it
    assert Counting.notified == 2


def test_closes_that_fall_behind_are_helped_by_the_evicting_thread(monkeypatch):
    """Past CLOSING_BACKLOG queued (the closer stuck on a slow close), the thread that evicts closes
    the due ones itself; one evicted less than CLOSE_DELAY_S ago is never closed early."""
    import threading

    class StuckCloser:  # the closer thread, alive but behind: it closes nothing meanwhile
        def is_alive(self) -> bool:
            return True

    closed_by: dict[str, str] = {}

    class Recording(FakeCore):
        def close(self) -> None:
            closed_by[self.name] = threading.current_thread().name

    monkeypatch.setattr(open_agents, "_closing_cond", threading.Condition())
    monkeypatch.setattr(open_agents, "_closing", [])
    monkeypatch.setattr(open_agents, "_closer", StuckCloser())
    monkeypatch.setattr(open_agents, "CLOSING_BACKLOG", 3)
    monkeypatch.setattr(open_agents, "CLOSE_DELAY_S", 60.0)
    for i in range(5):
        open_agents._close_later(Recording(f"fresh{i}"))
    assert closed_by == {} and len(open_agents._closing) == 5  # none due yet: a request may still hold them
    open_agents._closing[:] = [(0.0, core) for _at, core in open_agents._closing]  # all due now
    open_agents._close_later(Recording("last"))
    me = threading.current_thread().name
    assert closed_by == {"fresh0": me, "fresh1": me, "fresh2": me}  # the oldest, down to the backlog
    assert [core.name for _at, core in open_agents._closing] == ["fresh3", "fresh4", "last"]


def make_agents(tmp_path: Path, n: int, **extra) -> MemoryCoreConfig:
    agents = {}
    for i in range(n):
        ws = tmp_path / f"a{i}"
        (ws / "memory").mkdir(parents=True)
        (ws / "memory" / f"a{i}-note.md").write_text(f"# a{i}\nThe word of this agent is uw{i}.\n")
        agents[f"a{i}"] = {"workspace": str(ws)}
    return MemoryCoreConfig.model_validate({
        "agentId": "a0", "workspace": str(tmp_path / "a0"), "stateDir": str(tmp_path / "state"),
        "pool": {"workers": 0}, "sync": {"watchDebounceMs": 100}, "agents": agents, **extra})


def test_a_server_keeps_at_most_the_cap_open_and_every_agent_answers_its_own_word(tmp_path, monkeypatch):
    monkeypatch.setattr(open_agents, "DEFAULT_GRACE_S", 0.0)
    cfg = make_agents(tmp_path, 12, gateway={"maxOpenAgents": 3})
    service = MemoryService(cfg)

    async def main() -> list[dict]:
        async with GatewayServer(service, auth=p.AuthSettings("none")) as server:
            async with await GatewayClient.open(server.url) as client:
                out = []
                for rnd in range(2):
                    for i in range(12):
                        out.append(await client.call("memory.search", {"query": f"uw{i}", "agentId": f"a{i}"}))
                        # an agent with a sync queued or running is not closed under it: one over at most
                        assert len(service.runtime._cores) <= 4
                return out

    try:
        answers = asyncio.run(main())
        assert [[h["path"] for h in a["results"]] for a in answers] == [[f"memory/a{i}-note.md"] for i in range(12)] * 2
        assert not any(a.get("stale") for a in answers)
        cores = service.runtime._cores
        assert wait_for(lambda: cores.get("a11") is not None and len(cores) <= 3, 30)
        assert cores.evicted >= 9 + 12 - 1
    finally:
        service.close()


def indexed_and_stopped(tmp_path: Path, **extra) -> MemoryCoreConfig:
    """Two agents (``extra``: more config); a server indexes a1 (which answers its word) and stops:
    a restart opens it over its index."""
    cfg = make_agents(tmp_path, 2, **extra)
    service = MemoryService(cfg)
    try:
        assert [h.path for h in service.core("a1").search("uw1")] == ["memory/a1-note.md"]
    finally:
        service.close()
    return cfg


def test_an_agent_edited_while_closed_syncs_before_its_first_answer(tmp_path, monkeypatch):
    monkeypatch.setattr(open_agents, "DEFAULT_GRACE_S", 0.0)
    cfg = make_agents(tmp_path, 3, gateway={"maxOpenAgents": 1})
    service = MemoryService(cfg)
    try:
        first = service.core("a1")
        assert [h.path for h in first.search("uw1")] == ["memory/a1-note.md"]
        service.core("a2").search("uw2")  # a1 is closed as the least recently used
        assert wait_for(lambda: first.closed, 30)
        (tmp_path / "a1" / "memory" / "later.md").write_text("written while closed: zebracorn\n")
        again = service.core("a1")
        assert again is not first
        hits = again.search("zebracorn")
        assert ([h.path for h in hits], hits.staleness) == (["memory/later.md"], None)
    finally:
        service.close()


def test_a_request_that_opens_an_agent_waits_for_a_catch_up_sync_already_running(tmp_path, monkeypatch):
    """The race: the catch-up sync of an agent opened by a request may already have taken the changed
    paths when the request looks (nothing dirty, the index still behind). Forced here: the catch-up
    sync is held mid-publish until the request has had every chance to answer; the request must wait
    for it and answer from the synced index, not answer early (then ``stale`` and without the file)."""
    import threading

    from memory_core.freshness import Freshness

    cfg = indexed_and_stopped(tmp_path)
    (tmp_path / "a1" / "memory" / "later.md").write_text("written while the server was down: zebracorn\n")

    held, release = threading.Event(), threading.Event()
    opened: list = []
    real_for_core = Freshness.for_core.__func__

    def for_core(cls, core, settings=None):
        fresh = real_for_core(cls, core, settings)
        sync = fresh._sync_fn

        def held_sync(paths, reason, force):
            held.set()
            assert release.wait(60), "the test never released the catch-up sync"
            return sync(paths, reason, force)

        fresh._sync_fn = held_sync
        opened.append(fresh)
        return fresh

    monkeypatch.setattr(Freshness, "for_core", classmethod(for_core))
    real_make_core = MemoryService._make_core

    def make_core(cfg, agent_id):
        core = real_make_core(cfg, agent_id)
        # the state of the race, forced: the catch-up sync has taken the changed file and runs
        assert held.wait(60) and core.freshness.is_behind() and not core.freshness.is_dirty()
        return core

    monkeypatch.setattr(MemoryService, "_make_core", staticmethod(make_core))
    service = MemoryService(cfg)
    answers: list = []
    done = threading.Event()

    def request() -> None:
        try:
            hits = service.core("a1").search("zebracorn")
            answers.append(([h.path for h in hits], hits.staleness))
        finally:
            done.set()

    try:
        threading.Thread(target=request, daemon=True).start()
        assert held.wait(60)
        answered_early = done.wait(2.0)  # a request that does not wait answers at once (before the release)
        release.set()
        assert done.wait(60)
        assert not answered_early
        assert answers == [(["memory/later.md"], None)]
    finally:
        release.set()
        service.close()


def test_opening_an_agent_over_its_index_opens_the_file_once(tmp_path, monkeypatch):
    """An agent opened over an existing index (a server restart) reads its workspace, identity and
    catch-up facts through one read-only connection (the owner's), which its searches reuse; the
    in-process search engine (``pool.workers`` 0 here) holds the only other one."""
    from host_facades.db import sqlite_read
    from memory_core.store import reader

    cfg = indexed_and_stopped(tmp_path)
    opened: list[str] = []

    def counting(real):
        def open_readonly(db_path, **kw):
            opened.append(db_path)
            return real(db_path, **kw)
        return open_readonly

    monkeypatch.setattr(sqlite_read, "open_readonly", counting(sqlite_read.open_readonly))
    monkeypatch.setattr(reader, "open_readonly", counting(reader.open_readonly))
    (tmp_path / "a1" / "memory" / "later.md").write_text("written while the server was down: zebracorn\n")
    service = MemoryService(cfg)
    try:
        core = service.core("a1")
        for _ in range(3):
            hits = core.search("zebracorn")
            assert ([h.path for h in hits], hits.staleness) == (["memory/later.md"], None)
        assert opened.count(core.db_path) == 2
    finally:
        service.close()


def test_a_config_of_thousands_of_agents_loads_and_still_refuses_a_bad_one(tmp_path):
    import json

    from memory_core.config import load_config
    from memory_core.errors import ConfigError

    agents = {f"a{i}": {"workspace": str(tmp_path / f"a{i}")} for i in range(3000)}
    agents["a1234"] = {"workspace": str(tmp_path / "a1234"), "chunking": {"tokens": 0}}
    path = tmp_path / "memory-core.json"
    path.write_text(json.dumps({"agentId": "a0", "stateDir": str(tmp_path / "state"), "agents": agents}))
    with pytest.raises(ConfigError, match=r"for agent 'a1234': chunking.tokens: must be >= 1"):
        load_config(str(path), env={})
    agents["a1234"] = {"workspace": str(tmp_path / "a1234"), "chunking": {"tokens": 300}}
    path.write_text(json.dumps({"agentId": "a0", "stateDir": str(tmp_path / "state"), "agents": agents}))
    cfg = load_config(str(path), env={})
    assert (len(cfg.agents), cfg.for_agent("a2999").workspace, cfg.for_agent("a1234").chunking.tokens) == (
        3000, str(tmp_path / "a2999"), 300)


def test_agents_holding_connections_are_bounded_by_the_open_files_limit():
    from memory_core.open_agents import FDS_PER_OPEN_INDEX, FDS_RESERVED, fd_bounded_cap

    assert fd_bounded_cap(256, soft_limit=1024) == (1024 - FDS_RESERVED) // FDS_PER_OPEN_INDEX == 96
    assert fd_bounded_cap(256, soft_limit=20000) == 256
    assert fd_bounded_cap(256, soft_limit=100) == 1


def pooled_and_stopped(tmp_path: Path) -> MemoryCoreConfig:
    """``indexed_and_stopped`` with a retrieval worker (``pool.workers`` 1): a server opening an agent
    reads its open-time facts in the worker (the ``agent_state`` task)."""
    return indexed_and_stopped(tmp_path, pool={"workers": 1})


@pytest.mark.parametrize("log_left", [True, False])
def test_a_current_agent_opened_by_a_server_answers_without_an_owner_connection(tmp_path, monkeypatch, log_left):
    """A restart over a current index: the workspace, identity and catch-up reads come from the
    worker, in the one task that also answers the request's search (kept until every check passed),
    so the server's process opens no connection of its own to the file. ``log_left`` False: the
    index was closed cleanly (no ``-wal``; the worker's open creates an empty one, no change)."""
    from workers.pool import WorkerPool

    cfg = pooled_and_stopped(tmp_path)
    if not log_left:  # a restarted server: new workers (none has the file open)
        from workers.shared import close_all

        close_all()
        db = cfg.for_agent("a1").db_path("a1")
        assert os.path.getsize(db + "-wal") == 0  # no frame: removing it is what a clean close does
        for suffix in ("-wal", "-shm"):
            os.remove(db + suffix)
    tasks: list[str] = []
    real_run = WorkerPool.run

    def run(self, name, payload=None, **kw):
        tasks.append(name)
        return real_run(self, name, payload, **kw)

    monkeypatch.setattr(WorkerPool, "run", run)
    service = MemoryService(cfg)
    try:
        core = service.core("a1", ("uw1", None, None))
        for _ in range(2):
            hits = core.search("uw1")
            assert ([h.path for h in hits], hits.staleness) == (["memory/a1-note.md"], None)
        assert core.identity_state()["state"] == "ok"
        assert core.reader.conn is None
        assert tasks == ["agent_state", "search"]  # the second search asks the worker again
    finally:
        service.close()


def test_an_agent_edited_while_the_server_was_down_syncs_from_the_worker_read_rows(tmp_path):
    cfg = pooled_and_stopped(tmp_path)
    (tmp_path / "a1" / "memory" / "later.md").write_text("written while the server was down: zebracorn\n")
    (tmp_path / "a1" / "memory" / "a1-note.md").write_text("# a1\nThe word of this agent is now quetzal.\n")
    service = MemoryService(cfg)
    try:
        core = service.core("a1", ("zebracorn", None, None))  # answered ahead from the old index: not used
        hits = core.search("zebracorn")
        assert ([h.path for h in hits], hits.staleness) == (["memory/later.md"], None)
        assert [h.path for h in core.search("quetzal")] == ["memory/a1-note.md"]
        assert list(core.search("uw1")) == []
    finally:
        service.close()


def test_an_index_of_another_workspace_is_refused_from_the_worker_read_meta(tmp_path):
    from memory_core.errors import WorkspaceMismatch

    cfg = pooled_and_stopped(tmp_path)
    other = tmp_path / "elsewhere"
    (other / "memory").mkdir(parents=True)
    (other / "memory" / "x.md").write_text("another folder\n")
    agents = dict(cfg.agents)
    agents["a1"] = {**agents["a1"], "workspace": str(other)}
    service = MemoryService(cfg.model_copy(update={"agents": agents}))
    try:
        with pytest.raises(WorkspaceMismatch):
            service.core("a1")
    finally:
        service.close()


def test_the_worker_read_meta_is_dropped_once_the_file_changes(tmp_path):
    """Seeded meta answers only while the index file is unchanged: a write by another process (here
    a second owner's sync) is read from the file."""
    from memory_core.core import MemoryCore
    from memory_core.store import schema

    cfg = pooled_and_stopped(tmp_path)
    service = MemoryService(cfg)
    try:
        core = service.core("a1")
        assert core._owner._meta_seen is not None and core.reader.conn is None
        other = MemoryCore(config=cfg.for_agent("a1"), agent_id="a1", pool=False)
        try:
            other.writer.set_meta_value(schema.META_KEY, '{"provider": "elsewhere"}')
        finally:
            other.close()
        assert core.identity_state()["state"] == "mismatch"
        assert core.reader.conn is not None
    finally:
        service.close()


def _held(owner) -> bool:
    return owner._writer is not None or owner.meta_reader.conn is not None


def test_past_max_open_indexes_the_least_recently_used_agents_close_their_connections_not_one_in_use(
        tmp_path, monkeypatch):
    """Thousands of agents stay open (watched, cheap); only ``gateway.maxOpenIndexes`` of them hold
    SQLite connections in the server. The least recently used give theirs up, never one whose
    owner another thread holds, and reopen them when they next sync."""
    import threading

    held = open_agents.HeldConnections()
    monkeypatch.setattr("memory_core.index_owner.HELD", held)
    cfg = make_agents(tmp_path, 4, gateway={"maxOpenIndexes": 2})
    service = MemoryService(cfg)
    try:
        held.cap = 2
        from memory_core.index_identity import file_stamp

        owners, stamps = [], []
        for i in range(3):
            core = service.core(f"a{i}")
            assert [h.path for h in core.search(f"uw{i}")] == [f"memory/a{i}-note.md"]
            owners.append(core._owner)
            stamps.append(file_stamp(core.db_path))
        # the first sync of each agent opened its writer: a0, least recently used, gave it up, and
        # left its file as it was (no checkpoint: what a0 keeps under the file's stamp stays valid)
        assert [_held(o) for o in owners] == [False, True, True]
        assert file_stamp(owners[0].db_path) == stamps[0]
        assert len(service.runtime.open_agents) == 3 and held.released == 1
        busy = owners[1]
        with busy._lock:  # another thread holds a1's owner: it keeps its connections
            t = threading.Thread(target=lambda: service.core("a3").search("uw3"))
            t.start()
            t.join(60)
        assert [_held(o) for o in owners] == [False, True, False]
        # a0 edits and syncs again: its connections reopen (and the least recently used idle one goes)
        (tmp_path / "a0" / "memory" / "later.md").write_text("written later: zebracorn\n")
        owners[0].sync(reason="test")
        assert _held(owners[0]) and [h.path for h in service.core("a0").search("zebracorn")] == ["memory/later.md"]
        assert len(held) <= 3  # the cap, plus a1, held when it was the one to go
    finally:
        service.close()
    assert len(held) == 0  # closed owners leave the LRU


def test_health_checks_of_many_open_agents_are_paced():
    from memory_core.freshness.policy import HEALTH, HEALTH_CHECKS_PER_S, HealthPace, SyncPolicy

    pace = HealthPace()
    policies = [SyncPolicy(debounce_s=1.0, health_s=30.0, pace=pace) for _ in range(2000)]
    policies[0].start(0.0)
    assert policies[0].due_at() == 30.0  # one agent: every health_s
    for p in policies[1:]:
        p.start(0.0)
    assert pace.started == 2000
    assert policies[-1].due_at() == 2000 / HEALTH_CHECKS_PER_S  # 100 s: 20 checks a second in all
    assert policies[0].next_action(30.0) == HEALTH and policies[0].due_at() == 130.0
    for p in policies[:1500]:
        p.close()
    assert pace.started == 500 and policies[-1].next_action(100.0) == HEALTH and policies[-1].due_at() == 130.0


@contextlib.contextmanager
def one_agent_searched(tmp_path: Path):
    """A server's agent a0, opened and searched (its first index built)."""
    service = MemoryService(make_agents(tmp_path, 1))
    try:
        core = service.core("a0")
        assert [h.path for h in core.search("uw0")] == ["memory/a0-note.md"]
        yield core
    finally:
        service.close()


def test_an_idle_agents_reconcile_reads_its_index_rows_again_only_after_the_file_changed(tmp_path):
    """The rows a reconcile compares with the files are kept while the index file is unchanged (a
    stat instead of a connection per health check or re-check); any commit makes them read again."""
    from memory_core.index_identity import CATCH_UP_ROWS_KEPT

    with one_agent_searched(tmp_path) as core:
        owner = core._owner
        reads = []

        def read(rows=([["memory", "memory/a0-note.md", 1.0, 10]], [], [])):
            reads.append(1)
            return rows

        first = owner.catch_up_rows(read)
        assert owner.catch_up_rows(read) == first and len(reads) <= 1
        before = len(reads)
        (tmp_path / "a0" / "memory" / "later.md").write_text("written later: zebracorn\n")
        core.sync(reason="test")  # this process's sync leaves the rows it wrote (read through its writer)
        assert "memory/later.md" in [r[1] for r in owner.catch_up_rows(read)[0]] and len(reads) == before
        import apsw

        other = apsw.Connection(core.db_path)  # another process's commit: the file's stamp changes
        other.execute("CREATE TABLE IF NOT EXISTS elsewhere (x)")
        other.close()
        owner.catch_up_rows(read)
        assert len(reads) == before + 1
        owner.catch_up_rows(read)
        assert len(reads) == before + 1
        many = ([["memory", f"memory/n{i}.md", 1.0, 1] for i in range(CATCH_UP_ROWS_KEPT + 1)], [], [])
        owner._open_rows = None
        owner.catch_up_rows(lambda: (reads.append(1), many)[1])
        owner.catch_up_rows(lambda: (reads.append(1), many)[1])
        assert len(reads) == before + 3  # too many to keep: read each time
        # the real reconcile agrees with the files either way: nothing is dirty
        assert core.freshness.reconcile() == []


def test_an_index_log_created_empty_is_no_change_of_the_file():
    from memory_core.search.service import unchanged_stamp

    closed = (1, 2, 4096, 10, -1, -1)  # no -wal: the index was closed cleanly
    assert unchanged_stamp(closed, closed) == closed
    assert unchanged_stamp(closed, (1, 2, 4096, 10, 0, 11)) == (1, 2, 4096, 10, 0, 11)  # opened: empty log
    assert unchanged_stamp(closed, (1, 2, 4096, 10, 32, 11)) is None  # frames written
    assert unchanged_stamp(closed, (1, 2, 8192, 12, 0, 11)) is None  # the file written
    assert unchanged_stamp((1, 2, 4096, 10, 0, 11), (1, 2, 4096, 10, 0, 12)) is None
    assert unchanged_stamp(closed, None) is None


def test_an_agents_index_settings_are_read_once_per_change_of_its_file(tmp_path):
    """Every search checks the index settings: they are read through a connection once after each
    change of the file, not per search (a server of thousands of agents holds few connections)."""
    with one_agent_searched(tmp_path) as core:
        owner = core._owner
        reads = []
        run = owner.meta_reader.run
        owner.meta_reader.run = lambda fn: (reads.append(1), run(fn))[1]
        owner.identity_state()
        before = len(reads)
        assert owner.identity_state()["state"] == "ok" and core.search("uw0") and len(reads) == before
        (tmp_path / "a0" / "memory" / "later.md").write_text("written later: zebracorn\n")
        core.sync(reason="test")  # this process's sync leaves the settings it wrote (read through its writer)
        assert owner.identity_state()["state"] == "ok" and len(reads) == before
        assert [h.path for h in core.search("zebracorn")] == ["memory/later.md"] and len(reads) == before
        import apsw

        other = apsw.Connection(core.db_path)  # another process's commit: read again, once
        other.execute("CREATE TABLE IF NOT EXISTS elsewhere (x)")
        other.close()
        assert owner.identity_state()["state"] == "ok" and len(reads) == before + 1
        assert [h.path for h in core.search("zebracorn")] == ["memory/later.md"] and len(reads) == before + 1


def test_a_sync_folds_its_log_into_the_file_once_no_reader_is_on_an_older_snapshot(tmp_path, monkeypatch):
    """A sync that leaves frames in the write-ahead log copies them into the file and empties the
    log (``FOLD_LOG_BYTES``): the next first open of the file (a worker's reader, a restarted
    server) has no log to read, and thousands of idle agents keep no log on disk. A reader still on
    an older snapshot keeps its snapshot; the log is folded by a later sync."""
    import apsw

    from memory_core import index_owner

    monkeypatch.setattr(index_owner, "FOLD_LOG_BYTES", 0)
    with one_agent_searched(tmp_path) as core:
        log = core.db_path + "-wal"
        assert os.path.getsize(log) == 0
        reader = apsw.Connection(core.db_path, flags=apsw.SQLITE_OPEN_READONLY)
        reader.execute("BEGIN")
        before = reader.execute("SELECT count(*) FROM memory_index_sources").fetchone()[0]
        (tmp_path / "a0" / "memory" / "later.md").write_text("written later: zebracorn\n")
        core.sync(reason="test")
        assert os.path.getsize(log) > 0  # the reader's snapshot still needs the file as it was
        assert reader.execute("SELECT count(*) FROM memory_index_sources").fetchone()[0] == before
        reader.execute("COMMIT")
        reader.close()
        (tmp_path / "a0" / "memory" / "later2.md").write_text("written later still: quokkalith\n")
        core.sync(reason="test")
        assert os.path.getsize(log) == 0
        assert [h.path for h in core.search("zebracorn")] == ["memory/later.md"]
        assert [h.path for h in core.search("quokkalith")] == ["memory/later2.md"]


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise on this platform (the hint is skipped)")
def test_opening_a_small_index_reads_it_ahead_whole_and_a_large_one_not(tmp_path, monkeypatch):
    """A worker's open of a random agent's index (one of thousands, out of memory since it was last
    used) asks the kernel for the whole small file at once instead of SQLite's page-by-page reads."""
    from host_facades.db import sqlite_read

    with one_agent_searched(tmp_path) as core:
        db = core.db_path
    hints = []
    real = os.posix_fadvise
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, offset, length, advice: (
        hints.append((os.readlink(f"/proc/self/fd/{fd}"), offset, length, advice)), real(fd, offset, length, advice))[1])
    conn = sqlite_read.open_readonly(db, load_vec=False)
    assert conn.execute("SELECT count(*) FROM memory_index_sources").fetchone()[0] == 1
    conn.close()
    assert hints == [(db, 0, os.path.getsize(db), os.POSIX_FADV_WILLNEED)]
    monkeypatch.setattr(sqlite_read, "READ_AHEAD_MAX_BYTES", os.path.getsize(db) - 1)
    sqlite_read.open_readonly(db, load_vec=False).close()
    assert len(hints) == 1
