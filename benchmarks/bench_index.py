"""Index throughput benchmark (``memory-core bench index``): MB/s and chunks/s against raw disk reads.

Generates a seeded workspace (default 10,000 Markdown files, ~40 MB: daily notes with headings,
bullet entries and paragraphs), then measures in one run: reading every file's bytes from disk
(the baseline), a keyword-only full index into a fresh database, and, on a subset (default 200
files), a full index with ``local`` embeddings (all-MiniLM-L6-v2 int8) when that provider can run, side by
side with a plain batch encode of the same texts (its chunks and their passages).
Prints a table and writes the results as JSON. Target: keyword-only 10k files / 40 MB < 60 s.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from benchmarks import add_json_argument, emit, progress_log
from host_facades.chunking.pipeline import split_passages

TARGET_KEYWORD_SECONDS = 60.0
TARGET_X_PLAIN_ENCODE = 0.9  # the local index embeds at >= 0.9x a plain batch encode of the same chunks

_WORDS = (
    "deploy release rollback canary cluster staging production migration database index query cache "
    "latency incident postmortem runbook owner review meeting agenda decision preference budget invoice "
    "customer ticket escalation alert dashboard metric trace log sampling retention backup restore "
    "certificate rotation secret vault token permission policy schema contract interface module package "
    "dependency upgrade version branch merge commit pipeline workflow artifact container image registry "
    "kubernetes operator controller reconcile webhook retry idempotent queue worker thread process memory "
    "vector embedding search ranking recall precision summary note reminder travel lunch coffee weekend "
    "family birthday doctor dentist gym running reading book podcast article paper conference talk"
).split()
_NAMES = ["Dana", "Marco", "Priya", "Jonas", "Aiko", "Lena", "Omar", "Sofia", "Tomasz", "Wei"]


def _sentence(rng: random.Random, n: int) -> str:
    words = rng.choices(_WORDS, k=n)
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words)), rng.choice(_NAMES))
    return " ".join(words).capitalize() + "."


def _file_text(rng: random.Random, i: int, target_bytes: int) -> str:
    parts = [f"# {2020 + i % 7}-{1 + i % 12:02d}-{1 + i % 28:02d} notes {i}", ""]
    size = len(parts[0])
    while size < target_bytes:
        kind = rng.random()
        if kind < 0.15:
            line = f"## {_sentence(rng, rng.randint(2, 5))[:-1]}"
            block = ["", line, ""]
        elif kind < 0.6:
            block = [f"- {_sentence(rng, rng.randint(6, 18))}"]
            if rng.random() < 0.1:
                block.append(f"<!-- importance: {rng.randint(1, 10)} -->")
        else:
            block = [" ".join(_sentence(rng, rng.randint(8, 20)) for _ in range(rng.randint(2, 5))), ""]
        parts.extend(block)
        size += sum(len(b) + 1 for b in block)
    return "\n".join(parts) + "\n"


def generate_workspace(root: str, files: int = 10_000, total_mb: float = 40.0, seed: int = 0) -> dict[str, Any]:
    """Write ``files`` Markdown files of about ``total_mb`` MB under ``root/memory`` (seeded)."""
    rng = random.Random(seed)
    mean = total_mb * 1024 * 1024 / files
    total = 0
    for i in range(files):
        target = max(200, int(rng.uniform(0.4, 1.6) * mean))
        path = os.path.join(root, "memory", f"{2020 + i % 7}", f"{i // 500:03d}", f"note-{i:05d}.md")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = _file_text(rng, i, target).encode("utf-8")
        with open(path, "wb") as fh:
            fh.write(data)
        total += len(data)
    with open(os.path.join(root, "MEMORY.md"), "w", encoding="utf-8") as fh:
        fh.write("# Memory\n\n- The benchmark workspace is generated.\n")
    return {"files": files + 1, "bytes": total}


def read_all(root: str) -> tuple[int, int, float]:
    """The disk baseline: read every file's bytes (same listing as the indexer). Returns (files, bytes, s)."""
    from memory_core.sources import list_memory_files

    t0 = time.perf_counter()
    paths = list_memory_files(root)
    n = 0
    for p in paths:
        with open(p, "rb") as fh:
            n += len(fh.read())
    return len(paths), n, time.perf_counter() - t0


def subset_workspace(src: str, dst: str, files: int) -> None:
    """Copy the first ``files`` notes into a fresh workspace for the slower embedding run."""
    from memory_core.sources import list_memory_files

    for p in list_memory_files(src)[:files]:
        rel = os.path.relpath(p, src)
        os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
        shutil.copyfile(p, os.path.join(dst, rel))


