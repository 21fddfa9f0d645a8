"""Wait for a condition with a deadline, instead of sleeping and hoping."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """The condition did not hold before the deadline."""


def wait_for(
    predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.01, what: str = ""
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


async def await_for(
    predicate: Callable[[], T | Awaitable[T]],
    timeout: float = 10.0,
    interval: float = 0.01,
    what: str = "",
) -> T:
    """Async :func:`wait_for`; ``predicate`` may be a plain or an async function."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout}s waiting for {what or predicate!r}")
        await asyncio.sleep(interval)
