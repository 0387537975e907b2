"""Search generations: one snapshot per search, leases, derived-state retention, cursor pins."""

from __future__ import annotations

import os
import signal
import threading
import time

import apsw
import numpy as np
import pytest

from benchmarks.worker_tasks import retrieve
from host_facades.retrieval.vector_cache import DerivedStateCache
from host_facades.db.sqlite_read import db_identity, open_readonly, read_snapshot
from host_facades.db.vectors import encode_vector
from memory_core.errors import CursorExpired, WorkerUnavailable
from memory_core.generations import CursorPins, GenerationLeases, GenerationMismatch, run_consistent
from memory_core.store import schema
from tests.helpers import runtime_infos
from tests.worker_tasks import TASK_MODULES
from workers.inline import InlinePool
from workers.pool import WorkerPool
from workers.retriever import PooledRetriever

DIMS = 8
MODEL = "fake-8"


def vec(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(DIMS).astype(np.float32)
    return v / np.linalg.norm(v)


class TinyWriter:
    """A minimal publisher straight into the schema (the real writer is memory_core.store.writer)."""

    def __init__(self, path: str) -> None:
        self.conn = apsw.Connection(path)
        schema.configure_connection(self.conn)
        schema.migrate(self.conn)
        schema.ensure_fts(self.conn)

    def publish(self, path: str, texts: list[str], seeds: list[int], *, source: str = "memory") -> None:
        with self.conn:
            self.delete(path, source, _tx=False)
            self.conn.execute("INSERT INTO memory_index_sources(path, source, hash, mtime, size) VALUES (?,?,?,?,?)",
                              (path, source, f"h-{texts}", 1.0, 10))
            for i, (text, seed) in enumerate(zip(texts, seeds)):
                cid = f"{path}#{i}:{text}"
                self.conn.execute(
                    "INSERT INTO memory_index_chunks(id, path, source, start_line, end_line, hash, model, text,"
                    " embedding, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (cid, path, source, i + 1, i + 1, f"c{i}", MODEL, text, encode_vector(vec(seed)), 0))
                self.conn.execute("INSERT INTO memory_index_chunk_recall_metadata(chunk_id, importance) VALUES (?, ?)",
                                  (cid, 5))

    def delete(self, path: str, source: str = "memory", *, _tx: bool = True) -> None:
        def run():
            self.conn.execute("DELETE FROM memory_index_chunk_recall_metadata WHERE chunk_id IN"
                              " (SELECT id FROM memory_index_chunks WHERE path = ? AND source = ?)", (path, source))
            self.conn.execute("DELETE FROM memory_index_chunks WHERE path = ? AND source = ?", (path, source))
            self.conn.execute("DELETE FROM memory_index_sources WHERE path = ? AND source = ?", (path, source))
        if _tx:
            with self.conn:
                run()
        else:
            run()

    @property
    def revision(self) -> int:
        return schema.read_revision(self.conn)

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def db(tmp_path):
    path = str(tmp_path / "main.sqlite")
    w = TinyWriter(path)
    w.publish("memory/a.md", ["alpha old fact", "beta note"], [1, 2])
    w.publish("sessions/s1.jsonl", ["gamma session line"], [3], source="sessions")
    yield path, w
    w.close()


@pytest.fixture
def pool():
    p = WorkerPool("retrieval", 2, idle_timeout_s=None, task_modules=TASK_MODULES)
    yield p
    p.close(drain=False)


def hold_op(spec: dict) -> dict:
    """The tests' ``hold`` op (tests.worker_tasks): the task waits inside its snapshot until released."""
    return {"op": "hold", **spec}


def search_ops(query: str, seed: int) -> list[dict]:
    return [{"op": "fts_raw", "query": query, "limit": 10},
            {"op": "vector", "qvec": encode_vector(vec(seed)), "model": MODEL, "limit": 3}]


# --- leases and pins (pure) ----------------------------------------------------------------------


def test_leases_count_bind_and_notify_last_release():
    fired = []
    leases = GenerationLeases(on_last_release=lambda db, rev, rest: fired.append((db, rev, sorted(rest))))
    a = leases.acquire()
    b = leases.acquire("1:2", 7)
    a.bind("1:2", 7)
    c = leases.acquire("1:2", 9)
    assert leases.count() == 3 and leases.count("1:2", 7) == 2 and leases.leased_revisions("1:2") == {7, 9}
    a.release()
    a.release()  # idempotent
    assert fired == []
    b.release()
    assert fired == [("1:2", 7, [9])]
    with c:
        pass
    assert fired == [("1:2", 7, [9]), ("1:2", 9, [])]
    assert leases.count() == 0 and leases.snapshot() == {}


def test_unbound_lease_reports_what_to_keep_and_a_current_settle_is_quiet():
    fired = []
    leases = GenerationLeases(on_last_release=lambda db, rev, rest: fired.append((db, rev, sorted(rest))))
    held = leases.acquire("1:2", 7)
    lease, keep = leases.acquire_unbound("1:2")
    assert keep == [7] and leases.count() == 2
    assert leases.acquire_unbound(None)[1] == []
    lease.settle("1:2", 9, notify=False)  # the caller knows 9 is current: no last-release call
    assert fired == []
    lease.release()  # already released by settle: a no-op
    assert leases.count() == 2  # held + the second unbound lease above
    other, _ = leases.acquire_unbound("1:2")
    other.settle("1:2", 8)  # an older generation read by a finished search: workers may drop it
    assert fired == [("1:2", 8, [7])]
    held.release()
    assert fired[-1] == ("1:2", 7, [])


def test_cursor_pins_expire_after_ttl_and_release_their_lease():
    now = [100.0]
    leases = GenerationLeases()
    pins = CursorPins(leases, ttl_s=60, clock=lambda: now[0])
    token = pins.pin("1:2", 5, state=["hit-1", "hit-2"])
    assert pins.get(token) == ("1:2", 5, ["hit-1", "hit-2"])
    assert leases.count("1:2", 5) == 1
    now[0] += 59.9
    assert pins.get(token)[1] == 5
    now[0] += 0.2
    with pytest.raises(CursorExpired, match="cursor expired"):
        pins.get(token)
    assert leases.count() == 0 and len(pins) == 0
    t2 = pins.pin("1:2", 6)
    assert pins.release(t2) and leases.count() == 0


def test_cursor_pins_sweep_releases_the_expired_oldest_pins_only():
    now = [0.0]
    leases = GenerationLeases()
    pins = CursorPins(leases, ttl_s=10, clock=lambda: now[0])
    tokens = []
    for rev in range(4):  # pinned at t = 0, 1, 2, 3
        tokens.append(pins.pin("db", rev))
        now[0] += 1
    now[0] = 11.5  # the first two are past their TTL
    assert pins.sweep() == 2 and len(pins) == 2 and leases.snapshot() == {("db", 2): 1, ("db", 3): 1}
    now[0] = 1.0  # a clock that stepped back pins behind live ones: get still refuses it once expired
    late = pins.pin("db", 9)
    now[0] = 12.5
    assert pins.sweep() == 1 and len(pins) == 2  # t=2 expired; stops at t=3, still live
    with pytest.raises(CursorExpired):
        pins.get(late)
    assert leases.snapshot() == {("db", 3): 1}


def test_run_consistent_retries_until_parts_agree_then_gives_up():
    answers = iter([[{"db_id": "d", "revision": 1}, {"db_id": "d", "revision": 2}],
                    [{"db_id": "d", "revision": 2}, {"db_id": "d", "revision": 2}]])
    assert run_consistent(lambda: next(answers)) == [{"db_id": "d", "revision": 2}] * 2
    with pytest.raises(GenerationMismatch):
        run_consistent(lambda: [{"db_id": "d", "revision": 1}, {"db_id": "d", "revision": 2}], retries=2)


# --- derived state ------------------------------------------------------------------------------


def test_derived_state_matches_brute_force_and_is_retained_per_generation(db):
    path, w = db
    cache = DerivedStateCache()
    conn = open_readonly(path, load_vec=False)
    try:
        with read_snapshot(conn) as rev:
            key = (db_identity(path), rev, MODEL)
            state = cache.get_or_build(conn, key)
            assert cache.get_or_build(conn, key) is state and cache.builds == 1
            q = vec(2)
            got = state.search(q, 3)
            assert [g[0] for g in got] == ["memory/a.md#1:beta note", *[g[0] for g in got[1:]]]
            brute = sorted(((cid, float(np.dot(q, vec(s)))) for cid, s in
                            [("memory/a.md#0:alpha old fact", 1), ("memory/a.md#1:beta note", 2),
                             ("sessions/s1.jsonl#0:gamma session line", 3)]), key=lambda t: -t[1])
            assert [c for c, _ in got] == [c for c, _ in brute]
            assert np.allclose([s for _, s in got], [s for _, s in brute], atol=1e-5)
            assert [c for c, _ in state.search(q, 3, sources=["sessions"])] == ["sessions/s1.jsonl#0:gamma session line"]
            numpy_state = type(state)(state.key, state.ids, state.sources, state.matrix, None)
            assert [c for c, _ in numpy_state.search(q, 3)] == [c for c, _ in got]
    finally:
        conn.close()
    cache._states[(key[0], rev - 1, MODEL)] = state
    assert cache.retain(key[0], {rev}) == 1 and cache.keys() == [key]


# --- generations through the pool -----------------------------------------------------------------


def test_search_started_before_publication_finishes_on_its_generation(db, pool, tmp_path):
    path, w = db
    retriever = PooledRetriever(path, pool)
    first = retrieve(retriever, search_ops("alpha", 1))
    old_rev = first["revision"]
    hold = {"signal": str(tmp_path / "held"), "release": str(tmp_path / "go")}
    out: dict = {}
    ops = [hold_op(hold), *search_ops("alpha", 1)]
    t = threading.Thread(target=lambda: out.setdefault("r", retrieve(retriever, ops)))
    t.start()
    deadline = time.monotonic() + 10
    while not os.path.exists(hold["signal"]) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert retriever.leases.count() == 1
    w.publish("memory/a.md", ["alpha new fact"], [11])  # publication while the search holds its snapshot
    after = retrieve(retriever, search_ops("alpha", 1))
    open(hold["release"], "w").close()
    t.join(10)
    held = out["r"]
    assert held["revision"] == old_rev
    assert [h[0] for h in held["results"][1]] == ["memory/a.md#0:alpha old fact"]  # [0]: the hold
    assert held["metadata"]["memory/a.md#0:alpha old fact"]["text"] == "alpha old fact"
    assert after["revision"] == w.revision > old_rev
    assert [h[0] for h in after["results"][0]] == ["memory/a.md#0:alpha new fact"]
    assert "memory/a.md#0:alpha old fact" not in after["metadata"]
    assert {h[0] for h in after["results"][1]} == {"memory/a.md#0:alpha new fact", "sessions/s1.jsonl#0:gamma session line"}
    # leases drop to zero, and no worker keeps the old generation's derived state
    assert retriever.leases.count() == 0
    time.sleep(0.1)
    for info in runtime_infos(pool).values():
        assert all(k[1] == after["revision"] for k in info["derived_keys"]), info["derived_keys"]


def test_forgotten_chunks_never_appear_after_the_forget(db, pool):
    path, w = db
    retriever = PooledRetriever(path, pool)
    before = retrieve(retriever, search_ops("gamma", 3))
    assert [h[0] for h in before["results"][0]] == ["sessions/s1.jsonl#0:gamma session line"]
    w.delete("sessions/s1.jsonl", "sessions")  # forget
    res = retrieve(retriever, search_ops("gamma", 3) + [{"op": "metadata", "ids": ["sessions/s1.jsonl#0:gamma session line"]}])
    assert res["results"][0] == [] and res["results"][2] == {}
    assert all(not h[0].startswith("sessions/") for h in res["results"][1])
    assert not [k for k in res["metadata"] if k.startswith("sessions/")]


def test_killed_worker_mid_search_gives_typed_error_and_releases_the_lease(db, pool, tmp_path):
    path, w = db
    retriever = PooledRetriever(path, pool)
    hold = {"signal": str(tmp_path / "held"), "release": str(tmp_path / "never")}
    err: dict = {}

    def run():
        try:
            retrieve(retriever, [hold_op(hold), *search_ops("alpha", 1)])
        except Exception as exc:  # noqa: BLE001
            err["e"] = exc

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 10
    while not os.path.exists(hold["signal"]) and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(int(open(hold["signal"]).read()), signal.SIGKILL)
    t.join(10)
    assert isinstance(err["e"], WorkerUnavailable)
    assert retriever.leases.count() == 0
    res = retrieve(retriever, search_ops("alpha", 1))
    assert [h[0] for h in res["results"][0]] == ["memory/a.md#0:alpha old fact"]


def test_a_worker_loads_sqlite_vec_on_a_cached_reader_only_for_a_task_that_needs_it(db):
    from workers.tasks import WorkerContext

    path, _w = db
    ctx = WorkerContext()
    ident = db_identity(path)
    keyword_only = ctx.reader(path, ident, vec=False)
    with pytest.raises(apsw.SQLError, match="vec_version"):
        keyword_only.execute("SELECT vec_version()").fetchone()
    with_vec = ctx.reader(path, ident, vec=True)
    assert with_vec is keyword_only and with_vec.execute("SELECT vec_version()").fetchone()[0]
    assert ctx.reader(path, ident, vec=False) is with_vec  # loaded once, kept with the connection
    ctx.drop_reader(path)
    reopened = ctx.reader(path, ident, vec=False)
    assert reopened is not with_vec
    with pytest.raises(apsw.SQLError, match="vec_version"):
        reopened.execute("SELECT vec_version()").fetchone()
    ctx.drop_reader(path)


def test_pooled_equals_inline_including_vector_rows(db, pool):
    path, w = db
    ops = search_ops("alpha OR beta OR gamma", 2)
    ops[1]["rows"] = True
    pooled = retrieve(PooledRetriever(path, pool), ops)
    inline = retrieve(PooledRetriever(path, InlinePool(task_modules=TASK_MODULES)), ops)
    assert pooled == inline
    assert [r["id"] for r in pooled["results"][1]][0] == "memory/a.md#1:beta note"


def test_missing_database_is_an_empty_state(tmp_path, pool):
    r = PooledRetriever(str(tmp_path / "none.sqlite"), pool)
    assert r.index_state() == {"exists": False, "db_id": None, "revision": 0, "chunks": 0, "vectors": 0}
    assert retrieve(r, search_ops("x", 1))["results"] == [[], []]
