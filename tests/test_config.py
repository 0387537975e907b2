"""Configuration: spec §10 defaults, clamps, type errors naming the key path, layering, db_path rules."""

from __future__ import annotations

import json
import os

import pytest

from memory_core.config import MemoryCoreConfig, load_config
from memory_core.errors import ConfigError

EXPECTED_DEFAULTS = {
    "enabled": True,
    "workspace": None,
    "agentId": "main",
    "sessionsDir": None,
    "sources": ["memory"],
    "extraPaths": [],
    "experimental": {"sessionMemory": False},
    "provider": "none",
    "model": None,
    "fallback": "none",
    "remote": {
        "baseUrl": None,
        "apiKey": None,
        "headers": {},
        "batch": {"enabled": False, "wait": True, "concurrency": 2, "pollIntervalMs": 2000, "timeoutMinutes": 60},
        "nonBatchConcurrency": 4,
        "timeoutSeconds": 120.0,
    },
    "local": {"modelPath": None, "modelCacheDir": None, "contextSize": 4096, "threads": 0},
    "multimodal": {"enabled": False, "modalities": [], "maxFileBytes": 10000000},
    "outputDimensionality": None,
    "inputType": None,
    "queryInputType": None,
    "documentInputType": None,
    "rememberAcrossConversations": None,
    "chunking": {"tokens": 400, "overlap": 80},
    "sync": {
        "onSessionStart": True,
        "onSearch": True,
        "watch": True,
        "watchDebounceMs": 1500,
        "intervalMinutes": 0,
        "reconcileIntervalMs": 2000,
        "sessions": {"deltaBytes": 100000, "deltaMessages": 50, "postCompactionForce": True},
        "embeddingBatchTimeoutSeconds": None,
    },
    "query": {
        "maxResults": 6,
        "minScore": 0.35,
        "maxChars": 32768,
        "maxTerms": 8192,
        "hybrid": {
            "enabled": True,
            "vectorWeight": 0.7,
            "textWeight": 0.3,
            "candidateMultiplier": 4,
            "fusion": "weighted",
            "rrfK": 60,
            "mmr": {"enabled": True, "lambda": 0.7},
            "temporalDecay": {"enabled": True, "halfLifeDays": 30},
        },
    },
    "cache": {"enabled": True, "maxEntries": 50000},
    "store": {
        "driver": "sqlite",
        "path": None,
        "fts": {"tokenizer": "unicode61"},
        "vector": {"enabled": True, "extensionPath": None, "backend": "auto"},
    },
    "pool": {
        "workers": None,
        "maxPendingTasks": 256,
        "maxPendingBytes": 67108864,
        "taskTimeoutS": 30.0,
        "idleTimeoutS": 300.0,
        "cursorTtlS": 60.0,
    },
    "gateway": {"host": "127.0.0.1", "port": 18789, "token": None, "password": None, "auth": "token",
                "maxConnections": 256, "idleTimeoutSeconds": 600.0, "maxOpenAgents": 10000,
                "maxOpenIndexes": 256},
    "agents": {},
    "modelProviders": {},
    "citations": "auto",
    "userTimezone": None,
    "compaction": {"memoryFlush": {"enabled": True, "softThresholdTokens": None, "forceFlushTranscriptBytes": None,
                                   "model": None}},
}


def _err(**kw) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(**kw)
    assert info.value.code == "invalid_config"
    return str(info.value)


def test_defaults_are_spec_values(tmp_path):
    cfg = load_config(env={"MEMORY_CORE_HOME": str(tmp_path / "h")})
    dumped = cfg.model_dump(by_alias=True)
    assert dumped.pop("stateDir") == str(tmp_path / "h")
    assert dumped == EXPECTED_DEFAULTS
    assert cfg.candidate_limit == 24
    assert cfg.vectors_enabled is False  # provider "none" forces vectors off


def test_state_dir_defaults_to_home_dot_memory_core():
    cfg = load_config(env={})
    assert cfg.state_dir == os.path.expanduser("~/.memory-core")


