"""One sync pass: scan sources, prepare changed files, embed, publish, prune (upstream
`memory/manager-sync-ops.ts`).

:func:`run_sync` works on any :class:`IndexWriter`: the live one for an incremental sync, or the
temp one of an atomic full reindex. Chunk preparation sits behind :func:`prepare_entry` so it can be
routed to the indexing worker pool without touching the rest.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from host_facades.chunking.pipeline import PreparedChunk, hash_text, prepare_chunks, split_passages
from host_facades.db.sqlite_read import CORRUPT_ERRORS
from memory_core.errors import MemoryCoreError, WorkspaceError
from memory_core.sources import ScanResult, SourceEntry, scan_sources, stat_matches, valid_name
from memory_core.store.writer import FTS_ONLY_MODEL, LAST_SYNC_KEY, IndexWriter

ProgressFn = Callable[[int, int, str], None]

# Embedding work is grouped across files so a provider sees full batches; keyword-only publishes
# file by file.
EMBED_GROUP_CHUNKS = 64
DEFAULT_MAX_INPUT_BYTES = 8192
MAX_RECORDED_PROBLEMS = 200
# a sync that wrote at least 1/FTS_OPTIMIZE_SHARE of the index merges its FTS b-trees into one
FTS_OPTIMIZE_SHARE = 4


class ScanFailed(MemoryCoreError):
    """Listing the sources failed; a full reindex is aborted and the old index kept (upstream
    `memory/manager-sync-ops.ts`)."""

    code = "scan_failed"


@dataclass
class IndexSummary:
    """What one sync or index run did. ``files``/``chunks`` are the index totals afterwards."""

    files: int = 0
    chunks: int = 0
    added: int = 0
    changed: int = 0
    removed: int = 0
    unchanged: int = 0
    skipped: int = 0
    forgotten: int = 0
    failed: int = 0
    chunks_written: int = 0
    bytes: int = 0
    seconds: float = 0.0
    revision: int = 0
    full: bool = False
    reason: str = "manual"
    provider: str = "none"
    model: str = FTS_ONLY_MODEL
    scan_ok: bool = True
    problems: list[dict[str, str]] = field(default_factory=list)
    error: str | None = None
    # a forced rebuild found the index file unreadable: where the old file was moved (kept, not deleted)
    moved_aside: str | None = None
    # files that changed between being read and being published (left for the next sync)
    superseded: int = 0
    # why a full rebuild was one: "new index", "--force", "settings changed (chunking.tokens 400 -> 300)"
    rebuild_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["seconds"] = round(self.seconds, 3)
        return out


def prepare_entry(entry: SourceEntry, cfg: Any, *, max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> list[PreparedChunk]:
    """Chunk one source snapshot (pure; the unit of work for the indexing pool)."""
    return prepare_chunks(
        source=entry.source,
        path=entry.path,
        content=entry.content,
        tokens=cfg.chunking.tokens,
        overlap=cfg.chunking.overlap,
        mtime_ms=entry.mtime_ms,
        max_input_bytes=max_input_bytes,
        line_map=entry.line_map,
    )


class _ChunkVectorsOnly:
    """The embedding cache as one flush's :func:`embed_chunks` sees it: it stores chunk vectors only
    (passage vectors are kept once, in the index), and answers the lookup made up front from memory."""

    def __init__(self, cache: Any, provider: Any, hashes: Sequence[str]) -> None:
        self.cache = cache
        self.chunk_hashes = set(hashes)
        self.found = cache.get_many(provider.id, provider.model, provider.provider_key, list(dict.fromkeys(hashes)))

    def get_many(self, provider: str, model: str, provider_key: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        return {h: self.found[h] for h in hashes if h in self.found}

    def put_many(self, provider: str, model: str, provider_key: str, items: dict[str, np.ndarray]) -> None:
        self.cache.put_many(provider, model, provider_key, {h: v for h, v in items.items() if h in self.chunk_hashes})


def embed_group(provider: Any, texts: Sequence[str], hashes: Sequence[str], cache: Any,
                model: str) -> tuple[np.ndarray, list[np.ndarray | None]]:
    """The chunk vectors of ``texts`` and, per chunk, the ``(passages, dims)`` vectors of its passages
    (``split_passages``) or None. Chunk vectors go through ``cache``; a cached chunk whose passage
    vectors the index already holds (``cache.passages_of``: same hash, same chunk vector) reuses them.
    Everything else is embedded in ONE call, so the provider sees full batches."""
    from memory_core.embeddings.batching import embed_chunks, rows_per_group

    split = [split_passages(t) for t in texts]
    view = _ChunkVectorsOnly(cache, provider, hashes) if cache is not None else None
    reuse: dict[str, np.ndarray] = {}
    if view is not None and hasattr(cache, "passages_of"):
        reuse = cache.passages_of(model, [(hashes[i], view.found[hashes[i]]) for i, ps in enumerate(split)
                                          if ps and hashes[i] in view.found])
    out: list[np.ndarray | None] = [None] * len(texts)
    todo: list[int] = []
    for i, ps in enumerate(split):
        got = reuse.get(hashes[i]) if ps else None
        if got is not None and len(got) == len(ps):
            out[i] = got
        elif ps:
            todo.append(i)
    groups = [split[i] for i in todo]
    flat = [p for ps in groups for p in ps]
    matrix = embed_chunks(provider, [*texts, *flat], [*hashes, *(hash_text(p) for p in flat)], view)
    for i, rows in zip(todo, rows_per_group(groups, matrix, len(texts))):
        out[i] = rows
    return matrix[:len(texts)], out


def resolve_sessions_dir(cfg: Any, workspace: str) -> str:
    """``sessionsDir`` relative to the workspace, or ``<state_dir>/agents/<agent>/sessions``."""
    if cfg.sessions_dir:
        return os.path.abspath(os.path.join(workspace, os.path.expanduser(cfg.sessions_dir)))
    return os.path.join(os.path.expanduser(cfg.state_dir), "agents", cfg.agent_id, "sessions")


def extra_paths_arg(cfg: Any) -> list[Any]:
    out: list[Any] = []
    for item in cfg.extra_paths:
        out.append(item if isinstance(item, str) else item.model_dump(exclude_none=True))
    return out


def scan(cfg: Any, workspace: str) -> ScanResult:
    if not os.path.isdir(workspace):
        raise WorkspaceError(
            f"workspace {workspace} does not exist or is not a folder; pass --workspace PATH "
            "(or set `workspace` in the config)"
        )
    sessions_dir = resolve_sessions_dir(cfg, workspace) if "sessions" in cfg.sources else None
    return scan_sources(workspace, sources=tuple(cfg.sources), extra_paths=extra_paths_arg(cfg),
                        sessions_dir=sessions_dir)


def scan_paths(cfg: Any, workspace: str, wanted: set[str]) -> ScanResult:
    """A targeted scan (freshness): list the sources without reading them and build entries only
    for the ``wanted`` indexed paths, so a sync of one edited file does not re-read every file (and
    every transcript). A listing error makes the result not ``ok`` (nothing is pruned)."""
    from memory_core import sources as src

    result = ScanResult(ok=True)
    if "memory" in cfg.sources:
        listing = src._enumerate_memory(workspace, extra_paths_arg(cfg))  # noqa: SLF001 - errors are needed
        if listing.errors:
            result.ok = False
            result.problems.extend(listing.errors)
        _add_wanted(result, wanted, ((src.relative_source_path(workspace, path), workspace, path)
                                     for path in listing.files), src.build_file_entry, "memory")
    if "sessions" in cfg.sources:
        sessions_dir = resolve_sessions_dir(cfg, workspace)
        _add_wanted(result, wanted, ((f"sessions/{os.path.basename(path)}", sessions_dir, path)
                                     for path in src.list_session_files(sessions_dir)), src.build_session_entry,
                    "sessions")
    return result


def _add_wanted(result: Any, wanted: Any, candidates: Any, build: Any, source: str) -> None:
    """Build the entries of the ``(rel, root, abs_path)`` candidates whose ``rel`` is wanted; a file
    that cannot be read becomes a problem, a vanished one is skipped."""
    from memory_core import sources as src

    for rel, root, path in candidates:
        if rel not in wanted:
            continue
        try:
            entry = build(root, path)
        except src.SourceReadError as exc:
            result.problems.append(src.skipped_problem(rel, source, path, exc))
            continue
        if entry is not None:
            result.entries.append(entry)


def _problem_dict(p: Any, workspace: str) -> dict[str, str]:
    path = str(p.path)
    if os.path.isabs(path):
        rel = os.path.relpath(path, workspace)
        path = path if rel.startswith("..") else rel.replace(os.sep, "/")
    return {"path": path, "code": str(p.code), "message": str(p.message)}


def run_sync(
    writer: IndexWriter,
    cfg: Any,
    workspace: str,
    provider: Any | None,
    *,
    force: bool = False,
    full: bool = False,
    reason: str = "manual",
    paths: Sequence[str] | None = None,
    previous: Mapping[str, Mapping[str, str]] | None = None,
    progress: ProgressFn | None = None,
    scan_result: ScanResult | None = None,
) -> IndexSummary:
    """Bring ``writer``'s index up to date with the workspace.

    ``full``: the writer is a fresh temp database being rebuilt; any failure raises (the caller
    keeps the old index). ``previous``: the live index's ``{source: {path: hash}}`` so a full
    rebuild still reports added/changed/removed against what was there. Per-source publication
    failures of an incremental sync are recorded as problems and the rest continues.

    Steps: scan (here), plan (:func:`_plan`), embed and write (:class:`_Publisher`), prune
    (:func:`_prune`), record the stats and skips (:func:`_record_scan`), report (:func:`_report`).
    """
    t0 = time.perf_counter()
    if paths is not None:  # a watcher may report a name that is not UTF-8: the scan skips such files
        paths = [p for p in paths if valid_name(p)]
    model = str(provider.model) if provider is not None else FTS_ONLY_MODEL
    summary = IndexSummary(full=full, reason=reason, model=model,
                           provider=str(provider.id) if provider is not None else "none")
    # What is indexed is read before the listing: a file another writer (a serving process, a
    # concurrent `index`) publishes after the listing began is no candidate for pruning here.
    stats = {s: writer.indexed_stats(s) for s in cfg.sources}
    if scan_result is None and paths is not None and not full:
        scan_result = scan_paths(cfg, workspace, {p.replace(os.sep, "/") for p in paths})
    result = scan_result if scan_result is not None else scan(cfg, workspace)
    summary.scan_ok = bool(result.ok)
    problems = [_problem_dict(p, workspace) for p in result.problems]
    summary.skipped = len(problems)
    if full and not result.ok:
        detail = "; ".join(f"{p['path']}: {p['message']}" for p in problems[:3]) or "unknown error"
        raise ScanFailed(f"listing the memory sources failed ({detail}); the previous index was kept, retry later")

    wanted = None if paths is None else {p.replace(os.sep, "/") for p in paths}
    plan = _plan(writer, result, stats, summary, wanted=wanted, previous=previous, rewrite=force or full)
    # From here on only the identities of the scanned entries are needed; each content lives in
    # ``plan.todo`` until it is chunked, so a large transcript's text is not held while publishing.
    result = ScanResult(ok=result.ok, entries=[], problems=result.problems)

    max_input = int(getattr(provider, "max_input_bytes", 0) or 0) if provider is not None else DEFAULT_MAX_INPUT_BYTES
    _Publisher(writer, cfg, provider, model, summary, problems, full=full, progress=progress).run(
        plan.todo, max_input)
    if result.ok:
        _prune(writer, cfg, workspace, plan, summary, problems, previous=previous if full else None)
    _record_scan(writer, cfg, plan, complete=result.ok)
    return _report(writer, summary, problems, plan, t0)


@dataclass
class _Plan:
    """What a sync does with the scanned entries: ``todo`` to prepare and publish, ``restat`` (same
    content under a new ``(path, source, hash, mtime_ms, size)``), the ``scanned`` ``(source, path)``
    identities, the ``skipped`` records of the scan's problems, the ``indexed`` hashes before the
    sync, and the ``wanted`` paths of a targeted sync (None: all)."""

    todo: list[SourceEntry]
    restat: list[tuple[str, str, str, float, int]]
    scanned: list[tuple[str, str]]
    skipped: list[tuple[str, str, float, int, str]]
    indexed: dict[str, dict[str, str]]
    wanted: set[str] | None


def _plan(writer: IndexWriter, result: ScanResult, stats: Mapping[str, Mapping[str, tuple]], summary: IndexSummary,
          *, wanted: set[str] | None, previous: Mapping[str, Mapping[str, str]] | None, rewrite: bool) -> _Plan:
    """Sort the scanned entries into added/changed/unchanged/forgotten (counted in ``summary``) and
    decide which are prepared again (``rewrite``: all of them)."""
    indexed = {s: {p: v[2] for p, v in st.items()} for s, st in stats.items()}
    before = previous if previous is not None else indexed
    # A tombstoned session is neither added nor prepared: it is counted as forgotten (the writer
    # still refuses its publication, for a forget that lands while this sync runs).
    forgotten = {(source, path) for source, path, _ in writer.forgotten_paths()}

    todo: list[SourceEntry] = []
    restat: list[tuple[str, str, str, float, int]] = []  # same content, new mtime/size
    for e in result.entries:
        if wanted is not None and e.path not in wanted:
            continue
        if (e.source, e.path) in forgotten:
            summary.forgotten += 1
            continue
        old = before.get(e.source, {}).get(e.path)
        if old is None:
            summary.added += 1
        elif old != e.hash:
            summary.changed += 1
        else:
            summary.unchanged += 1
        if rewrite or indexed.get(e.source, {}).get(e.path) != e.hash:
            todo.append(e)
        else:
            mtime, size, _ = stats[e.source][e.path]
            if mtime is None or size is None or not stat_matches((mtime, size), (e.mtime_ms, e.size)):
                restat.append((e.path, e.source, e.hash, e.mtime_ms, e.size))
    scanned = [(e.source, e.path) for e in result.entries]
    skipped = [(p.source, p.path, p.stat[0], p.stat[1], p.code) for p in result.problems
               if p.stat is not None and (wanted is None or p.path in wanted)]
    return _Plan(todo=todo, restat=restat, scanned=scanned, skipped=skipped, indexed=indexed, wanted=wanted)


class _Publisher:
    """Prepare, embed and write the planned entries: chunks are embedded in groups across files (a
    provider sees full batches; keyword-only publishes file by file), each file is published in its
    own transaction, and a file that fails is a problem of an incremental sync (its old rows kept)
    or the failure of a full one."""

    def __init__(self, writer: IndexWriter, cfg: Any, provider: Any | None, model: str, summary: IndexSummary,
                 problems: list[dict[str, str]], *, full: bool, progress: ProgressFn | None) -> None:
        self.writer, self.cfg, self.provider, self.model = writer, cfg, provider, model
        self.summary, self.problems, self.full, self.progress = summary, problems, full, progress
        self.total = 0
        self.done = 0
        self.group: list[tuple[SourceEntry, list[PreparedChunk]]] = []
        self.group_chunks = 0

    def run(self, todo: list[SourceEntry], max_input: int) -> None:
        self.total = len(todo)
        # A temp database being rebuilt commits in bulk (each source still in its own savepoint); the
        # live database commits per source so searches see each file as soon as it is published.
        # chunk preparation runs in the shared indexing pool when there is enough to parallelise
        # (workers/shared.py; pool.workers = 0 or few files: in-process), in file order, same result.
        from workers.shared import prepared_stream

        cfg, full = self.cfg, self.full
        stream = prepared_stream(todo, cfg, max_input)
        with self.writer.bulk() if full else contextlib.nullcontext():
            for idx in range(len(todo)):  # not enumerate(): its cached (idx, entry) tuple would keep the text alive
                entry = todo[idx]
                try:
                    chunks = stream.get(idx) if stream is not None else prepare_entry(entry, cfg, max_input_bytes=max_input)
                except MemoryCoreError:
                    raise
                except Exception as exc:  # a chunking bug on one file must not lose the others
                    if full:
                        raise
                    self.summary.failed += 1
                    self.problems.append({"path": entry.path, "code": "prepare_failed",
                                          "message": f"could not chunk {entry.path}: {exc}; its previous rows were kept"})
                    self.done += 1
                    continue
                entry = todo[idx] = replace(entry, content="", line_map=None)  # chunked: drop the text
                self.group.append((entry, chunks))
                self.group_chunks += len(chunks)
                if self.provider is None or self.group_chunks >= EMBED_GROUP_CHUNKS:
                    self.flush()
            if self.group:
                self.flush()

    def flush(self) -> None:
        """Embed the group's chunks (through the cache) and publish its files, in order."""
        group, provider, summary = self.group, self.provider, self.summary
        vectors: list[np.ndarray | None] = [None] * len(group)
        passages: list[list[np.ndarray | None] | None] = [None] * len(group)
        if provider is not None and self.group_chunks:
            from memory_core.embeddings.batching import rows_per_group

            texts = [c.text for _, cs in group for c in cs]
            hashes = [c.hash for _, cs in group for c in cs]
            cache = self.writer.cache if getattr(self.cfg.cache, "enabled", True) else None
            matrix, extra = embed_group(provider, texts, hashes, cache, self.model)  # float32 rows
            per_file = [cs for _, cs in group]
            vectors, passages = rows_per_group(per_file, matrix), rows_per_group(per_file, extra)
        for (entry, chunks), vecs, extra_vecs in zip(group, vectors, passages):
            if not self.full and entry.source == "memory" and _changed_since_read(entry):
                # Its content is older than the file now: publishing it could overwrite a newer
                # publish by another writer. The change is the next sync's (a watcher reports it).
                summary.superseded += 1
                self.done += 1
                continue
            try:
                status = self.writer.replace_source(entry, chunks, vecs, self.model, passages=extra_vecs)
            except Exception as exc:
                if self.full or isinstance(exc, (MemoryCoreError, *CORRUPT_ERRORS)):
                    raise  # a damaged index file fails the run (IndexCorrupt), it is no file's problem
                summary.failed += 1
                self.problems.append({"path": entry.path, "code": "publish_failed",
                                      "message": f"could not store {entry.path}: {exc}; its previous rows were kept"})
            else:
                if status == "forgotten":
                    summary.forgotten += 1
                else:
                    summary.chunks_written += len(chunks)
                    summary.bytes += int(entry.size)
            self.done += 1
            if self.progress is not None:
                self.progress(self.done, self.total, entry.path)
        self.group = []
        self.group_chunks = 0


