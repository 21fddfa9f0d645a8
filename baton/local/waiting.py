"""Wait for a condition with a deadline, instead of sleeping and hoping."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar, overload

from baton.errors import StoreError, WaitTimeout
from baton.store.base import Store

T = TypeVar("T")
Falsy = None | Literal[False] | Literal[0] | Literal[""]


def wait_for(
    predicate: Callable[[], T | Falsy],
    timeout: float = 10.0,
    interval: float = 0.01,
    what: str = "",
) -> T:
    """Call ``predicate`` until it returns a truthy value and return that value; raise
    :class:`WaitTimeout` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout}s waiting for {what or predicate!r}")
        time.sleep(interval)


@overload
async def await_for(
    predicate: Callable[[], Awaitable[T | Falsy]],
    timeout: float = ...,
    interval: float = ...,
    what: str = ...,
) -> T: ...


@overload
async def await_for(
    predicate: Callable[[], T | Falsy],
    timeout: float = ...,
    interval: float = ...,
    what: str = ...,
) -> T: ...


async def await_for(
    predicate: Callable[[], object],
    timeout: float = 10.0,
    interval: float = 0.01,
    what: str = "",
) -> object:
    """Async :func:`wait_for`; ``predicate`` may be a plain or an async function."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout}s waiting for {what or predicate!r}")
        await asyncio.sleep(interval)


async def store_reachable(store: Store) -> bool:
    """Whether ``store`` answers now (for waiting until a restarted server is back)."""
    try:
        await store.now()
    except StoreError:
        return False
    return True


__all__ = ["Falsy", "WaitTimeout", "await_for", "store_reachable", "wait_for"]
