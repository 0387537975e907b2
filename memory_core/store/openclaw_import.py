"""Bring your embeddings: seed memory-core's embedding cache from an OpenClaw index.

OpenClaw 2026.9 keeps each agent's memory index in ``agents/<id>/agent/openclaw-agent.sqlite``:
``memory_embedding_cache(provider, model, provider_key, hash, embedding, dims)`` and
``memory_index_chunks(hash, model, embedding)``, with the index identity in ``memory_index_meta``
(``memory_index_meta_v1``: provider, model, vectorDims). Its vectors are little-endian float64 BLOBs
(8 bytes per dimension; float32 is read too). A chunk's hash is the sha256 of its text, as
memory-core's, so a vector is taken for the same provider and model and keyed by memory-core's own
provider key: the next ``memory-core index`` finds unchanged chunks in the cache and does not embed
them. The provider key is not compared: upstream hashes other settings into it (and the secret-free
parts differ), the provider and model are what decide the vectors.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import apsw
import numpy as np

from host_facades.db.vectors import normalize_rows
from memory_core.errors import ConfigError, MemoryCoreError

OPENCLAW_META_KEY = "memory_index_meta_v1"


class ImportRefused(ConfigError):
    """The OpenClaw index's vectors do not fit this configuration (provider, model or dimensions)."""

    code = "import_refused"


@dataclass
class ImportReport:
    """What ``import-embeddings`` took."""

    source: str
    provider: str
    model: str
    dims: int | None
    imported: int = 0  # vectors written to the cache
    skipped: int = 0  # rows of the same provider/model whose BLOB was not a vector of ``dims``
    other_models: list[str] = field(default_factory=list)  # provider/model pairs left alone
    # passages of the OpenClaw index's chunks: memory-core's own vectors (one per line or short group
    # of lines, host_facades.chunking.pipeline.split_passages), which OpenClaw never made; the next index embeds them
    passages_to_embed: int = 0
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "provider": self.provider, "model": self.model, "dims": self.dims,
                "imported": self.imported, "skipped": self.skipped, "otherModels": self.other_models,
                "passagesToEmbed": self.passages_to_embed, "warnings": self.warnings}


def decode_openclaw_vector(blob: Any, dims: int | None) -> np.ndarray | None:
    """An OpenClaw vector BLOB (float64, or float32) of ``dims`` values (None: any), else None."""
    if not isinstance(blob, (bytes, bytearray, memoryview)) or not len(blob):
        return None
    raw = bytes(blob)
    if dims:
        if len(raw) == dims * 8:
            return np.frombuffer(raw, dtype="<f8").astype(np.float32)
        if len(raw) == dims * 4:
            return np.frombuffer(raw, dtype="<f4").astype(np.float32)
        return None
    return np.frombuffer(raw, dtype="<f8").astype(np.float32) if len(raw) % 8 == 0 else None


BATCH = 2000  # vectors read, decoded and written at a time (memory stays bounded on a large index)


