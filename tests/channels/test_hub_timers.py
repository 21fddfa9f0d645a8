"""The channel hub's timing logic on a manual clock, in this process with a real SQLite store:
the linger after the last subscriber, the growing pause between restarts of an upstream that
keeps failing, and the pauses between a subscribe's attempts. Clock time moves only when the
test moves it, so seconds of timers take milliseconds and a loaded machine cannot skew them.

The hub's lease keeper renews on the same clock, but its renewals are real store calls; the
ttl is long (a renewal every 60 clock seconds) so that none is due within a test: a clock
moved in one jump could otherwise time a renewal out while its real call is still waiting for
a loaded machine's thread, and the hub would rightly step down."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from baton.channels.config import ChannelsConfig
from baton.channels.handler import CLUSTER_USER, Channel, Context, Handler, User
from baton.channels.hub import ChannelHub, lease_name
from baton.channels.upstream import MAX_RESTART_PAUSE
from baton.errors import ChannelUnavailable
from baton.lease.role import Role
from baton.lease.timings import Timings
from baton.store import Store, open_store
from baton.store.sqlite import SQLiteStore
from baton.testing.clock import ManualClock
from tests.channels.test_lifecycle import Frames

#: Long enough that no renewal of the hub's leases is due within a test's clock time.
HUB_TTL = 300.0


class Failing(Handler):
    """An upstream that fails at once, every time, and notes the clock time of each start."""

    starts: list[float] = []

    async def subscribe(self, ctx: Context, user: User, channel: Channel) -> Any:
        return None

    async def run(self, ctx: Context, channel: Channel) -> AsyncIterator[Any]:
        Failing.starts.append(ctx.clock.monotonic())
        raise RuntimeError("broken on purpose")
        yield  # an async generator, that never yields


async def _hub(store: Store, clock: ManualClock, **config: Any) -> ChannelHub:
    assert isinstance(store, SQLiteStore)
    # The clock waits for store calls in flight (a lease renewal) before each step: on a
    # loaded machine one can take longer in real time than many steps.
    clock.wait_on(lambda: store.in_flight > 0)
    hub = ChannelHub(
        store, "a", "x" * 32, Timings.for_ttl(HUB_TTL), config=ChannelsConfig(**config), clock=clock
    )
    await hub.start()
    return hub


def _kinds(sink: Frames) -> list[str]:
    return [json.loads(line)["type"] for text in sink.texts for line in text.split("\n")]


async def test_the_last_subscriber_leaving_lingers_then_releases(tmp_path: Path) -> None:
    clock = ManualClock()
    async with open_store(f"sqlite://{tmp_path / 'store.db'}") as s:
        hub = await _hub(s, clock, linger=5.0)
        try:
            channel = "tick:linger,every=0.5"
            sink = Frames()
            await hub.subscribe(sink, channel, CLUSTER_USER, None)
            # Publications come on the clock: two in one clock second.
            await clock.run_until(lambda: _kinds(sink).count("pub") >= 2, limit=1.0)
            assert hub.unsubscribe(sink, channel)
            # Within the linger the upstream runs on and the lease is kept...
            await clock.advance(4.5)
            assert hub.streams[channel].role is Role.LEADER
            assert await s.get_lease(lease_name(channel)) is not None
            # ...a subscriber coming back meanwhile cancels the linger...
            again = Frames()
            await hub.subscribe(again, channel, CLUSTER_USER, None)
            hub.drop(again)
            # ...and once the linger has passed with nobody, the lease is released.
            took = await clock.run_until(lambda: channel not in hub.streams, limit=10.0)
            assert 4.9 <= took <= 5.5, took
            assert await s.get_lease(lease_name(channel)) is None
            assert hub.metrics.upstreams._value.get() == 0
        finally:
            await hub.stop()


async def test_an_upstream_failing_at_once_restarts_with_a_growing_pause(tmp_path: Path) -> None:
    clock = ManualClock()
    Failing.starts = []
    config = {"handlers": {"failing": f"{__name__}:Failing"}}
    async with open_store(f"sqlite://{tmp_path / 'store.db'}") as s:
        hub = await _hub(s, clock, **config)
        try:
            sink = Frames()
            await hub.subscribe(sink, "failing:x", CLUSTER_USER, None)
            await clock.run_until(lambda: len(Failing.starts) >= 9, limit=30.0, step=0.05)
            pauses = [round(b - a, 3) for a, b in itertools.pairwise(Failing.starts)]
            # Doubling from 50 ms while nothing is published, up to the longest pause.
            assert pauses[:6] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6], pauses
            assert pauses[6:] == [MAX_RESTART_PAUSE] * len(pauses[6:]), pauses
            # Every restart told the subscriber of the gap, in one epoch.
            assert _kinds(sink).count("gap") >= 8
            assert hub.metrics.restarts._value.get() >= 8
        finally:
            await hub.stop()


async def test_a_subscribe_with_no_reachable_leader_retries_then_refuses(tmp_path: Path) -> None:
    """Scenario 2 in clock time: the lease is held by a node that has no address, so every
    forwarded subscribe fails; the hub tries three times, pausing 0.2 s then 0.4 s, and the
    subscriber gets 4503."""
    clock = ManualClock()
    async with open_store(f"sqlite://{tmp_path / 'store.db'}") as s:
        hub = await _hub(s, clock)
        try:
            channel = "tick:elsewhere"
            held = await s.acquire(lease_name(channel), "ghost", 30)
            assert held is not None
            began = clock.monotonic()
            subscribing = asyncio.ensure_future(
                hub.subscribe(Frames(), channel, CLUSTER_USER, None)
            )
            await clock.run_until(subscribing.done, limit=5.0, step=0.05)
            with pytest.raises(ChannelUnavailable, match="no node record"):
                subscribing.result()
            assert clock.monotonic() - began >= 0.6
            assert hub.streams[channel].leader == "ghost"
        finally:
            await hub.stop()
