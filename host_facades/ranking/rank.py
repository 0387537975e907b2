"""Pure ranking over retrieved candidates (upstream `memory/manager.ts`): merge, RRF, decay, multipliers,
MMR, selection.

No I/O here: every function takes plain data or :class:`Candidate` lists and returns new orders
or scores. It lives in ``host_facades`` so a worker can run a whole search (retrieval + ranking,
``host_facades.search.run``).
"""

from __future__ import annotations

import calendar
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from host_facades.db.chunk_rows import has_triggers, provenance_of
from host_facades.retrieval.fts_query import ASCII_SEPARATORS

DAY_MS = 24 * 60 * 60 * 1000
DEFAULT_RRF_K = 60
# weighted: vw x vector + tw x keyword order score; upstream: upstream's exact weighted merge (its text
# half is the boosted lexical score); rrf: reciprocal ranks; minmax / zscore: each half normalised per query
FUSIONS = ("weighted", "upstream", "rrf", "minmax", "zscore")
MEDIA_EXTENSIONS = frozenset({
    ".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tif", ".tiff", ".heic", ".heif", ".avif",
    ".mp3", ".wav", ".m4a", ".ogg", ".oga", ".flac", ".aac", ".opus", ".webm",
})


@dataclass(frozen=True)
class RankingOptions:
    """The ranking knobs (defaults: docs/decisions.md D2 and D7: MMR and decay on, weights 0.7/0.3)."""

    vector_weight: float = 0.7
    text_weight: float = 0.3
    fusion: str = "weighted"          # one of FUSIONS
    rrf_k: int = DEFAULT_RRF_K
    mmr_enabled: bool = True
    mmr_lambda: float = 0.7
    decay_enabled: bool = True
    half_life_days: float = 30.0
    now_ms: float | None = None
    active_project_keys: tuple[str, ...] | None = None


def citation_for(path: str, start_line: int, end_line: int, *, always_range: bool = False) -> str:
    """``path#Lx`` when the range is one line, else ``path#Lx-Ly`` (upstream
    `extensions/memory-core/src/tools.ts`); with ``always_range``,
    ``path#Lx-Ly`` for one line too (the legacy adapter's label, upstream
    `src/plugins/memory-provider-adapter.ts`)."""
    if start_line == end_line and not always_range:
        return f"{path}#L{start_line}"
    return f"{path}#L{start_line}-L{end_line}"


@dataclass
class Candidate:
    """A merged candidate during ranking (internal; never returned)."""

    id: str
    path: str
    source: str
    start_line: int
    end_line: int
    snippet: str
    vector_score: float = 0.0
    text_score: float = 0.0
    ranking_score: float = 0.0   # boosted lexical score (upstream `memory/manager-search.ts`)
    path_score: float = 0.0
    exact: int = 0               # exact-path specificity 0..3
    has_body_match: bool = False
    in_vector: bool = False
    in_keyword: bool = False
    vector_rank: int | None = None   # 1-based, for RRF
    keyword_rank: int | None = None
    keyword_order: int | None = None  # 1-based keyword-only order (ties share), None without keyword evidence
    text_half: float = 0.0        # the fused text half: keyword order as a score in (0, 1]
    vector_half: float = 0.0      # the fused vector half: the vector score, or the vector list's floor
    vector_norm: float = 0.0      # per-query normalised halves (fusion weighted / minmax / zscore)
    text_norm: float = 0.0
    fusion_scale: float = 1.0     # the weighted merge's per-query scale (scale_halves)
    pre_mmr_position: int = 0     # 1-based position before MMR, and after (explain)
    position: int = 0
    content_score: float = 0.0
    lexical_rank: float = 0.0
    rank_score: float = 0.0      # internal ranking score (after decay / multipliers)
    score: float = 0.0           # public score
    decay: float = 1.0
    importance_mult: float = 1.0
    project_mult: float = 1.0
    importance: int | None = None
    triggers: str | None = None
    project_key: str | None = None
    provenance: dict[str, Any] | None = None
    source_mtime: float | None = None
    hash: str | None = None      # the chunk's content hash (the v2 reference's revision)
    extra: dict[str, Any] = field(default_factory=dict)
    row: dict[str, Any] | None = None  # the chunk's stored row (attach_metadata): a hit field's fallback

    @property
    def key(self) -> str:
        return f"{self.source}:{self.path}:{self.start_line}:{self.end_line}"

    def parts(self) -> dict[str, Any]:
        """Score parts for ``--explain``: the flat fields, plus each stage of the score in order
        (keyword order, vector score, fusion, decay and multipliers, MMR)."""
        return {
            "id": self.id, "citation": citation_for(self.path, self.start_line, self.end_line),
            "vector_score": self.vector_score, "text_score": self.text_score,
            "ranking_score": self.ranking_score, "path_score": self.path_score, "exact": self.exact,
            "has_body_match": self.has_body_match, "vector_rank": self.vector_rank,
            "keyword_rank": self.keyword_rank, "content_score": self.content_score,
            "lexical_rank": self.lexical_rank, "decay": self.decay, "importance_mult": self.importance_mult,
            "project_mult": self.project_mult, "rank_score": self.rank_score, "score": self.score,
            "stages": {
                "keyword": {"order": self.keyword_order, "bm25": self.text_score, "boosted": self.ranking_score,
                            "path": self.path_score, "half": self.text_half, "normalised": self.text_norm},
                "vector": {"rank": self.vector_rank, "score": self.vector_score, "half": self.vector_half,
                           "normalised": self.vector_norm},
                "fusion": {"content": self.content_score, "scale": self.fusion_scale},
                "adjust": {"decay": self.decay, "importance": self.importance_mult, "project": self.project_mult,
                           "rank_score": self.rank_score, "score": self.score},
                "mmr": {"before": self.pre_mmr_position, "after": self.position},
            },
        }


