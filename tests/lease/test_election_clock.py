"""Elections on a manual clock (baton.testing.ManualClock) over the embedded SQLite store,
which keeps time on the same clock: the timing rules of a term, checked in clock time, so
a ttl of 30 s costs milliseconds and a loaded machine cannot stretch or shrink it."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from baton.errors import LeaseLost, LossReason
from baton.lease.election import Election, LeadershipLost
from baton.lease.keeper import LeaseKeeper
from baton.lease.timings import Timings
from baton.store.sqlite import SQLiteStore
from baton.testing import ManualClock

#: Production-like timings: a manual clock makes them cost nothing.
SLOW = Timings(
    ttl=30.0,
    renew_interval=6.0,
    renew_deadline=20.0,
    request_timeout=5.0,
    election_timeout_min=0.5,
    election_timeout_max=1.5,
)


@contextlib.asynccontextmanager
async def on_clock(tmp_path: Path, n: int) -> AsyncIterator[tuple[ManualClock, list[Election]]]:
    clock = ManualClock()
    stores = [SQLiteStore(str(tmp_path / "s.db"), clock=clock.time) for _ in range(n)]
    clock.wait_on(lambda: answering(stores))
    elections = [Election(s, "job", f"n{i}", SLOW, clock=clock) for i, s in enumerate(stores)]
    try:
        for e in elections:
            await e.start()
        yield clock, elections
    finally:
        for e in elections:
            await e.stop()
        for s in stores:
            await s.close()


def leaders(es: list[Election]) -> list[Election]:
    return [e for e in es if e.is_leader]


#: Stores a test hangs on purpose: the clock moves on while their calls wait.
HUNG: set[SQLiteStore] = set()


def answering(stores: list[SQLiteStore]) -> bool:
    """Whether a store call is on its way (the clock waits for it: on a loaded machine it can
    take longer in real time than many clock steps)."""
    return any(s.in_flight and s not in HUNG for s in stores)


@contextlib.contextmanager
def hung(store: SQLiteStore) -> Iterator[None]:
    """Every call of ``store`` hangs, as on a connection whose packets are dropped: its one
    database thread is kept busy until the block ends. Other clients of the file go on."""
    release = threading.Event()
    assert store._executor is not None
    store._executor.submit(release.wait)
    HUNG.add(store)
    try:
        yield
    finally:
        HUNG.discard(store)
        release.set()


async def test_a_leader_renews_for_ten_ttls_and_keeps_its_epoch(tmp_path: Path) -> None:
    async with on_clock(tmp_path, 2) as (clock, es):
        await clock.run_until(lambda: len(leaders(es)) == 1, limit=10, step=0.1, what="a leader")
        (leader,) = leaders(es)
        epoch = leader.epoch
        seen: list[int] = []

        def one_leader_with_the_same_epoch() -> bool:
            seen.append(len(leaders(es)))
            return False

        with pytest.raises(AssertionError):
            await clock.run_until(one_leader_with_the_same_epoch, limit=10 * SLOW.ttl, step=0.5)
        assert set(seen) == {1}
        assert leaders(es) == [leader] and leader.epoch == epoch


async def test_a_paused_leader_wakes_with_its_term_over(tmp_path: Path) -> None:
    async with on_clock(tmp_path, 2) as (clock, es):
        await clock.run_until(lambda: len(leaders(es)) == 1, limit=10, step=0.1, what="a leader")
        (leader,) = leaders(es)
        with pytest.raises(LeaseLost) as info:
            async with leader.leadership() as term:
                # Paused past the ttl (a GC, a VM migration): on waking the term is over,
                # whatever the body does next.
                clock.jump(SLOW.ttl + 1)
                assert not term.valid
                await clock.sleep(3600)  # cancelled, not run out
        assert info.value.reason in (LossReason.EXPIRED, LossReason.PREEMPTED)
        # Someone leads again, in a new term (the paused node may win it back: it stopped).
        # The follower may learn of the expiry from the store's change feed, which waits on
        # real time (an idle feed rechecks every real second): 10 ms real between steps.
        await clock.run_until(
            lambda: len(leaders(es)) == 1, limit=10, step=0.1, pause=0.01, what="a leader"
        )
        (new,) = leaders(es)
        assert new.epoch is not None and new.epoch > term.epoch
        assert not (await leader.store.put("fenced", b"x", lease=term.lease)).ok


async def test_an_acquire_answered_after_its_deadline_is_given_back(tmp_path: Path) -> None:
    """An acquire that reaches the store only after the participant's deadline (it was
    paused, or the reply was slow) wins the lease, but the participant cannot use it: it
    releases it at once rather than leave the store holding it a whole ttl for nobody."""
    async with on_clock(tmp_path, 1) as (clock, (e,)):
        assert isinstance(e.store, SQLiteStore)
        # Wait (real time) until it sleeps its election timeout, the lease read and free.
        await clock.run_until(lambda: clock.pending > 0, limit=1, step=0, pause=0.01)
        with hung(e.store):
            await clock.advance(SLOW.election_timeout_max)  # the acquire is sent, and waits
            clock.jump(SLOW.renew_deadline + 1)  # past its deadline before it is answered
        lost: list[LossReason] = []
        e.on_event(lambda ev: lost.append(ev.reason) if isinstance(ev, LeadershipLost) else None)
        # Well within the ttl the orphan lease would have kept: released, then won again.
        await clock.run_until(
            lambda: e.is_leader and bool(lost), limit=5, step=0.1, pause=0.01, what="a leader"
        )
        assert lost == [LossReason.EXPIRED]


async def test_no_overlap_when_a_leader_cannot_renew(tmp_path: Path) -> None:
    """The leader's own deadline (renew_deadline from *sending* its last good renewal) ends
    its term before the store's expiry (ttl from processing it) lets another node in."""
    async with on_clock(tmp_path, 2) as (clock, es):
        await clock.run_until(lambda: len(leaders(es)) == 1, limit=10, step=0.1, what="a leader")
        (leader,) = leaders(es)
        other = next(e for e in es if e is not leader)
        assert isinstance(leader.store, SQLiteStore)
        began = clock.monotonic()
        stepped_down: list[float] = []

        def never_two() -> bool:
            assert len(leaders(es)) <= 1, "two leaders at once"
            if not leader.is_leader and not stepped_down:
                stepped_down.append(clock.monotonic() - began)
            return other.is_leader

        with hung(leader.store):
            took = await clock.run_until(never_two, limit=2 * SLOW.ttl, step=0.1, what="takeover")
        # It stopped within its renew deadline; the other took over only after the ttl.
        assert stepped_down and stepped_down[0] <= SLOW.renew_deadline + 0.1  # one step
        assert stepped_down[0] < took
        assert SLOW.ttl - SLOW.renew_interval <= took <= SLOW.ttl + 2


