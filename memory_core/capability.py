"""The memory capability a Python host registers (upstream ``api.registerMemoryCapability({...})``).

``memory_capability(config)`` builds every member over one set of engines (one per agent, opened
lazily and shared): ``provider_runtime`` (the neutral provider contract), ``runtime`` (the legacy
file-shaped runtime with the ``prepare_reload`` / ``close_memory_search_manager`` hooks),
``prompt_builder``, ``flush_plan_resolver``, ``public_artifacts``, ``recall_tool_names`` and
``tools(agent_id)``, the registered ``memory_search``/``memory_get`` contracts. ``close()`` closes
the engines.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from memory_core.artifacts import MemoryArtifact, list_artifacts
from memory_core.flush_plan import MemoryFlushPlan, build_memory_flush_plan
from memory_core.prompt_section import build_prompt_section
from memory_core.provider.legacy_runtime import MemoryCoreLegacyRuntime
from memory_core.provider.runtime import RECALL_TOOL_NAMES, MemoryCoreProviderRuntime
from memory_core.contract.types import MemoryCallerContext, MemoryProviderOpenParams, OperatorAuthority
from memory_core.tools import MemoryTools, ToolContract

PLUGIN_ID = "memory-core"
# The members memory-core registers, by their upstream (MemoryPluginCapability) names.
CAPABILITY_MEMBERS: tuple[str, ...] = (
    "promptBuilder", "flushPlanResolver", "runtime", "providerRuntime", "publicArtifacts", "recallToolNames",
    "deterministicRecallToolName", "supportsPrivateTranscriptRecall",
)


class PromptBuilder:
    """``promptBuilder``: the memory prompt section for the tools the host made available."""

    def __init__(self, config: Any) -> None:
        self._config = config

    def __call__(self, available_tools: Collection[str], citations_mode: str | None = None) -> list[str]:
        if not self._config.enabled:  # memory.search.enabled = false: no memory section
            return []
        return build_prompt_section(available_tools, citations_mode or self._config.citations)


class FlushPlanResolver:
    """``flushPlanResolver``: the pre-compaction flush plan (None when flushing is disabled)."""

    def __init__(self, runtime: MemoryCoreProviderRuntime) -> None:
        self._runtime = runtime

    def __call__(self, now_ms: float | None = None, *, agent_id: str | None = None, cfg: Any = None,
                 context_window_tokens: int | None = None) -> MemoryFlushPlan | None:
        config = cfg if cfg is not None else self._runtime.agent_config(agent_id or self._runtime.config.agent_id)
        if config is None:
            raise ValueError(f"unknown agent id {agent_id!r}; use one of the configured agents")
        return build_memory_flush_plan(config, now_ms, context_window_tokens=context_window_tokens)


class PublicArtifacts:
    """``publicArtifacts``: the memory files of every configured agent's workspace."""

    def __init__(self, runtime: MemoryCoreProviderRuntime) -> None:
        self._runtime = runtime

    def list_artifacts(self) -> list[MemoryArtifact]:
        cfg = self._runtime.config
        by_workspace: dict[str, list[str]] = {}
        for agent_id in dict.fromkeys([cfg.agent_id, *cfg.agents]):
            agent_cfg = self._runtime.agent_config(agent_id)
            if agent_cfg is not None:  # no workspace configured: the current directory, as MemoryCore
                workspace = os.path.abspath(os.path.expanduser(agent_cfg.workspace or os.getcwd()))
                by_workspace.setdefault(workspace, []).append(agent_id)
        return [a for ws, agents in by_workspace.items() for a in list_artifacts(ws, tuple(agents))]


@dataclass
class MemoryCapability:
    """What memory-core registers in the host's memory slot (field names: upstream's, snake_case)."""

    provider_runtime: MemoryCoreProviderRuntime
    runtime: MemoryCoreLegacyRuntime
    prompt_builder: PromptBuilder
    flush_plan_resolver: FlushPlanResolver
    public_artifacts: PublicArtifacts
    recall_tool_names: tuple[str, ...] = RECALL_TOOL_NAMES
    deterministic_recall_tool_name: str = "memory_search"
    supports_private_transcript_recall: bool = True
    plugin_id: str = PLUGIN_ID
    _tools: dict[str, MemoryTools] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def tools(self, agent_id: str | None = None) -> tuple[ToolContract, ...]:
        """The registered agent tools of one agent (default: the configured one), in recall order."""
        agent = agent_id or self.provider_runtime.config.agent_id
        config = self.provider_runtime.agent_config(agent)
        if config is None:
            raise ValueError(f"unknown agent id {agent!r}; use one of the configured agents")
        with self._lock:
            tools = self._tools.get(agent)
            if tools is None:
                tools = self._tools[agent] = MemoryTools(
                    config, core_factory=lambda: self.provider_runtime.core(agent))
        return tools.contracts()

    def close(self) -> None:
        """Close the tools' keyword engines and every agent's engine."""
        with self._lock:
            for tools in self._tools.values():
                tools.close()
            self._tools.clear()
        self.provider_runtime.close_all()


def operator_open_params(agent_id: str, *, purpose: str = "status", conn_id: str = "host") -> MemoryProviderOpenParams:
    """``provider_runtime.open`` parameters for the host itself acting as operator (status, CLI)."""
    context = MemoryCallerContext(authority=OperatorAuthority(scopes=("operator.read",), conn_id=conn_id),
                                  assert_current=lambda: None)
    return MemoryProviderOpenParams(agent_id=agent_id, context=context, purpose=purpose)


def memory_capability(config: Any = None) -> MemoryCapability:
    """Build the capability for ``config`` (a MemoryCoreConfig; None = ``load_config()``)."""
    if config is None:
        from memory_core.config import load_config

        config = load_config()
    runtime = MemoryCoreProviderRuntime(config)
    return MemoryCapability(
        provider_runtime=runtime,
        runtime=MemoryCoreLegacyRuntime(runtime),
        prompt_builder=PromptBuilder(config),
        flush_plan_resolver=FlushPlanResolver(runtime),
        public_artifacts=PublicArtifacts(runtime),
    )