def is_non_text_media_path(path: str) -> bool:
    dot = path.rfind(".")
    return dot >= 0 and path[dot:].lower() in MEDIA_EXTENSIONS


# ---------------------------------------------------------------------------------------------
# Temporal decay (upstream `memory/temporal-decay.ts`)
# ---------------------------------------------------------------------------------------------

_DATED_RE = re.compile(r"(?:^|/)memory/(\d{4})-(\d{2})-(\d{2})\.md$")
_RESET_RE = re.compile(r"\.jsonl\.reset\.(\d{4})-(\d{2})-(\d{2})T(\d{2})-(\d{2})-(\d{2})(?:[-.](\d{1,3}))?Z?$")
EVERGREEN_ROOT_FILES = frozenset({"MEMORY.md", "memory.md", "USER.md"})


def decay_multiplier(age_days: float, half_life_days: float) -> float:
    """``exp(-ln2/halfLife * max(0, age))``; a non-positive or invalid half-life gives 1."""
    if not isinstance(half_life_days, (int, float)) or not math.isfinite(half_life_days) or half_life_days <= 0:
        return 1.0
    age = max(0.0, float(age_days))
    if not math.isfinite(age):
        return 1.0
    return math.exp(-(math.log(2) / half_life_days) * age)


def _normalize_path(path: str) -> str:
    p = path.replace("\\", "/")
    return p[2:] if p.startswith("./") else p


def date_from_path(path: str) -> float | None:
    """UTC-midnight ms of a ``memory/YYYY-MM-DD.md`` path (validated date), else None."""
    m = _DATED_RE.search(_normalize_path(path))
    if not m:
        return None
    y, mo, d = (int(g) for g in m.groups())
    if not (1 <= mo <= 12) or not (1 <= d <= calendar.monthrange(y, mo)[1]):
        return None
    return calendar.timegm((y, mo, d, 0, 0, 0)) * 1000.0


def _reset_archive_ms(path: str) -> float | None:
    m = _RESET_RE.search(path)
    if not m:
        return None
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    try:
        base = calendar.timegm((y, mo, d, h, mi, s)) * 1000.0
    except (ValueError, OverflowError):
        return None
    ms = int((m.group(7) or "0").ljust(3, "0")) if m.group(7) else 0
    return base + ms


def is_evergreen(path: str, source: str) -> bool:
    if source != "memory":
        return False
    p = _normalize_path(path)
    if p in EVERGREEN_ROOT_FILES:
        return True
    return p.startswith("memory/") and not _DATED_RE.search(p)


def decay_timestamp_ms(path: str, source: str, source_mtime: float | None) -> float | None:
    """The timestamp decay uses: dated path, reset-archive name, evergreen (None), else mtime (ms)."""
    dated = date_from_path(path)
    if dated is not None:
        return dated
    reset = _reset_archive_ms(path)
    if reset is not None:
        return reset
    if is_evergreen(path, source):
        return None
    if source_mtime is None or not math.isfinite(float(source_mtime)):
        return None
    return float(source_mtime)


def temporal_decay_for(path: str, source: str, source_mtime: float | None, *, half_life_days: float, now_ms: float) -> float:
    ts = decay_timestamp_ms(path, source, source_mtime)
    if ts is None:
        return 1.0
    return decay_multiplier(max(0.0, now_ms - ts) / DAY_MS, half_life_days)


def score_exact_path_tie_for_temporal_decay(content_score: float) -> float:
    """Exact-path ranking score under decay: ``(1 + clamp(content, 0, 1)) / 2`` in [0.5, 1]."""
    c = content_score if math.isfinite(content_score) else 0.0
    return (1.0 + min(1.0, max(0.0, c))) / 2.0


# ---------------------------------------------------------------------------------------------
# Importance and project multipliers (upstream `memory/project-ranking.ts`)
# ---------------------------------------------------------------------------------------------


