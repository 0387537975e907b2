"""The error hierarchy of memory-core.

Every error has a stable ``code`` and a message that says what to do. Errors cross process and
network boundaries as data (``{"code", "message"}``) and are rebuilt with :func:`error_from_data`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


class MemoryCoreError(Exception):
    """Base class of every memory-core error; ``code`` is stable and machine-readable."""

    code = "failed"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def to_data(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "type": type(self).__name__}


class ConfigError(MemoryCoreError):
    """A configuration value is missing, of the wrong type or out of range."""

    code = "invalid_config"


class WorkspaceError(MemoryCoreError):
    """The workspace folder does not exist or cannot be read."""

    code = "invalid_workspace"


class WorkspaceMismatch(WorkspaceError):
    """The index was built from another workspace; nothing is synced (or pruned) against this one."""

    code = "workspace_mismatch"


class SourceReadError(MemoryCoreError):
    """A source file could not be read or decoded; the file is skipped, nothing else is lost."""

    code = "source_unreadable"

    def __init__(self, message: str, *, code: str | None = None, stat: tuple[float, int] | None = None) -> None:
        super().__init__(message, code=code)
        self.stat = stat  # (mtime_ms, size) of the file as it was refused, when known


class IndexPaused(MemoryCoreError):
    """The index identity no longer matches the configuration; run `memory-core index --force`."""

    code = "index_paused"

    @classmethod
    def settings_changed(cls, changed: Any, *, doing: str = "search") -> IndexPaused:
        """The one "paused" error: the index was built before the settings ``changed`` (identity
        keys) did; ``doing`` is what is paused (``search`` or ``index``)."""
        keys = ", ".join(map(str, changed)) if isinstance(changed, (list, tuple, set)) else str(changed)
        return cls(f"memory {doing} paused: the index was built with different settings ({keys}); "
                   "run `memory-core index --force`")


class IndexUnreadable(MemoryCoreError):
    """The index file exists but cannot be opened for reading; the message says why."""

    code = "index_unreadable"


class IndexCorrupt(IndexUnreadable):
    """The index file is not a readable SQLite database; `memory-core index --force` sets it aside and rebuilds."""

    code = "index_corrupt"


class IndexNewer(IndexUnreadable):
    """The index file was written by a newer memory-core (a schema this one does not know); upgrade,
    or `memory-core index --force` moves it aside and rebuilds."""

    code = "index_newer"


class StateDirNotWritable(MemoryCoreError):
    """The folder that holds the index cannot be written; set MEMORY_CORE_HOME or stateDir elsewhere."""

    code = "state_dir_not_writable"


class IndexBusy(MemoryCoreError):
    """Another process holds the reindex lock for this agent."""

    code = "index_busy"


class ProviderUnavailable(MemoryCoreError):
    """An explicitly configured embedding provider cannot be used; memory-core fails closed."""

    code = "unavailable"


class ForgetRefused(MemoryCoreError):
    """Memory files are edited, not forgotten: the request named a memory file."""

    code = "forget_refused"


class ReferenceNotFound(MemoryCoreError):
    """A path or reference is not in the indexed sources (or its revision is stale)."""

    code = "not_found"


class InvalidRequest(MemoryCoreError):
    """A request parameter has the wrong type or value."""

    code = "invalid_request"


class Forbidden(MemoryCoreError):
    """The caller's authority does not allow this operation."""

    code = "forbidden"


class CapabilityNotDeclared(MemoryCoreError):
    """A request used a capability the provider did not declare."""

    code = "capability_not_declared"


class WorkerError(MemoryCoreError):
    """A worker task failed; ``code`` is one of unavailable, timeout, failed, overloaded."""

    code = "failed"


class WorkerUnavailable(WorkerError):
    """The worker died or the pool is closed."""

    code = "unavailable"


class WorkerTimeout(WorkerError):
    """The task ran past its timeout and its worker was ended."""

    code = "timeout"


class WorkerOverloaded(WorkerError):
    """The pool's admission limits are reached; retry later."""

    code = "overloaded"


