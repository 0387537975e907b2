"""The long-query workload of ``memory-core bench latency --workload long``: sentences over documents.

A generated workspace (seed 0, no download) of ``--docs`` notes of 10-15 lines each: every line is
one WordNet synset (its lemmas and gloss) when ``wordnet-base`` is installed, else a generated
sentence of Zipf-distributed words. Queries are 10-20 words: a synset's usage examples followed by
its definition (or generated words), one query per timed sample, never repeated (a query cache must
not make the row cheaper than an agent's first ask).

Rows, interleaved sample by sample so every row sees the same machine load:

- anchor FTS5 OR: one in-process ``MATCH`` of the query's words OR-joined over a plain FTS5 table of
  the documents, ``ORDER BY rank LIMIT candidates``, path and text fetched;
- anchor hybrid: the same query embedded by the same model (local all-MiniLM-L6-v2, in the loop),
  exact inner product over one float32 vector per document, fused with the FTS5 OR ranking by RRF
  (k = 60), top ``maxResults``. Like memory-core's keyword and hybrid systems, the two anchors are
  separate engines: each has its own FTS5 table (the hybrid anchor's lexical step never re-reads
  pages the FTS5 OR anchor just read for the same query), and the hybrid anchor has its own model
  session (never weights the in-process rows' embeddings of the same process just warmed);
- memory-core keyword and hybrid through ``memory-core serve`` (``memory.search`` v1 over one warm
  WebSocket connection), the same two searches in-process (``MemoryCore.search``, worker pool as
  configured) and on the engine alone (``MemoryCore(pool=False)``: no process hop), which tells the
  engine's own work from the hops between processes.

Index rows: ``MemoryCore.index`` of the workspace with the local provider (fresh state, cache
empty) against a plain batch encode of the same texts the index embeds (each chunk, and each
passage it stored a vector for); the bytes the index keeps on disk (database, WAL, mapped vector
files, cache) against the text plus one float32 vector per chunk and one byte per dimension per
passage vector. Targets: keyword <= 1.5x anchor FTS5 OR, hybrid <= 1.5x anchor hybrid,
index <= 1.3x the plain encode, disk <= 1.5x that sum.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memory_core.progress import Progress

TOKEN = "bench-token"
RRF_K = 60
TARGETS = {"keyword": 1.5, "hybrid": 1.5, "index": 1.3, "disk": 1.5}
_WORD = re.compile(r"[A-Za-z0-9]+")


# --- data ----------------------------------------------------------------------------------------


def _lines_and_queries(n_lines: int, n_queries: int, seed: int) -> tuple[list[str], list[tuple[int, str]]]:
    """``n_lines`` document lines and ``(line index, query)`` pairs of 10-20 words."""
    rng = random.Random(seed)
    lines: list[str] = []
    sources: list[list[str]] = []  # per line: the words a query about it may use
    try:
        from benchmarks.bench_quality import parse_wordnet

        synsets = list(parse_wordnet())
    except FileNotFoundError:
        synsets = []
    if len(synsets) >= n_lines:
        rng.shuffle(synsets)
        for s in synsets[:n_lines]:
            lines.append(s.text)
            sources.append(" ".join([*s.examples, s.definition]).split())
    else:  # no wordnet-base: generated sentences over a Zipf vocabulary
        from benchmarks.bench_latency import vocabulary

        vocab = vocabulary(20_000)
        p = 1.0 / np.arange(1, len(vocab) + 1)
        p /= p.sum()
        nrng = np.random.default_rng(seed)
        for _ in range(n_lines):
            words = [vocab[i] for i in nrng.choice(len(vocab), size=int(nrng.integers(8, 18)), p=p)]
            lines.append(" ".join(words) + ".")
            sources.append(words + [vocab[i] for i in nrng.choice(len(vocab), size=12, p=p)])
    queries: list[tuple[int, str]] = []
    order = list(range(n_lines))
    rng.shuffle(order)
    for i in order:
        words = sources[i]
        if len(words) < 10:
            continue
        queries.append((i, " ".join(words[: rng.randint(10, min(20, len(words)))]).strip(" ;,.")))
        if len(queries) >= n_queries:
            break
    return lines, queries


def build_workspace(root: Path, n_docs: int, n_queries: int, *, seed: int = 0) -> tuple[Path, list[str], list[str]]:
    """``(workspace, document texts, queries)``: ``n_docs`` notes of 10-15 lines under ``memory/``."""
    rng = random.Random(seed + 1)
    sizes = [rng.randint(10, 15) for _ in range(n_docs)]
    lines, queries = _lines_and_queries(sum(sizes), n_queries, seed)
    ws = root / "workspace"
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    docs: list[str] = []
    at = 0
    for d, size in enumerate(sizes):
        text = "\n".join(lines[at:at + size]) + "\n"
        at += size
        (ws / "memory" / f"note-{d:05d}.md").write_text(text, encoding="utf-8")
        docs.append(text)
    return ws, docs, [q for _, q in queries]


# --- anchors -------------------------------------------------------------------------------------


def or_query(query: str) -> str:
    """The query's words, quoted and OR-joined (what a bare FTS5 caller would send)."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))
    return " OR ".join(f'"{w}"' for w in words) or '""'


