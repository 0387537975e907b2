"""Gateway secrets: a short one is refused on a non-loopback bind (a warning on loopback), one given
on argv is warned about, and so is a secret in a config file other users can read."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from memory_core.config import load_config
from memory_core.errors import ConfigError
from memory_core.gateway.server import resolve_auth
from tests.gateway_fixtures import ROOT, child_env, make_workspace

pytestmark = pytest.mark.timeout(60)

GOOD = "k" * 16


def auth(**kw):
    warnings: list[str] = []
    settings = resolve_auth(warn=warnings.append, **kw)
    return settings, warnings


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.5", "::"])
def test_short_secret_is_refused_off_loopback(host):
    with pytest.raises(ConfigError, match=rf"^the gateway token has 1 characters: too short to listen on {host}; "
                                          r"use at least 16 random characters"):
        auth(mode=None, host=host, env={"MEMORY_CORE_GATEWAY_TOKEN": "x"})
    with pytest.raises(ConfigError, match="^the gateway password has 15 characters"):
        auth(mode="password", host=host, env={"MEMORY_CORE_GATEWAY_PASSWORD": "p" * 15})
    settings, warnings = auth(mode=None, host=host, env={"MEMORY_CORE_GATEWAY_TOKEN": GOOD})
    assert (settings.mode, settings.secret, warnings) == ("token", GOOD, [])


def test_short_secret_on_loopback_is_a_warning():
    settings, warnings = auth(mode=None, host="127.0.0.1", env={"MEMORY_CORE_GATEWAY_TOKEN": "abc"})
    assert settings.secret == "abc"
    assert warnings == ["the gateway token has 3 characters, easy to guess; use at least 16 random characters, "
                        "e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`"]


def test_secret_on_argv_is_a_warning():
    _, warnings = auth(mode=None, host="127.0.0.1", token=GOOD, env={})
    assert warnings == ["--token on the command line is visible to every local user (ps, /proc/PID/cmdline); set "
                        "MEMORY_CORE_GATEWAY_TOKEN or gateway.token in a config file only you can read (chmod 600) "
                        "instead"]
    _, warnings = auth(mode="password", host="127.0.0.1", password=GOOD, env={})
    assert warnings[0].startswith("--password on the command line is visible")
    assert "MEMORY_CORE_GATEWAY_PASSWORD" in warnings[0]


def _config_file(tmp_path, mode, doc):
    path = tmp_path / "memory-core.json"
    path.write_text(json.dumps(doc))
    os.chmod(path, mode)
    return path


def test_secret_in_a_config_file_others_can_read(tmp_path):
    path = _config_file(tmp_path, 0o644, {"gateway": {"token": GOOD}, "remote": {"apiKey": "sk-1"},
                                          "agents": {"ops": {}}})
    cfg = load_config(path, env={})
    expected = (f"config file {path} holds gateway.token, remote.apiKey and other users can read it (mode 0644); "
                f"run `chmod 600 {path}`")
    assert cfg.notices == [expected]
    assert cfg.for_agent("ops").notices == [expected]
    os.chmod(path, 0o600)
    assert load_config(path, env={}).notices == []
    assert load_config(_config_file(tmp_path, 0o644, {"query": {"maxResults": 3}}), env={}).notices == []


def test_cli_serve_refuses_a_short_token_on_all_interfaces(tmp_path):
    env = child_env(tmp_path, MEMORY_CORE_GATEWAY_TOKEN="x")
    out = subprocess.run([sys.executable, "-m", "memory_core", "serve", "--host", "0.0.0.0", "--port", "0",
                          "--workspace", str(make_workspace(tmp_path))],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.startswith("error: the gateway token has 1 characters: too short to listen on 0.0.0.0")
    assert out.stderr.count("\n") == 1


def test_cli_warns_about_a_readable_config_file(tmp_path):
    path = _config_file(tmp_path, 0o644, {"workspace": str(make_workspace(tmp_path)), "gateway": {"token": GOOD}})
    out = subprocess.run([sys.executable, "-m", "memory_core", "status", "--config", str(path)],
                         cwd=ROOT, env=child_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"warning: config file {path} holds gateway.token and other users can read it (mode 0644)" in out.stderr
