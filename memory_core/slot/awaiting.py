"""Awaiting provider calls: a provider method may be ``async`` or a plain function, and a caller's
abort signal may end the wait early."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable
from typing import Any

from memory_core.errors import Aborted
from memory_core.contract.types import AbortSignal


async def resolve(value: Any) -> Any:
    """Await ``value`` if it is awaitable (provider methods may be sync or async)."""
    if inspect.isawaitable(value):
        return await value
    return value


async def race_with_signal(awaitable: Awaitable[Any], signal: AbortSignal | None) -> Any:
    """Await ``awaitable`` unless ``signal`` aborts first (``racePromiseWithAbortSignal``)."""
    if signal is None:
        return await awaitable
    signal.throw_if_aborted()
    loop = asyncio.get_running_loop()
    aborted: asyncio.Future[None] = loop.create_future()

    def settle() -> None:
        if not aborted.done():
            aborted.set_result(None)

    def on_abort() -> None:  # abort() may be called from any thread
        try:
            if asyncio.get_running_loop() is loop:
                settle()
                return
        except RuntimeError:
            pass
        loop.call_soon_threadsafe(settle)

    task = asyncio.ensure_future(awaitable)
    signal.add_listener(on_abort)
    try:
        await asyncio.wait({task, aborted}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        signal.remove_listener(on_abort)
    if task.done():
        return task.result()
    task.cancel()
    raise Aborted(signal.reason or "This operation was aborted")
