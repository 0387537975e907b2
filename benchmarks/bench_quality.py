"""Retrieval quality: every memory-core system and fusion against bm25s and faiss on four data sets.

Run as ``memory-core bench quality``. Data: Debian's ``wordnet-base`` (``/usr/share/wordnet/data.{noun,verb,adj,adv}``), installed offline
with ``apt-get install wordnet-base``. Each synset is one memory entry: its lemma words and its
gloss definition, with the usage examples removed. A sampled synset's first usage example is a
query whose one relevant entry is that synset; hard negatives are the other senses (synsets) of
the same lemma words; random synsets fill the corpus. Seed 0. Data sets: ``wordnet-100`` (100
queries / 1k entries), ``wordnet-1k`` (1,000 queries / 10k entries), ``lee`` (below) and
``wordnet-packed``: the wordnet-1k entries packed 8-12 to a file in shuffled order (long chunks;
the relevant file is the one holding the query's synset). ``--ci`` runs wordnet-100, lee and the
packed set built from wordnet-100.

Systems, all in one run on the same data: memory-core keyword-only (with and without the
OR-probe fix), vector-only, the hybrid under every fusion of ``host_facades.ranking.rank.FUSIONS``
and, as a sanity row, the weighted hybrid with vectorWeight 0 and MMR off, whose ranking must be
keyword-only's (all through ``SearchEngine`` on a real index written by ``IndexWriter``, with the
passage vectors of multi-line entries as the indexer writes them), and the
baselines ``bm25s``, faiss exact inner product over the same embeddings, and RRF(bm25s, faiss). Metrics: nDCG@10, Recall@10, MRR@10. Rankings are taken
with ``min_score = 0`` and ``max_results = 10`` so selection thresholds do not truncate them.
``--dataset lee`` adds the Lee corpus read from a gensim wheel (lead sentence -> rest of article).

What memory-core changes in upstream's keyword retrieval, and why (all in
``host_facades/retrieval/fts_query.py`` and ``fts_search.py``; the strict query, exact-path tiers, boosted score and selection are
upstream's):

1. OR probe. Upstream runs the strict AND query, then (when fewer than ``limit`` non-exact hits
   come back) one FTS search per extracted keyword, at most 6, each ranked alone. A usage example
   such as "the patient is respiring" has no entry containing every word, so the strict query is
   empty and the per-keyword probes lose the BM25 evidence that several words co-occur. memory-core
   first runs ONE bm25-ranked OR query over all the keywords (up to 64: a single query, so its cost
   stays bounded) and runs the per-keyword probes only if that still leaves the pool thin.
2. Light-stem prefixes in that OR probe only: ``"respiring"`` also matches ``"respir"*``, so an
   inflected query word reaches the entry's lemma. The strict query keeps exact terms.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import os
import random
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from benchmarks import add_json_argument, emit, progress_log
from benchmarks.plot import add_plot_argument, check_plot_available, grouped_bars
from memory_core.progress import Progress

WORDNET_DIR = "/usr/share/wordnet"
POS_FILES = {"n": "data.noun", "v": "data.verb", "a": "data.adj", "r": "data.adv"}
K = 10


@dataclass(frozen=True)
class Synset:
    key: str
    lemmas: tuple[str, ...]
    definition: str
    examples: tuple[str, ...]

    @property
    def text(self) -> str:
        words = ", ".join(lemma.replace("_", " ") for lemma in self.lemmas)
        return f"{words}: {self.definition}"


_EXAMPLE_RE = re.compile(r'"([^"]+)"')


@functools.lru_cache(maxsize=2)
def parse_wordnet(root: str = WORDNET_DIR) -> tuple[Synset, ...]:
    """Every synset of the four data files (gloss split into definition and quoted examples)."""
    out: list[Synset] = []
    for pos, name in POS_FILES.items():
        path = os.path.join(root, name)
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is missing; install it with `apt-get install wordnet-base`")
        with open(path, encoding="latin-1") as fh:
            for line in fh:
                if line.startswith("  ") or "|" not in line:
                    continue
                head, gloss = line.split("|", 1)
                fields = head.split()
                w_cnt = int(fields[3], 16)
                lemmas = tuple(re.sub(r"\(.*\)$", "", fields[4 + 2 * i]).lower() for i in range(w_cnt))
                examples = tuple(e.strip() for e in _EXAMPLE_RE.findall(gloss) if len(e.split()) >= 3)
                definition = _EXAMPLE_RE.sub("", gloss).strip().strip(";").strip()
                definition = re.sub(r"(;\s*)+$", "", re.sub(r"\s*;\s*(;\s*)+", "; ", definition)).strip()
                out.append(Synset(f"{pos}{fields[0]}", lemmas, definition, examples))
    return tuple(out)


def build_dataset(n_queries: int, n_docs: int, seed: int = 0, root: str = WORDNET_DIR):
    """``(docs [(key, text)], queries [(text, relevant_key)])``, deterministic for a seed."""
    synsets = parse_wordnet(root)
    rng = random.Random(seed)
    by_lemma: dict[str, list[Synset]] = {}
    for s in synsets:
        for lemma in s.lemmas:
            by_lemma.setdefault(lemma, []).append(s)
    with_examples = [s for s in synsets if s.examples and any(len(by_lemma[l]) > 1 for l in s.lemmas)]
    rng.shuffle(with_examples)
    chosen = with_examples[:n_queries]
    docs: dict[str, Synset] = {s.key: s for s in chosen}
    # hard negatives: the other senses of the query synsets' words, up to half the corpus
    budget = max(n_docs // 2, n_queries)
    for s in chosen:
        for lemma in s.lemmas:
            for other in by_lemma[lemma]:
                if len(docs) >= budget:
                    break
                docs.setdefault(other.key, other)
    pool = [s for s in synsets if s.key not in docs]
    rng.shuffle(pool)
    for s in pool[: max(0, n_docs - len(docs))]:
        docs[s.key] = s
    queries = [(s.examples[0], s.key) for s in chosen]
    ordered = sorted(docs.values(), key=lambda s: s.key)
    return [(s.key, s.text) for s in ordered], queries


def find_gensim_wheel(explicit: str | None = None) -> str | None:
    """A gensim wheel file (``pip download gensim --no-deps -d DIR``); gensim itself is never imported."""
    import glob

    if explicit:
        return explicit if os.path.isfile(explicit) else None
    dirs = [os.environ.get("MEMORY_CORE_GENSIM_WHEEL_DIR", ""),
            os.path.expanduser("~/.cache/memory-core/gensim"), os.getcwd()]  # .ci/install-test-data
    for d in dirs:
        if d:
            found = sorted(glob.glob(os.path.join(d, "gensim-*.whl")))
            if found:
                return found[-1]
    return None


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")


def build_lee_dataset(wheel: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Lee corpus from the gensim wheel: each of the 50 ``lee.cor`` articles' lead sentence is a query
    whose relevant entry is the rest of that article; the 300 ``lee_background.cor`` articles are
    distractors. The lead sentence is removed from the entry."""
    import zipfile

    with zipfile.ZipFile(wheel) as z:
        lee = z.read("gensim/test/test_data/lee.cor").decode("latin-1").splitlines()
        background = z.read("gensim/test/test_data/lee_background.cor").decode("latin-1").splitlines()
    docs: list[tuple[str, str]] = []
    queries: list[tuple[str, str]] = []
    for i, article in enumerate(a.strip() for a in lee):
        parts = _SENTENCE_END.split(article, maxsplit=1)
        if len(parts) < 2 or len(parts[1].split()) < 10:
            continue
        docs.append((f"lee{i:03d}", parts[1]))
        queries.append((parts[0], f"lee{i:03d}"))
    docs += [(f"bg{i:03d}", a.strip()) for i, a in enumerate(background) if a.strip()]
    return docs, queries


