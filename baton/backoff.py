"""The wait before trying again something that keeps failing, for every loop in baton that
retries (a node service's step, a reconnect, a store at start-up, a record to publish): the
first wait, doubling up to a longest one, and back to the first after a success.

Why not tenacity: these loops run for as long as a service does, around a stop event and a
one-line-per-cause log, and only the wait is shared; a decorator would own the loop.
"""

from __future__ import annotations

import asyncio


class Backoff:
    """``first`` seconds, doubling with each :meth:`next` up to ``most``."""

    def __init__(self, first: float, most: float) -> None:
        if not 0 < first <= most:
            raise ValueError(f"a backoff needs 0 < first <= most, not {first!r} and {most!r}")
        self.first = first
        self.most = most
        self._next = first

    @property
    def current(self) -> float:
        """The wait :meth:`next` gives next."""
        return self._next

    def next(self) -> float:
        """This wait; the next one doubles."""
        wait = self._next
        self._next = min(self.most, wait * 2)
        return wait

    def reset(self) -> None:
        """Something worked: the next failure waits ``first`` again."""
        self._next = self.first

    async def sleep(self) -> None:
        await asyncio.sleep(self.next())
