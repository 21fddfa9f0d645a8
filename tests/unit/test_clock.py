"""The manual clock tests use: it must behave as real time would, in order, only without the
waiting (see baton.testing.clock)."""

from __future__ import annotations

import asyncio

import pytest

from baton.clock import SYSTEM
from baton.testing import ManualClock


async def test_sleepers_wake_in_deadline_order_at_their_deadline() -> None:
    clock = ManualClock(start=0.0)
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append((name, clock.monotonic()))

    tasks = [asyncio.create_task(sleeper(n, s)) for n, s in (("c", 3.0), ("a", 1.0), ("b", 2.0))]
    await clock.advance(1.5)
    assert woke == [("a", 1.0)]
    await clock.advance(10)
    assert woke == [("a", 1.0), ("b", 2.0), ("c", 3.0)]
    assert clock.monotonic() == 11.5
    await asyncio.gather(*tasks)


async def test_a_timer_chain_runs_every_link_within_one_advance() -> None:
    clock = ManualClock(start=0.0)
    ticks: list[float] = []

    async def every_second() -> None:
        while True:
            await clock.sleep(1.0)
            ticks.append(clock.monotonic())

    task = asyncio.create_task(every_second())
    await clock.advance(5.5)
    task.cancel()
    assert ticks == [1.0, 2.0, 3.0, 4.0, 5.0]


async def test_timeout_fires_at_the_clock_deadline_and_not_before() -> None:
    clock = ManualClock(start=0.0)
    outcome: list[str] = []

    async def guarded() -> None:
        try:
            async with clock.timeout(2.0):
                await asyncio.Event().wait()
        except TimeoutError:
            outcome.append(f"timed out at {clock.monotonic()}")

    task = asyncio.create_task(guarded())
    await clock.advance(1.9)
    assert outcome == []
    await clock.advance(0.2)
    assert outcome == ["timed out at 2.0"]
    await task


async def test_a_block_done_in_time_is_not_cancelled_later() -> None:
    clock = ManualClock()
    async with clock.timeout(1.0):
        pass
    assert clock.pending == 0
    await clock.advance(5)  # the dead timer must not cancel whatever this task does next


async def test_an_outside_cancel_stays_a_cancel() -> None:
    clock = ManualClock()

    async def guarded() -> None:
        async with clock.timeout(10.0):
            await asyncio.Event().wait()

    task = asyncio.create_task(guarded())
    await clock.settle()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_jump_runs_nothing_on_the_way() -> None:
    clock = ManualClock(start=0.0)
    woke: list[float] = []

    async def sleeper() -> None:
        await clock.sleep(1.0)
        woke.append(clock.monotonic())

    task = asyncio.create_task(sleeper())
    await clock.settle()
    clock.jump(5.0)  # a pause: the sleeper oversleeps, as a paused process does
    assert woke == []
    await clock.advance(0)
    assert woke == [5.0]
    await task


async def test_run_until_fails_with_what_did_not_happen() -> None:
    clock = ManualClock()
    with pytest.raises(AssertionError, match=r"the flag did not happen within 1\.0 s"):
        await clock.run_until(lambda: False, limit=1.0, step=0.25, what="the flag")
    assert clock.monotonic() >= 1_001.0  # the clock moved the whole limit, in steps


async def test_the_system_clock_is_the_hosts() -> None:
    before = SYSTEM.monotonic()
    await SYSTEM.sleep(0)
    with pytest.raises(TimeoutError):
        async with SYSTEM.timeout(0.001):
            await asyncio.Event().wait()
    assert SYSTEM.monotonic() >= before
