"""The query budget and numeric ranges on every surface (memory_core.validation): library, CLI,
gateway v1/v2, MCP and the provider runtime answer with their typed invalid-request error, naming
the limit and how to change it, before any sync, embedding or worker work; never a traceback."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys

import pytest

from memory_core.config import MemoryCoreConfig, load_config
from memory_core.core import MemoryCore
from memory_core.errors import InvalidRequest
from memory_core.gateway import protocol as p
from memory_core.gateway.client import GatewayCallError, GatewayClient
from memory_core.gateway.handlers import MemoryService
from memory_core.gateway.server import GatewayServer
from memory_core.mcp_server import MemoryTools, ToolArgumentError
from memory_core.provider.runtime import MemoryCoreProviderRuntime
from memory_core.validation import (
    DEFAULT_MAX_QUERY_CHARS,
    DEFAULT_MAX_QUERY_TERMS,
    MAX_SAFE_INTEGER,
    QueryBudget,
    QueryTooLarge,
    is_finite_number,
    search_numbers,
)
from tests.gateway_fixtures import ROOT, TOKEN, make_workspace
from tests.test_provider_runtime import EMBEDDER, near_far, open_lease, run  # noqa: F401 - near_far is a fixture

pytestmark = pytest.mark.timeout(120)

HUGE = 10**400  # parses to Infinity in JavaScript; float() of it raises OverflowError in Python
LONG = "falcon " * 5000  # 35,000 characters: over the default budget
CHARS_HINT = "the limit is 32768; send a shorter query, or raise query.maxChars in the config " \
             "(MEMORY_CORE_QUERY__MAX_CHARS)"


def test_budget_names_the_limit_and_the_setting():
    budget = QueryBudget(max_chars=20, max_terms=3)
    budget.check("  one two three  ")  # surrounding blanks do not count
    with pytest.raises(QueryTooLarge, match=r"^query is too long: 21 characters, the limit is 20; .*query\.maxChars"):
        budget.check("x" * 21)
    with pytest.raises(QueryTooLarge, match=r"^query has too many terms: 4, the limit is 3; .*query\.maxTerms"):
        budget.check("one two three four")
    assert issubclass(QueryTooLarge, InvalidRequest)


def test_defaults_admit_a_page_of_prose_and_come_from_the_config():
    prose = ("The deploy window moved to Tuesday; Alice wants p95 latency under fifty ms. " * 400)[:32_000]
    QueryBudget().check(prose)
    cfg = load_config(None, env={"MEMORY_CORE_QUERY__MAX_CHARS": "100", "MEMORY_CORE_QUERY__MAX_TERMS": "7"})
    assert QueryBudget.of(cfg) == QueryBudget(max_chars=100, max_terms=7)
    assert QueryBudget.of(MemoryCoreConfig()) == QueryBudget(DEFAULT_MAX_QUERY_CHARS, DEFAULT_MAX_QUERY_TERMS)


def test_numbers_never_raise_overflow():
    assert not is_finite_number(HUGE) and not is_finite_number(True) and not is_finite_number(float("nan"))
    assert is_finite_number(10**300) and is_finite_number(0.5)
    with pytest.raises(InvalidRequest, match=f"^max_results must be an integer from 1 to {MAX_SAFE_INTEGER}, got 1000"):
        search_numbers(HUGE, 0.5)
    with pytest.raises(InvalidRequest, match="^min_score must be a finite number, got -1000"):
        search_numbers(3, -HUGE)
    assert search_numbers(3.7, 10**300) == (3, 1e300)


# ---------------------------------------------------------------------- library and CLI


def test_library_search_refuses_before_any_sync(tmp_path):
    ws = make_workspace(tmp_path)
    cfg = MemoryCoreConfig(workspace=str(ws), state_dir=str(tmp_path / "state"))
    with MemoryCore(config=cfg) as core:
        with pytest.raises(QueryTooLarge, match=re.escape(CHARS_HINT)):
            core.search(LONG)
        with pytest.raises(InvalidRequest, match="^max_results must be an integer from 1 to"):
            core.search("coffee", max_results=HUGE)
        with pytest.raises(InvalidRequest, match="^min_score must be a finite number"):
            core.search("coffee", min_score=HUGE)
        assert not (tmp_path / "state" / "main.sqlite").exists()  # no bootstrap index was built
        assert [h.path for h in core.search("coffee")] == ["MEMORY.md"]


def _cli(tmp_path, *args, **env):
    full_env = {"MEMORY_CORE_HOME": str(tmp_path / "state"), "PYTHONPATH": str(ROOT),
                "MEMORY_CORE_POOL__WORKERS": "0", "PATH": "/usr/bin:/bin", **env}
    return subprocess.run([sys.executable, "-m", "memory_core", *args, "--workspace", str(make_workspace(tmp_path))],
                          cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args", [["search", LONG], ["search", "--explain", LONG],
                                  ["search", "coffee", "--max-results", str(HUGE)]])
def test_cli_search_is_a_usage_error(tmp_path, args):
    out = _cli(tmp_path, *args)
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("error: ")
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "state" / "main.sqlite").exists()


def test_cli_budget_follows_the_environment(tmp_path):
    out = _cli(tmp_path, "search", "dark roast coffee", MEMORY_CORE_QUERY__MAX_TERMS="2")
    assert out.stderr == ("error: query has too many terms: 3, the limit is 2; send fewer words, or raise "
                          "query.maxTerms in the config (MEMORY_CORE_QUERY__MAX_TERMS)\n")


# ---------------------------------------------------------------------- gateway


@pytest.fixture(scope="module")
def gw_config(tmp_path_factory):
    base = tmp_path_factory.mktemp("limits")
    cfg = load_config(None, env={"MEMORY_CORE_HOME": str(base / "state")},
                      overrides={"workspace": str(make_workspace(base))})
    with MemoryCore(config=cfg) as core:
        core.index()
    return cfg


def gateway_calls(config, calls):
    """Each call's payload or error shape, and whether the engine was opened at all."""
    service = MemoryService(config)

    async def main():
        async with GatewayServer(service, auth=p.AuthSettings("token", TOKEN)) as server:
            async with await GatewayClient.open(server.url, token=TOKEN) as client:
                out = []
                for method, params in calls:
                    try:
                        out.append(await client.call(method, params))
                    except GatewayCallError as err:
                        out.append({"code": err.code, "message": err.message})
                return out

    try:
        results = asyncio.run(main())
        return results, service.runtime.opened_core("main") is not None
    finally:
        service.close()


