"""Time, as the parts of baton that run on timers see it: elections, the lease keeper, the
channel hub and the cascade ticker each take a :class:`Clock` and never call ``time`` or
``asyncio.sleep`` themselves.

Why: their logic is *about* time (a lease lapses after its ttl, a renewal is due every
interval, a channel's upstream is restarted after a quiet spell), and a test of that logic
should not wait real seconds for it. :data:`SYSTEM` is the host's clocks, the default
everywhere; ``baton.testing.ManualClock`` moves only when a test moves it, so a test of a
thirty-second timeout runs in milliseconds and cannot be thrown off by a loaded machine.

What a clock is not: a store's clock. A lease lapses on the store's clock (Redis ``TIME``,
PostgreSQL ``clock_timestamp()``), which no local clock can move; only the embedded SQLite
store, which keeps time in this process, takes the same clock (its ``clock=`` argument is
:meth:`Clock.time`).
"""

from __future__ import annotations

import asyncio
import time
from contextlib import AbstractAsyncContextManager
from typing import Protocol


class Clock(Protocol):
    """The four things timer logic needs from time."""

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin, never going back: deadlines and intervals."""

    def time(self) -> float:
        """Wall-clock seconds since the epoch: only for values shown to people or other
        processes (a timestamp in a frame), never for deciding when something is due."""

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time (``0`` yields to the loop once)."""

    def timeout(self, seconds: float | None) -> AbstractAsyncContextManager[object]:
        """Like ``asyncio.timeout(seconds)``, in this clock's time: the block is cancelled
        and ``TimeoutError`` raised when it runs past ``seconds`` (``None``: never)."""


class SystemClock:
    """The host's clocks: ``time.monotonic``, ``time.time``, ``asyncio.sleep`` and
    ``asyncio.timeout``."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def timeout(self, seconds: float | None) -> AbstractAsyncContextManager[object]:
        return asyncio.timeout(seconds)


#: The host's clocks; the default of every part that takes a clock.
SYSTEM: Clock = SystemClock()
