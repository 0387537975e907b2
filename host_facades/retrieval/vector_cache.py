"""Where a generation's vector state is kept: per-process caches and, for large states, files
mapped by every worker.

**In memory.** One :class:`DerivedStateCache` per worker (``workers.tasks.WorkerContext``) and
:data:`PROCESS_CACHE` for in-process searches keep the
:class:`~host_facades.retrieval.vector_state.VectorState` of a generation while it is current or leased and
drop it after (workers: the owner's ``retain`` broadcasts; in-process:
:meth:`DerivedStateCache.get_current` keeps the newest generation per file).

**Shared files.** A large state (from :data:`SHARED_MIN_ROWS` vectors) is built once per
generation, by the first worker that needs it, and written next to the database in
``<db>-vectors/``; every worker then maps those files (``numpy.memmap`` for the float32 matrix,
``faiss.IO_FLAG_MMAP_IFC`` for the int8 candidate codes), so the kernel's page cache holds the one
copy they all read. Layout of a generation (``stem`` = db identity, revision and a digest of the
model key): the matrix ``<stem>.f32``, the faiss candidate index ``<stem>.faiss`` (absent for a
flat index), and ``<stem>.npz`` (ids, sources, quantizer parameters), written last: it marks the
set complete. Each file is written to a temporary name and renamed, under ``<stem>.lock``
(``flock``). The owner removes the files of generations that are neither current nor leased
(:func:`prune_shared`, from ``workers.retriever.PooledRetriever``); a worker that still maps
removed files keeps reading them until it drops its state (unlinked files live until unmapped).

Imported by workers: standard library, numpy, faiss and apsw only.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import apsw
import numpy as np

from host_facades.db.sqlite_read import db_identity
from host_facades.retrieval.vector_state import (
    DerivedKey,
    Int8Candidates,
    VectorState,
    build_index,
    has_passage_table,
    load_faiss,
    load_vector_state,
    model_key,
)

# a file mapped by every worker from this many rows (below, each worker builds its own state)
SHARED_MIN_ROWS = int(os.environ.get("MEMORY_CORE_SHARED_VECTORS_MIN_ROWS", "20000"))
FORMAT = 1
PRIVATE_DIR, PRIVATE_FILE = 0o700, 0o600  # as memory_core.store.perms: other users never read vectors
_STALE_TMP_S = 600.0
SHARED_BUILDS = 0  # shared states this process built and wrote (the other processes mapped them)

# --- in memory ---------------------------------------------------------------------------------


def _chunk_count(conn: apsw.Connection) -> int | None:
    """Rows of the chunk and passage-vector tables (an upper bound on a generation's vectors),
    None if unreadable."""
    try:
        n = int(conn.execute("SELECT count(*) FROM memory_index_chunks").fetchone()[0])
        if has_passage_table(conn):
            n += int(conn.execute("SELECT count(*) FROM memory_index_passage_vectors").fetchone()[0])
        return n
    except apsw.Error:
        return None


class DerivedStateCache:
    """Per-process cache of :class:`VectorState` keyed by (db identity, revision, model).

    ``retain(db_id, keep)`` drops every state of that database whose revision is not in ``keep``:
    the owner passes the current revision plus the revisions it still holds leases on, so memory
    holds at most the current generation plus the leased ones.
    """

    def __init__(self, *, use_faiss: bool = True, max_entries: int = 16, shared: bool = False) -> None:
        self.max_entries = max_entries  # across databases (agents); least recently used goes first
        # large states through the shared files (below): built once, mapped by every process
        self.shared = shared
        self._states: OrderedDict[DerivedKey, VectorState] = OrderedDict()
        self._lock = threading.Lock()
        self.use_faiss = use_faiss
        self.builds = 0
        self._newest: dict[str, int] = {}   # db identity -> newest revision seen (in-process policy)
        self._path_ids: dict[str, str] = {}  # database path -> its current db identity

    def get_or_build(self, conn: apsw.Connection, key: DerivedKey) -> VectorState:
        """The state for ``key``; ``conn`` must be inside the read transaction of ``key[1]``."""
        with self._lock:
            state = self._states.get(key)
            if state is not None:
                self._states.move_to_end(key)
        if state is not None:
            return state
        if self.shared and self.use_faiss:
            state = shared_state(
                conn, key, lambda: load_vector_state(conn, key, use_faiss=True), rows_hint=_chunk_count(conn))
        else:
            state = load_vector_state(conn, key, use_faiss=self.use_faiss)
        with self._lock:
            self._states[key] = state
            self.builds += 1
            while len(self._states) > self.max_entries:
                self._states.popitem(last=False)
        return state

    def retain(self, db_id: str, keep: set[int] | list[int] | tuple[int, ...]) -> int:
        """Drop states of ``db_id`` whose revision is not in ``keep``; returns how many were dropped."""
        keep_set = {int(r) for r in keep}
        with self._lock:
            drop = [k for k in self._states if k[0] == db_id and k[1] not in keep_set]
            for k in drop:
                del self._states[k]
        return len(drop)

    def get_current(self, conn: apsw.Connection, key: DerivedKey, path: str | None = None) -> VectorState:
        """In-process policy (no owner leases): keep only the newest generation seen per database
        file and drop every state of a database file that a reindex replaced at ``path``.

        A search on an older snapshot still gets (and holds, while it runs) its own state; the
        cache just does not keep it. So memory holds the current generation plus the states of
        searches in flight - the in-process counterpart of "current + leased"."""
        db_id, revision = key[0], int(key[1])
        if path is not None:
            with self._lock:
                old = self._path_ids.get(path)
                self._path_ids[path] = db_id
            if old is not None and old != db_id:
                self.drop_database(old)
                with self._lock:
                    self._newest.pop(old, None)
        state = self.get_or_build(conn, key)
        with self._lock:
            newest = max(revision, self._newest.get(db_id, revision))
            self._newest[db_id] = newest
        self.retain(db_id, {newest})
        return state

    def drop_database(self, db_id: str | None = None) -> int:
        """Drop every state of ``db_id`` (or of every database when None)."""
        with self._lock:
            drop = [k for k in self._states if db_id is None or k[0] == db_id]
            for k in drop:
                del self._states[k]
            if db_id is None:
                self._newest.clear()
                self._path_ids.clear()
        return len(drop)

    def keys(self) -> list[DerivedKey]:
        with self._lock:
            return list(self._states)

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(s.nbytes for s in self._states.values())


# The in-process cache: host_facades.retrieval.vector_search's numpy/faiss backends (searches that run in
# the owner process without a pool) use this one; each worker process has its WorkerContext.cache.
PROCESS_CACHE = DerivedStateCache()


def process_state(conn: apsw.Connection, model: str | Sequence[str] | None = None,
                  db_id: str | None = None) -> VectorState:
    """The generation's :class:`VectorState` for ``conn`` (inside its read transaction) from
    :data:`PROCESS_CACHE`. ``db_id`` is the identity of the file ``conn`` has open (pass it when
    known; otherwise the path is stat'ed, which names the wrong file right after a swap)."""
    path = conn.filename
    ident = db_id
    if ident is None:
        try:
            ident = db_identity(path)
        except OSError:  # in-memory or vanished file: the path names it
            ident = f"path:{path}"
    row = conn.execute("SELECT revision FROM memory_index_state WHERE id = 1").fetchone()
    revision = int(row[0]) if row else 0
    return PROCESS_CACHE.get_current(conn, (ident, revision, model_key(model)), path)


# --- shared files ------------------------------------------------------------------------------


def shared_dir(db_path: str) -> str:
    """Where the shared state of ``db_path`` lives."""
    return f"{db_path}-vectors"


def shared_stem(key: DerivedKey) -> str:
    """File name stem of ``key`` = (db identity, revision, model key)."""
    db_id, revision, model = key
    digest = hashlib.sha1(repr(model).encode("utf-8")).hexdigest()[:12]
    return f"{str(db_id).replace(':', '-')}.r{int(revision)}.{digest}"


def _parse(name: str) -> tuple[str, int] | None:
    """``(db identity, revision)`` of a file name in a state directory, None if not ours."""
    parts = name.split(".")
    if len(parts) < 4 or not parts[1].startswith("r") or not parts[1][1:].isdigit():
        return None
    return parts[0].replace("-", ":", 1), int(parts[1][1:])


class MappedIds(Sequence):
    """The chunk ids of a shared state: one UTF-8 blob plus offsets, decoded on access."""

    def __init__(self, blob: bytes, offsets: np.ndarray) -> None:
        self._blob = blob
        self._offsets = offsets

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = int(i)
        if i < 0:
            i += len(self)
        return self._blob[int(self._offsets[i]):int(self._offsets[i + 1])].decode("utf-8")


def shared_state(conn: Any, key: DerivedKey, build: Callable[[], VectorState],
                 *, rows_hint: int | None = None) -> VectorState:
    """The state of ``key``: mapped from the shared files when they exist, else built (by this
    process, under the build lock), written and mapped. Small states (under
    :data:`SHARED_MIN_ROWS` rows; ``rows_hint`` is an upper bound known beforehand) and
    databases whose directory cannot be written stay private to the process."""
    if rows_hint is not None and rows_hint < SHARED_MIN_ROWS:
        return build()
    db_path = getattr(conn, "filename", None)
    if not db_path:
        return build()
    directory = shared_dir(db_path)
    state = load_shared(directory, key)
    if state is not None:
        return state
    try:
        os.makedirs(directory, mode=PRIVATE_DIR, exist_ok=True)
        lock = open(_private(os.path.join(directory, shared_stem(key) + ".lock")), "a+b")
    except OSError:
        return build()
    with lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        state = load_shared(directory, key)  # built by another worker while this one waited
        if state is not None:
            return state
        built = build()
        if len(built.ids) < SHARED_MIN_ROWS:
            return built
        try:
            save_shared(directory, key, built)
        except OSError:
            return built
        global SHARED_BUILDS
        SHARED_BUILDS += 1
        mapped = load_shared(directory, key)
        if mapped is None:
            return built
        del built
        _return_freed_memory()  # the build's private copies (rows read from SQLite, matrix)
        return mapped


def save_shared(directory: str, key: DerivedKey, state: VectorState) -> None:
    """Write ``state`` as the shared files of ``key`` (the ``.npz`` last)."""
    base = os.path.join(directory, shared_stem(key))
    index = state.index
    kind = state.index_kind
    meta: dict[str, Any] = {"format": FORMAT, "n": len(state.ids), "d": state.dims, "kind": kind,
                            "passages": int(state.passages)}
    arrays: dict[str, np.ndarray] = {}
    ids = [str(i).encode("utf-8") for i in state.ids]
    arrays["id_offsets"] = np.concatenate([[0], np.cumsum([len(b) for b in ids], dtype=np.int64)]).astype(np.int64)
    arrays["id_blob"] = np.frombuffer(b"".join(ids), dtype=np.uint8)
    names, codes = np.unique(np.asarray(state.sources, dtype=object).astype(str), return_inverse=True)
    meta["source_names"] = [str(s) for s in names]
    arrays["source_codes"] = codes.astype(np.int32)
    with _written(base + ".f32") as tmp:
        np.ascontiguousarray(state.matrix, dtype=np.float32).tofile(tmp)
    if kind in ("int8", "fp16"):
        faiss = load_faiss()
        with _written(base + ".faiss") as tmp:
            faiss.write_index(index.index if kind == "int8" else index, tmp)
        if kind == "int8":
            arrays["scale"] = np.asarray(index.scale, dtype=np.float64)
            arrays["err_l1"] = np.asarray(index.err_l1, dtype=np.float64)
            meta.update(err_norm=index.err_norm, code_norm=index.code_norm, verified=bool(index.verified))
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    with _written(base + ".npz") as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)


def load_shared(directory: str, key: DerivedKey) -> VectorState | None:
    """The mapped state of ``key``, or None when its files are absent, incomplete or foreign."""
    base = os.path.join(directory, shared_stem(key))
    try:
        with np.load(base + ".npz", allow_pickle=False) as z:
            meta = json.loads(bytes(z["meta"]).decode("utf-8"))
            if meta.get("format") != FORMAT:
                return None
            n, d, kind = int(meta["n"]), int(meta["d"]), str(meta["kind"])
            passages = int(meta.get("passages", 0))
            offsets = z["id_offsets"]
            blob = bytes(z["id_blob"])
            source_codes = z["source_codes"]
            scale = z["scale"] if "scale" in z.files else None
            err_l1 = z["err_l1"] if "err_l1" in z.files else None
        if os.path.getsize(base + ".f32") != n * d * 4 or len(offsets) != n + 1 or len(source_codes) != n:
            return None
        matrix = np.memmap(base + ".f32", dtype=np.float32, mode="r", shape=(n, d))
        index: Any = None
        if kind in ("int8", "fp16"):
            faiss = load_faiss()
            mapped = faiss.read_index(base + ".faiss", faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY)
            if mapped.ntotal != n or mapped.d != d:
                return None
            if kind == "int8":
                index = Int8Candidates.from_parts(
                    mapped, scale=scale, err_l1=err_l1, err_norm=float(meta["err_norm"]),
                    code_norm=float(meta["code_norm"]), verified=bool(meta["verified"]))
            else:
                index = mapped
        elif kind == "flat":
            index, matrix = build_index(np.ascontiguousarray(matrix), kind="flat")
        sources = np.asarray(meta["source_names"], dtype=object)[source_codes]
    except (OSError, KeyError, ValueError, RuntimeError):
        return None
    return VectorState(key, MappedIds(blob, offsets), sources, matrix, index, passages=passages)


def prune_shared(db_path: str, keep: dict[str, set[int]]) -> int:
    """Remove the shared files of every generation that ``keep`` (db identity -> revisions)
    does not hold. Revisions newer than every kept one of their database stay: a worker may have
    built them before the owner heard of them. Returns how many files were removed."""
    directory = shared_dir(db_path)
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    removed = 0
    now = time.time()
    for name in names:
        parsed = _parse(name)
        if parsed is None:
            continue
        db_id, revision = parsed
        revisions = keep.get(db_id)
        kept = revisions is not None and (revision in revisions or revision > max(revisions, default=-1))
        path = os.path.join(directory, name)
        if kept and ".tmp-" in name:
            try:
                kept = now - os.path.getmtime(path) < _STALE_TMP_S  # a build that died midway
            except OSError:
                continue
        if kept:
            continue
        try:
            os.unlink(path)
            removed += 1
        except OSError:
            pass
    return removed


def _return_freed_memory() -> None:
    """Give the heap freed by a build back to the system (glibc ``malloc_trim``; best effort)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _private(path: str) -> str:
    """``path``, created empty with mode 0600 first when missing: writers that open it by name keep
    that mode whatever the umask (the vectors are the index's private data)."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))
    return path


@contextlib.contextmanager
def _written(path: str) -> Iterator[str]:
    """A temporary name to write ``path`` to; renamed over ``path`` when the block succeeds."""
    tmp = _private(f"{path}.tmp-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
