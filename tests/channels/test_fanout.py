"""The fan-out's fast path: a frame goes to a connection's socket in the publishing loop itself
(:func:`baton.channels.server.start_now`), and only a send that has to wait for the socket
finishes in a task of its own. What must hold: a send that does not wait is done on return,
with nothing left to schedule; one that waits has run up to the wait, and its task finishes it
with what it waited for, or with the error or the cancellation it met. And the subscribe
burst's side: subscribers arriving while a survey is under way share it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from baton.channels.handler import CLUSTER_USER, Channel, Context, Handler, TickHandler, User
from baton.channels.protocol import Pub, dumps
from baton.channels.server import start_now
from baton.channels.stream import Stream, Sub
from baton.store import open_store
from baton.testing.clock import ManualClock
from tests.channels.test_hub_timers import _hub, _kinds
from tests.channels.test_lifecycle import Frames


async def test_a_send_that_does_not_wait_is_done_on_return() -> None:
    written: list[str] = []

    async def send(text: str) -> None:
        written.append(text)

    assert start_now(send("a")) is None
    assert written == ["a"]


async def test_a_send_that_waits_is_finished_by_a_task_with_what_it_waited_for() -> None:
    gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    steps: list[str] = []

    async def send() -> None:
        steps.append("before")
        steps.append(await gate)
        await asyncio.sleep(0)  # a bare yield after the first wait is driven too
        steps.append("after")

    task = start_now(send())
    assert task is not None and not task.done()
    assert steps == ["before"]
    gate.set_result("written")
    await asyncio.wait_for(task, 5)
    assert steps == ["before", "written", "after"]


async def test_an_error_before_the_wait_is_raised_and_after_it_ends_the_task() -> None:
    async def broken() -> None:
        raise ConnectionResetError("gone")

    with pytest.raises(ConnectionResetError):
        start_now(broken())

    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def fails_later() -> None:
        await gate

    task = start_now(fails_later())
    assert task is not None
    gate.set_exception(BrokenPipeError("closed under the send"))
    with pytest.raises(BrokenPipeError):
        await asyncio.wait_for(task, 5)


async def test_cancelling_a_waiting_send_cancels_the_wait_inside_it() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    cleaned: list[bool] = []

    async def send() -> None:
        try:
            await gate
        finally:
            cleaned.append(gate.cancelled())

    task = start_now(send())
    assert task is not None
    await asyncio.sleep(0)  # the task is waiting on the gate
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == [True]


class Gated(Handler):
    """A handler whose initial data waits for a gate, and counts how often it is asked."""

    asked = 0
    gate: asyncio.Event | None = None

    async def subscribe(self, ctx: Context, user: User, channel: Channel) -> Any:
        Gated.asked += 1
        assert Gated.gate is not None
        await Gated.gate.wait()
        return {"asked": Gated.asked}

    async def run(self, ctx: Context, channel: Channel) -> AsyncIterator[Any]:
        n = 0
        while not ctx.stopping.is_set():
            await ctx.clock.sleep(0.5)
            n += 1
            yield {"n": n}


async def test_subscribers_arriving_during_a_survey_share_it(tmp_path: Path) -> None:
    """A burst of subscribes of one user costs one survey (one initial data, one lease
    renewal): those that arrive while it is under way get its answer, and then every
    publication after its offset, once each."""
    clock = ManualClock()
    Gated.asked = 0
    Gated.gate = asyncio.Event()
    config = {"handlers": {"gated": f"{__name__}:Gated"}}
    async with open_store(f"sqlite://{tmp_path / 'store.db'}") as s:
        hub = await _hub(s, clock, **config)
        try:
            channel = "gated:burst"
            sinks = [Frames() for _ in range(10)]
            first = asyncio.ensure_future(hub.subscribe(sinks[0], channel, CLUSTER_USER, None))
            await clock.run_until(lambda: Gated.asked == 1, limit=5.0)
            rest = [
                asyncio.ensure_future(hub.subscribe(sink, channel, CLUSTER_USER, None))
                for sink in sinks[1:]
            ]
            await asyncio.sleep(0)  # the others reach the survey under way
            Gated.gate.set()
            await asyncio.wait_for(asyncio.gather(first, *rest), 30)
            assert Gated.asked == 1
            await clock.run_until(
                lambda: all(_kinds(sink).count("pub") >= 3 for sink in sinks), limit=10.0
            )
            for sink in sinks:
                lines = [json.loads(x) for t in sink.texts for x in t.split("\n")]
                assert lines[0]["type"] == "subscribed" and lines[0]["data"] == {"asked": 1}
                offsets = [x["offset"] for x in lines[1:] if x["type"] == "pub"]
                # After the survey's offset, each publication once and in order.
                assert offsets == list(range(lines[0]["offset"] + 1, offsets[-1] + 1))
        finally:
            await hub.stop()


def test_relays_get_a_publication_before_the_nodes_own_subscribers() -> None:
    """A relay carries the frame to a whole node: it goes first, so that node's fan-out runs
    beside this one; the fence still holds for both kinds."""
    order: list[str] = []

    class Named(Frames):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

        def send(self, text: str, ts: float | None = None) -> None:
            order.append(self.name)

    stream = Stream(Channel("tick", "x"), TickHandler(), keep=10, epoch=3)
    clients = [Named(f"client{i}") for i in range(3)]
    relay, stale = Named("relay"), Named("stale relay")
    for sink in clients[:2]:
        stream.subs[sink] = Sub(CLUSTER_USER, 3, 0)
    stream.subs[relay] = Sub(CLUSTER_USER, 3, 0, relay=True)
    stream.subs[stale] = Sub(CLUSTER_USER, 2, 0, relay=True)  # another epoch: fenced
    stream.subs[clients[2]] = Sub(CLUSTER_USER, 3, 0)
    frame = Pub(channel="tick:x", epoch=3, offset=1, data={}, ts=1.0)
    stream.deliver(frame, dumps(frame))
    stream.deliver(frame, dumps(frame))  # a repeat: nobody gets it twice
    assert order == ["relay", "client0", "client1", "client2"]