def _prune(writer: IndexWriter, cfg: Any, workspace: str, plan: _Plan, summary: IndexSummary,
           problems: list[dict[str, str]], *, previous: Mapping[str, Mapping[str, str]] | None) -> None:
    """Delete the rows of the files the scan no longer found; called only after a scan that succeeded
    (upstream `memory/manager-sync-ops.ts`): a file that could not be read this time keeps its rows
    (it is reported as a problem, not treated as deleted). ``previous``: a full rebuild's live index,
    whose files gone since are counted as removed."""
    wanted = plan.wanted
    present: dict[str, set[str]] = {s: set() for s in cfg.sources}
    for source, path in plan.scanned:
        present.setdefault(source, set()).add(path)
    problem_paths = {p["path"] for p in problems}
    for source, hashes in plan.indexed.items():
        for path, h in hashes.items():
            if wanted is not None and path not in wanted:
                continue
            if path in present.get(source, ()) or path in problem_paths:
                continue
            if source == "memory" and os.path.lexists(os.path.join(workspace, path)):
                continue  # created again since the listing: the next sync publishes it
            if writer.delete_if_current(path, source, h):
                summary.removed += 1
    if previous is not None:  # files gone since the live index was built
        for source, hashes in previous.items():
            gone = [p for p in hashes if p not in present.get(source, ()) and p not in problem_paths]
            summary.removed += len([p for p in gone if wanted is None or p in wanted])


