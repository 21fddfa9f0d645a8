"""Elections in one process, several participants each with its own store client, on every
backend. Multi-process behaviour (SIGKILL, SIGSTOP) is in tests/cluster."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest

from baton.errors import LeaseLost, LossReason, NotLeader
from baton.lease.election import Election, LeadershipLost, NewLeader, NewState, State
from baton.lease.timings import Timings
from baton.store import Change, ChangeKind, Lease, Store
from baton.testing import await_for
from tests.conftest import Backend

FAST = Timings(
    ttl=2.0,
    renew_interval=0.4,
    renew_deadline=1.4,
    request_timeout=0.3,
    election_timeout_min=0.01,
    election_timeout_max=0.05,
)


@contextlib.asynccontextmanager
async def participants(
    backend: Backend, n: int, name: str = "lead", timings: Timings = FAST
) -> AsyncIterator[list[Election]]:
    stores: list[Store] = [backend.open() for _ in range(n)]
    elections = [Election(s, name, f"n{i}", timings) for i, s in enumerate(stores)]
    try:
        for e in elections:
            await e.start()
        yield elections
    finally:
        for e in elections:
            await e.stop()
        for s in stores:
            await s.close()


def leaders(elections: list[Election]) -> list[Election]:
    return [e for e in elections if e.is_leader]


async def one_leader(elections: list[Election], timeout: float = 10) -> Election:
    found = await await_for(
        lambda: len(leaders(elections)) == 1 and leaders(elections), timeout, what="one leader"
    )
    return found[0]


async def test_exactly_one_leader_and_everyone_knows(backend: Backend) -> None:
    async with participants(backend, 3) as es:
        leader = await one_leader(es)
        assert leader.epoch is not None
        await await_for(
            lambda: all(e.leader == leader.node_id for e in es), what="all know the leader"
        )
        lease = await es[0].store.get_lease("lead")
        assert lease is not None and lease.holder == leader.node_id
        assert lease.epoch == leader.epoch
        # Stays stable across several renewals.
        deadline = time.monotonic() + 3 * FAST.renew_interval
        while time.monotonic() < deadline:
            assert leaders(es) == [leader]
            await asyncio.sleep(0.05)


async def test_resign_hands_over_with_higher_epoch(backend: Backend) -> None:
    async with participants(backend, 3) as es:
        first = await one_leader(es)
        events = first.events()
        old_epoch = first.epoch
        assert old_epoch is not None
        await first.resign()
        assert not first.is_leader
        second = await one_leader(es)
        assert second is not first
        assert second.epoch is not None and second.epoch > old_epoch
        seen = [await asyncio.wait_for(anext(events), 5) for _ in range(3)]
        assert LeadershipLost(old_epoch, LossReason.RELEASED) in seen
        assert NewState(State.FOLLOWER) in seen
        assert await first.resign() is False  # not the leader: nothing to resign, no error


async def test_elect_names_the_next_leader(backend: Backend) -> None:
    async with participants(backend, 4) as es:
        first = await one_leader(es)
        target = next(e for e in es if e is not first and e.node_id != "n0")
        with pytest.raises(NotLeader):
            await target.elect("n0")
        await first.elect(target.node_id)
        await await_for(lambda: target.is_leader, what=f"{target.node_id} to lead")
        assert leaders(es) == [target]
        assert target.epoch is not None and first.epoch is None


def events_and_reads(e: Election) -> list[object]:
    """``e``'s events as they come, with "get_lease" where it read its lease between them."""
    seen: list[object] = []
    e.on_event(seen.append)
    look = e.store.get_lease

    async def counted(name: str) -> Lease | None:
        seen.append("get_lease")
        return await look(name)

    e.store.get_lease = counted  # type: ignore[method-assign]
    return seen


async def test_named_successor_campaigns_without_looking_first(backend: Backend) -> None:
    """The feed says a release named this participant: it acquires at once, without reading
    the lease after that (the store's acquire decides); the others only wait."""
    async with participants(backend, 3) as es:
        first = await one_leader(es)
        target = next(e for e in es if e is not first)
        await await_for(lambda: target.leader == first.node_id, what="the leader known")
        seen = events_and_reads(target)
        old_epoch = first.epoch
        assert old_epoch is not None
        await first.elect(target.node_id)
        await await_for(lambda: target.is_leader, what=f"{target.node_id} to lead")
        assert target.epoch is not None and target.epoch > old_epoch
        released = seen.index(NewLeader(None, None))
        led = seen.index(NewState(State.LEADER))
        assert released < led and "get_lease" not in seen[released:led]
        assert leaders(es) == [target]