def test_constructor_reads_memory_core_home(state_home):
    assert MemoryCoreConfig().state_dir == str(state_home)


@pytest.mark.parametrize(
    ("overrides", "attr", "expected"),
    [
        ({"chunking": {"tokens": 100, "overlap": 500}}, "chunking.overlap", 99),
        ({"chunking": {"tokens": 1, "overlap": 80}}, "chunking.overlap", 0),
        ({"query": {"minScore": 1.7}}, "query.min_score", 1.0),
        ({"query": {"minScore": -0.2}}, "query.min_score", 0.0),
        ({"query": {"hybrid": {"candidateMultiplier": 0}}}, "query.hybrid.candidate_multiplier", 1),
        ({"query": {"hybrid": {"candidateMultiplier": 99}}}, "query.hybrid.candidate_multiplier", 20),
        ({"query": {"hybrid": {"candidateMultiplier": 3.9}}}, "query.hybrid.candidate_multiplier", 3),
        ({"query": {"hybrid": {"mmr": {"lambda": 1.5}}}}, "query.hybrid.mmr.lambda_", 1.0),
        ({"query": {"hybrid": {"mmr": {"lambda": -1}}}}, "query.hybrid.mmr.lambda_", 0.0),
        ({"query": {"hybrid": {"temporalDecay": {"halfLifeDays": 0.4}}}}, "query.hybrid.temporal_decay.half_life_days", 1),
        ({"query": {"hybrid": {"temporalDecay": {"halfLifeDays": 7.9}}}}, "query.hybrid.temporal_decay.half_life_days", 7),
        ({"remote": {"batch": {"concurrency": 0}}}, "remote.batch.concurrency", 1),
    ],
)
def test_clamps(overrides, attr, expected):
    cfg = load_config(env={}, overrides=overrides)
    value = cfg
    for part in attr.split("."):
        value = getattr(value, part)
    assert value == expected


@pytest.mark.parametrize(
    ("vw", "tw", "expected"),
    [(0.5, 0.5, (0.5, 0.5)), (2.0, 1.0, (0.5, 0.5)), (0.0, 0.0, (0.7, 0.3)), (0.6, 0.2, (0.75, 0.25)), (-1, 0.4, (0.0, 1.0))],
)
def test_hybrid_weights_clamped_and_normalised(vw, tw, expected):
    cfg = load_config(env={}, overrides={"query": {"hybrid": {"vectorWeight": vw, "textWeight": tw}}})
    h = cfg.query.hybrid
    assert (round(h.vector_weight, 9), round(h.text_weight, 9)) == expected


def test_sessions_source_needs_experimental_session_memory():
    assert load_config(env={}, overrides={"sources": ["memory", "sessions"]}).sources == ["memory"]
    on = load_config(env={}, overrides={"sources": ["sessions", "memory"], "experimental": {"sessionMemory": True}})
    assert on.sources == ["sessions", "memory"]
    assert load_config(env={}, overrides={"sources": []}).sources == ["memory"]
    off = load_config(env={}, overrides={"sources": ["memory", "sessions"]})
    assert off.notices == [('sources: "sessions" is ignored: session transcripts are indexed only with '
                            "experimental.sessionMemory = true")]
    assert on.notices == [] and off.for_agent("ops").notices == off.notices
    per_agent = load_config(env={}, overrides={"sources": ["memory", "sessions"],
                                               "agents": {"ops": {"experimental": {"sessionMemory": True}}}})
    assert per_agent.sources == ["memory"] and per_agent.for_agent("ops").sources == ["memory", "sessions"]
    assert per_agent.for_agent("ops").notices == []


def test_cli_says_when_a_setting_has_no_effect(tmp_path, monkeypatch, capsys):
    from memory_core.cli import main

    cfg = tmp_path / "c.toml"
    cfg.write_text('sources = ["memory", "sessions"]\n', encoding="utf-8")
    monkeypatch.setenv("MEMORY_CORE_HOME", str(tmp_path / "home"))
    assert main(["status", "--workspace", str(tmp_path), "--config", str(cfg)]) == 0
    assert 'warning: sources: "sessions" is ignored' in capsys.readouterr().err