def importance_multiplier(importance: Any) -> float:
    """``0.75 + 0.05 * clamp(floor(importance), 1, 10)``; None or invalid -> 1."""
    if importance is None or isinstance(importance, bool):
        return 1.0
    try:
        value = float(importance)
    except (TypeError, ValueError):
        return 1.0
    if not math.isfinite(value):
        return 1.0
    return 0.75 + 0.05 * min(10, max(1, math.floor(value)))


def prepare_active_project_keys(keys: Iterable[str] | None) -> frozenset[str] | None:
    if keys is None:
        return None
    cleaned = frozenset(k.strip() for k in keys if isinstance(k, str) and k.strip())
    return cleaned or None


def project_keys_of(project_key: str | None) -> list[str] | None:
    """The keys of a ``;``-separated project annotation, blank entries dropped; None without an
    annotation (``[]`` is an annotation that names no key, which makes an entry keyless, not global)."""
    if not isinstance(project_key, str):
        return None
    return [k.strip() for k in project_key.split(";") if k.strip()]


def project_multiplier(project_key: str | None, active: frozenset[str] | None) -> float:
    """x1.15 when every key of the chunk is active, x0.9 otherwise; no active set or no key -> 1."""
    if not active:
        return 1.0
    keys = project_keys_of(project_key)
    if not keys:
        return 1.0
    return 1.15 if all(k in active for k in keys) else 0.9


# ---------------------------------------------------------------------------------------------
# MMR (upstream `memory/mmr.ts`)
# ---------------------------------------------------------------------------------------------

_ASCII_TOKEN = re.compile(r"[a-z0-9_]+")


_CJK_CLASS = "\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
_CJK_RUN = re.compile(f"[{_CJK_CLASS}]+")


def mmr_tokenize(text: str) -> frozenset[str]:
    """Lowercased ASCII word tokens, CJK unigrams and bigrams of originally adjacent CJK chars."""
    lower = text.lower()
    if lower.isascii():  # the same tokens as the pattern below, found faster
        return frozenset(lower.translate(ASCII_SEPARATORS).split())
    tokens = set(_ASCII_TOKEN.findall(lower))
    for run in _CJK_RUN.findall(lower):
        tokens.update(run)
        tokens.update(run[i : i + 2] for i in range(len(run) - 1))
    return frozenset(tokens)


def jaccard(a: set[str], b: set[str]) -> float:
    if not a and not b:
        return 1.0
    if not a or not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