class Anchors:
    """The raw engines of the same data, in-process: an FTS5 table and an exact inner product."""

    def __init__(self, path: str, docs: Sequence[str], names: Sequence[str], provider: Any) -> None:
        import apsw

        self.conn = apsw.Connection(path)
        self.conn.execute("CREATE VIRTUAL TABLE docs USING fts5(path UNINDEXED, text)")
        with self.conn:
            self.conn.executemany("INSERT INTO docs(rowid, path, text) VALUES (?,?,?)",
                                  ((i, names[i], t) for i, t in enumerate(docs)))
        self.provider = provider
        self.matrix: np.ndarray | None = None

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """A plain batch encode: the provider's ``embed_batch`` over as many texts as it takes in one
        call (the local provider sorts a call's rows by length and keeps every thread busy)."""
        batch = int(getattr(self.provider, "max_batch_inputs", 0) or 256)
        rows = [np.asarray(self.provider.embed_batch(list(texts[i:i + batch])), dtype=np.float32)
                for i in range(0, len(texts), batch)]
        return np.vstack(rows) if rows else np.zeros((0, 384), np.float32)

    def fts(self, query: str, limit: int) -> list[tuple[int, str, str]]:
        return list(self.conn.execute(
            "SELECT rowid, path, text FROM docs WHERE docs MATCH ? ORDER BY rank LIMIT ?", (or_query(query), limit)))

    def hybrid(self, query: str, limit: int, k: int) -> list[tuple[str, str]]:
        assert self.matrix is not None
        q = np.asarray(self.provider.embed_batch([query]), dtype=np.float32)[0]
        lexical = self.fts(query, limit)
        scores = self.matrix @ q
        top = np.argpartition(-scores, min(limit, len(scores) - 1))[:limit]
        top = top[np.argsort(-scores[top])]
        fused: dict[int, float] = {}
        for rank, (rowid, _, _) in enumerate(lexical):
            fused[rowid] = fused.get(rowid, 0.0) + 1.0 / (RRF_K + rank + 1)
        for rank, rowid in enumerate(top.tolist()):
            fused[rowid] = fused.get(rowid, 0.0) + 1.0 / (RRF_K + rank + 1)
        best = sorted(fused, key=lambda r: -fused[r])[:k]
        return [tuple(row) for row in self.conn.execute(  # type: ignore[misc]
            f"SELECT path, text FROM docs WHERE rowid IN ({','.join(map(str, best))})")]


# --- the run -------------------------------------------------------------------------------------


def _percentiles(times: Sequence[float]) -> dict[str, float]:
    a = np.asarray(times)
    return {"p50": round(float(np.percentile(a, 50)), 3), "p95": round(float(np.percentile(a, 95)), 3),
            "n": len(times)}


def disk_bytes(state: Path) -> dict[str, int]:
    """Bytes under the state dir by kind: the database files, mapped vector files, anything else."""
    out = {"database": 0, "mapped_vectors": 0, "other": 0}
    for path in state.rglob("*"):
        if not path.is_file() or path.name.endswith(".lock"):
            continue
        size = path.stat().st_size
        if path.parent.name.endswith("-vectors"):
            out["mapped_vectors"] += size
        elif ".sqlite" in path.name:
            out["database"] += size
        else:
            out["other"] += size
    return out


