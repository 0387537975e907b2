"""memory-core's plugin manifest (the counterpart of upstream ``openclaw.plugin.json``).

The manifest ships as package data (``memory_core/openclaw.plugin.json``); :func:`load_manifest`
reads it and ``memory-core plugin manifest`` (:mod:`memory_core.cli.plugin`) prints it.
:func:`build_manifest` is its source: the ``configSchema`` is generated from
:class:`~memory_core.config.MemoryCoreConfig`, and a test keeps the shipped file equal to it
(regenerate with ``python -m memory_core.manifest --write``).
Instead of a minimum host version, the manifest declares what memory-core implements: gateway
protocol 4, the memory method versions and the OpenClaw release its real-client test runs against.
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from typing import Any

MANIFEST_FILE = "openclaw.plugin.json"

# The JSON Schema of the manifest itself: the upstream fields memory-core fills, all required.
MANIFEST_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["id", "name", "description", "version", "kind", "categories", "contracts", "toolMetadata",
                 "cliCommands", "implements", "configSchema"],
    "additionalProperties": False,
    "properties": {
        "id": {"const": "memory-core"},
        "name": {"type": "string", "minLength": 1},
        "description": {"type": "string", "minLength": 1},
        "version": {"type": "string", "pattern": r"^\d+\.\d+\.\d+"},
        "kind": {"const": "memory"},
        "categories": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "contracts": {
            "type": "object",
            "required": ["tools", "memoryCapability"],
            "properties": {
                "tools": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "memoryCapability": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            },
        },
        "toolMetadata": {"type": "object", "additionalProperties": {"type": "object"}},
        "cliCommands": {
            "type": "array",
            "items": {"type": "object", "required": ["name", "description", "hasSubcommands"]},
        },
        "implements": {
            "type": "object",
            "required": ["gatewayProtocol", "gatewayMethods", "memoryMethodVersions", "memoryProvider",
                         "testedWith"],
            "properties": {
                "gatewayProtocol": {"type": "integer"},
                "gatewayMethods": {"type": "array", "items": {"type": "string"}},
                "memoryMethodVersions": {"type": "array", "items": {"type": "integer"}},
                "memoryProvider": {"type": "object"},
                "testedWith": {"type": "object"},
            },
        },
        "configSchema": {"type": "object", "required": ["type", "properties"]},
    },
}


def config_schema() -> dict[str, Any]:
    """The JSON Schema of memory-core's config file (camelCase keys, unknown keys rejected)."""
    from memory_core.config import MemoryCoreConfig

    schema = MemoryCoreConfig.model_json_schema(by_alias=True, mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


def build_manifest() -> dict[str, Any]:
    """The manifest as memory-core's code defines it (what the shipped file must equal)."""
    from memory_core import __version__
    from memory_core.capability import CAPABILITY_MEMBERS
    from memory_core.gateway.protocol import PROTOCOL_VERSION, SERVED_METHODS
    from memory_core.provider.runtime import CAPABILITIES, RECALL_TOOL_NAMES

    return {
        "id": "memory-core",
        "name": "memory-core",
        "description": "File-backed memory search tools and CLI (a Python Memory Core)",
        "version": __version__,
        "kind": "memory",
        "categories": ["memory"],
        "contracts": {"tools": sorted(RECALL_TOOL_NAMES), "memoryCapability": list(CAPABILITY_MEMBERS)},
        "toolMetadata": {"memory_get": {"replaySafe": True}},
        "cliCommands": [{"name": "memory-core", "description": "Search, inspect, and reindex memory files",
                         "hasSubcommands": True}],
        "implements": {
            "gatewayProtocol": PROTOCOL_VERSION,
            "gatewayMethods": list(SERVED_METHODS),
            "memoryMethodVersions": [1, 2],
            "memoryProvider": {"id": "memory-core",
                               "capabilities": CAPABILITIES.to_json()},
            "testedWith": {"openclaw": "2026.9.6"},
        },
        "configSchema": config_schema(),
    }


def manifest_text(manifest: dict[str, Any]) -> str:
    return json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"


def shipped_manifest_text() -> str:
    """The shipped manifest file's text (package data), as ``memory-core plugin manifest`` prints it."""
    return resources.files("memory_core").joinpath(MANIFEST_FILE).read_text(encoding="utf-8")


def load_manifest() -> dict[str, Any]:
    """The shipped manifest (package data)."""
    return json.loads(shipped_manifest_text())


def main(argv: list[str] | None = None) -> int:
    """``python -m memory_core.manifest [--write]``: print the generated manifest, or rewrite the shipped file."""
    args = sys.argv[1:] if argv is None else argv
    text = manifest_text(build_manifest())
    if args == ["--write"]:
        from pathlib import Path

        (Path(__file__).parent / MANIFEST_FILE).write_text(text, encoding="utf-8")
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
