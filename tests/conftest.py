"""Shared fixtures: small workspaces and an autouse guard that closes what a test opened."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run unless MEMORY_CORE_HYPOTHESIS=explore: CI
# and the README's test command must not pass or fail by luck. Exploring (fresh random examples
# on every run; loop it) is how new counterexamples are found; add each one as an explicit test.
settings.register_profile("reproducible", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile("explore" if os.environ.get("MEMORY_CORE_HYPOTHESIS") == "explore" else "reproducible")

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# One BLAS/OpenMP thread in the test process too: the machine has 2 cores.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


# CI installs everything every test needs (.ci/run): there a skip means an install step failed
# silently, so MEMORY_CORE_NO_SKIPS=1 turns each skip into a failure that gives the skip's reason.
NO_SKIPS = os.environ.get("MEMORY_CORE_NO_SKIPS") == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if NO_SKIPS and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped where every test must run (MEMORY_CORE_NO_SKIPS=1): {reason}"


@pytest.fixture
def state_home(tmp_path, monkeypatch):
    """A private MEMORY_CORE_HOME so no test touches ~/.memory-core."""
    home = tmp_path / "state"
    home.mkdir()
    monkeypatch.setenv("MEMORY_CORE_HOME", str(home))
    return home


@pytest.fixture
def workspace(tmp_path):
    """An empty agent workspace folder with a memory/ directory."""
    ws = tmp_path / "workspace"
    (ws / "memory").mkdir(parents=True)
    return ws


@pytest.fixture(autouse=True)
def _isolate_home(tmp_path, monkeypatch):
    if "MEMORY_CORE_HOME" not in os.environ or not os.environ["MEMORY_CORE_HOME"].startswith(str(tmp_path)):
        monkeypatch.setenv("MEMORY_CORE_HOME", str(tmp_path / "home"))
