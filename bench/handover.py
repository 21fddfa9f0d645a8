"""Benchmark 3: planned handover (``elect``) and resignation (``resign``) between two Elections
of one process, each with its own store client, timings ``Timings.for_ttl(2)``.

A trial starts right before the leader's call and ends when the other participant's event
stream delivers ``NewState(LEADER)`` (emitted the moment it becomes leader, so ``is_leader`` is
true then; this is checked). Before the next trial, both participants must agree on the new
leader (the old one has seen the acquisition on its change feed), so trials do not overlap.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from baton.lease.election import Election, EventStream, NewState, State
from baton.lease.timings import Timings
from baton.store import open_store
from bench.common import BenchError, Summary, backend_url, loadavg, ms, temp_dir

TTL = 2.0
#: Longest wait for one handover before the benchmark gives up.
TRIAL_TIMEOUT = 10.0


@dataclass
class HandoverResult:
    backend: str
    elect: list[float] = field(default_factory=list)
    """From ``leader.elect(other)`` being called to ``other`` being leader."""
    elect_call: list[float] = field(default_factory=list)
    """How long the ``elect()`` call itself took (the old leader's release)."""
    resign: list[float] = field(default_factory=list)
    """From ``leader.resign()`` being called to the other being leader."""
    load: tuple[float, float] = (0.0, 0.0)
    stuck_tasks: list[str] = field(default_factory=list)
    """Tasks still running after both ``Election.stop()`` returned (then cancelled again)."""

    @property
    def elect_summary(self) -> Summary:
        return Summary.of(self.elect)

    @property
    def resign_summary(self) -> Summary:
        return Summary.of(self.resign)


async def _became_leader(stream: EventStream) -> None:
    async for event in stream:
        if isinstance(event, NewState) and event.state is State.LEADER:
            return


async def _until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TRIAL_TIMEOUT
    while not predicate():
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {TRIAL_TIMEOUT:g} s waiting for {what}")
        await asyncio.sleep(0.001)


def _roles(a: Election, b: Election) -> tuple[Election, Election]:
    if a.is_leader and not b.is_leader:
        return a, b
    if b.is_leader and not a.is_leader:
        return b, a
    raise BenchError(f"expected exactly one leader, got a={a.is_leader} b={b.is_leader}")


async def _settled(new: Election, old: Election) -> None:
    """Wait until ``old`` knows that ``new`` leads (at ``new``'s epoch)."""
    await _until(
        lambda: new.is_leader and old.leader == new.node_id and old.leader_epoch == new.epoch,
        f"{old.node_id} to see {new.node_id} as leader",
    )


async def _trial(a: Election, b: Election, *, planned: bool) -> tuple[float, float]:
    leader, other = _roles(a, b)
    stream = other.events()
    try:
        started = time.perf_counter()
        if planned:
            await leader.elect(other.node_id)
        else:
            await leader.resign()
        returned = time.perf_counter()
        async with asyncio.timeout(TRIAL_TIMEOUT):
            await _became_leader(stream)
        done = time.perf_counter()
    finally:
        stream.close()
    if not other.is_leader:
        raise BenchError(f"{other.node_id} announced leadership but is_leader is false")
    await _settled(other, leader)
    return done - started, returned - started


async def _handover(
    url: str, result: HandoverResult, trials: int, progress: Callable[[str], None]
) -> None:
    timings = Timings.for_ttl(TTL)
    stores = [open_store(url), open_store(url)]
    a = Election(stores[0], "handover", "node-a", timings)
    b = Election(stores[1], "handover", "node-b", timings)
    await a.start()
    await b.start()
    try:
        await _until(lambda: a.is_leader or b.is_leader, "a first leader")
        leader, other = _roles(a, b)
        await _settled(leader, other)
        for _ in range(trials):
            took, call = await _trial(a, b, planned=True)
            result.elect.append(took)
            result.elect_call.append(call)
        progress(f"  {result.backend}: {trials} handovers, median {ms(result.elect_summary.p50)}")
        for _ in range(trials):
            took, _call = await _trial(a, b, planned=False)
            result.resign.append(took)
        progress(
            f"  {result.backend}: {trials} resignations, median {ms(result.resign_summary.p50)}"
        )
    finally:
        await a.stop()
        await b.stop()
        result.stuck_tasks = await _cancel_leftovers()
        for store in stores:
            await store.close()


async def _cancel_leftovers() -> list[str]:
    """Cancel (again) every task still running besides this one; return their names.

    ``Election.stop()`` cancels its tasks and waits a bounded time; on Redis the change-feed
    task sometimes survives that cancellation, and ``asyncio.run()`` would then wait for it.
    """
    me = asyncio.current_task()
    names: list[str] = []
    deadline = time.monotonic() + TRIAL_TIMEOUT
    while True:
        left = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
        if not left:
            return names
        for task in left:
            coro = getattr(task.get_coro(), "__qualname__", "?")
            name = f"{task.get_name()} ({coro})"
            if name not in names:
                names.append(name)
        if time.monotonic() > deadline:
            raise BenchError(f"tasks survive repeated cancellation: {', '.join(names)}")
        for task in left:
            task.cancel()
        await asyncio.wait(left, timeout=0.5)


def handover(backend: str, trials: int, progress: Callable[[str], None]) -> HandoverResult:
    """Benchmark 3 on one backend (fresh server, fresh namespace)."""
    result = HandoverResult(backend)
    with temp_dir(f"handover-{backend}") as tmp, backend_url(backend, tmp, "handover") as url:
        result.load = (loadavg(), 0.0)
        asyncio.run(_handover(url, result, trials, progress))
        result.load = (result.load[0], loadavg())
    return result