def _record_scan(writer: IndexWriter, cfg: Any, plan: _Plan, *, complete: bool) -> None:
    """Record new stats of unchanged files and what the scan skipped."""
    if plan.restat:  # same content under a new mtime/size (touched, checked out again): record the stat
        writer.refresh_source_stats(plan.restat)
    # What this sync skipped, and under which stat: freshness treats such a file as current until it
    # changes again (otherwise every search would find it "dirty"). Only what the scan covered is
    # replaced: everything after a complete listing, the wanted paths of a targeted sync.
    wanted = plan.wanted
    if wanted is None and complete:
        covered = None
    else:
        covered = set(plan.scanned) | {(s_, p_) for s_, p_, *_ in plan.skipped}
        if wanted is not None:
            covered |= {(source, path) for source in cfg.sources for path in wanted}
    writer.record_skipped(plan.skipped, covered=covered)


def _report(writer: IndexWriter, summary: IndexSummary, problems: list[dict[str, str]], plan: _Plan,
            t0: float) -> IndexSummary:
    """The index totals, problems, error and revision after the sync."""
    counts = writer.counts()
    summary.files = counts["files"]
    summary.chunks = counts["chunks"]
    if summary.chunks_written and summary.chunks_written * FTS_OPTIMIZE_SHARE >= summary.chunks:
        # a first index, a rebuild or a large change: one FTS b-tree again (smaller syncs leave
        # FTS5's own merging to it; their cost stays proportional to what they wrote)
        writer.optimize_fts()
    summary.problems = problems[:MAX_RECORDED_PROBLEMS]
    entry_paths = {path for _, path in plan.scanned}
    summary.skipped = len({p["path"] for p in problems if p["path"] not in entry_paths})
    if summary.failed:
        summary.error = f"{summary.failed} file(s) could not be indexed; see problems"
    summary.revision = writer.revision
    summary.seconds = time.perf_counter() - t0
    return summary


def _changed_since_read(entry: SourceEntry) -> bool:
    """The file's stat differs from the one taken before its content was read (or it is gone)."""
    try:
        st = os.stat(entry.abs_path)
    except OSError:
        return True
    return not stat_matches((entry.mtime_ms, entry.size), (st.st_mtime_ns / 1e6, st.st_size))


def record_last_sync(writer: IndexWriter, summary: IndexSummary | None, *, error: str | None = None,
                     reason: str = "manual") -> None:
    """Store time, error and problems of the last sync in ``memory_index_last_sync_v1`` (for status)."""
    data = {
        "time": int(time.time() * 1000),
        "reason": summary.reason if summary is not None else reason,
        "full": bool(summary.full) if summary is not None else False,
        "error": error if error is not None else (summary.error if summary is not None else None),
        "problems": summary.problems[:50] if summary is not None else [],
        "seconds": round(summary.seconds, 3) if summary is not None else None,
    }
    writer.set_meta_value(LAST_SYNC_KEY, json.dumps(data, sort_keys=True))