def test_gateway_query_budget_is_invalid_request_before_the_engine_opens(gw_config):
    results, opened = gateway_calls(gw_config, [
        ("memory.search", {"query": LONG}),
        ("memory.search", {"query": LONG, "version": 2}),
        ("memory.search", {"query": "x" * 10_000_000}),
    ])
    assert results[0] == {"code": "INVALID_REQUEST", "message": f"query is too long: 34999 characters, {CHARS_HINT}"}
    assert results[1] == results[0]
    assert results[2]["code"] == "INVALID_REQUEST" and "10000000 characters" in results[2]["message"]
    assert not opened


@pytest.mark.parametrize(("params", "message"), [
    ({"query": "coffee", "maxResults": HUGE}, "maxResults and minScore must be finite numbers when provided"),
    ({"query": "coffee", "minScore": -HUGE}, "maxResults and minScore must be finite numbers when provided"),
    ({"query": "coffee", "version": 2, "maxResults": HUGE}, "maxResults must be a positive integer"),
    ({"query": "coffee", "version": 2, "maxResults": 2**60},
     f"maxResults must be a positive integer no larger than {MAX_SAFE_INTEGER}"),
    ({"query": "coffee", "version": 2, "minScore": HUGE}, "minScore must be a finite number"),
])
def test_gateway_huge_numbers_are_invalid_request(gw_config, params, message):
    (result,), _ = gateway_calls(gw_config, [("memory.search", params)])
    assert result == {"code": "INVALID_REQUEST", "message": message}


def test_gateway_get_bounds(gw_config):
    ref = {"providerId": "memory-core", "id": "x"}
    results, _ = gateway_calls(gw_config, [("memory.get", {"version": 2, "reference": ref, "from": HUGE}),
                                           ("memory.get", {"version": 2, "reference": ref, "lines": 1e300})])
    assert results == [{"code": "INVALID_REQUEST", "message": "from must be a positive integer"},
                       {"code": "INVALID_REQUEST",
                        "message": f"lines must be a positive integer no larger than {MAX_SAFE_INTEGER}"}]


# ---------------------------------------------------------------------- MCP and the provider runtime


def test_mcp_tool_arguments(gw_config):
    tools = MemoryTools(gw_config)
    try:
        for args, message in [
            ({"query": LONG}, f"query is too long: 34999 characters, {CHARS_HINT}"),
            ({"query": "coffee", "maxResults": HUGE},
             "maxResults must be a positive integer, got 10000000000000000000... (401 characters)"),
            ({"query": "coffee", "maxResults": 2**53},
             f"maxResults must be a positive integer no larger than {MAX_SAFE_INTEGER}, got {2**53}"),
            ({"query": "coffee", "minScore": HUGE},
             "minScore must be a finite number, got 10000000000000000000... (401 characters)"),
        ]:
            with pytest.raises(ToolArgumentError) as caught:
                tools.search(args)
            assert str(caught.value) == message
        with pytest.raises(ToolArgumentError, match="^from must be a positive integer, got 1000"):
            tools.get({"path": "MEMORY.md", "from": HUGE})
        assert tools._core is None  # refused before the engine opened
    finally:
        tools.close()


def test_mcp_over_stdio_answers_a_huge_number_as_a_tool_error(tmp_path):
    from tests.test_mcp import details, run_calls
    from tests.gateway_fixtures import write_config

    cfg = write_config(tmp_path, make_workspace(tmp_path))
    result, ok = run_calls(cfg, [("memory_search", {"query": "coffee", "maxResults": HUGE}),
                                 ("memory_search", {"query": LONG})])
    assert result.is_error and details(result) == {
        "error": "maxResults must be a positive integer, got 10000000000000000000... (401 characters)"}
    assert ok.is_error and details(ok) == {"error": f"query is too long: 34999 characters, {CHARS_HINT}"}


def test_provider_search_refuses_before_embedding(near_far):  # noqa: F811 - the fixture
    async def go():
        runtime = MemoryCoreProviderRuntime(near_far)
        lease = await open_lease(runtime)
        calls = EMBEDDER.calls
        with pytest.raises(QueryTooLarge, match=re.escape(CHARS_HINT)):
            await lease.search({"query": LONG})
        assert EMBEDDER.calls == calls
        with pytest.raises(InvalidRequest, match=f"^from must be a positive integer no larger than {MAX_SAFE_INTEGER}$"):
            await lease.get({"reference": {"providerId": "memory-core", "id": "x"}, "from": HUGE})
        runtime.close_all()

    run(go())


def test_gateway_unchanged_for_valid_numbers(gw_config):
    (v1, v2), _ = gateway_calls(gw_config, [("memory.search", {"query": "coffee", "maxResults": 10**300}),
                                            ("memory.search", {"query": "coffee", "version": 2, "maxResults": 2**53 - 1})])
    assert [r["path"] for r in v1["results"]] == ["MEMORY.md"]
    assert len(v2["hits"]) == 1
    assert json.dumps(v2)  # plain JSON
