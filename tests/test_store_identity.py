"""Index identity (memory_core.store.identity): what an index was built with and what changed since."""

from __future__ import annotations

import pytest

from memory_core import config
from memory_core.config import load_config
from memory_core.store import identity
from memory_core.store.identity import IDENTITY_KEYS, identity_mismatch, index_identity


class _Prov:
    id = "local"
    model = "all-MiniLM-L6-v2"
    provider_key = "k1"
    dims = 384


def test_index_identity_and_mismatch():
    cfg = load_config(env={})
    fts = index_identity(cfg, None)
    assert {k: v for k, v in fts.items() if k != "scopeHash"} == {
        "model": "fts-only",
        "provider": "none",
        "providerKey": "",
        "sources": ["memory"],
        "chunkTokens": 400,
        "chunkOverlap": 80,
        "chunkingVersion": 6,
        "vectorDims": None,
        "ftsTokenizer": "unicode61",
        "provenanceVersion": 1,
    }
    assert len(fts["scopeHash"]) == 64
    sem = index_identity(cfg, _Prov())
    assert (sem["model"], sem["provider"], sem["providerKey"], sem["vectorDims"]) == ("all-MiniLM-L6-v2", "local", "k1", 384)
    assert identity_mismatch(fts, fts) == []
    assert identity_mismatch(fts, sem) == ["model", "provider", "providerKey"]  # vectorDims: one side unset
    other = index_identity(load_config(env={}, overrides={"extraPaths": ["x"], "chunking": {"tokens": 300},
                                                          "store": {"fts": {"tokenizer": "trigram"}}}), None)
    assert identity_mismatch(fts, other) == ["scopeHash", "chunkTokens", "ftsTokenizer"]
    assert identity_mismatch({**sem, "vectorDims": 768}, sem) == ["vectorDims"]
    assert identity_mismatch(None, sem)[0] == "model"


def test_the_scope_hash_covers_extra_paths_and_multimodal_only():
    cfg = load_config(env={})
    assert identity.scope_hash(cfg) == identity.scope_hash(load_config(env={}, overrides={"chunking": {"tokens": 300}}))
    assert identity.scope_hash(cfg) != identity.scope_hash(load_config(env={}, overrides={"extraPaths": ["notes"]}))
    assert identity.scope_hash(cfg) == "210b39e7ec6a7e1a9ae6a84f9ec580fc9d06c0ea4738e5c16bc029e5af7510a9"


def test_a_new_chunking_version_asks_for_a_rebuild(monkeypatch):
    cfg = load_config(env={})
    before = index_identity(cfg, _Prov())
    monkeypatch.setattr(identity, "CHUNKING_VERSION", 7)
    after = index_identity(cfg, _Prov())
    assert after["chunkingVersion"] == 7
    assert identity_mismatch(before, after) == ["chunkingVersion"]


def test_nothing_stored_mismatches_every_key():
    assert identity_mismatch(None, index_identity(load_config(env={}), None)) == list(IDENTITY_KEYS)
    assert identity_mismatch({}, {}) == list(IDENTITY_KEYS)


@pytest.mark.parametrize("name", ["index_identity", "identity_mismatch", "scope_hash", "IDENTITY_KEYS"])
def test_config_holds_configuration_only(name):
    assert not hasattr(config, name)