class OpenClawIndex:
    """An OpenClaw index opened read-only: what it holds (:meth:`survey`), then its vectors of one
    provider and model in batches (:meth:`batches`)."""

    def __init__(self, path: str) -> None:
        self.path = path
        if not os.path.isfile(path):
            raise ConfigError(f"--from {path}: no such file; pass an OpenClaw index "
                              "(~/.openclaw/agents/<id>/agent/openclaw-agent.sqlite)")
        try:
            self.conn = apsw.Connection(f"file:{path}?mode=ro",
                                        flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
            self.conn.set_busy_timeout(5000)
            self.tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except apsw.Error as exc:
            raise ConfigError(f"--from {path}: not a readable SQLite database ({exc}); pass an OpenClaw index") from None
        if "memory_embedding_cache" not in self.tables and "memory_index_chunks" not in self.tables:
            self.close()
            raise ConfigError(f"--from {path}: no OpenClaw memory index in it (no memory_embedding_cache or "
                              "memory_index_chunks table)")
        self.meta = _meta(self.conn, self.tables)

    def close(self) -> None:
        self.conn.close()

    def _sources(self, provider: str, model: str) -> list[tuple[str, tuple[Any, ...], str, Any]]:
        """Per table holding vectors: (``FROM ... WHERE ...``, its parameters, the dims column, the
        dims the index meta declares)."""
        out: list[tuple[str, tuple[Any, ...], str, Any]] = []
        if "memory_embedding_cache" in self.tables:
            out.append(("memory_embedding_cache WHERE provider = ? AND model = ?", (provider, model), "dims", None))
        if "memory_index_chunks" in self.tables and self.meta.get("provider") == provider:
            # the chunks' own vectors (an index whose cache was disabled or pruned)
            out.append(("memory_index_chunks WHERE model = ?", (model,), "NULL", self.meta.get("vectorDims")))
        return out

    def survey(self, provider: str, model: str) -> ImportReport:
        """What the index holds for ``provider``/``model`` (dims, other models, passages), from
        lengths alone; refuses another model and mixed dimensions."""
        report = ImportReport(source=self.path, provider=provider, model=model, dims=None)
        pairs: set[tuple[str, str]] = set()
        sizes: dict[int, int] = {}
        try:
            if "memory_embedding_cache" in self.tables:
                pairs |= {(str(p), str(m)) for p, m in self.conn.execute(
                    "SELECT DISTINCT provider, model FROM memory_embedding_cache")}
            if "memory_index_chunks" in self.tables:
                from host_facades.chunking.pipeline import split_passages

                report.passages_to_embed = sum(len(split_passages(str(t))) for (t,) in self.conn.execute(
                    "SELECT text FROM memory_index_chunks WHERE model = ?", (model,)))
                if self.meta.get("provider") == provider and self.meta.get("model") == model:
                    pairs.add((provider, model))
            for where, params, dims_col, declared in self._sources(provider, model):
                for length, dims, n in self.conn.execute(
                        f"SELECT length(embedding), {dims_col}, count(*) FROM {where} GROUP BY 1, 2", params):
                    size = _vector_size(int(length or 0), int(dims or declared or 0) or None)
                    if size:
                        sizes[size] = sizes.get(size, 0) + int(n)
        except apsw.Error as exc:
            raise ConfigError(f"--from {self.path}: cannot read its memory index ({exc})") from None
        report.other_models = sorted(f"{p}/{m}" for p, m in pairs if (p, m) != (provider, model))
        if not sizes:
            held = ", ".join(report.other_models) or "no vectors"
            raise ImportRefused(
                f"--from {self.path}: it holds {held}, not {provider}/{model}; set `provider` and `model` to the "
                "ones it was built with (vectors of another model cannot be reused), or index from scratch")
        if len(sizes) > 1:
            raise ImportRefused(f"--from {self.path}: its {provider}/{model} vectors have mixed dimensions "
                                f"{sorted(sizes)}; rebuild that index with OpenClaw first")
        report.dims = next(iter(sizes))
        return report

    def batches(self, provider: str, model: str, report: ImportReport) -> Iterator[dict[str, np.ndarray]]:
        """The vectors by chunk hash, ``BATCH`` at a time, unit length; unreadable ones are counted
        in ``report.skipped``."""
        for where, params, dims_col, declared in self._sources(provider, model):
            cur = self.conn.execute(f"SELECT hash, embedding, {dims_col} FROM {where}", params)
            while True:
                rows = [r for _, r in zip(range(BATCH), cur)]
                if not rows:
                    break
                out: dict[str, np.ndarray] = {}
                for h, blob, dims in rows:
                    vec = decode_openclaw_vector(blob, int(dims or declared or 0) or report.dims)
                    if vec is None or vec.size != report.dims or not np.all(np.isfinite(vec)):
                        report.skipped += 1
                        continue
                    out[str(h)] = vec
                if out:
                    yield dict(zip(out, normalize_rows(np.vstack(list(out.values()))), strict=True))


def _vector_size(length: int, dims: int | None) -> int | None:
    """The number of values in a BLOB of ``length`` bytes (float64, or float32 where ``dims`` says so)."""
    if dims:
        return dims if length in (dims * 8, dims * 4) else None
    return length // 8 if length and length % 8 == 0 else None


def _meta(conn: apsw.Connection, tables: set[str]) -> dict[str, Any]:
    if "memory_index_meta" not in tables:
        return {}
    row = conn.execute("SELECT value FROM memory_index_meta WHERE key = ?", (OPENCLAW_META_KEY,)).fetchone()
    try:
        meta = json.loads(row[0]) if row else {}
    except (TypeError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def import_embeddings(core: Any, path: str) -> ImportReport:
    """Seed ``core``'s embedding cache with the OpenClaw index's vectors of its provider and model.

    Refuses (:class:`ImportRefused`) another model, vectors whose dimensions differ from the
    provider's (``outputDimensionality``) or from the memory-core index's, and keyword-only mode."""
    provider = core.provider
    if provider is None:
        raise ConfigError('import-embeddings: provider is "none" (keyword-only): there is no embedding cache to seed; '
                          "set `provider` and `model` to the ones the OpenClaw index was built with")
    if not core.config.cache.enabled:
        raise ConfigError("import-embeddings: cache.enabled = false: the imported vectors would not be used; "
                          "enable the embedding cache")
    index = OpenClawIndex(os.path.abspath(os.path.expanduser(path)))
    try:
        report = index.survey(provider.id, provider.model)
        want = getattr(provider, "dims", None)
        stored = _index_dims(core)
        for expected, what in ((want, f"provider {provider.id} gives"), (stored, "the memory-core index holds")):
            if expected is not None and report.dims is not None and expected != report.dims:
                raise ImportRefused(
                    f"--from {path}: its {provider.id}/{provider.model} vectors have {report.dims} dimensions but "
                    f"{what} {expected}-dimension vectors; set outputDimensionality to {report.dims} (or rebuild)")
        taken: set[str] = set()
        for items in index.batches(provider.id, provider.model, report):
            try:
                core.writer.cache.put_many(provider.id, provider.model, provider.provider_key, items)
            except apsw.Error as exc:
                raise MemoryCoreError(f"import-embeddings: cannot write the embedding cache ({exc})") from None
            taken.update(items)
        report.imported = len(taken)
    except apsw.Error as exc:
        raise ConfigError(f"--from {path}: cannot read its memory index ({exc})") from None
    finally:
        index.close()
    limit = core.config.cache.max_entries
    if limit is not None and report.imported + report.passages_to_embed > limit:
        report.warnings.append(
            f"cache.maxEntries = {limit} keeps only the newest {limit} vectors, fewer than the "
            f"{report.imported + report.passages_to_embed} this index needs; raise cache.maxEntries (or set it to "
            "null) before `memory-core index`, or the oldest imported vectors are dropped and embedded again")
    return report


def _index_dims(core: Any) -> int | None:
    from memory_core.store import schema

    raw = core.read_meta_value(schema.META_KEY)
    try:
        meta = json.loads(raw) if raw else None
    except ValueError:
        return None
    if not isinstance(meta, dict) or meta.get("provider") in (None, "none"):
        return None
    dims = meta.get("vectorDims")
    return int(dims) if isinstance(dims, int) else None
