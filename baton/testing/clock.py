"""A clock that moves only when the test moves it (see :mod:`baton.clock`).

Give one :class:`ManualClock` to every part under test (and its :meth:`ManualClock.time` to an
embedded SQLite store as ``clock=``), then move time with :meth:`ManualClock.advance` (pure
timer logic), :meth:`ManualClock.run_for` (a span in which real store calls run) or wait for
a condition in clock time with :meth:`ManualClock.run_until`::

    clock = ManualClock()
    store = SQLiteStore(path, clock=clock.time)
    election = Election(store, "job", "n1", timings, clock=clock)
    await clock.run_until(lambda: election.is_leader, limit=10.0)

Sleepers and timeouts fire in deadline order, and each woken task runs until it waits again
before the clock moves on, so a timer chain (sleep, renew, sleep) behaves as it would in real
time, only without the waiting. Store calls still take real time: that is why waits
go through :meth:`run_until`, which yields real milliseconds between steps, and, for the
stores registered with :meth:`ManualClock.wait_on`, lets no step begin while one of their calls
is in flight: on a loaded machine a call can take longer in real time than many steps, and
the clock must not run its timeouts out meanwhile.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field

#: How many times a step yields to the loop so that the tasks it woke run to their next wait.
SETTLE_YIELDS = 20

#: The longest a step waits (real seconds) for calls in flight: a call held longer (a store a
#: test hangs on purpose) lets time move on, so its timeout can fire.
QUIET_LIMIT = 5.0


@dataclass(order=True)
class _Timer:
    deadline: float
    seq: int
    fire: Callable[[], None] = field(compare=False)
    live: bool = field(default=True, compare=False)


class ManualClock:
    """Monotonic time starts at ``start``; wall time is ``wall + monotonic``."""

    def __init__(self, start: float = 1_000.0, wall: float = 1_800_000_000.0) -> None:
        self._now = start
        self._wall = wall
        self._timers: list[_Timer] = []
        self._seq = itertools.count()
        self._busy: list[Callable[[], bool]] = []

    def monotonic(self) -> float:
        return self._now

    def time(self) -> float:
        return self._wall + self._now

    def _at(self, seconds: float, fire: Callable[[], None]) -> _Timer:
        timer = _Timer(self._now + seconds, next(self._seq), fire)
        heapq.heappush(self._timers, timer)
        return timer

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        done = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not done.done():
                done.set_result(None)

        timer = self._at(seconds, wake)
        try:
            await done
        finally:
            timer.live = False

    def timeout(self, seconds: float | None) -> AbstractAsyncContextManager[object]:
        return self._timeout(seconds)

    @asynccontextmanager
    async def _timeout(self, seconds: float | None) -> AsyncIterator[object]:
        # asyncio's own Timeout does the cancelling (and turns it into TimeoutError, telling
        # it apart from an outside cancel); this clock only decides when it is due.
        async with asyncio.timeout(None) as scope:
            if seconds is None:
                yield scope
                return
            loop = asyncio.get_running_loop()

            def expire() -> None:
                if scope.expired() is False and scope.when() is None:
                    scope.reschedule(loop.time())

            if seconds <= 0:
                expire()
                yield scope
                return
            timer = self._at(seconds, expire)
            try:
                yield scope
            finally:
                timer.live = False

    @property
    def pending(self) -> int:
        """Timers (sleeps and timeouts) waiting for the clock."""
        return sum(1 for t in self._timers if t.live)

    async def settle(self) -> None:
        """Let every task that can run, run to its next wait."""
        for _ in range(SETTLE_YIELDS):
            await asyncio.sleep(0)

    async def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, firing every timer due on the way in order."""
        if seconds < 0:
            raise ValueError("a clock never goes back")
        target = self._now + seconds
        await self.settle()
        while self._timers and self._timers[0].deadline <= target:
            timer = heapq.heappop(self._timers)
            if not timer.live:
                continue
            self._now = max(self._now, timer.deadline)
            timer.fire()
            await self.settle()
        self._now = target
        await self.settle()

    def jump(self, seconds: float) -> None:
        """Move time forward by ``seconds`` at once, running nothing on the way: what a
        process paused (by a GC, a VM migration, SIGSTOP) sees when it runs again. Timers
        that fell due fire at the next :meth:`advance`."""
        if seconds < 0:
            raise ValueError("a clock never goes back")
        self._now += seconds

    def wait_on(self, busy: Callable[[], bool]) -> None:
        """Hold :meth:`run_for` and :meth:`run_until` steps while ``busy()`` is true (real
        work in flight, e.g. ``lambda: store.in_flight > 0``), for up to :data:`QUIET_LIMIT`
        real seconds a step."""
        self._busy.append(busy)

    async def _between_steps(self, pause: float) -> None:
        await asyncio.sleep(pause)
        if not self._busy:
            return
        give_up = time.monotonic() + QUIET_LIMIT
        # Polled: the predicates read plain counters of other objects; there is no event.
        while any(b() for b in self._busy) and time.monotonic() < give_up:  # noqa: ASYNC110
            await asyncio.sleep(0.001)

    async def run_for(self, seconds: float, *, step: float = 0.01) -> None:
        """Let ``seconds`` of clock time pass in ``step``s, with a real millisecond between
        steps (see :meth:`run_until`): for spans in which real store calls run."""
        end = self._now + seconds
        while self._now < end:
            await self._between_steps(0.001)
            await self.advance(min(step, end - self._now))

    async def run_until(
        self,
        condition: Callable[[], bool],
        *,
        limit: float,
        step: float = 0.01,
        what: str = "the condition",
        pause: float = 0.001,
    ) -> float:
        """Advance in ``step``s until ``condition()`` holds; fail after ``limit`` seconds of
        clock time. Between steps the loop gets ``pause`` real seconds, for store calls in
        flight: keep ``step`` well below the request timeouts of the parts under test, or a
        slow real call could see its clock-time timeout pass (the calls of what
        :meth:`wait_on` names are waited for). A longer ``pause`` gives what waits on real
        time (a store's change feed rechecks an idle feed every real second) time to run.
        Returns the clock time it took."""
        began = self._now
        while not condition():
            if self._now - began >= limit:
                raise AssertionError(f"{what} did not happen within {limit} s of clock time")
            await self._between_steps(pause)
            await self.advance(step)
        return self._now - began