def _embedded_texts(db: str) -> tuple[list[str], int, int]:
    """``(texts, chunks, passages)``: what the index embedded (chunk texts, then the passages it
    stored a vector for, split as the indexer splits them)."""
    import apsw

    from host_facades.chunking.pipeline import split_passages
    from host_facades.retrieval.vector_state import passage_join

    conn = apsw.Connection(db, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        chunks = [(cid, t) for cid, t in conn.execute("SELECT id, text FROM memory_index_chunks ORDER BY rowid")]
        layout = passage_join(conn)
        stored = {cid for (cid,) in conn.execute(
            "SELECT DISTINCT c.id FROM memory_index_passage_vectors p JOIN memory_index_chunks c ON"
            f" {layout[0]}")} if layout is not None else set()
    finally:
        conn.close()
    texts = [t for _, t in chunks]
    passages = [p for cid, t in chunks if cid in stored for p in split_passages(t)]
    return texts + passages, len(chunks), len(passages)


async def _samples(urls: dict[str, str], cores: dict[str, Any], anchors: dict[str, Anchors], queries: list[str],
                   warm: list[str], *, max_results: int, candidates: int,
                   log: Callable[[str], None]) -> dict[str, list[float]]:
    from memory_core.gateway.client import GatewayClient

    rows: dict[str, list[float]] = {name: [] for name in (
        "anchor FTS5 OR", "anchor hybrid", "keyword gateway", "hybrid gateway", "keyword in-process",
        "hybrid in-process", "keyword engine", "hybrid engine")}
    clients = {kind: await GatewayClient.open(url, token=TOKEN) for kind, url in urls.items()}
    params = {"maxResults": max_results}

    def clock(row: str, fn: Callable[[], Any]) -> None:
        t = time.perf_counter()
        fn()
        rows[row].append((time.perf_counter() - t) * 1000)

    async def aclock(row: str, coro: Any) -> None:
        t = time.perf_counter()
        await coro
        rows[row].append((time.perf_counter() - t) * 1000)

    try:
        for q in warm:  # first-use imports, model sessions, vector state on both sides
            anchors["keyword"].fts(q, candidates)
            anchors["hybrid"].hybrid(q, candidates, max_results)
            for kind in ("keyword", "hybrid"):
                cores[kind].search(q, max_results=max_results)
                cores[f"{kind} engine"].search(q, max_results=max_results)
                await clients[kind].call("memory.search", {"query": q, **params})
        with Progress("  long-query samples", len(queries), unit="samples") as progress:
            for i, q in enumerate(queries):
                # every row searches q, new to each system (each has its own query caches and index)
                clock("anchor FTS5 OR", lambda: anchors["keyword"].fts(q, candidates))
                clock("anchor hybrid", lambda: anchors["hybrid"].hybrid(q, candidates, max_results))
                await aclock("keyword gateway", clients["keyword"].call("memory.search", {"query": q, **params}))
                await aclock("hybrid gateway", clients["hybrid"].call("memory.search", {"query": q, **params}))
                # in-process: this process's engine, whose query caches have not seen ``q`` either
                clock("keyword in-process", lambda: cores["keyword"].search(q, max_results=max_results))
                clock("hybrid in-process", lambda: cores["hybrid"].search(q, max_results=max_results))
                clock("keyword engine", lambda: cores["keyword engine"].search(q, max_results=max_results))
                clock("hybrid engine", lambda: cores["hybrid engine"].search(q, max_results=max_results))
                progress(i + 1)
    finally:
        for client in clients.values():
            await client.close()
    return rows


def system_config(ws: Path, state_dir: Path, provider: str, pool_workers: int | None = None) -> dict[str, Any]:
    """The config of one memory-core system of the run; ``pool_workers`` sets ``pool.workers`` (0:
    retrieval runs in the searching process, no worker hop), None keeps the default."""
    config: dict[str, Any] = {"workspace": str(ws), "stateDir": str(state_dir), "provider": provider}
    if pool_workers is not None:
        config["pool"] = {"workers": pool_workers}
    return config


def run_long(*, docs: int, queries: int, max_results: int, workdir: str,
             log: Callable[[str], None], pool_workers: int | None = None) -> dict[str, Any]:
    """The long-query workload's results (and, under ``raw``, each row's latencies in ms);
    ``pool_workers``: memory-core's ``pool.workers`` in every system (None: the default)."""
    from benchmarks.bench_gateway import start_server
    from memory_core.config import load_config
    from memory_core.core import MemoryCore
    from memory_core.embeddings.local import LocalMiniLMProvider

    root = Path(workdir)
    n_warm = 5
    ws, texts, qs = build_workspace(root, docs, queries + n_warm)
    warm, qs = qs[:n_warm], qs[n_warm:]
    text_bytes = sum(len(t.encode("utf-8")) for t in texts)
    res: dict[str, Any] = {"workload": "long", "docs": docs, "queries": len(qs), "max_results": max_results,
                           "pool_workers": pool_workers, "cpu_count": os.cpu_count(),
                           "loadavg": list(os.getloadavg()), "text_bytes": text_bytes}
    log(f"long-query workload: {docs} documents of 10-15 lines ({text_bytes / 1e6:.2f} MB), {len(qs)} queries "
        f"of 10-20 words, maxResults {max_results}"
        + ("" if pool_workers is None else f", memory-core with pool.workers = {pool_workers}"))
    env = dict(os.environ, MEMORY_CORE_GATEWAY_TOKEN=TOKEN)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("MEMORY_CORE_HOME", None)
    configs: dict[str, Path] = {}
    for kind, provider in (("keyword", "none"), ("hybrid", "local")):
        configs[kind] = root / f"{kind}.json"
        configs[kind].write_text(json.dumps(system_config(ws, root / f"state-{kind}", provider, pool_workers)),
                                 encoding="utf-8")
    cores: dict[str, Any] = {}
    procs: list[subprocess.Popen[str]] = []
    try:
        for kind in ("keyword", "hybrid"):
            cfg = load_config(str(configs[kind]), env={})
            cores[kind] = MemoryCore(agent_id=cfg.agent_id, config=cfg)
            t = time.perf_counter()
            summary = cores[kind].index()
            res[f"index {kind} s"] = round(time.perf_counter() - t, 2)
            res["chunks"] = summary.chunks
            cores[kind].freshness.start()  # as the server: watcher running, no inline reconcile
        for kind in ("keyword", "hybrid"):  # the same index, searched in this process
            cfg = load_config(str(configs[kind]), env={})
            cores[f"{kind} engine"] = MemoryCore(agent_id=cfg.agent_id, config=cfg, pool=False)
            cores[f"{kind} engine"].freshness.start()
        from memory_core.search.engine import candidate_count

        candidates = candidate_count(max_results, cores["hybrid"].config.query.hybrid.candidate_multiplier)
        db = cores["hybrid"].db_path
        embedded, n_chunks, n_passages = _embedded_texts(db)
        res.update(chunks=n_chunks, passage_vectors=n_passages, embedded_texts=len(embedded))
        provider = LocalMiniLMProvider(threads=cores["hybrid"].config.local.threads, own_session=True)
        names = [f"note-{d:05d}.md" for d in range(docs)]
        anchors = {"keyword": Anchors(str(root / "anchor-keyword.sqlite"), texts, names, None),
                   "hybrid": Anchors(str(root / "anchor-hybrid.sqlite"), texts, names, provider)}
        provider.embed_batch(["load the session before the clock starts"])
        t = time.perf_counter()
        anchors["hybrid"].encode(embedded)
        res["anchor encode s"] = round(time.perf_counter() - t, 2)
        anchors["hybrid"].matrix = anchors["hybrid"].encode(texts)  # one vector per document
        log(f"  index with local embeddings {res['index hybrid s']:.1f} s ({n_chunks} chunks, {n_passages} passage "
            f"vectors) vs a plain batch encode of those {len(embedded)} texts {res['anchor encode s']:.1f} s")
        for kind in ("keyword", "hybrid"):
            proc, url = start_server(configs[kind], env)
            procs.append(proc)
            res.setdefault("urls", {})[kind] = url
        raw = asyncio.run(_samples(res.pop("urls"), cores, anchors, qs, warm, max_results=max_results,
                                   candidates=candidates, log=log))
        res["explain_ms"] = _explain_stages(cores["hybrid"], qs[0] + " recap", max_results)
        res["explain_engine_ms"] = _explain_stages(cores["hybrid engine"], qs[1] + " recap", max_results)
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        for core in cores.values():
            core.close()
    disk = disk_bytes(root / "state-hybrid")
    dims = 384
    floor = text_bytes + 4 * dims * res["chunks"] + dims * res["passage_vectors"]
    res["disk_bytes"] = disk
    res["disk_floor_bytes"] = floor
    res["rows"] = {name: _percentiles(t) for name, t in raw.items()}
    r = res["rows"]
    res["ratios"] = {
        "keyword": round(r["keyword gateway"]["p50"] / r["anchor FTS5 OR"]["p50"], 2),
        "hybrid": round(r["hybrid gateway"]["p50"] / r["anchor hybrid"]["p50"], 2),
        "keyword in-process": round(r["keyword in-process"]["p50"] / r["anchor FTS5 OR"]["p50"], 2),
        "hybrid in-process": round(r["hybrid in-process"]["p50"] / r["anchor hybrid"]["p50"], 2),
        "keyword engine": round(r["keyword engine"]["p50"] / r["anchor FTS5 OR"]["p50"], 2),
        "hybrid engine": round(r["hybrid engine"]["p50"] / r["anchor hybrid"]["p50"], 2),
        "index": round(res["index hybrid s"] / max(res["anchor encode s"], 1e-9), 2),
        "disk": round(sum(disk.values()) / floor, 2),
    }
    res["targets"] = {k: {"max_ratio": v, "ratio": res["ratios"][k], "ok": res["ratios"][k] <= v}
                      for k, v in TARGETS.items()}
    res["loadavg_end"] = list(os.getloadavg())
    res["_raw"] = raw
    for line in table(res).splitlines():
        log(line)
    return res


def _explain_stages(core: Any, query: str, max_results: int) -> dict[str, float]:
    """``--explain``'s stage timings of one warm in-process hybrid search (a new query text)."""
    core.explain(query, max_results=max_results)
    details = core.explain(query + " again", max_results=max_results)
    return {k: round(float(v), 2) for k, v in details.timings_ms.items()}


def table(r: dict[str, Any]) -> str:
    rows = r["rows"]
    lines = [f"{'row':<22}{'p50 ms':>10}{'p95 ms':>10}{'n':>6}"]
    for name, row in rows.items():
        lines.append(f"{name:<22}{row['p50']:>10.2f}{row['p95']:>10.2f}{row['n']:>6}")
    disk = r["disk_bytes"]
    lines.append(f"index on disk {sum(disk.values()) / 1e6:.1f} MB (database {disk['database'] / 1e6:.1f}, mapped "
                 f"vectors {disk['mapped_vectors'] / 1e6:.1f}, other {disk['other'] / 1e6:.1f}) vs text + chunk "
                 f"float32 + passage int8 {r['disk_floor_bytes'] / 1e6:.1f} MB")
    lines.append("explain stages (ms, one warm in-process hybrid search): "
                 + ", ".join(f"{k} {v:.2f}" for k, v in r["explain_ms"].items()))
    lines.append("  the same on the engine alone: " + ", ".join(f"{k} {v:.2f}" for k, v in r["explain_engine_ms"].items()))
    labels = {"keyword": "keyword gateway / anchor FTS5 OR", "hybrid": "hybrid gateway / anchor hybrid",
              "index": "index / plain batch encode", "disk": "disk / text + vectors"}
    for key, t in r["targets"].items():
        lines.append(f"target {labels[key]}: {t['ratio']:.2f}x <= {t['max_ratio']}x -> {'ok' if t['ok'] else 'MISSED'}")
    lines.append(f"in-process: keyword {r['ratios']['keyword in-process']:.2f}x, hybrid "
                 f"{r['ratios']['hybrid in-process']:.2f}x their anchors; engine alone: keyword "
                 f"{r['ratios']['keyword engine']:.2f}x, hybrid {r['ratios']['hybrid engine']:.2f}x (load "
                 f"{r['loadavg'][0]:.1f} -> {r['loadavg_end'][0]:.1f})")
    return "\n".join(lines)