def test_extra_paths_trimmed_and_deduplicated():
    cfg = load_config(env={}, overrides={"extraPaths": [" notes ", "notes", "", {"path": "docs", "pattern": "*.md"}]})
    assert [p if isinstance(p, str) else p.model_dump() for p in cfg.extra_paths] == [
        "notes",
        {"path": "docs", "pattern": "*.md"},
    ]


def test_wrong_type_names_key_path_and_file(tmp_path):
    path = tmp_path / "mc.toml"
    path.write_text('[chunking]\ntokens = "abc"\n')
    msg = _err(path=str(path), env={})
    assert msg == (
        f"invalid configuration: chunking.tokens: must be an integer (got 'abc'); set in config file {path}"
    )


def test_negative_count_rejected_with_range():
    msg = _err(env={}, overrides={"chunking": {"overlap": -5}})
    assert msg == "invalid configuration: chunking.overlap: must be >= 0 (got -5); set in overrides"
    msg = _err(env={}, overrides={"query": {"maxResults": 0}})
    assert msg == "invalid configuration: query.maxResults: must be >= 1 (got 0); set in overrides"


def test_wrong_type_from_env_names_the_variable():
    msg = _err(env={"MEMORY_CORE_QUERY__HYBRID__VECTOR_WEIGHT": "lots"})
    assert msg == (
        "invalid configuration: query.hybrid.vectorWeight: must be a number (got 'lots'); "
        "set in environment variable MEMORY_CORE_QUERY__HYBRID__VECTOR_WEIGHT"
    )


def test_misspelt_env_section_is_rejected_and_other_knobs_are_left_alone():
    msg = _err(env={"MEMORY_CORE_QUERYY__MAX_RESULTS": "3"})
    assert msg.startswith("environment variable MEMORY_CORE_QUERYY__MAX_RESULTS: unknown configuration "
                          "section 'queryy'; known: ") and "MEMORY_CORE_QUERY__MAX_RESULTS" in msg
    assert load_config(env={"MEMORY_CORE_HYPOTHESIS": "explore"}).query.max_results == 6  # not a config key


def test_unknown_key_and_bad_enum_rejected(tmp_path):
    path = tmp_path / "mc.json"
    path.write_text(json.dumps({"query": {"maxResult": 3}, "store": {"fts": {"tokenizer": "porter"}}}))
    msg = _err(path=str(path), env={})
    assert "query.maxResult: is not a known setting" in msg
    assert "store.fts.tokenizer: must be one of 'unicode61' or 'trigram' (got 'porter')" in msg
    assert f"config file {path}" in msg


def test_secrets_are_never_echoed():
    msg = _err(env={}, overrides={"remote": {"apiKey": 12345}})
    assert msg == "invalid configuration: remote.apiKey: must be a string; set in overrides"
    cfg = load_config(env={}, overrides={"remote": {"apiKey": "sk-secret"}, "gateway": {"token": "T0K"}})
    assert "sk-secret" not in repr(cfg) and "T0K" not in repr(cfg)


def test_file_errors(tmp_path):
    assert "does not exist" in _err(path=str(tmp_path / "missing.toml"), env={})
    yaml = tmp_path / "mc.yaml"
    yaml.write_text("a: 1")
    assert "unsupported extension '.yaml'; use a .toml or .json file" in _err(path=str(yaml), env={})
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{\n  "query": {\n    "maxResults": 3,,\n  }\n}\n')  # JSON5 allows one trailing comma
    assert f"config file {bad_json}: JSON syntax error at line 3 column 22" in _err(path=str(bad_json), env={})
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text("[query]\nmaxResults = = 3\n")
    assert "TOML syntax error" in _err(path=str(bad_toml), env={}) and "line 2" in _err(path=str(bad_toml), env={})


