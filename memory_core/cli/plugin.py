"""``memory-core plugin manifest``: print the shipped plugin manifest (``memory_core.manifest``)."""

from __future__ import annotations

import sys
from typing import Any

from memory_core.manifest import shipped_manifest_text


def _cmd_manifest(args: Any) -> int:
    sys.stdout.write(shipped_manifest_text())
    return 0


def register(sub: Any, common: Any) -> None:
    plugin = sub.add_parser("plugin", parents=[common], help="the plugin manifest a host reads",
                            description="What a host needs to register memory-core as its memory plugin.")
    actions = plugin.add_subparsers(dest="plugin_command", metavar="ACTION")
    p = actions.add_parser("manifest", parents=[common], help="print the plugin manifest (openclaw.plugin.json)",
                           description="Print memory-core's openclaw.plugin.json: id, kind, contracts, the "
                                       "protocol versions it implements and its config schema.")
    p.set_defaults(func=_cmd_manifest)
    plugin.set_defaults(func=lambda args: (plugin.print_help(sys.stderr), 2)[1])