def pack_dataset(docs: Sequence[tuple[str, str]], queries: Sequence[tuple[str, str]], seed: int = 0,
                 sizes: tuple[int, int] = (8, 12)) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Long chunks from short entries: the entries shuffled and packed ``sizes[0]..sizes[1]`` to a
    file (one entry a line); a query's relevant file is the one holding its entry."""
    rng = random.Random(seed)
    order = list(docs)
    rng.shuffle(order)
    packed: list[tuple[str, str]] = []
    file_of: dict[str, str] = {}
    i = 0
    while i < len(order):
        group = order[i : i + rng.randint(*sizes)]
        key = f"pack{len(packed):05d}"
        packed.append((key, "\n".join(text for _, text in group)))
        for entry_key, _ in group:
            file_of[entry_key] = key
        i += len(group)
    return packed, [(q, file_of[rel]) for q, rel in queries]


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------


def metrics(rankings: Sequence[Sequence[str]], relevant: Sequence[str], k: int = K) -> dict[str, float]:
    ndcg = recall = mrr = 0.0
    for ranked, rel in zip(rankings, relevant):
        top = list(ranked)[:k]
        if rel in top:
            r = top.index(rel) + 1
            ndcg += 1.0 / math.log2(r + 1)
            recall += 1.0
            mrr += 1.0 / r
    n = max(1, len(relevant))
    return {"ndcg@10": ndcg / n, "recall@10": recall / n, "mrr@10": mrr / n}