def test_precedence_file_then_env_then_overrides(tmp_path):
    path = tmp_path / "mc.toml"
    path.write_text(
        'provider = "local"\nworkspace = "/ws/a"\n[query]\nmaxResults = 3\nminScore = 0.5\n'
        "[query.hybrid]\nfusion = \"rrf\"\n"
    )
    env = {
        "MEMORY_CORE_QUERY__MAX_RESULTS": "9",
        "MEMORY_CORE_WORKSPACE": "/ws/b",
        "MEMORY_CORE_HOME": str(tmp_path / "home"),
        "MEMORY_CORE_GATEWAY_TOKEN": "tok",
        "MEMORY_CORE_SOMETHING_ELSE": "ignored: not a config key",
        "OTHER": "x",
    }
    cfg = load_config(str(path), env=env, overrides={"query": {"minScore": 0.1}})
    assert (cfg.provider, cfg.workspace, cfg.state_dir) == ("local", "/ws/b", str(tmp_path / "home"))
    assert (cfg.query.max_results, cfg.query.min_score, cfg.query.hybrid.fusion) == (9, 0.1, "rrf")
    assert cfg.gateway.token == "tok"


def test_json_file_and_snake_case_keys(tmp_path):
    path = tmp_path / "mc.json"
    path.write_text(json.dumps({"chunking": {"tokens": 200}, "query": {"hybrid": {"rrf_k": 30}}, "store": {"vector": {"backend": "faiss"}}}))
    cfg = load_config(path, env={"MEMORY_CORE_PROVIDER": "openai-compatible", "MEMORY_CORE_MODEL": "m1"})
    assert (cfg.chunking.tokens, cfg.chunking.overlap, cfg.query.hybrid.rrf_k) == (200, 80, 30)
    assert (cfg.provider, cfg.model, cfg.store.vector.backend) == ("openai-compatible", "m1", "faiss")


def test_env_lists_and_booleans():
    cfg = load_config(env={"MEMORY_CORE_SOURCES": "memory,sessions", "MEMORY_CORE_EXPERIMENTAL__SESSION_MEMORY": "true",
                           "MEMORY_CORE_EXTRA_PATHS": '["a", "b"]', "MEMORY_CORE_SYNC__WATCH": "false"})
    assert (cfg.sources, cfg.extra_paths, cfg.sync.watch) == (["memory", "sessions"], ["a", "b"], False)


def test_upstream_g2_shape(tmp_path):
    path = tmp_path / "openclaw.json"
    doc = {
        "models": {"anything": True},
        "memory": {"search": {"chunking": {"tokens": 300}, "query": {"maxResults": 4}}, "citations": "auto"},
        "agents": {"ops": {"memory": {"search": {"query": {"maxResults": 10}}}}},
    }
    path.write_text(json.dumps(doc))
    cfg = load_config(path, env={})
    assert (cfg.chunking.tokens, cfg.query.max_results) == (300, 4)
    ops = cfg.for_agent("ops")
    assert (ops.agent_id, ops.chunking.tokens, ops.query.max_results) == ("ops", 300, 10)


def test_upstream_g1_shape_with_agent_list(tmp_path):
    path = tmp_path / "openclaw.json"
    doc = {
        "agents": {
            "defaults": {"memorySearch": {"extraPaths": ["shared"], "query": {"hybrid": {"vectorWeight": 0.5, "textWeight": 0.3}}}},
            "list": [{"id": "beta", "memorySearch": {"extraPaths": ["beta-notes"], "query": {"hybrid": {"textWeight": 0.5}}}}],
        }
    }
    path.write_text(json.dumps(doc))
    cfg = load_config(path, env={})
    assert cfg.agent_id == "beta"  # the sole configured agent is the default one (upstream)
    nobody = cfg.for_agent("nobody")
    assert nobody.extra_paths == ["shared"]
    assert (nobody.query.hybrid.vector_weight, nobody.query.hybrid.text_weight) == pytest.approx((0.625, 0.375))
    beta = cfg.for_agent("beta")
    # per key: agent override, then defaults (raw values, normalised after the merge); extraPaths concatenate
    assert beta.extra_paths == ["shared", "beta-notes"]
    assert (beta.query.hybrid.vector_weight, beta.query.hybrid.text_weight) == (0.5, 0.5)
    assert cfg.for_agent("nobody").extra_paths == ["shared"]