async def test_the_old_leader_does_not_look_until_the_successor_leads(backend: Backend) -> None:
    """After a handover the old leader holds off: it reads the lease only once the feed says
    the successor acquired it, so it adds no request while the successor takes over."""
    async with participants(backend, 2) as es:
        first = await one_leader(es)
        target = next(e for e in es if e is not first)
        await await_for(lambda: target.leader == first.node_id, what="the leader known")
        seen = events_and_reads(first)
        await first.elect(target.node_id)
        await await_for(lambda: target.is_leader, what=f"{target.node_id} to lead")
        await await_for(lambda: first.leader == target.node_id, what="the old leader to know")
        assert target.epoch is not None
        told = seen.index(NewLeader(target.node_id, target.epoch))
        assert "get_lease" not in seen[:told]
        assert leaders(es) == [target]


async def test_a_late_feed_entry_about_the_handed_over_term_is_old_news(backend: Backend) -> None:
    """The feed may deliver the old leader's own acquisition after it handed the term over (CI
    saw it on PostgreSQL): it must neither name the old leader again nor make it read."""
    async with participants(backend, 2) as es:
        first = await one_leader(es)
        target = next(e for e in es if e is not first)
        old_epoch = first.epoch
        assert old_epoch is not None
        await first.elect(target.node_id)
        seen = events_and_reads(first)
        late = Change(
            position="late",
            revision=0,
            kind=ChangeKind.ACQUIRED,
            key=first.name,
            holder=first.node_id,
            epoch=old_epoch,
        )
        first._on_change(late)  # the feed's entry point, as its watch task calls it
        assert first.leader != first.node_id
        await await_for(lambda: target.is_leader, what=f"{target.node_id} to lead")
        await await_for(lambda: first.leader == target.node_id, what="the old leader to know")
        assert target.epoch is not None
        told = seen.index(NewLeader(target.node_id, target.epoch))
        assert NewLeader(first.node_id, old_epoch) not in seen
        assert "get_lease" not in seen[:told]


async def test_leadership_body_is_cancelled_when_lease_lost(backend: Backend) -> None:
    async with participants(backend, 2) as es:
        leader = await one_leader(es)
        started = asyncio.Event()
        with pytest.raises(LeaseLost) as info:
            async with leader.leadership() as term:
                started.set()
                assert term.valid and term.epoch == leader.epoch
                # Block the whole event loop past the ttl, like a GC or VM pause.
                time.sleep(FAST.ttl + 0.3)  # noqa: ASYNC251 - the point of the test
                await asyncio.sleep(30)  # must be cancelled, not run out
        assert started.is_set()
        assert info.value.reason in (LossReason.EXPIRED, LossReason.PREEMPTED)
        assert not term.valid
        with pytest.raises(LeaseLost):
            term.check()
        # The write the stale term would make now is refused by the store.
        assert not (await leader.store.put("fenced", b"x", lease=term.lease)).ok
        other = await one_leader(es)
        assert other.epoch is not None and other.epoch > term.epoch


async def test_leadership_body_that_resigns_exits_cleanly(backend: Backend) -> None:
    async with participants(backend, 2) as es:
        leader = await one_leader(es)
        async with leader.leadership() as term:
            assert (await leader.store.put("k", b"1", lease=term.lease)).ok
            await leader.resign()
        assert not term.valid
        await await_for(lambda: leaders(es) and leaders(es)[0] is not leader, what="takeover")


async def test_events_report_new_leader(backend: Backend) -> None:
    async with participants(backend, 2) as es:
        got: list[object] = []
        es[1].on_event(got.append)
        leader = await one_leader(es)
        await await_for(
            lambda: NewLeader(leader.node_id, leader.epoch) in got, what="NewLeader event"
        )


async def test_wait_leader_and_stop_releases(backend: Backend) -> None:
    async with participants(backend, 1) as es:
        (only,) = es
        assert await only.wait_leader(10) == "n0"
        term = await only.wait_leadership(10)
        await only.stop()
        lease = await only.store.get_lease("lead")
        assert lease is None, "a clean stop must release the lease"
        assert not term.valid