class CursorExpired(MemoryCoreError):
    """A pagination cursor outlived its pinned generation; start the search again."""

    code = "cursor_expired"



class AuthorityNotCurrent(MemoryCoreError):
    """The caller, its audience, the provider handle or the plugin instance is no longer current; open again."""

    code = "not_current"


class ProviderContractError(MemoryCoreError):
    """A memory provider broke the provider-runtime contract (missing method, invalid capabilities)."""

    code = "provider_contract"


class Aborted(MemoryCoreError):
    """The caller's abort signal fired before the operation finished."""

    code = "aborted"


class MemoryManagerReloading(MemoryCoreError):
    """A plugin reload retires this agent's engine; retry after the plugin operation completes."""

    code = "reloading"


def reason_of(exc: BaseException) -> str:
    """A non-empty one-line reason for ``exc`` (what a failed sync records): its message, or its
    class name when the message is empty; an interrupt says so."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (KeyboardInterrupt)"
    text = exc.message if isinstance(exc, MemoryCoreError) else str(exc)
    return text.strip() or type(exc).__name__


# An absolute POSIX path of two or more parts: "/" not inside a word, URL or relative path, up to a
# space, quote or bracket; "at /a/b" is a JSON pointer in a validation message, not a path.
_PART = r"[^\s'\"`()\[\]{},;/]+"
_HOST_PATH = re.compile(rf"(?<![\w.~:/-])(?<!at )/{_PART}(?:/{_PART})+/?")


def redact_paths(text: str) -> str:
    """``text`` without host paths, for messages sent to remote clients (gateway, MCP): every absolute
    path becomes ``<path>/<its last part>`` (``/home/u/.memory-core/main.sqlite`` ->
    ``<path>/main.sqlite``). Server logs keep the full message."""
    return _HOST_PATH.sub(lambda m: "<path>/" + (m.group(0).rstrip("/").rsplit("/", 1)[-1] or ""), text)


_BY_NAME: dict[str, type[MemoryCoreError]] = {}


def _register() -> None:
    stack: list[type[MemoryCoreError]] = [MemoryCoreError]
    while stack:
        cls = stack.pop()
        _BY_NAME[cls.__name__] = cls
        stack.extend(cls.__subclasses__())


def error_from_data(data: dict[str, Any]) -> MemoryCoreError:
    """Rebuild a typed error from its ``to_data()`` form (the inverse across a process boundary)."""
    if not _BY_NAME:
        _register()
    cls = _BY_NAME.get(str(data.get("type", "")), MemoryCoreError)
    return cls(str(data.get("message", "")), code=str(data.get("code") or cls.code))


# --- how an error shows on each surface: the one table -----------------------------------------

EXIT_FAILURE = 1  # everything else (e.g. IndexCorrupt: run `memory-core index --force`)
EXIT_USAGE = 2  # the command line or the configuration must change (a state dir that cannot be written too)


@dataclass(frozen=True)
class OnSurfaces:
    """How one kind of error shows: the CLI's exit code and gateway v1's error code. Gateway v2
    answers every failure ``UNAVAILABLE`` (upstream's provider request handler) and the MCP tools
    every error with upstream's unavailable result, so neither needs a column."""

    exit_code: int
    gateway: str


_FAILURE = OnSurfaces(EXIT_FAILURE, "UNAVAILABLE")
_ON_SURFACES: dict[type[BaseException], OnSurfaces] = {
    InvalidRequest: OnSurfaces(EXIT_USAGE, "INVALID_REQUEST"),
    ConfigError: OnSurfaces(EXIT_USAGE, "UNAVAILABLE"),
    WorkspaceError: OnSurfaces(EXIT_USAGE, "UNAVAILABLE"),
    StateDirNotWritable: OnSurfaces(EXIT_USAGE, "UNAVAILABLE"),
}


def on_surfaces(exc: BaseException) -> OnSurfaces:
    """The row of ``exc``'s nearest class in the table (subclasses share their base's row)."""
    for cls in type(exc).__mro__:
        row = _ON_SURFACES.get(cls)
        if row is not None:
            return row
    return _FAILURE
