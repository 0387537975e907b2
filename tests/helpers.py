"""Small helpers shared by several test modules."""

from __future__ import annotations

import os
import shutil
import time

import pytest


def wait_for(pred, timeout=30.0, step=0.02):
    """Poll ``pred`` until it is true or ``timeout`` passes (generous: a loaded machine makes a
    condition late, not false); returns its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


def unprivileged_prefix() -> list[str]:
    """The command prefix under which ``chmod 0`` really makes a file unreadable: none for a
    normal user; as root (who ignores permissions) ``setpriv`` with CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH dropped, or a skip when setpriv is absent."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: permissions cannot make a file unreadable")
    caps = "-dac_override,-dac_read_search"
    return [setpriv, f"--bounding-set={caps}", f"--inh-caps={caps}"]


def runtime_infos(pool, attempts: int = 50) -> dict[int, dict]:
    """``runtime_info`` of every live worker of ``pool``, by pid. Concurrent tasks usually land on
    distinct idle workers, but a quick one may finish before the next is sent: ask until each
    worker answered."""
    pool.prewarm()
    want = set(pool.worker_pids())
    infos: dict[int, dict] = {}
    for _ in range(attempts):
        for future in [pool.submit("runtime_info") for _ in range(pool.size)]:
            info = future.result(10)
            infos[info["pid"]] = info
        if want <= set(infos):
            break
    assert want <= set(infos), f"workers {sorted(want - set(infos))} never answered runtime_info"
    return {pid: infos[pid] for pid in want}


def memory_core_cli(*args: str, home) -> "subprocess.CompletedProcess[str]":
    """``python -m memory_core ARGS`` from the repository, state in ``home`` (MEMORY_CORE_HOME),
    no MEMORY_CORE_CONFIG from the caller's environment."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "MEMORY_CORE_HOME": str(home), "PYTHONPATH": str(root)}
    env.pop("MEMORY_CORE_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "memory_core", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=120)