def rrf(lists: Sequence[Sequence[str]], k: int = 60, top: int = K) -> list[str]:
    scores: dict[str, float] = {}
    for lst in lists:
        for rank, key in enumerate(lst, start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    return [key for key, _ in sorted(scores.items(), key=lambda t: (-t[1], t[0]))][:top]


# ---------------------------------------------------------------------------------------------
# Embeddings (local MiniLM via memory_core.embeddings), optionally cached on disk by text hash
# ---------------------------------------------------------------------------------------------

EMBED_SLICE = 64


def embed_all(texts: Sequence[str], provider: Any, label: str, *, cache: str | None = None) -> np.ndarray:
    """Embed ``texts`` with progress on stderr (done/total, texts/s, ETA); with ``cache``
    (``--cache-dir``) the vectors are kept there by text hash and reused by later runs."""
    path = None
    if cache:
        # the provider key, not just the model: a change in how texts become vectors is a new entry
        ident = f"{provider.model}\x00{getattr(provider, 'provider_key', '')}"
        digest = hashlib.sha256(("\x00".join(texts) + ident).encode()).hexdigest()[:16]
        path = os.path.join(cache, f"{label}-{digest}.npy")
        if os.path.exists(path):
            return np.load(path)
    from memory_core.embeddings.batching import embed_texts

    parts = []
    with Progress(f"  embedding {label}", len(texts), unit="texts") as progress:
        for start in range(0, len(texts), EMBED_SLICE):
            parts.append(np.asarray(embed_texts(provider, list(texts[start : start + EMBED_SLICE])),
                                    dtype=np.float32))
            progress.advance(len(parts[-1]))
    vecs = np.concatenate(parts) if parts else np.zeros((0, getattr(provider, "dims", 0) or 0), np.float32)
    if path:
        os.makedirs(cache, exist_ok=True)  # a new --cache-dir is made, not a crash after the embedding
        np.save(path, vecs)
    return vecs


def local_provider(window_overlap: int | None = None) -> Any:
    """The ``local`` provider as configured by default; ``window_overlap`` reads long texts as
    overlapping windows (``--window-overlap``)."""
    from memory_core.config import MemoryCoreConfig
    from memory_core.embeddings import create_embedding_provider
    from memory_core.embeddings.local import create_local

    config = MemoryCoreConfig(provider="local")
    if window_overlap is None:
        return create_embedding_provider(config)
    return create_local(config, window_overlap=window_overlap)


# ---------------------------------------------------------------------------------------------
# memory-core index + systems
# ---------------------------------------------------------------------------------------------


def doc_path(key: str) -> str:
    return f"memory/wordnet/{key}.md"


def embed_passages_all(docs: Sequence[tuple[str, str]], provider: Any, label: str, *,
                       cache: str | None = None) -> list[np.ndarray | None]:
    """Per entry, its passages' vectors (``host_facades.chunking.pipeline.split_passages``; None for an
    entry of one passage), embedded as the indexer embeds them."""
    from host_facades.chunking.pipeline import split_passages
    from memory_core.embeddings.batching import rows_per_group

    split = [split_passages(t) for _, t in docs]
    flat = [p for ps in split for p in ps]
    return rows_per_group(split, embed_all(flat, provider, label, cache=cache) if flat else None)


def build_index(db_path: str, docs: Sequence[tuple[str, str]], vectors: np.ndarray | None, model: str,
                passages: Sequence[np.ndarray | None] | None = None) -> None:
    """Write one source per entry through the real single writer (with its passage vectors)."""
    from host_facades.chunking.pipeline import hash_text
    from memory_core.store.writer import IndexWriter

    writer = IndexWriter(db_path, vector_enabled=vectors is not None)
    try:
        for i, (key, text) in enumerate(docs):
            h = hash_text(text)
            entry = SimpleNamespace(path=doc_path(key), source="memory", hash=h, mtime_ms=0.0, size=len(text))
            chunk = SimpleNamespace(start_line=1, end_line=text.count("\n") + 1, text=text, hash=h)
            emb = vectors[i : i + 1] if vectors is not None else None
            extra = [passages[i]] if passages is not None else None
            writer.replace_source(entry, [chunk], emb, model if vectors is not None else "fts-only", passages=extra)
    finally:
        writer.close()


def key_of(path: str) -> str:
    return path.rsplit("/", 1)[-1][:-3]


def run_engine(engine: Any, queries: Sequence[str], qvecs: np.ndarray | None, **kw: Any) -> tuple[list[list[str]], list[float]]:
    out, lat = [], []
    for i, q in enumerate(queries):
        t = time.perf_counter()
        hits = engine.search(q, max_results=K, min_score=0.0, query_vector=None if qvecs is None else qvecs[i], **kw)
        lat.append((time.perf_counter() - t) * 1000)
        out.append([key_of(h.path) for h in hits])
    return out, lat


class _ModelOnly:
    """The provider identity the engine needs when query vectors are precomputed."""

    def __init__(self, model: str, dims: int) -> None:
        self.id, self.model, self.dims, self.provider_key = "local", model, dims, ""

    def embed_batch(self, texts):  # pragma: no cover - vectors are always passed in
        raise RuntimeError("query vectors are precomputed in the benchmark")


def evaluate(n_queries: int, n_docs: int, *, seed: int = 0, workdir: str | None = None,
             with_vectors: bool = True, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The wordnet set of ``n_queries`` queries over ``n_docs`` entries through every system."""
    t0 = time.perf_counter()
    docs, queries = build_dataset(n_queries, n_docs, seed)
    log(f"wordnet: {len(docs)} entries, {len(queries)} queries (seed {seed}), built in {time.perf_counter() - t0:.1f}s")
    return evaluate_dataset("wordnet", docs, queries, workdir=workdir, with_vectors=with_vectors, log=log,
                            meta={"seed": seed})


KEYWORD_ONLY = "memory-core keyword-only"
VECTOR_ONLY = "memory-core vector-only"
SANITY = "memory-core hybrid vectorWeight 0, MMR off"


def hybrid_name(fusion: str) -> str:
    return f"memory-core hybrid {fusion}"


def default_fusion() -> str:
    from memory_core.config import MemoryCoreConfig

    return MemoryCoreConfig().query.hybrid.fusion


def hybrid_systems(vector_weight: float | None = None) -> list[tuple[str, dict[str, Any]]]:
    """``(row name, config overrides)`` of the vector-backed memory-core systems: vector-only, the
    hybrid under each fusion (at ``vector_weight`` / 1 - ``vector_weight`` when given, else the
    configured default weights), and the sanity row."""
    from host_facades.ranking.rank import FUSIONS

    weights = {} if vector_weight is None else {"vector_weight": vector_weight, "text_weight": 1.0 - vector_weight}
    rows: list[tuple[str, dict[str, Any]]] = [(VECTOR_ONLY, {"query": {"hybrid": {"enabled": False}}})]
    rows += [(hybrid_name(f), {"query": {"hybrid": {"fusion": f, **weights}}}) for f in FUSIONS]
    rows.append((SANITY, {"query": {"hybrid": {"fusion": "weighted", "vector_weight": 0.0, "text_weight": 1.0,
                                               "mmr": {"enabled": False}}}}))
    return rows


def same_ranking(keyword: Sequence[Sequence[str]], hybrid: Sequence[Sequence[str]]) -> int:
    """How many queries' hybrid ranking differs from keyword-only's over keyword-only's hits."""
    return sum(1 for k, h in zip(keyword, hybrid) if list(h[: len(k)]) != list(k))


def targets(results: dict[str, dict[str, float]], lists: dict[str, list[list[str]]]) -> dict[str, Any]:
    """The targets on one data set: the default hybrid beats both of its halves by 0.01,
    keyword-only keeps up with bm25s, and vectorWeight 0 ranks exactly as keyword-only."""
    r = {k: v["ndcg@10"] for k, v in results.items()}
    fusion = default_fusion()
    out: dict[str, Any] = {
        "keyword-only >= bm25s - 0.01": r[KEYWORD_ONLY] >= r["baseline bm25s"] - 0.01}
    if VECTOR_ONLY in r:
        out[f"default hybrid ({fusion}) >= max(keyword-only, vector-only) + 0.01"] = (
            r[hybrid_name(fusion)] >= max(r[KEYWORD_ONLY], r[VECTOR_ONLY]) + 0.01)
        out["vectorWeight 0 ranks as keyword-only (queries that differ)"] = same_ranking(
            lists[KEYWORD_ONLY], lists[SANITY])
    return out


def evaluate_dataset(name: str, docs: Sequence[tuple[str, str]], queries: Sequence[tuple[str, str]], *,
                     workdir: str | None = None, with_vectors: bool = True, log: Callable[[str], None] = print,
                     meta: dict[str, Any] | None = None, cache: str | None = None,
                     window_overlap: int | None = None, vector_weight: float | None = None) -> dict[str, Any]:
    """Run every system over one dataset of ``(key, text)`` entries and ``(query, relevant key)`` pairs.
    Its index goes to a temporary folder under ``workdir`` (default: the system's, removed after);
    embeddings are kept only with ``cache`` (``--cache-dir``)."""
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="mc-bench-quality-") as tmpdir:
            return evaluate_dataset(name, docs, queries, workdir=tmpdir, with_vectors=with_vectors, log=log,
                                    window_overlap=window_overlap, vector_weight=vector_weight,
                                    meta=meta, cache=cache)
    from memory_core.config import MemoryCoreConfig
    from memory_core.search.engine import SearchEngine

    qtexts = [q for q, _ in queries]
    relevant = [r for _, r in queries]
    dvecs = qvecs = pvecs = None
    model = "fts-only"
    if with_vectors:
        provider = local_provider(window_overlap)
        model = provider.model
        t1 = time.perf_counter()
        dvecs = embed_all([t for _, t in docs], provider, f"{name}-docs", cache=cache)
        qvecs = embed_all(qtexts, provider, f"{name}-queries", cache=cache)
        pvecs = embed_passages_all(docs, provider, f"{name}-passages", cache=cache)
        log(f"embeddings ({provider.model}): {time.perf_counter() - t1:.1f}s")
    tmp = tempfile.mkdtemp(prefix="mc-bench-quality-", dir=workdir)
    db = os.path.join(tmp, f"{name}.sqlite")
    t2 = time.perf_counter()
    build_index(db, docs, dvecs, model, pvecs)
    log(f"index: {time.perf_counter() - t2:.1f}s")
    results: dict[str, dict[str, float]] = {}
    lists: dict[str, list[list[str]]] = {}

    def record(system: str, ranked: list[list[str]], lat: list[float] | None = None) -> None:
        m = metrics(ranked, relevant)
        if lat:
            m["p50_ms"] = float(np.percentile(lat, 50))
        results[system] = m
        lists[system] = ranked
        log(f"  {system:<44} nDCG@10 {m['ndcg@10']:.4f}  R@10 {m['recall@10']:.4f}  MRR@10 {m['mrr@10']:.4f}")

    base = MemoryCoreConfig(state_dir=tmp)
    eng = SearchEngine(base, db, None)
    record(KEYWORD_ONLY, *run_engine(eng, qtexts, None))
    eng.or_fallback = False
    record("memory-core keyword (upstream probes)", *run_engine(eng, qtexts, None))
    eng.close()

    import bm25s

    corpus_tokens = bm25s.tokenize([t for _, t in docs], stopwords="en", show_progress=False)
    retriever = bm25s.BM25()
    retriever.index(corpus_tokens, show_progress=False)
    idx, _ = retriever.retrieve(bm25s.tokenize(qtexts, stopwords="en", show_progress=False), k=min(100, len(docs)),
                                show_progress=False)
    bm25_lists = [[docs[int(i)][0] for i in row] for row in idx]
    record("baseline bm25s", [r[:K] for r in bm25_lists])

    if with_vectors:
        import faiss

        index = faiss.IndexFlatIP(dvecs.shape[1])
        index.add(np.ascontiguousarray(dvecs))
        _, fidx = index.search(np.ascontiguousarray(qvecs), min(100, len(docs)))
        faiss_lists = [[docs[int(i)][0] for i in row if i >= 0] for row in fidx]
        record("baseline faiss exact", [r[:K] for r in faiss_lists])
        record("baseline RRF(bm25s, faiss)", [rrf([a, b]) for a, b in zip(bm25_lists, faiss_lists)])
        prov = _ModelOnly(model, dvecs.shape[1])
        for system, overrides in hybrid_systems(vector_weight):
            cfg = MemoryCoreConfig(state_dir=tmp, provider="local", **overrides)
            eng = SearchEngine(cfg, db, prov)
            record(system, *run_engine(eng, qtexts, qvecs))
            eng.close()
    summary = {"dataset": {"name": name, "entries": len(docs), "queries": len(queries), **(meta or {}),
                           **({} if vector_weight is None else {"hybrid_vector_weight": vector_weight})},
               "results": results, "targets": targets(results, lists)}
    log("targets: " + json.dumps(summary["targets"]))
    return summary


DATASETS = ("wordnet-100", "wordnet-1k", "lee", "wordnet-packed")
CI_DATASETS = ("wordnet-100", "lee", "wordnet-packed")


def load_dataset(name: str, args: argparse.Namespace, log: Callable[[str], None]):
    """``(docs, queries, meta)`` of a named data set, or None when its data is not installed."""
    if name == "lee":
        wheel = find_gensim_wheel(args.gensim_wheel)
        if wheel is None:
            log("lee: skipped; fetch the corpus with `pip download gensim --no-deps -d DIR` and pass "
                "--gensim-wheel DIR/gensim-*.whl (or set MEMORY_CORE_GENSIM_WHEEL_DIR)")
            return None
        docs, queries = build_lee_dataset(wheel)
        return docs, queries, {"source": os.path.basename(wheel)}
    small = name == "wordnet-100" or (name == "wordnet-packed" and args.ci)
    nq = args.queries or (100 if small else 1000)
    nd = args.docs or (1000 if small else 10_000)
    docs, queries = build_dataset(nq, nd, args.seed)
    meta = {"seed": args.seed, "wordnet_entries": len(docs)}
    if name == "wordnet-packed":
        docs, queries = pack_dataset(docs, queries, args.seed)
    return docs, queries, meta


def format_table(out: Sequence[dict[str, Any]]) -> str:
    """nDCG@10 of every system (rows) on every data set (columns), then each set's targets."""
    names = [d["dataset"]["name"] for d in out]
    systems: list[str] = []
    for d in out:
        systems += [s for s in d["results"] if s not in systems]
    width = max(len(s) for s in systems) + 2
    lines = ["nDCG@10".ljust(width) + "".join(f"{n:>16}" for n in names)]
    for s in systems:
        cells = [d["results"].get(s, {}).get("ndcg@10") for d in out]
        lines.append(s.ljust(width) + "".join(f"{'-' if c is None else f'{c:.3f}':>16}" for c in cells))
    lines.append(f"default fusion: {default_fusion()}")
    for d in out:
        lines.append(f"targets {d['dataset']['name']}: " + json.dumps(d["targets"]))
    return "\n".join(lines)


def _weight(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"--vector-weight takes a number from 0 to 1, got {text}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ci", action="store_true",
                   help="small run: wordnet-100, lee and the packed set built from wordnet-100")
    p.add_argument("--dataset", choices=[*DATASETS, "all"], default="all",
                   help="one data set, or all of them (default)")
    p.add_argument("--queries", type=int, default=None, metavar="N",
                   help="wordnet sets: number of queries (default 100 for wordnet-100, else 1000)")
    p.add_argument("--docs", type=int, default=None, metavar="N",
                   help="wordnet sets: number of entries (default 1000 for wordnet-100, else 10000)")
    p.add_argument("--seed", type=int, default=0, help="wordnet sampling and packing seed (default 0)")
    p.add_argument("--no-vectors", action="store_true", help="keyword systems only (no local model)")
    p.add_argument("--gensim-wheel", default=None, metavar="WHL", help="gensim wheel holding the Lee corpus")
    p.add_argument("--window-overlap", type=int, default=None, metavar="N",
                   help="embed texts longer than the model's 256-token window as overlapping windows "
                        "sharing N tokens, mean-pooled (default: truncate, as the product does)")
    p.add_argument("--vector-weight", type=_weight, default=None, metavar="W",
                   help="run every hybrid row at vectorWeight W and textWeight 1 - W (default: the "
                        "configured 0.7 / 0.3); the vectorWeight 0 sanity row stays as it is")
    p.add_argument("--cache-dir", default=None, metavar="DIR",
                   help="keep the embeddings in DIR and reuse them in later runs (default: nothing is "
                        "kept; the indexes go to a temporary folder that is removed)")
    add_plot_argument(p)
    add_json_argument(p)


def missing_modules(with_vectors: bool) -> list[str]:
    """The Python modules this benchmark needs and cannot import (the bm25s/faiss baselines,
    and with vectors the ``local`` embedding model)."""
    import importlib.util

    from memory_core.embeddings.local import REQUIRED_MODULES

    needed = ["bm25s", "faiss", *(REQUIRED_MODULES if with_vectors else ())]
    return [m for m in needed if importlib.util.find_spec(m) is None]


def plot_quality(out: Sequence[dict[str, Any]], path: str) -> None:
    """nDCG@10 per system (one bar each), grouped by data set."""
    groups = {d["dataset"]["name"]: {s: m["ndcg@10"] for s, m in d["results"].items()} for d in out}
    grouped_bars(groups, path, title=f"memory-core bench quality (default fusion: {default_fusion()})",
                 ylabel="nDCG@10", value_format="{:.2f}")


def run(args: argparse.Namespace) -> int:
    from memory_core.errors import MemoryCoreError

    missing = missing_modules(not args.no_vectors)
    if missing:  # before any work: fail with the fix, not a traceback halfway through
        raise MemoryCoreError(
            f"bench quality needs {', '.join(missing)}, which are not installed; "
            "install them with `pip install \".[bench]\"` (baselines, the local model and matplotlib), "
            "or `pip install bm25s` and run with --no-vectors for the keyword systems only")
    check_plot_available(args.plot)
    log = progress_log(args)
    names = (CI_DATASETS if args.ci else DATASETS) if args.dataset == "all" else (args.dataset,)
    out = []
    with tempfile.TemporaryDirectory(prefix="mc-bench-quality-") as tmpdir:
        for name in names:
            t0 = time.perf_counter()
            loaded = load_dataset(name, args, log)
            if loaded is None:
                continue
            docs, queries, meta = loaded
            log(f"{name}: {len(docs)} entries, {len(queries)} queries, built in {time.perf_counter() - t0:.1f}s")
            out.append(evaluate_dataset(name, docs, queries, workdir=tmpdir, with_vectors=not args.no_vectors,
                                        log=log, meta=meta, cache=args.cache_dir,
                                        window_overlap=args.window_overlap, vector_weight=args.vector_weight))
    emit(args, out, lambda: format_table(out))
    if args.plot and out:
        plot_quality(out, args.plot)
        log(f"plot written to {args.plot}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_quality", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
