"""The index owner under concurrent use in one process: searches and identity reads on read-only
connections while the writer publishes and another process swaps the file."""

from __future__ import annotations

import os
import threading
import traceback
import uuid

import apsw

from memory_core.config import MemoryCoreConfig
from memory_core.core import MemoryCore
from memory_core.store.reindex import reindex_lock, swap_into_place


def _core(tmp_path) -> MemoryCore:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    for i in range(5):
        (ws / "memory" / f"note{i}.md").write_text(f"# note {i}\n\nword{i} and shared text\n")
    cfg = MemoryCoreConfig.model_validate({"workspace": str(ws), "stateDir": str(tmp_path / "state"),
                                           "pool": {"workers": 0}})
    core = MemoryCore(str(ws), config=cfg)
    core.index()
    return core


def _swap_in_copy(db_path: str) -> None:
    """What another process's `index --force` does to the live file: a new file swapped over it."""
    temp = f"{db_path}.tmp-{os.getpid()}-{uuid.uuid4().hex}"
    conn = apsw.Connection(db_path, flags=apsw.SQLITE_OPEN_READONLY)
    conn.set_busy_timeout(5000)
    try:
        conn.execute("VACUUM INTO ?", (temp,))
    finally:
        conn.close()
    built = apsw.Connection(temp)  # a rebuild's file is a WAL database, checkpointed and closed
    built.execute("PRAGMA journal_mode=WAL")
    built.close()
    with reindex_lock(db_path):
        swap_into_place(temp, db_path)


def test_identity_reads_race_neither_the_writer_nor_a_file_swap(tmp_path):
    core = _core(tmp_path)
    errors: list[BaseException] = []
    stop = threading.Event()
    note = tmp_path / "ws" / "memory" / "note0.md"

    def reader() -> None:
        while not stop.is_set():
            try:
                assert core.identity_state()["state"] == "ok"
            except BaseException as exc:  # noqa: BLE001 - collected and asserted below
                errors.append(exc)
                return

    def writer() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            note.write_text(f"# note 0\n\nrevision{n} and shared text\n")
            try:
                core.sync(reason="test", paths=["memory/note0.md"])
                core.writer.set_meta_value("test_key", str(n))
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                return

    threads = [threading.Thread(target=reader) for _ in range(3)] + [threading.Thread(target=writer)]
    for t in threads:
        t.start()
    try:
        for _ in range(150):
            if errors:
                break
            _swap_in_copy(core.db_path)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        core.close()
    assert ["".join(traceback.format_exception(e)[-6:]) for e in errors] == []