def index_once(workspace: str, state_dir: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    from memory_core.config import load_config
    from memory_core.core import MemoryCore

    from memory_core.progress import Progress

    cfg = load_config(None, env={}, overrides={"stateDir": state_dir, **(overrides or {})})
    with MemoryCore(workspace, config=cfg) as core:
        t0 = time.perf_counter()
        with Progress("  indexing", unit="files") as progress:
            summary = core.index(force=True, progress=progress)
        seconds = time.perf_counter() - t0
        st = core.status()
    return {"seconds": seconds, "files": summary.files, "chunks": summary.chunks, "bytes": summary.bytes,
            "provider": summary.provider, "model": summary.model, "db_bytes": st.get("db_bytes", 0),
            "db_path": cfg.db_path()}


def chunk_texts(db_path: str) -> list[str]:
    import apsw

    conn = apsw.Connection(db_path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [row[0] for row in conn.execute("SELECT text FROM memory_index_chunks ORDER BY path, start_line")]
    finally:
        conn.close()


def plain_batch_encode(texts: list[str], batch: int = 32) -> float:
    """Seconds to embed ``texts`` the plain way, as a user of the model would: one onnxruntime
    session on all the machine's cores (intra-op threads), length-sorted batches of 32 padded to
    their longest row, mean pooling, L2 norm. The baseline of the ``local`` index run."""
    import numpy as np
    import onnxruntime
    from tokenizers import Tokenizer

    from memory_core.embeddings.local import MAX_TOKENS, TOKENIZER_PATH, default_model_path, machine_threads

    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = machine_threads()
    session = onnxruntime.InferenceSession(str(default_model_path()), sess_options=opts,
                                           providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    tok = Tokenizer.from_file(str(TOKENIZER_PATH))
    tok.enable_truncation(max_length=MAX_TOKENS)
    tok.no_padding()
    t0 = time.perf_counter()
    encs = tok.encode_batch(texts)
    order = sorted(range(len(encs)), key=lambda i: len(encs[i].ids))
    for start in range(0, len(order), batch):
        rows = order[start : start + batch]
        width = max(len(encs[i].ids) for i in rows)
        ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for r, i in enumerate(rows):
            ids[r, : len(encs[i].ids)] = encs[i].ids
            mask[r, : len(encs[i].ids)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = session.run(None, feeds)[0]
        pooled = (hidden * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
    return time.perf_counter() - t0


def _rates(row: dict[str, Any], read_seconds_per_byte: float) -> dict[str, Any]:
    mb = row["bytes"] / (1024 * 1024)
    row["mb_per_s"] = round(mb / row["seconds"], 3) if row["seconds"] else None
    row["chunks_per_s"] = round(row["chunks"] / row["seconds"], 1) if row["seconds"] else None
    read_s = read_seconds_per_byte * row["bytes"]
    row["x_disk_read"] = round(row["seconds"] / read_s, 1) if read_s else None
    row["seconds"] = round(row["seconds"], 3)
    return row


def run_bench(*, files: int = 10_000, total_mb: float = 40.0, embed_files: int = 200, seed: int = 0,
              workdir: str | None = None, with_embeddings: bool = True, log: Any = print) -> dict[str, Any]:
    root = workdir or tempfile.mkdtemp(prefix="memory-core-bench-index-")
    try:
        ws = os.path.join(root, "ws")
        t0 = time.perf_counter()
        gen = generate_workspace(ws, files, total_mb, seed)
        log(f"generated {gen['files']} files, {gen['bytes'] / 1048576:.1f} MB in {time.perf_counter() - t0:.1f}s")
        n, nbytes, read_s = read_all(ws)
        per_byte = read_s / nbytes if nbytes else 0.0
        rows: dict[str, Any] = {
            "disk_read": {"files": n, "bytes": nbytes, "seconds": round(read_s, 3),
                          "mb_per_s": round(nbytes / 1048576 / read_s, 1) if read_s else None},
        }
        log(f"read {n} files ({nbytes / 1048576:.1f} MB) in {read_s:.2f}s")
        kw = index_once(ws, os.path.join(root, "state-kw"))
        rows["keyword_only"] = _rates(kw, per_byte)
        log(f"keyword-only index: {kw['seconds']:.2f}s, {kw['chunks']} chunks")
        if with_embeddings and embed_files > 0:
            sub = os.path.join(root, "ws-sub")
            subset_workspace(ws, sub, embed_files)
            try:
                emb = index_once(sub, os.path.join(root, "state-local"), {"provider": "local"})
            except Exception as exc:  # noqa: BLE001 - report why the local run was skipped
                rows["local_embeddings"] = {"skipped": f"{type(exc).__name__}: {exc}"}
                log(f"local embeddings skipped: {exc}")
            else:
                db_path = emb.pop("db_path")
                rows["local_embeddings"] = _rates(emb, per_byte)
                log(f"local embeddings index ({embed_files} files): {emb['seconds']:.2f}s, {emb['chunks']} chunks")
                texts = chunk_texts(db_path)
                # the index also embeds the passages of multi-line chunks: the plain encode does the same work
                passages = [p for t in texts for p in split_passages(t)]
                work = texts + passages
                # side by side: the plain encode before and after the index run (the load moves)
                plain_s = (plain_batch_encode(work) + plain_batch_encode(work)) / 2
                plain_rate = len(texts) / plain_s
                rows["local_embeddings"]["passages"] = len(passages)
                rows["plain_batch_encode"] = {"files": emb["files"], "bytes": emb["bytes"], "chunks": len(texts),
                                              "passages": len(passages), "seconds": round(plain_s, 3),
                                              "mb_per_s": None, "chunks_per_s": round(plain_rate, 1)}
                ratio = (emb["chunks"] / emb["seconds"]) / plain_rate if emb["seconds"] else None
                rows["local_embeddings"]["x_plain_encode"] = None if ratio is None else round(ratio, 3)
                log(f"plain batch encode of the same {len(texts)} chunks and {len(passages)} passages: "
                    f"{plain_s:.2f}s; local index runs at {ratio:.2f}x its chunks/s")
        local = rows.get("local_embeddings", {})
        result = {
            "benchmark": "index",
            "seed": seed,
            "workspace": {"files": gen["files"], "bytes": gen["bytes"]},
            "results": rows,
            "target": {"keyword_only_seconds_max": TARGET_KEYWORD_SECONDS,
                       "met": rows["keyword_only"]["seconds"] < TARGET_KEYWORD_SECONDS,
                       "local_index_x_plain_encode_min": TARGET_X_PLAIN_ENCODE,
                       "local_met": (local.get("x_plain_encode") or 0) >= TARGET_X_PLAIN_ENCODE
                       if "x_plain_encode" in local else None},
            "cpu_count": os.cpu_count(),
        }
        return result
    finally:
        if workdir is None:
            shutil.rmtree(root, ignore_errors=True)


def format_table(result: dict[str, Any]) -> str:
    lines = [f"{'run':<18}{'files':>8}{'MB':>9}{'chunks':>9}{'seconds':>10}{'MB/s':>9}{'chunks/s':>10}{'x read':>8}"]
    for name, row in result["results"].items():
        if "skipped" in row:
            lines.append(f"{name:<18}skipped: {row['skipped']}")
            continue
        lines.append(
            f"{name:<18}{row['files']:>8}{row['bytes'] / 1048576:>9.1f}{row.get('chunks', ''):>9}"
            f"{row['seconds']:>10.2f}{row['mb_per_s'] or 0:>9.2f}{row.get('chunks_per_s') or '':>10}"
            f"{row.get('x_disk_read') or '':>8}"
        )
    t = result["target"]
    lines.append(f"target: keyword-only < {t['keyword_only_seconds_max']:.0f}s -> {'met' if t['met'] else 'MISSED'}")
    local = result["results"].get("local_embeddings", {})
    if t.get("local_met") is not None:
        lines.append(f"target: local index >= {t['local_index_x_plain_encode_min']}x the plain batch encode's chunks/s "
                     f"-> {local['x_plain_encode']}x, {'met' if t['local_met'] else 'MISSED'}")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--files", type=int, default=10_000, help="number of generated notes (default 10000)")
    p.add_argument("--mb", type=float, default=40.0, help="total size in MB (default 40)")
    p.add_argument("--embed-files", type=int, default=200, help="subset indexed with local embeddings (0 = skip)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", help="keep the generated workspace and databases here")
    add_json_argument(p)


def run(args: argparse.Namespace) -> int:
    result = run_bench(files=args.files, total_mb=args.mb, embed_files=args.embed_files, seed=args.seed,
                       workdir=args.workdir, with_embeddings=args.embed_files > 0, log=progress_log(args))
    emit(args, result, lambda: format_table(result))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_index", description=(__doc__ or "").splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
