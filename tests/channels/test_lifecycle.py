"""Channel lifecycle on real node processes: a graceful stop hands the channel over by name and
the last subscriber leaving releases the lease after the linger; a client recovers what it
missed through another node; the store frozen (the leader cannot refresh, followers cannot
check); and leadership changing in the middle of a forwarded subscribe (on a hub in this
process, with a real SQLite store)."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from baton.channels.config import ChannelsConfig
from baton.channels.handler import CLUSTER_USER, Channel, Context, Handler, User
from baton.channels.hub import ChannelHub, lease_name
from baton.errors import ChannelRefused, ChannelUnavailable
from baton.lease.role import Role
from baton.lease.timings import Timings
from baton.local.cluster import LocalCluster
from baton.local.waiting import await_for, wait_for
from baton.store import Change, ChangeKind, open_store
from baton.testing.channels import Subscriber
from baton.testing.clock import ManualClock
from baton.testing.servers import RedisServer
from tests.channels.test_failures import leaders, subscribers

pytestmark = pytest.mark.cluster


def feed(url: str, since: str, until: ChangeKind, holder: str, timeout: float = 15) -> list[Change]:
    """Changes of the channel leases after ``since``, up to the first ``until`` by ``holder``."""

    async def go() -> list[Change]:
        out = []
        async with open_store(url) as store, asyncio.timeout(timeout):
            async for ch in store.watch("channels/", since=since):
                out.append(ch)
                if ch.kind is until and ch.holder == holder:
                    return out
        return out

    return asyncio.run(go())


def head(url: str) -> str:
    async def go() -> str:
        async with open_store(url) as store:
            return await store.head()

    return asyncio.run(go())


def metric(c: LocalCluster, node: str, name: str) -> float | None:
    try:
        text = c.node(node).get("/metrics").text
    except Exception:
        return None
    m = re.search(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+-]+)$", text, re.M)  # labels: node
    return float(m.group(1)) if m else None


def test_graceful_stop_hands_over_by_name_and_linger_releases(tmp_path: Path) -> None:
    with LocalCluster(2, None, tmp_path, ttl=2, env={"BATON_CHANNELS": '{"linger": 0.5}'}) as c:
        wait_for(lambda: list(c.states().values()) == ["live"] * 2, timeout=30)
        channel = "tick:handover,every=0.05"
        first = Subscriber([c.node("n0").url], c.token, channel).start()
        second: Subscriber | None = None
        try:
            wait_for(first.pubs, what="the first subscriber")
            # The first subscription anywhere made its node the leader.
            assert leaders(c, channel)[0][0] == "n0"
            epoch = first.epoch()
            second = Subscriber([c.node("n1").url], c.token, channel).start()
            wait_for(second.pubs, what="the second subscriber, through n1's relay")
            since = head(c.store_url)
            c.terminate("n0")
            s = second
            wait_for(lambda: s.pubs() and s.pubs()[-1].epoch > epoch, timeout=15)
            assert leaders(c, channel)[0][0] == "n1"
            changes = feed(c.store_url, since, ChangeKind.ACQUIRED, "n1")
            kinds = [(ch.kind, ch.holder, ch.successor) for ch in changes]
            # Released to n1 by name, then taken by n1: never left to expire.
            assert (ChangeKind.RELEASED, "n0", "n1") in kinds, kinds
            assert ChangeKind.EXPIRED not in [k for k, _, _ in kinds]
            # The last subscriber leaves: after the linger, the upstream stops and the lease
            # is released.
            since = head(c.store_url)
            second.stop()
            released = feed(c.store_url, since, ChangeKind.RELEASED, "n1")
            assert released[-1].kind is ChangeKind.RELEASED
            wait_for(lambda: not leaders(c, channel))
            assert metric(c, "n1", "baton_channel_upstreams") == 0
        finally:
            first.stop()
            if second is not None:
                second.stop()


def test_client_recovers_through_another_node(tmp_path: Path) -> None:
    with LocalCluster(3, None, tmp_path, ttl=2) as c:
        wait_for(lambda: list(c.states().values()) == ["live"] * 3, timeout=30)
        channel = "tick:recover,every=0.05"
        anchor = Subscriber([c.node("n0").url], c.token, channel).start()  # n0 leads
        sub = Subscriber([c.node("n1").url, c.node("n2").url], c.token, channel)
        try:
            wait_for(anchor.pubs)
            sub.start()
            wait_for(lambda: len(sub.pubs()) >= 5, what="publications through n1")
            c.kill("n1")  # a follower: the leader and the epoch stay
            mark = len(sub.pubs())
            wait_for(lambda: len(sub.pubs()) > mark + 5, timeout=15, what="more through n2")
            assert sub.client is not None and sub.client.connections >= 2
            again = sub.kinds("subscribed")
            assert len(again) == 2 and again[1].recovered and again[1].data is None
            offsets = [m.offset for m in sub.pubs()]
            # Nothing missed, nothing twice, one epoch.
            assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
            assert {m.epoch for m in sub.pubs()} == {anchor.epoch()}
        finally:
            sub.stop()
            anchor.stop()


def test_store_frozen_leader_stops_followers_do_not_flap(tmp_path: Path) -> None:
    """Scenarios 3 and 4: the store stops answering (SIGSTOP). The leader cannot renew, so its
    upstream stops on its own while the store is still frozen (before anyone else could lead);
    the followers cannot check the lease and change nothing. When the store is back, every
    subscriber moves once to one new epoch."""
    with RedisServer(tmp_path / "redis") as redis:
        url = f"{redis.url}?namespace=t{uuid.uuid4().hex[:8]}"
        with LocalCluster(3, url, tmp_path / "c", ttl=2) as c:
            wait_for(lambda: list(c.states().values()) == ["live"] * 3, timeout=30)
            channel = "tick:frozen,every=0.05"
            subs = subscribers(c, channel)
            try:
                wait_for(lambda: all(s.pubs() for s in subs.values()))
                ((leader, epoch),) = wait_for(lambda: leaders(c, channel))
                marks = {n: len(s.kinds("subscribed")) for n, s in subs.items()}
                redis.pause()
                try:
                    wait_for(
                        lambda: metric(c, leader, "baton_channel_upstreams") == 0,
                        timeout=10,
                        what="the leader's upstream to stop while the store is frozen",
                    )
                    # Nobody was told to start over while nothing could be checked.
                    assert {n: len(s.kinds("subscribed")) for n, s in subs.items()} == marks
                    assert all(s.error is None for s in subs.values())
                finally:
                    redis.resume()
                wait_for(
                    lambda: all(s.pubs() and s.pubs()[-1].epoch > epoch for s in subs.values()),
                    timeout=20,
                    what="every subscriber at a new epoch",
                )
                new = {m.epoch for s in subs.values() for m in s.kinds("subscribed")[1:]}
                assert len(new) == 1 and new.pop() > epoch, "more than one new epoch: flapping"
                assert len(leaders(c, channel)) == 1
            finally:
                for s in subs.values():
                    s.stop()


class Frames:
    """A sink that keeps what the hub sends (the hub's own interface, in this process)."""

    peer: str | None = None

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.closed: tuple[int, str] | None = None

    def send(self, text: str, ts: float | None = None) -> None:
        self.texts.append(text)

    def close(self, code: int, reason: str) -> None:
        self.closed = (code, reason)

    async def wait_closed(self) -> None:
        return None


async def test_leadership_changed_during_a_forwarded_subscribe(tmp_path: Path) -> None:
    """Scenario 6: the leader re-checks (renews) its lease at the asked epoch after computing
    the initial data; when another holder has it by then, the subscribe is refused (4503, retry)
    and nothing is sent."""
    async with open_store(f"sqlite://{tmp_path / 'store.db'}") as store:
        hub = ChannelHub(store, "a", "x" * 32, Timings.for_ttl(2))
        await hub.start()
        try:
            channel = "tick:six,every=0.05"
            sink = Frames()
            await hub.subscribe(sink, channel, CLUSTER_USER, None)
            lease = await store.get_lease(lease_name(channel))
            assert lease is not None and lease.holder == "a"
            answer = await hub.survey(channel, CLUSTER_USER, lease.epoch)
            assert answer.data == {"tick": "six", "every": 0.05}
            with pytest.raises(ChannelUnavailable, match="does not lead"):
                await hub.survey(channel, CLUSTER_USER, lease.epoch - 1)
            # Another node takes the lease between the follower's read and the survey.
            assert await store.release(lease)
            other = await store.acquire(lease.name, "b", 2)
            assert other is not None and other.epoch > lease.epoch
            with pytest.raises(ChannelUnavailable, match="changed during the subscribe"):
                await hub.survey(channel, CLUSTER_USER, lease.epoch)
            # And the hub stops publishing at the old epoch as soon as it finds out.
            await await_for(lambda: hub.streams[channel].role is not Role.LEADER, timeout=10)
        finally:
            await hub.stop()


class Users(Handler):
    """A namespace whose handler accepts per-user tokens ``user-<name>`` and refuses bob."""

    def authenticate(self, token: str) -> str | None:
        return token.removeprefix("user-") if token.startswith("user-") else None

    async def subscribe(self, ctx: Context, user: User, channel: Channel) -> Any:
        if user.id == "bob":
            raise ChannelRefused(f"{user.id} may not watch {channel}")
        return {"hello": user.id}

    async def run(self, ctx: Context, channel: Channel) -> AsyncIterator[Any]:
        while not ctx.stopping.is_set():
            await ctx.clock.sleep(0.05)
            yield {"for": channel.path}


async def test_per_user_tokens_reach_only_their_namespace(tmp_path: Path) -> None:
    config = ChannelsConfig(handlers={"users": f"{__name__}:Users"})
    clock = ManualClock()  # the handler publishes on the hub's clock
    async with open_store(f"sqlite://{tmp_path / 'store.db'}") as store:
        hub = ChannelHub(store, "a", "x" * 32, Timings.for_ttl(2), config=config, clock=clock)
        await hub.start()
        try:
            assert hub.authenticate("x" * 32) == CLUSTER_USER
            assert hub.authenticate("wrong") is None
            alice = hub.authenticate("user-alice")
            assert alice == User("alice", namespace="users")
            sink = Frames()
            await hub.subscribe(sink, "users:room1", alice, None)
            first = json.loads(sink.texts[0])
            assert first["type"] == "subscribed" and first["data"] == {"hello": "alice"}
            await clock.run_until(lambda: len(sink.texts) > 2, limit=1.0)
            with pytest.raises(ChannelRefused, match="does not give access"):
                await hub.subscribe(Frames(), "tick:x", alice, None)
            bob = hub.authenticate("user-bob")
            assert bob is not None
            with pytest.raises(ChannelRefused, match="bob may not watch"):
                await hub.subscribe(Frames(), "users:room1", bob, None)
        finally:
            await hub.stop()


async def _closed_with(url: str, token: str, channel: str, stop: Any) -> tuple[int | None, str]:
    """Subscribe at ``url``, wait for the first publication, call ``stop()`` (in a thread),
    and return the close code and reason the node sent."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    from baton.channels.client import ws_url
    from baton.channels.protocol import frames

    headers = {"authorization": f"Bearer {token}"}
    async with connect(ws_url(url), additional_headers=headers) as ws:
        await ws.send(json.dumps({"type": "subscribe", "channel": channel}))
        async with asyncio.timeout(30):
            while not any(f["type"] == "pub" for f in frames(await ws.recv())):
                pass
        stopping = asyncio.ensure_future(asyncio.to_thread(stop))
        try:
            async with asyncio.timeout(30):
                while True:
                    await ws.recv()
        except ConnectionClosed as exc:
            return (exc.rcvd.code, exc.rcvd.reason) if exc.rcvd else (None, "")
        finally:
            await stopping


def test_a_stopping_node_closes_its_subscribers_with_1001(tmp_path: Path) -> None:
    """Issue 28, point 5: at SIGTERM a node closes every channel connection with 1001 (the node
    is stopping: reconnect to another node), as docs/channels.md says. A follower node closed
    them with 1012 (the HTTP server's own shutdown), and a leader one time in four, because
    the server stopped while the handover still ran."""
    with LocalCluster(2, None, tmp_path, ttl=2) as c:
        wait_for(lambda: list(c.states().values()) == ["live"] * 2, timeout=30)
        channel = "tick:going-away,every=0.05"
        with Subscriber([c.node("n0").url], c.token, channel) as anchor:  # n0 leads it
            wait_for(anchor.pubs, what="the channel's leader on n0")
            for node in ("n1", "n0"):  # a follower node, then the leader's
                code, reason = asyncio.run(
                    _closed_with(c.node(node).url, c.token, channel, lambda n=node: c.terminate(n))
                )
                assert (code, reason) == (
                    1001,
                    f"node {node} is stopping: reconnect to another node",
                )


def test_a_follower_subscriber_misses_nothing_while_its_relay_starts(tmp_path: Path) -> None:
    """A subscriber at a follower starts from the leader's answer and takes the rest from the
    follower's relay. Each channel here is new at n1, so its relay starts with the subscribe:
    the publications between the answer's offset and the relay's first one must still come,
    on a stream fast enough (every 10 ms) that the relay's connect spans several of them."""
    with LocalCluster(2, None, tmp_path, ttl=2) as c:
        wait_for(lambda: list(c.states().values()) == ["live"] * 2, timeout=30)
        for i in range(6):
            channel = f"tick:relayed{i},every=0.01"
            with Subscriber([c.node("n0").url], c.token, channel) as anchor:
                wait_for(anchor.pubs, what="the leader's first publication")  # n0 leads
                with Subscriber([c.node("n1").url], c.token, channel) as sub:
                    wait_for(lambda: len(sub.pubs()) >= 10, what="publications through n1")
                    start = sub.kinds("subscribed")[0].offset
                    offsets = [m.offset for m in sub.pubs()]
                    assert offsets == list(range(start + 1, start + 1 + len(offsets))), (i, start)
