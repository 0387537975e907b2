"""``memory-core plugin``: the plugin manifest a host reads (``manifest``), and the OpenClaw plugin that
makes memory-core OpenClaw's memory (``path``: where its folder is; ``install``: link it into an
OpenClaw install, select the memory slot and record how to start memory-core)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from memory_core.errors import ConfigError, MemoryCoreError
from memory_core.manifest import shipped_manifest_text

OPENCLAW_PLUGIN_ID = "memory-core-py"


def _cmd_manifest(args: Any) -> int:
    sys.stdout.write(shipped_manifest_text())
    return 0


def openclaw_plugin_dir() -> Path:
    """The shipped OpenClaw plugin folder (package data of ``openclaw_plugin``; in a source checkout,
    the folder next to ``memory_core``)."""
    import importlib.util

    spec = importlib.util.find_spec("openclaw_plugin")
    candidates = [Path(spec.origin).parent] if spec is not None and spec.origin else []
    candidates.append(Path(__file__).resolve().parents[2] / "openclaw_plugin")
    for folder in candidates:
        if (folder / "openclaw.plugin.json").is_file() and (folder / "index.js").is_file():
            return folder.resolve()
    raise MemoryCoreError("the OpenClaw plugin folder (openclaw_plugin/) is missing from this memory-core "
                          "installation; reinstall memory-core (pip install --force-reinstall memory-core)")


def plugin_start_config() -> dict[str, Any]:
    """How the plugin starts memory-core: this interpreter's ``-m memory_core``, plus PYTHONPATH when
    memory_core is only importable from a source checkout (not installed)."""
    config: dict[str, Any] = {"command": [sys.executable, "-m", "memory_core"]}
    root = str(Path(__file__).resolve().parents[2])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = subprocess.run([sys.executable, "-c", "import memory_core, sys; print(memory_core.__file__)"],
                           capture_output=True, text=True, env=env, cwd=os.path.expanduser("~"), timeout=60,
                           check=False)
    if probe.returncode != 0 or not probe.stdout.strip().startswith(root + os.sep + "memory_core"):
        config["env"] = {"PYTHONPATH": root}
    return config


def install_commands(openclaw: list[str], folder: Path, start: dict[str, Any]) -> list[list[str]]:
    """The ``openclaw`` commands that install the plugin, select the memory slot and configure it."""
    return [
        [*openclaw, "plugins", "install", "--link", "--force", "--accept-capabilities", str(folder)],
        [*openclaw, "config", "set", f"plugins.entries.{OPENCLAW_PLUGIN_ID}.config",
         json.dumps(start, separators=(",", ":")), "--strict-json"],
    ]


def _cmd_path(args: Any) -> int:
    print(openclaw_plugin_dir())
    return 0


def _cmd_install(args: Any) -> int:
    folder = openclaw_plugin_dir()
    start = plugin_start_config()
    if args.openclaw:
        openclaw = shlex.split(args.openclaw)
        if not openclaw:
            raise ConfigError("--openclaw is empty; pass the openclaw command, e.g. --openclaw openclaw")
    else:
        found = shutil.which("openclaw")
        openclaw = [found] if found else []
    commands = install_commands(openclaw or ["openclaw"], folder, start)
    if not openclaw or args.print_only:
        if not openclaw:
            print("openclaw is not on PATH; run these commands where it is (or pass --openclaw CMD):",
                  file=sys.stderr)
        for command in commands:
            print(shlex.join(command))
        print("then restart the gateway: openclaw gateway restart (or stop and run it again)", file=sys.stderr)
        return 0
    for command in commands:
        print(f"$ {shlex.join(command)}", file=sys.stderr, flush=True)
        try:
            done = subprocess.run(command, check=False)
        except OSError as exc:
            raise MemoryCoreError(f"cannot run {command[0]}: {exc.strerror or exc}; check --openclaw or PATH") from exc
        if done.returncode != 0:
            raise MemoryCoreError(f"`{shlex.join(command[:4])} ...` failed (exit {done.returncode}); see its output "
                                  "above, fix it and rerun `memory-core plugin install`")
    print(f"memory-core is OpenClaw's memory (plugin {OPENCLAW_PLUGIN_ID} in the memory slot); restart the gateway "
          "to apply: openclaw gateway restart", file=sys.stderr)
    return 0


def register(sub: Any, common: Any) -> None:
    plugin = sub.add_parser("plugin", parents=[common], help="the plugin manifest a host reads, and the OpenClaw plugin",
                            description="What a host needs to register memory-core as its memory plugin.")
    actions = plugin.add_subparsers(dest="plugin_command", metavar="ACTION")
    p = actions.add_parser("manifest", parents=[common], help="print the plugin manifest (openclaw.plugin.json)",
                           description="Print memory-core's openclaw.plugin.json: id, kind, contracts, the "
                                       "protocol versions it implements and its config schema.")
    p.set_defaults(func=_cmd_manifest)
    p = actions.add_parser("path", parents=[common], help="print the folder of the OpenClaw plugin",
                           description="Print the folder of the OpenClaw plugin (kind memory, id memory-core-py) "
                                       "shipped with memory-core: `openclaw plugins install --link <folder>`.")
    p.set_defaults(func=_cmd_path)
    p = actions.add_parser(
        "install", parents=[common], help="make memory-core OpenClaw's memory (install the plugin, select the slot)",
        description="Run `openclaw plugins install --link --force --accept-capabilities <folder>` (which enables "
                    "the plugin and selects plugins.slots.memory) and record in the plugin config how to start "
                    "memory-core (this Python's -m memory_core). Without openclaw on PATH, print the commands.")
    p.add_argument("--openclaw", metavar="CMD", default=None,
                   help="the openclaw command (default: openclaw on PATH), e.g. \"node /path/openclaw.mjs\"")
    p.add_argument("--print", dest="print_only", action="store_true", help="print the commands instead of running them")
    p.set_defaults(func=_cmd_install)
    plugin.set_defaults(func=lambda args: (plugin.print_help(sys.stderr), 2)[1])