def test_invalid_agent_override_rejected_at_load():
    msg = _err(env={}, overrides={"agents": {"ops": {"chunking": {"tokens": "many"}}}})
    assert msg == (
        "invalid configuration for agent 'ops': chunking.tokens: must be an integer (got 'many'); "
        "set in agents.ops in overrides"
    )


def test_db_path_rules(tmp_path):
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    cfg = load_config(env={"MEMORY_CORE_HOME": str(tmp_path / "home")}, overrides={"workspace": str(ws)})
    assert cfg.db_path() == str(tmp_path / "home" / "main.sqlite")
    assert cfg.db_path("ops") == str(tmp_path / "home" / "ops.sqlite")
    custom = cfg.model_copy(update={"store": cfg.store.model_copy(update={"path": str(tmp_path / "db" / "{agentId}-idx.sqlite")})})
    assert custom.db_path("ops") == str(tmp_path / "db" / "ops-idx.sqlite")
    inside = load_config(env={}, overrides={"workspace": str(ws), "store": {"path": str(ws / "memory" / "{agentId}.sqlite")}})
    with pytest.raises(ConfigError, match=r"store.path: the index database .* would be inside the workspace's memory/ folder"):
        inside.db_path()
    in_ws_root = load_config(env={}, overrides={"workspace": str(ws), "store": {"path": str(ws / "idx.sqlite")}})
    assert in_ws_root.db_path() == str(ws / "idx.sqlite")
    home_inside = load_config(env={"MEMORY_CORE_HOME": str(ws / "memory" / "state")}, overrides={"workspace": str(ws)})
    with pytest.raises(ConfigError, match="stateDir"):
        home_inside.db_path()
    with pytest.raises(ConfigError, match="cannot name a database file"):
        cfg.db_path("../evil")


def test_agents_of_one_override_shape_get_the_view_validation_would_give(tmp_path):
    # agents whose overrides differ only in their workspace share one validated view as template
    agents = {**{f"w{i}": {"workspace": f"~/ws{i}"} for i in range(4)}, "n1": {}, "n2": {},
              "x1": {"workspace": None}, "x2": {"workspace": None}, "e1": {"workspace": ""},
              "q1": {"workspace": "/a", "query": {"maxResults": 3}}, "q2": {"workspace": "/b", "query": {"maxResults": 3}},
              "s1": {"experimental": {"sessionMemory": True}}, "s2": {"experimental": {"sessionMemory": True}}}
    path = tmp_path / "memory-core.json"
    path.write_text(json.dumps({"workspace": str(tmp_path), "sources": ["memory", "sessions"],
                                "query": {"hybrid": {"vectorWeight": 0.6, "textWeight": 0.4}}, "agents": agents}))
    cfg = load_config(str(path), env={"MEMORY_CORE_HOME": str(tmp_path / "home")})
    base = cfg._base or cfg
    assert base._shape_views  # load_config validated one agent per shape and kept it
    for agent_id in agents:
        copied = cfg.for_agent(agent_id)
        base._shape_views.clear()
        validated = cfg.for_agent(agent_id)
        for other in agents:  # templates from the other agents again
            if other != agent_id:
                cfg.for_agent(other)
        copied = cfg.for_agent(agent_id)
        assert copied is not validated and copied == validated
        assert copied.model_dump() == validated.model_dump()
        assert copied.model_fields_set == validated.model_fields_set
        assert (copied._raw, dict(copied._origins), copied._notices, copied._file_notices, copied._base) == \
            (validated._raw, dict(validated._origins), validated._notices, validated._file_notices, validated._base)
    assert cfg.for_agent("w2").workspace == os.path.expanduser("~/ws2") and cfg.for_agent("w2").agent_id == "w2"
    assert cfg.for_agent("n2").workspace == str(tmp_path) and cfg.for_agent("x2").workspace is None
    assert cfg.for_agent("w2").store is cfg.for_agent("w3").store  # copies of one template, not validated again


