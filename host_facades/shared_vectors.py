"""One copy of a generation's derived vector state for every worker: files mapped read-only.

A large :class:`~host_facades.engine_knn.VectorState` (from :data:`SHARED_MIN_ROWS` vectors) is
built once per generation, by the first worker that needs it, and written next to the database
in ``<db>-vectors/``; every worker then maps those files (``numpy.memmap`` for the float32
matrix, ``faiss.IO_FLAG_MMAP_IFC`` for the int8 candidate codes). The kernel's page cache holds
the one copy they all read:

- memory: at 100k x 384 a generation is 153.6 MB of matrix + 38.4 MB of codes, once instead of
  once per worker;
- build: one worker loads the vectors from SQLite and quantizes them; the others wait on the
  build lock and map the result;
- throughput: two processes scanning one shared copy of the 38.4 MB of codes scaled 1.85-1.96x
  here, two private copies 1.65-1.92x (the codes nearly fit the 32 MB L3 that the cores share).

Layout of a generation (``stem`` = db identity, revision and a digest of the model key): the
matrix ``<stem>.f32``, the faiss candidate index ``<stem>.faiss`` (absent for a flat index), and
``<stem>.npz`` (ids, sources, quantizer parameters), written last: it marks the set complete.
Each file is written to a temporary name and renamed, under ``<stem>.lock`` (``flock``). The
owner removes the files of generations that are neither current nor leased (:func:`prune`, from
``workers.retriever.PooledRetriever``); a worker that still maps removed files keeps reading
them until it drops its state (unlinked files live until unmapped).

Imported by workers: standard library, numpy and faiss only.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from host_facades import engine_knn

SHARED_MIN_ROWS = int(os.environ.get("MEMORY_CORE_SHARED_VECTORS_MIN_ROWS", str(engine_knn.FP16_MIN_ROWS)))
FORMAT = 1
PRIVATE_DIR, PRIVATE_FILE = 0o700, 0o600  # as memory_core.store.perms: other users never read vectors
_STALE_TMP_S = 600.0
BUILDS = 0  # shared states this process built and wrote (the other processes mapped them)


def state_dir(db_path: str) -> str:
    """Where the shared state of ``db_path`` lives."""
    return f"{db_path}-vectors"


def stem(key: engine_knn.DerivedKey) -> str:
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


def get_or_build(conn: Any, key: engine_knn.DerivedKey, build: Callable[[], engine_knn.VectorState],
                 *, rows_hint: int | None = None) -> engine_knn.VectorState:
    """The state of ``key``: mapped from the shared files when they exist, else built (by this
    process, under the build lock), written and mapped. Small states (under
    :data:`SHARED_MIN_ROWS` rows; ``rows_hint`` is an upper bound known beforehand) and
    databases whose directory cannot be written stay private to the process."""
    if rows_hint is not None and rows_hint < SHARED_MIN_ROWS:
        return build()
    db_path = getattr(conn, "filename", None)
    if not db_path:
        return build()
    directory = state_dir(db_path)
    state = load(directory, key)
    if state is not None:
        return state
    try:
        os.makedirs(directory, mode=PRIVATE_DIR, exist_ok=True)
        lock = open(_private(os.path.join(directory, stem(key) + ".lock")), "a+b")
    except OSError:
        return build()
    with lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        state = load(directory, key)  # built by another worker while this one waited
        if state is not None:
            return state
        built = build()
        if len(built.ids) < SHARED_MIN_ROWS:
            return built
        try:
            save(directory, key, built)
        except OSError:
            return built
        global BUILDS
        BUILDS += 1
        mapped = load(directory, key)
        if mapped is None:
            return built
        del built
        _return_freed_memory()  # the build's private copies (rows read from SQLite, matrix)
        return mapped


def save(directory: str, key: engine_knn.DerivedKey, state: engine_knn.VectorState) -> None:
    """Write ``state`` as the shared files of ``key`` (the ``.npz`` last)."""
    base = os.path.join(directory, stem(key))
    index = state.index
    kind = state.index_kind
    meta: dict[str, Any] = {"format": FORMAT, "n": len(state.ids), "d": state.dims, "kind": kind}
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
        faiss = engine_knn._faiss()
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


def load(directory: str, key: engine_knn.DerivedKey) -> engine_knn.VectorState | None:
    """The mapped state of ``key``, or None when its files are absent, incomplete or foreign."""
    base = os.path.join(directory, stem(key))
    try:
        with np.load(base + ".npz", allow_pickle=False) as z:
            meta = json.loads(bytes(z["meta"]).decode("utf-8"))
            if meta.get("format") != FORMAT:
                return None
            n, d, kind = int(meta["n"]), int(meta["d"]), str(meta["kind"])
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
            faiss = engine_knn._faiss()
            mapped = faiss.read_index(base + ".faiss", faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY)
            if mapped.ntotal != n or mapped.d != d:
                return None
            if kind == "int8":
                index = engine_knn.Int8Candidates.from_parts(
                    mapped, scale=scale, err_l1=err_l1, err_norm=float(meta["err_norm"]),
                    code_norm=float(meta["code_norm"]), verified=bool(meta["verified"]))
            else:
                index = mapped
        elif kind == "flat":
            index, matrix = engine_knn.build_index(np.ascontiguousarray(matrix), kind="flat")
        sources = np.asarray(meta["source_names"], dtype=object)[source_codes]
    except (OSError, KeyError, ValueError, RuntimeError):
        return None
    return engine_knn.VectorState(key, MappedIds(blob, offsets), sources, matrix, index)


def prune(db_path: str, keep: dict[str, set[int]]) -> int:
    """Remove the shared files of every generation that ``keep`` (db identity -> revisions)
    does not hold. Revisions newer than every kept one of their database stay: a worker may have
    built them before the owner heard of them. Returns how many files were removed."""
    directory = state_dir(db_path)
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