_BITWISE_COUNT = hasattr(np, "bitwise_count")  # numpy >= 2.0; before it, a byte table
_POPCOUNT8 = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def similarity_matrix(token_sets: Sequence[frozenset[str]]) -> list[list[float]]:
    """Pairwise Jaccard similarities (same values as :func:`jaccard`, in float32): each set once as
    bit-packed token incidence, intersections by AND and popcount in row blocks. No BLAS call: a
    small matrix product waited tens of ms on BLAS threads in a loaded owner process."""
    n = len(token_sets)
    vocab: dict[str, int] = {}
    ids = [[vocab.setdefault(t, len(vocab)) for t in toks] for toks in token_sets]
    m = np.zeros((n, max(1, len(vocab))), dtype=bool)
    lens = [len(row) for row in ids]
    if sum(lens):
        m[np.repeat(np.arange(n), lens), np.fromiter((c for row in ids for c in row), dtype=np.int64)] = True
    bits = np.packbits(m, axis=1)
    sizes = np.array(lens, dtype=np.float32)
    out = np.empty((n, n), dtype=np.float32)
    block = max(1, (8 << 20) // max(1, n * bits.shape[1]))  # temporaries of about 8 MB at most
    for a in range(0, n, block):
        both = bits[a:a + block, None, :] & bits[None, :, :]
        counts = np.bitwise_count(both) if _BITWISE_COUNT else _POPCOUNT8[both]
        inter = counts.sum(axis=2, dtype=np.int64).astype(np.float32)
        union = sizes[a:a + block, None] + sizes[None, :] - inter
        with np.errstate(divide="ignore", invalid="ignore"):
            out[a:a + block] = np.where(union > 0, inter / np.where(union > 0, union, 1), np.float32(1.0))
    return out.tolist()


def compute_mmr_score(relevance: float, max_similarity: float, lam: float) -> float:
    return lam * relevance - (1 - lam) * max_similarity


def _similarity32(a: frozenset[str], b: frozenset[str]) -> float:
    """One entry of :func:`similarity_matrix` (the same float32 value)."""
    inter = len(a & b)
    union = len(a) + len(b) - inter
    return float(np.float32(inter) / np.float32(union)) if union > 0 else 1.0


def mmr_rerank(items: Sequence[Any], *, lam: float, score: Callable[[Any], float], text: Callable[[Any], str],
               done: Callable[[Any], bool] | None = None) -> list[Any]:
    """Greedy MMR reorder (never drops items); ties go to the higher original score, then the earlier
    item. ``done(item)`` is told each pick in order; once it answers True the rest keeps its input
    order (a caller that needs only a prefix of the order): the picks so far are exactly the full
    reorder's first ones."""
    lam = min(1.0, max(0.0, lam))
    items = list(items)
    if len(items) <= 1:
        return items
    if lam >= 1.0:
        return sorted(items, key=lambda it: -score(it))
    scores = [score(it) for it in items]
    lo, hi = min(scores), max(scores)
    rel = [1.0 if hi == lo else (s - lo) / (hi - lo) for s in scores]
    if done is not None:
        return _mmr_prefix(items, scores, rel, lam, text, done)
    sets = [mmr_tokenize(text(it)) for it in items]
    sim = similarity_matrix(sets)
    remaining = list(range(len(items)))
    # max similarity to the already selected items, updated with each new pick: O(n^2) overall
    max_sim = [0.0] * len(items)
    selected: list[int] = []
    while remaining:
        best = None
        best_val = -math.inf
        for i in remaining:
            val = compute_mmr_score(rel[i], max_sim[i], lam)
            if val > best_val or (val == best_val and best is not None and scores[i] > scores[best]):
                best, best_val = i, val
        selected.append(best)
        remaining.remove(best)
        row = sim[best]
        for i in remaining:
            if row[i] > max_sim[i]:
                max_sim[i] = row[i]
    return [items[i] for i in selected]


def _mmr_prefix(items: list[Any], scores: list[float], rel: list[float], lam: float,
                text: Callable[[Any], str], done: Callable[[Any], bool]) -> list[Any]:
    """:func:`mmr_rerank`'s picks until ``done``, visiting candidates by relevance: a pick's MMR
    value is at most ``lam x relevance`` (similarities are >= 0), so each pick's scan stops at the
    first candidate whose bound is below the best value found, and only visited candidates are
    tokenized and compared (each with the picks made since its last visit). The same picks as the
    full loop, whose choice is the greatest (value, original score, earlier item)."""
    n = len(items)
    by_rel = sorted(range(n), key=lambda i: (-rel[i], i))  # stable: equal relevance in input order
    bound = [lam * rel[i] for i in range(n)]  # compute_mmr_score with no similarity, exactly
    sets: list[frozenset[str] | None] = [None] * n
    max_sim = [0.0] * n
    folded = [0] * n  # picks already folded into max_sim[i]
    taken = [False] * n
    selected: list[int] = []
    while len(selected) < n:
        best = -1
        best_val = -math.inf
        for i in by_rel:
            if taken[i]:
                continue
            if bound[i] < best_val:
                break  # this and every later candidate (lower relevance) scores below best_val
            toks = sets[i]
            if toks is None:
                toks = sets[i] = mmr_tokenize(text(items[i]))
            if folded[i] < len(selected):
                m = max_sim[i]
                for p in selected[folded[i]:]:
                    s = _similarity32(sets[p], toks)  # type: ignore[arg-type]
                    if s > m:
                        m = s
                max_sim[i] = m
                folded[i] = len(selected)
            val = compute_mmr_score(rel[i], max_sim[i], lam)
            if (val > best_val or (val == best_val and (scores[i] > scores[best]
                                                        or (scores[i] == scores[best] and i < best)))):
                best, best_val = i, val
        selected.append(best)
        taken[best] = True
        if done(items[best]):
            break
    return [items[i] for i in selected] + [items[i] for i in range(n) if not taken[i]]


# ---------------------------------------------------------------------------------------------
# Merge (upstream `memory/hybrid.ts`) and RRF (docs/decisions.md D7)
# ---------------------------------------------------------------------------------------------


def union_candidates(vector: Sequence[dict[str, Any]], keyword: Sequence[dict[str, Any]]) -> list[Candidate]:
    """Union retriever hits by chunk id; the keyword snippet wins when non-empty."""
    by_id: dict[str, Candidate] = {}
    for rank, v in enumerate(vector, start=1):
        if v["id"] in by_id:
            continue
        by_id[v["id"]] = Candidate(
            id=v["id"], path=v["path"], source=v["source"], start_line=int(v["start_line"]),
            end_line=int(v["end_line"]), snippet=v.get("snippet", ""), vector_score=float(v["vector_score"]),
            in_vector=True, vector_rank=rank,
        )
    for rank, k in enumerate(keyword, start=1):
        c = by_id.get(k["id"])
        if c is None:
            c = Candidate(id=k["id"], path=k["path"], source=k["source"], start_line=int(k["start_line"]),
                          end_line=int(k["end_line"]), snippet=k.get("snippet", ""))
            by_id[k["id"]] = c
        elif k.get("snippet"):
            c.snippet = k["snippet"]
        c.in_keyword = True
        c.keyword_rank = rank if c.keyword_rank is None else c.keyword_rank
        c.text_score = max(c.text_score, float(k.get("text_score", 0.0)))
        c.ranking_score = max(c.ranking_score, float(k.get("score", k.get("text_score", 0.0))))
        c.path_score = max(c.path_score, float(k.get("path_score", 0.0)))
        c.exact = max(c.exact, int(k.get("exact", 0)))
        c.has_body_match = c.has_body_match or bool(k.get("has_body_match", c.text_score > 0))
    return list(by_id.values())


def keyword_content_score(c: Candidate) -> float:
    """Upstream's text half: the boosted lexical score (saturates towards 1 for long queries)."""
    if c.text_score > 0:
        return c.ranking_score
    if c.exact > 0:
        return 0.0
    return c.path_score


def keyword_order_key(c: Candidate) -> tuple[float, float, float]:
    """The keyword-only order of a candidate before decay and multipliers (boosted score, then BM25,
    then path score): :func:`rank_keyword_only` sorts by the same fields."""
    return (keyword_content_score(c), c.text_score, c.path_score)


def has_keyword_evidence(c: Candidate) -> bool:
    return c.in_keyword and keyword_content_score(c) > 0


def bm25_relevance(text_score: float) -> float:
    """The BM25 relevance behind a mapped ``text_score`` (the inverse of ``rel / (1 + rel)``)."""
    return math.inf if text_score >= 1.0 else text_score / (1.0 - text_score)


def assign_keyword_order(candidates: Sequence[Candidate], *, keyword_full: bool = False) -> None:
    """Set ``keyword_order`` (1-based, equal keys share a position) and ``text_half`` on every candidate.

    The text half is the BM25 relevance normalised per query by the best candidate's, scaled by the
    best boosted score, kept non-increasing along the keyword order, and never above the candidate's
    own boosted score (a path-only hit uses its path score over the best). Unlike the boosted score,
    which saturates at 1.0 for most hits of a long query, it keeps BM25's spread; with one matching
    candidate it equals upstream's text half. Candidates without keyword evidence get 0, or, when the
    BM25 list returned all it was asked for (``keyword_full``), the lowest text half of its body
    hits: a chunk it did not return ranks below those, not at 0 (as :func:`assign_vector_half`)."""
    scored = sorted((c for c in candidates if has_keyword_evidence(c)), key=keyword_order_key, reverse=True)
    best = keyword_content_score(scored[0]) if scored else 0.0
    top_rel = max((bm25_relevance(c.text_score) for c in scored if c.text_score > 0), default=0.0)
    prev: tuple | None = None
    pos = 0
    ratio = 1.0
    for i, c in enumerate(scored, start=1):
        key = keyword_order_key(c)
        if key != prev:
            pos, prev = i, key
        c.keyword_order = pos
        own = keyword_content_score(c)
        if c.text_score > 0 and top_rel > 0:
            rel = bm25_relevance(c.text_score)
            r = 1.0 if rel == top_rel else (0.0 if math.isinf(top_rel) else rel / top_rel)
        else:
            r = own / best
        ratio = min(ratio, r)
        c.text_half = min(own, best * ratio)
    floor = min((c.text_half for c in scored if c.text_score > 0), default=0.0) if keyword_full else 0.0
    for c in candidates:
        if not has_keyword_evidence(c):
            c.keyword_order, c.text_half = None, floor


def assign_vector_half(candidates: Sequence[Candidate], *, vector_full: bool = False) -> None:
    """Set ``vector_half``: the vector score of a candidate the vector search returned. When that
    search returned all it was asked for (``vector_full``), a candidate it did not return gets the
    lowest score it returned (its own is at most that, not 0), never below 0; otherwise 0 (the
    search returned every chunk with a vector, so the candidate has none).

    Counting an unreturned candidate as 0 makes the vector half a bonus for being in both lists: a
    flat, weak vector half then outvotes the keyword order with membership alone."""
    scores = [c.vector_score for c in candidates if c.in_vector]
    floor = max(0.0, min(scores)) if scores and vector_full else 0.0
    for c in candidates:
        c.vector_half = c.vector_score if c.in_vector else floor


def scale_halves(candidates: Sequence[Candidate], vw: float, tw: float) -> None:
    """The weighted merge's halves over their best (into ``vector_norm`` / ``text_norm``, 1.0 for the
    best), and the query's scale (into ``fusion_scale``): what the raw mix ``vw x vector + tw x text``
    gives a candidate best in both halves (or in the only half that returned anything).

    Over its best, each half spans the same range, so ``vw`` and ``tw`` weigh what they say: raw
    cosines bunch within a few tenths while the text half spans 0..1, so a raw mix lets the text
    half decide however small ``tw`` is. The scale is one number per query, so it leaves the order
    alone and keeps the scores absolute: ``minScore`` still drops a query whose best match is weak."""
    vmax = max((c.vector_half for c in candidates), default=0.0)
    tmax = max((c.text_half for c in candidates), default=0.0)
    present = (vw if vmax > 0 else 0.0) + (tw if tmax > 0 else 0.0)
    scale = (vw * vmax + tw * tmax) / present if present > 0 else 0.0
    for c in candidates:
        c.vector_norm = c.vector_half / vmax if vmax > 0 else 0.0
        c.text_norm = c.text_half / tmax if tmax > 0 else 0.0
        c.fusion_scale = scale


def weighted_content(c: Candidate, vw: float, tw: float, *, upstream: bool = False, scale: float = 1.0) -> float:
    """``scale x (vw x vector half + tw x text half)``, each half over its best (:func:`scale_halves`);
    ``upstream`` is upstream's exact merge: the raw vector score (0 when not returned) and the
    boosted score as the text half."""
    if c.in_vector and not c.in_keyword and is_non_text_media_path(c.path):
        return c.vector_score
    if upstream:
        return vw * c.vector_score + tw * keyword_content_score(c)
    return scale * (vw * c.vector_norm + tw * c.text_norm)


def _normal_cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def normalise_halves(candidates: Sequence[Candidate], method: str) -> None:
    """Per-retriever normalisation of this query's scores into ``vector_norm`` / ``text_norm`` in [0, 1]:
    ``minmax`` maps each retriever's lowest..highest candidate to 0..1; ``zscore`` maps each score to
    the normal CDF of its z-score within its retriever. A candidate a retriever did not return gets 0."""
    halves = (("vector_norm", [c for c in candidates if c.in_vector], lambda c: c.vector_score),
              ("text_norm", [c for c in candidates if has_keyword_evidence(c)], lambda c: c.text_half))
    for c in candidates:
        c.vector_norm = c.text_norm = 0.0
    for attr, members, value in halves:
        if not members:
            continue
        vals = np.array([value(c) for c in members], dtype=np.float64)
        if method == "minmax":
            lo, hi = float(vals.min()), float(vals.max())
            norm = np.ones_like(vals) if hi == lo else (vals - lo) / (hi - lo)
        else:
            std = float(vals.std())
            z = np.zeros_like(vals) if std == 0 else (vals - float(vals.mean())) / std
            norm = np.array([_normal_cdf(float(x)) for x in z])
        for c, v in zip(members, norm):
            setattr(c, attr, float(v))


def rrf_content(c: Candidate, k: int, lists: int) -> float:
    """RRF normalised to [0, 1]: the sum of ``1/(k + rank)`` divided by its maximum ``lists/(k + 1)``.

    Normalising keeps ``minScore`` meaningful: 1.0 means rank 1 in every list that ran; a hit
    ranked r in one of two lists scores ``(k + 1) / (2 (k + r))`` (0.5 at r = 1, ~0.36 at r = 24).
    The keyword rank is the keyword order (:func:`assign_keyword_order`).
    """
    if lists <= 0:
        return 0.0
    total = 0.0
    if c.vector_rank is not None and c.vector_score > 0:
        total += 1.0 / (k + c.vector_rank)
    if c.keyword_order is not None:
        total += 1.0 / (k + c.keyword_order)
    return total / (lists / (k + 1.0))


def fused_content(c: Candidate, opts: RankingOptions, lists: int) -> float:
    """The content score of one candidate under ``opts.fusion`` (see :data:`FUSIONS`); the weighted
    merge reads the query's ``fusion_scale`` from :func:`scale_halves`."""
    if opts.fusion == "rrf":
        return rrf_content(c, opts.rrf_k, lists)
    if opts.fusion in ("minmax", "zscore"):
        if c.in_vector and not c.in_keyword and is_non_text_media_path(c.path):
            return c.vector_norm
        return opts.vector_weight * c.vector_norm + opts.text_weight * c.text_norm
    return weighted_content(c, opts.vector_weight, opts.text_weight, upstream=opts.fusion == "upstream",
                            scale=c.fusion_scale)


def _tiebreak(c: Candidate) -> tuple:
    """Equal scores: the keyword order first (led by BM25; candidates without keyword evidence last),
    then the BM25 score itself, then path and lines (stable, deterministic)."""
    return (c.keyword_order if c.keyword_order is not None else math.inf, -c.text_score, -c.path_score,
            c.path, c.start_line, c.end_line)


def rank_hybrid(candidates: list[Candidate], opts: RankingOptions, *, lists: int = 2,
                vector_full: bool = False, keyword_full: bool = False,
                need: tuple[int, float] | None = None) -> list[Candidate]:
    """Score, adjust and order merged candidates (upstream `memory/hybrid.ts` with the chosen fusion);
    ``vector_full`` / ``keyword_full``: the vector / BM25 search returned as many hits as it was asked for.
    ``need = (max_results, min_score)``: only the order up to the ``max_results``-th candidate at or
    above ``min_score`` matters (:func:`select_hybrid` then takes exactly those): MMR stops there and
    the rest keeps its pre-MMR order (positions past it are not MMR's)."""
    now_ms = opts.now_ms
    active = prepare_active_project_keys(opts.active_project_keys)
    assign_keyword_order(candidates, keyword_full=keyword_full)
    assign_vector_half(candidates, vector_full=vector_full)
    if opts.fusion in ("minmax", "zscore"):
        normalise_halves(candidates, opts.fusion)
    elif opts.fusion == "weighted":
        scale_halves(candidates, opts.vector_weight, opts.text_weight)
    for c in candidates:
        c.content_score = fused_content(c, opts, lists)
        c.lexical_rank = c.ranking_score if (c.has_body_match and c.text_score == 0) else 0.0
        if c.exact > 0:
            if opts.decay_enabled:
                base = score_exact_path_tie_for_temporal_decay(c.content_score)
            else:
                base = c.content_score if c.content_score > 0 else 1.0
        else:
            base = c.content_score if c.content_score != 0 else c.lexical_rank
        c.decay = (temporal_decay_for(c.path, c.source, c.source_mtime, half_life_days=opts.half_life_days,
                                      now_ms=now_ms) if opts.decay_enabled and now_ms is not None else 1.0)
        c.importance_mult = importance_multiplier(c.importance)
        c.project_mult = project_multiplier(c.project_key, active)
        c.rank_score = base * c.decay * c.importance_mult * c.project_mult
        if c.exact > 0:
            c.score = c.project_mult
        elif c.content_score == 0:
            c.score = 0.0
        else:
            c.score = c.rank_score
    groups = [sorted((c for c in candidates if c.exact == tier),
                     key=lambda c: ((0 if c.content_score > 0 else 1) if not opts.decay_enabled else 0,
                                    -c.rank_score, -c.lexical_rank, *_tiebreak(c))) for tier in (3, 2, 1)]
    groups.append(sorted((c for c in candidates if c.exact == 0),
                         key=lambda c: (-c.score, -c.rank_score, -c.lexical_rank, *_tiebreak(c))))
    out: list[Candidate] = []
    for tier, group in zip((3, 2, 1, 0), groups):
        left = None if need is None else need[0] - sum(1 for c in out if c.score >= need[1])
        if opts.mmr_enabled and (left is None or left > 0):
            rel = (lambda c: c.rank_score) if tier else (lambda c: c.score)
            group = mmr_rerank(group, lam=opts.mmr_lambda, score=rel, text=lambda c: c.snippet,
                               done=None if need is None else _countdown(left, need[1]))
        out.extend(group)
    _mark_positions([c for g in groups for c in g], out)
    return out


def _countdown(left: int, min_score: float) -> Callable[[Candidate], bool]:
    """``done`` for :func:`mmr_rerank`: True once ``left`` picks scored at or above ``min_score``."""
    box = [left]

    def done(c: Candidate) -> bool:
        box[0] -= c.score >= min_score
        return box[0] <= 0

    return done


def rank_keyword_only(candidates: list[Candidate], opts: RankingOptions) -> list[Candidate]:
    """FTS-only ranking (upstream `memory/manager.ts`): decay, multipliers, keyword order, exact public
    score."""
    active = prepare_active_project_keys(opts.active_project_keys)
    for c in candidates:
        c.content_score = c.ranking_score if c.has_body_match else 0.0
        if c.exact > 0:
            base = score_exact_path_tie_for_temporal_decay(c.content_score) if opts.decay_enabled else (
                c.ranking_score if c.has_body_match else 1.0)
        else:
            base = c.ranking_score if c.has_body_match else c.path_score
        c.decay = (temporal_decay_for(c.path, c.source, c.source_mtime, half_life_days=opts.half_life_days,
                                      now_ms=opts.now_ms) if opts.decay_enabled and opts.now_ms is not None else 1.0)
        c.importance_mult = importance_multiplier(c.importance)
        c.project_mult = project_multiplier(c.project_key, active)
        c.rank_score = base * c.decay * c.importance_mult * c.project_mult
        c.score = c.rank_score
    prefer_body = not opts.decay_enabled
    candidates = sorted(candidates, key=lambda c: (
        -c.exact,
        -(1 if c.has_body_match else 0) if (prefer_body and c.exact > 0) else 0,
        -c.rank_score, -c.text_score, -c.path_score if c.exact == 0 else 0.0, c.path, c.start_line, c.id,
    ))
    for c in candidates:
        if c.exact > 0:
            c.score = c.project_mult
    assign_keyword_order(candidates)
    _mark_positions(candidates, candidates)
    return candidates


def rank_vector_only(candidates: list[Candidate]) -> list[Candidate]:
    for c in candidates:
        c.content_score = c.rank_score = c.score = c.vector_score
    ordered = sorted(candidates, key=lambda c: (-c.score, *_tiebreak(c)))
    _mark_positions(ordered, ordered)
    return ordered


def _mark_positions(before: Sequence[Candidate], after: Sequence[Candidate]) -> None:
    """1-based positions before and after MMR (explain)."""
    for i, c in enumerate(before, start=1):
        c.pre_mmr_position = i
    for i, c in enumerate(after, start=1):
        c.position = i


# ---------------------------------------------------------------------------------------------
# Selection (upstream `memory/hybrid.ts`)
# ---------------------------------------------------------------------------------------------


def select_hybrid(merged: Sequence[Candidate], *, max_results: int, min_score: float, keyword_keys: set[str]) -> list[Candidate]:
    """strict >= minScore; else keyword-backed >= 0; else fill spare slots with keyword-only hits."""
    strict = [c for c in merged if c.score >= min_score][:max_results]
    if not keyword_keys or len(strict) >= max_results:
        return strict
    if not strict:
        return [c for c in merged if c.key in keyword_keys and c.score >= 0][:max_results]
    chosen = {id(c) for c in strict}
    spare = max_results - len(strict)
    fill = [c for c in merged if id(c) not in chosen and c.vector_score == 0 and c.key in keyword_keys][:spare]
    fill_ids = {id(c) for c in fill}
    # keep merged order across the strict hits and the fill
    return [c for c in merged if id(c) in chosen or id(c) in fill_ids]


def select_scored(results: Sequence[Candidate], *, max_results: int, min_score: float, relaxed_min: float = 0.0) -> list[Candidate]:
    strict = [c for c in results if c.score >= min_score]
    if strict:
        return strict[:max_results]
    return [c for c in results if c.score >= relaxed_min][:max_results]


# ---------------------------------------------------------------------------------------------
# Metadata and the whole ranking step (upstream `memory/manager.ts`)
# ---------------------------------------------------------------------------------------------


def attach_metadata(cands: list[Candidate], meta: dict[str, dict[str, Any]]) -> list[Candidate]:
    """Copy recall metadata (``host_facades.db.chunk_rows`` rows) onto candidates; chunks absent from
    ``meta`` (removed after retrieval) drop out."""
    out = []
    for c in cands:
        m = meta.get(c.id)
        if m is None:
            continue  # the chunk was removed after retrieval (left-join reader omits it)
        imp = m.get("importance")
        c.importance = int(imp) if isinstance(imp, (int, float)) and not isinstance(imp, bool) else None
        trig = m.get("triggers")  # kept as stored (JSON text) when it names any trigger
        c.triggers = trig.strip() if has_triggers(trig) else None
        pk = m.get("project_key")
        c.project_key = pk.strip() if isinstance(pk, str) and pk.strip() else None
        c.provenance = provenance_of(m)
        c.source_mtime = m.get("source_mtime")
        c.hash = m.get("hash")
        c.row = m
        out.append(c)
    return out


def rank_and_select(
    *,
    mode: str,
    keyword_hits: Sequence[dict[str, Any]] | None,
    vector_hits: Sequence[dict[str, Any]] | None,
    metadata: dict[str, dict[str, Any]],
    opts: RankingOptions,
    max_results: int,
    min_score: float,
    limit: int | None = None,
    selected_only: bool = False,
) -> tuple[list[Candidate], list[Candidate], bool]:
    """Merge, adjust, order and select (upstream `memory/manager.ts`, `memory/hybrid.ts`); ``limit`` is how
    many hits the
    vector and the BM25 search were each asked for (None: unknown). ``selected_only``: the caller
    uses only the selection, so the hybrid order past it is not computed (``rank_hybrid``'s ``need``).

    Returns ``(selected, ordered, vector_mode)``; ``vector_mode`` says whether hits carry a vector score.
    """
    kw = list(keyword_hits or [])
    vec = list(vector_hits or [])
    if mode == "keyword":
        cands = attach_metadata(union_candidates([], kw), metadata)
        ordered = rank_keyword_only(cands, opts)
        selected = select_scored(ordered, max_results=max_results, min_score=min_score, relaxed_min=0.0)
        return selected, ordered, False
    if mode == "vector":
        cands = attach_metadata(union_candidates(vec, []), metadata)
        ordered = rank_vector_only(cands)
        selected = [c for c in ordered if c.score >= min_score][:max_results]
        return selected, ordered, True
    cands = attach_metadata(union_candidates(vec, kw), metadata)
    vector_full = limit is not None and len(vec) >= limit
    keyword_full = limit is not None and sum(1 for h in kw if float(h.get("text_score", 0.0)) > 0) >= limit
    ordered = rank_hybrid(cands, opts, lists=2, vector_full=vector_full, keyword_full=keyword_full,
                          need=(max_results, min_score) if selected_only else None)
    keyword_keys = {c.key for c in ordered if c.in_keyword}
    selected = select_hybrid(ordered, max_results=max_results, min_score=min_score, keyword_keys=keyword_keys)
    return selected, ordered, True