async def test_a_keeper_drops_what_it_cannot_renew_at_its_deadline(tmp_path: Path) -> None:
    clock = ManualClock()
    store = SQLiteStore(str(tmp_path / "k.db"), clock=clock.time)
    clock.wait_on(lambda: answering([store]))
    lost: list[tuple[str, LossReason, float]] = []
    keeper = LeaseKeeper(
        store, "n1", SLOW, on_lost=lambda n, r: lost.append((n, r, clock.monotonic())), clock=clock
    )
    await keeper.start()
    try:
        got = await keeper.add_many(["a", "b"])
        assert all(got.values())
        start = clock.monotonic()
        await clock.run_for(5 * SLOW.ttl, step=0.25)  # renewals every interval keep both
        assert keeper.get("a") is not None and keeper.get("b") is not None and not lost
        renewals = keeper.renewal_calls
        # One round per interval, each a step or two late (a renewal takes real time).
        assert renewals >= 5 * SLOW.ttl / (SLOW.renew_interval + 1)
        before = clock.monotonic()  # the last good renewal was sent at most this late
        unusable: list[float] = []

        def dropped() -> bool:
            if keeper.get("a") is None and not unusable:
                unusable.append(clock.monotonic() - before)
            return len(lost) == 2

        with hung(store):
            await clock.run_until(dropped, limit=SLOW.ttl, step=0.25, what="drops")
        assert {n for n, _, _ in lost} == {"a", "b"}
        assert all(r is LossReason.STORE_UNREACHABLE for _, r, _ in lost)
        # No longer handed out once the renew deadline passed (a step late at most), well
        # before the store's ttl could give it to anyone else; reported lost at the next
        # renewal round (a hung renewal holds the round up for one request timeout).
        assert unusable and unusable[0] <= SLOW.renew_deadline + 0.25
        late = SLOW.renew_deadline + SLOW.renew_interval + SLOW.request_timeout + 0.25
        assert all(at - before <= late for _, _, at in lost)
        assert start < before
    finally:
        await keeper.stop()


async def test_a_resign_whose_release_times_out_still_steps_down(tmp_path: Path) -> None:
    """The store stops answering as the leader resigns (as `baton elect` does after its
    command): the resign is not an error, the leader has stopped, and a leader is elected
    again in a newer term once the store answers."""
    async with on_clock(tmp_path, 2) as (clock, es):
        await clock.run_until(lambda: len(leaders(es)) == 1, limit=10, step=0.1, what="a leader")
        (leader,) = leaders(es)
        epoch = leader.epoch
        assert isinstance(leader.store, SQLiteStore) and epoch is not None
        with hung(leader.store):
            resigning = asyncio.ensure_future(leader.resign())
            await clock.run_until(resigning.done, limit=2 * SLOW.request_timeout, what="resign")
            assert resigning.result() is True
            assert not leader.is_leader
        # The store's feed waits on real time (an idle feed rechecks every real second).
        await clock.run_until(
            lambda: len(leaders(es)) == 1, limit=3 * SLOW.ttl, step=0.1, pause=0.01, what="a leader"
        )
        (new,) = leaders(es)
        assert new.epoch is not None and new.epoch > epoch
