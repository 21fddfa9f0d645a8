"""Live channels on real node processes (LocalCluster) and a real store: seed 000's failure
scenarios. Each test subscribes through the Client at several nodes and waits, with deadlines,
for what the subscribers must see."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from baton.local.cluster import LocalCluster
from baton.local.waiting import await_for, wait_for
from baton.store import ChangeKind
from baton.testing.channels import Subscriber, channel_leaders, channel_views

pytestmark = pytest.mark.cluster


def views(c: LocalCluster) -> dict[str, list[dict[str, Any]]]:
    return channel_views(c)


def leaders(c: LocalCluster, channel: str) -> list[tuple[str, int]]:
    return channel_leaders(c, channel)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(3, None, tmp_path, ttl=2) as c:
        wait_for(lambda: list(c.states().values()) == ["live"] * 3, timeout=30)
        yield c


def subscribers(c: LocalCluster, channel: str) -> dict[str, Subscriber]:
    return {n: Subscriber([node.url], c.token, channel).start() for n, node in c.nodes.items()}


def test_leader_killed_survivors_move_to_a_new_epoch(cluster: LocalCluster) -> None:
    c = cluster
    channel = "tick:killed,every=0.05"
    subs = subscribers(c, channel)
    try:
        wait_for(lambda: all(len(s.pubs()) >= 3 for s in subs.values()), what="publications")
        # One upstream in the cluster, and everyone at its epoch.
        ((leader, epoch),) = wait_for(lambda: leaders(c, channel))
        assert {s.pubs()[-1].epoch for s in subs.values()} == {epoch}
        c.kill(leader)
        survivors = [n for n in c.nodes if n != leader]
        wait_for(
            lambda: all(len(subs[n].pubs()) and subs[n].epoch() > epoch for n in survivors),
            timeout=20,
            what="survivors to receive from a new epoch",
        )
        ((new_leader, new_epoch),) = wait_for(lambda: leaders(c, channel))
        assert new_leader != leader and new_epoch > epoch
        for n in survivors:
            sub = subs[n]
            # A fresh start at the new epoch: a subscribed with data, then its publications.
            again = [m for m in sub.kinds("subscribed") if m.epoch == new_epoch]
            assert again and again[0].data == {"tick": "killed", "every": 0.05}
            assert sub.pubs(new_epoch)
            # Never an older epoch after a newer one, never an offset twice.
            seen = [(m.epoch, m.offset) for m in sub.pubs()]
            assert seen == sorted(set(seen))
    finally:
        for s in subs.values():
            s.stop()


def test_clean_finish_tells_subscribers_and_releases_the_lease(cluster: LocalCluster) -> None:
    import asyncio

    from baton.store import open_store

    c = cluster
    channel = "tick:short,every=0.05,end=5"

    async def head() -> str:
        async with open_store(c.store_url) as store:
            return await store.head()

    since = asyncio.run(head())
    subs = subscribers(c, channel)
    try:
        for s in subs.values():
            assert s.finished.wait(20), "the subscription did not finish"
            assert s.error is None
            assert s.messages[-1].kind == "finished"

        async def released() -> list[ChangeKind]:
            async with open_store(c.store_url) as store:
                kinds = []
                async with asyncio.timeout(2):
                    async for ch in store.watch("channels/", since=since):
                        kinds.append(ch.kind)
                        if ch.kind in (ChangeKind.RELEASED, ChangeKind.EXPIRED):
                            break
                return kinds

        # Released by the leader (not left to expire).
        assert asyncio.run(released())[-1] is ChangeKind.RELEASED
        assert wait_for(lambda: not leaders(c, channel))
    finally:
        for s in subs.values():
            s.stop()


def test_paused_leader_never_delivers_a_stale_epoch(cluster: LocalCluster) -> None:
    """Scenario 5 (and 3 seen from outside): the leader is paused past its ttl; another node
    leads at a higher epoch. When the old leader resumes, nothing it published at its old epoch
    after the pause reaches anyone, and its own subscribers move to the new epoch."""
    import time

    c = cluster
    channel = "tick:paused,every=0.05"
    subs = subscribers(c, channel)
    try:
        wait_for(lambda: all(len(s.pubs()) >= 3 for s in subs.values()), what="publications")
        ((leader, epoch),) = wait_for(lambda: leaders(c, channel))
        c.pause(leader)
        paused_at = time.time()
        others = [n for n in c.nodes if n != leader]
        wait_for(
            lambda: all(subs[n].epoch() > epoch for n in others),
            timeout=20,
            what="the others to move to a new epoch",
        )
        c.resume(leader)
        # The resumed node's own subscriber follows the new leader.
        wait_for(
            lambda: subs[leader].pubs() and subs[leader].pubs()[-1].epoch > epoch,
            timeout=20,
            what="the resumed node's subscriber to reach the new epoch",
        )
        ((new_leader, new_epoch),) = wait_for(lambda: leaders(c, channel))
        assert new_leader != leader and new_epoch > epoch
        # A few more publications, then look at everything received.
        marks = {n: len(s.pubs()) for n, s in subs.items()}
        wait_for(lambda: all(len(s.pubs()) > marks[n] + 3 for n, s in subs.items()))
        for sub in subs.values():
            old = sub.pubs(epoch)
            # Nothing the paused leader made after it was paused reached anyone...
            assert all(m.ts is not None and m.ts <= paused_at for m in old), [
                m for m in old if (m.ts or 0) > paused_at
            ]
            # ...and no subscriber got an older epoch after a newer one, or a repeat.
            seen = [(m.epoch, m.offset) for m in sub.pubs()]
            assert seen == sorted(set(seen))
    finally:
        for s in subs.values():
            s.stop()


def test_failing_upstream_is_restarted_and_subscribers_told_of_the_gap(
    cluster: LocalCluster,
) -> None:
    """Scenario 7: the upstream raises after 4 ticks, every time. It is restarted at once in the
    same epoch (no new leadership), and every subscriber, at every node, gets a gap notice
    followed by more publications."""
    c = cluster
    channel = "tick:flaky,every=0.05,fail=4"
    subs = subscribers(c, channel)
    try:
        wait_for(
            lambda: all(len(s.kinds("gap")) >= 2 for s in subs.values()),
            timeout=20,
            what="two gaps at every node",
        )
        ((leader, epoch),) = leaders(c, channel)
        for sub in subs.values():
            gap = sub.kinds("gap")[0]
            assert gap.epoch == epoch and "upstream failed" in (gap.reason or "")
            after = [m for m in sub.pubs() if m.offset > gap.offset]
            assert after and all(m.epoch == epoch for m in after)
        metrics = c.node(leader).get("/metrics").text
        assert "baton_channel_upstream_restarts_total" in metrics
    finally:
        for s in subs.values():
            s.stop()


def test_leader_not_answering_a_forwarded_subscribe(tmp_path: Path) -> None:
    """Scenario 2: the leader is paused (well inside its ttl). A subscribe at another node is
    forwarded, times out, is retried, and is answered with 4503 and a one-line reason; the same
    subscribe sent again once the leader answers succeeds at the same epoch."""
    import asyncio
    import json

    from websockets.asyncio.client import connect

    from baton.channels.client import ws_url
    from baton.channels.protocol import frames

    channel = "tick:slow,every=0.05"
    with LocalCluster(2, None, tmp_path, ttl=8) as c:
        wait_for(lambda: list(c.states().values()) == ["live"] * 2, timeout=30)
        with Subscriber([c.node("n0").url], c.token, channel) as anchor:
            wait_for(anchor.pubs)
            epoch = anchor.epoch()

            async def go() -> tuple[dict[str, Any], dict[str, Any]]:
                headers = {"authorization": f"Bearer {c.token}"}
                request = json.dumps({"type": "subscribe", "channel": channel})
                async with connect(ws_url(c.node("n1").url), additional_headers=headers) as ws:
                    c.pause("n0")
                    try:
                        await ws.send(request)
                        (refusal,) = frames(await asyncio.wait_for(ws.recv(), 20))
                    finally:
                        c.resume("n0")
                    await ws.send(request)
                    while True:
                        for answer in frames(await asyncio.wait_for(ws.recv(), 20)):
                            if answer["type"] != "pub":
                                return refusal, answer

            refusal, answer = asyncio.run(go())
            assert refusal["type"] == "unsubscribed" and refusal["code"] == 4503, refusal
            assert "did not answer" in refusal["reason"] and "\n" not in refusal["reason"]
            assert answer["type"] == "subscribed" and answer["epoch"] == epoch, answer
            assert leaders(c, channel) == [("n0", epoch)]
            text = c.node("n1").get("/metrics").text
            forwarded = "baton_channel_forwarded_subscribes_total"
            assert f'{forwarded}{{node="n1",outcome="unavailable"}} 3.0' in text
            assert f'{forwarded}{{node="n1",outcome="ok"}} 1.0' in text


def test_leadership_changed_during_a_forwarded_subscribe(tmp_path: Path) -> None:
    """Scenario 6 on real processes: a subscribe at n1 is forwarded to the leader n0, whose
    handler holds the initial data (a gate); meanwhile the lease goes to another holder (taken
    in the store, as a node that found it free would). The leader's re-check of its lease at
    the asked epoch fails: the subscriber is refused (4503, one line, retry) and gets nothing
    of the old epoch; n0 stops leading it."""
    import asyncio
    import json

    from websockets.asyncio.client import connect

    from baton.channels.client import ws_url
    from baton.channels.hub import lease_name
    from baton.channels.protocol import frames
    from baton.store import open_store

    gate = tmp_path / "gate"
    gate.touch()
    config = {
        "handlers": {"gated": "baton.testing.channels:GatedHandler"},
        "settings": {"gated": {"gate": str(gate)}},
    }
    channel = "gated:six"
    env = {"BATON_CHANNELS": json.dumps(config)}
    with LocalCluster(2, None, tmp_path / "c", ttl=4, env=env) as c:
        wait_for(lambda: list(c.states().values()) == ["live"] * 2, timeout=30)
        with Subscriber([c.node("n0").url], c.token, channel) as anchor:
            wait_for(anchor.pubs, what="the leader's first publications")
            epoch = anchor.epoch()
            assert leaders(c, channel) == [("n0", epoch)]
            gate.unlink()
            waiting = gate.with_name("gate.waiting")
            waiting.unlink()

            async def go() -> dict[str, Any]:
                headers = {"authorization": f"Bearer {c.token}"}
                request = json.dumps({"type": "subscribe", "channel": channel})
                async with (
                    open_store(c.store_url) as store,
                    connect(ws_url(c.node("n1").url), additional_headers=headers) as ws,
                ):
                    await ws.send(request)
                    # The forwarded subscribe is inside n0's handler: the lease moves now.
                    await await_for(waiting.exists, timeout=20, what="the leader's handler")
                    assert waiting.read_text() == "n0"
                    held = await store.get_lease(lease_name(channel))
                    assert held is not None and held.holder == "n0" and held.epoch == epoch
                    assert await store.release(held)
                    other = await store.acquire(held.name, "elsewhere", 30)
                    assert other is not None and other.epoch > epoch
                    gate.touch()
                    while True:
                        for answer in frames(await asyncio.wait_for(ws.recv(), 20)):
                            if answer["type"] != "pub":
                                return answer

            refusal = asyncio.run(go())
            assert refusal["type"] == "unsubscribed" and refusal["code"] == 4503, refusal
            assert "\n" not in refusal["reason"]
            # Refused by the leader's re-check (its line), then by the retry (the lease's new
            # holder is no node): never answered with the old epoch's data.
            n0 = c.node("n0").proc
            assert n0 is not None
            wait_for(lambda: any("leadership changed during it" in x for x in n0.lines()), 10)
            text = c.node("n1").get("/metrics").text
            forwarded = "baton_channel_forwarded_subscribes_total"
            assert f'{forwarded}{{node="n1",outcome="ok"}}' not in text, text
            # The old leader finds out and stops publishing at its epoch.
            wait_for(lambda: ("n0", epoch) not in leaders(c, channel), timeout=15)