def test_for_agent_keeps_model_copy_updates(tmp_path):
    cfg = load_config(env={}, overrides={"agents": {"ops": {"query": {"maxResults": 2}}}})
    moved = cfg.model_copy(update={"workspace": str(tmp_path)})
    ops = moved.for_agent("ops")
    assert (ops.workspace, ops.agent_id, ops.query.max_results, ops.agents) == (str(tmp_path), "ops", 2, cfg.agents)
    assert load_config(env={}, overrides={"agentId": "ops", "agents": {"ops": {"query": {"maxResults": 2}}}}).query.max_results == 2


def test_boolean_is_not_a_number():
    msg = _err(env={}, overrides={"chunking": {"tokens": True}})
    assert msg == "invalid configuration: chunking.tokens: must be a number, not a boolean (got True); set in overrides"
    assert load_config(env={}, overrides={"sync": {"watch": "false"}}).sync.watch is False


def test_config_path_from_env(tmp_path):
    path = tmp_path / "mc.toml"
    path.write_text("[query]\nmaxResults = 11\n")
    assert load_config(env={"MEMORY_CORE_CONFIG": str(path)}).query.max_results == 11
    assert "does not exist" in _err(env={"MEMORY_CORE_CONFIG": str(tmp_path / "gone.toml")})


@pytest.mark.parametrize("name, suggestion", [
    ("MEMORY_CORE_PROVIDR", "MEMORY_CORE_PROVIDER"), ("MEMORY_CORE_HOMR", "MEMORY_CORE_HOME"),
    ("MEMORY_CORE_EXTRA_PATH", "MEMORY_CORE_EXTRA_PATHS"), ("MEMORY_CORE_POOL_WORKERS", "MEMORY_CORE_POOL__WORKERS"),
    ("MEMORY_CORE_QUERY_MAX_RESULTS", "MEMORY_CORE_QUERY__MAX_RESULTS"),
])
def test_a_misspelt_top_level_env_variable_is_refused_with_a_suggestion(name, suggestion):
    with pytest.raises(ConfigError) as exc:
        load_config(env={name: "local"})
    assert exc.value.message == (f"environment variable {name} is not a memory-core setting; did you mean "
                                 f"{suggestion}? (rename or unset it)")


def test_env_knobs_that_are_no_settings_stay_allowed():
    """Every MEMORY_CORE_* name the code, CI scripts and README use is a setting or a known knob."""
    import re
    from pathlib import Path

    from memory_core.config import KNOWN_KNOBS, MemoryCoreConfig, SPECIAL_ENV, _env_name

    root = Path(__file__).resolve().parent.parent
    files = [p for d in ("memory_core", "workers", "host_facades", "benchmarks", "tests", ".ci")
             for p in (root / d).rglob("*") if p.is_file() and p.suffix in ("", ".py", ".sh", ".md", ".toml")
             and p.name != "test_config.py"] + [root / "README.md"]
    used = {m for p in files for m in re.findall(r"MEMORY_CORE_[A-Z0-9_]*[A-Z0-9]", p.read_text(errors="replace"))}
    settings = set(SPECIAL_ENV) | {_env_name(f.alias or n) for n, f in MemoryCoreConfig.model_fields.items()}
    # the README's refused examples
    misspelt_examples = {"MEMORY_CORE_PROVIDR", "MEMORY_CORE_POOL_WORKERS", "MEMORY_CORE_MAX_RESULTS"}
    knobs = sorted(n for n in used if "__" not in n and n not in settings | misspelt_examples)
    assert set(knobs) <= KNOWN_KNOBS | {"MEMORY_CORE_SOMETHING_ELSE"}, set(knobs) - KNOWN_KNOBS
    assert {"MEMORY_CORE_CONFIG", "MEMORY_CORE_NO_SKIPS", "MEMORY_CORE_HYPOTHESIS"} <= set(knobs)
    for name in [*knobs, "MEMORY_CORE_PROGRESS", "MEMORY_CORE_CACHE_DIR"]:
        if name != "MEMORY_CORE_CONFIG":  # names a file load_config would read
            load_config(env={name: "1"})
