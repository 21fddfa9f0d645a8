"""Leader election over a lease, with a fencing epoch.

An :class:`Election` is one participant (``node_id``) campaigning for one lease (``name``). It is
a follower or the leader (states as in leaderfeed); unlike leaderfeed, every leadership has an
epoch, and unlike etcd's ``Campaign`` a lost lease is noticed and acted on at once.

Followers learn of changes from the store's change feed, not by polling: they wake when the lease
is released, expires, or changes hands, and when the current lease is due to expire. A follower
that finds the lease free waits a random election timeout before it campaigns, so followers do
not stampede; the successor named by a handover (:meth:`Election.elect`) campaigns at once.

The leader renews every ``renew_interval``. It stops being leader, by itself, when it has not
renewed successfully within ``renew_deadline`` of *sending* its last successful renewal; the store
cannot let anyone else acquire until ``ttl`` after *processing* it, which is later. Work run in
:meth:`Election.leadership` is cancelled the moment leadership is lost, and ``term.epoch`` fences
everything it does::

    async with Election(store, "controller", "node-a") as election:
        async with election.leadership() as term:     # waits until this node leads
            await do_leader_work(term)                  # cancelled when the lease is lost

If leadership is lost while the body runs, the ``async with`` raises
:class:`~baton.errors.LeaseLost`, whose ``reason`` says why (expired, preempted, released, store
unreachable).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Self, TypeVar

from baton.clock import SYSTEM, Clock
from baton.errors import (
    ConfigError,
    FeedCompacted,
    LeaseLost,
    LossReason,
    NotLeader,
    StoreError,
)
from baton.lease.timings import Timings
from baton.logs import describe
from baton.store.base import Change, ChangeKind, Lease, Store, check_name

log = logging.getLogger("baton.election")
T = TypeVar("T")

#: Bound of each event subscriber's queue; when full, the oldest event is dropped (and counted).
EVENT_QUEUE_BOUND = 256


class State(enum.StrEnum):
    """An election participant's state."""

    FOLLOWER = "follower"
    LEADER = "leader"


@dataclass(frozen=True, slots=True)
class NewState:
    """Event: this participant became follower or leader."""

    state: State


@dataclass(frozen=True, slots=True)
class NewLeader:
    """Event: the lease's holder changed (``leader`` is None while nobody holds it)."""

    leader: str | None
    epoch: int | None


@dataclass(frozen=True, slots=True)
class LeadershipLost:
    """Event: this participant stopped being leader of ``epoch``, for ``reason``."""

    epoch: int
    reason: LossReason


ElectionEvent = NewState | NewLeader | LeadershipLost


@dataclass(frozen=True, slots=True)
class Term:
    """One leadership: the lease and its fencing ``epoch``. ``valid_until`` is the local
    monotonic time after which this node no longer acts as leader unless it renews."""

    lease: Lease
    election: Election

    @property
    def epoch(self) -> int:
        return self.lease.epoch

    @property
    def name(self) -> str:
        return self.lease.name

    @property
    def holder(self) -> str:
        return self.lease.holder

    @property
    def valid(self) -> bool:
        """Whether this term is still current: same epoch and inside the renew deadline."""
        return self.election._term_valid(self.lease.epoch)

    def check(self) -> None:
        """Raise :class:`LeaseLost` unless this term is still :attr:`valid`. Call it right
        before a side effect that is not fenced by the receiver."""
        if not self.valid:
            raise LeaseLost(self.name, self.election._loss_reason or LossReason.EXPIRED)


class EventStream:
    """A bounded subscription to an election's events (an async iterator)."""

    def __init__(self, election: Election) -> None:
        self._election = election
        self._queue: asyncio.Queue[ElectionEvent] = asyncio.Queue(EVENT_QUEUE_BOUND)
        self.dropped = 0

    def _push(self, event: ElectionEvent) -> None:
        if self._queue.full():
            self._queue.get_nowait()
            self.dropped += 1
        self._queue.put_nowait(event)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> ElectionEvent:
        return await self._queue.get()

    def close(self) -> None:
        self._election._streams.discard(self)


class Election:
    """One participant of the election for lease ``name``.

    ``start()`` (or ``async with``) begins campaigning; ``stop()`` resigns if leader and stops.
    ``rng`` may be given for reproducible election timeouts.
    """

    def __init__(
        self,
        store: Store,
        name: str,
        node_id: str,
        timings: Timings | None = None,
        *,
        rng: random.Random | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.store = store
        #: Every deadline and wait of the election is on this clock (tests pass a manual one).
        self.clock = clock
        self.name = check_name("election name", name)
        self.node_id = check_name("node id", node_id)
        self.timings = timings or Timings()
        self._rng = rng or random.Random()
        self.state = State.FOLLOWER
        self.leader: str | None = None
        self.leader_epoch: int | None = None
        self._lease: Lease | None = None
        self._valid_until = 0.0  # monotonic deadline of the current term
        self._loss_reason: LossReason | None = None
        self._task: asyncio.Task[None] | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._leader_changed = asyncio.Event()
        self._is_leader = asyncio.Event()
        self._successor_for_me = False
        self._hold_off_until = 0.0
        self._pending: asyncio.Future[None] | None = None
        self._pending_successor: str | None = None
        self._loss_callbacks: set[Callable[[LossReason], None]] = set()
        self._streams: set[EventStream] = set()
        self._callbacks: list[Callable[[ElectionEvent], None]] = []
        self._stopping = False
        self._newest_epoch = 0  # highest lease epoch seen from any source
        # Highest epoch known to have ended (this node let it go, or the feed said it was
        # released or expired): a late feed entry saying it was acquired is old news.
        self._ended_epoch = 0
        #: Called with the seconds each successful renewal took (for metrics).
        self.renewal_observer: Callable[[float], None] | None = None
        #: Called with a short operation name when a store call fails (for metrics).
        self.error_observer: Callable[[str], None] | None = None
        #: ``clock.monotonic()`` of the last store call that failed (None: none has).
        self.store_failed_at: float | None = None

    # -- public API --------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.state is State.LEADER and self._term_valid(self.epoch or -1)

    @property
    def epoch(self) -> int | None:
        """The fencing epoch of the current term, or None when not leader."""
        return self._lease.epoch if self._lease is not None else None

    @property
    def valid_until(self) -> float:
        """The clock's ``monotonic()`` after which this node stops leading unless it renews
        (0 when not leader). Processes that act for the leader can be held to it."""
        return self._valid_until if self._lease is not None else 0.0

    @property
    def term(self) -> Term | None:
        return Term(self._lease, self) if self._lease is not None and self.is_leader else None

    async def start(self) -> None:
        """Start campaigning (returns at once)."""
        if self._task is not None:
            return
        self._stopping = False
        await self.store.connect()
        self._watch_task = asyncio.create_task(self._watch(), name=f"election-watch:{self.name}")
        self._task = asyncio.create_task(self._run(), name=f"election:{self.name}")

    async def stop(self) -> None:
        """Resign if leader, then stop campaigning."""
        self._stopping = True
        if self.state is State.LEADER:
            with contextlib.suppress(StoreError, TimeoutError):
                await self._step_down(LossReason.RELEASED, successor=None)
        tasks = [t for t in (self._task, self._watch_task) if t is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            # Bounded: a store client stuck on a dead connection must not hang a clean stop.
            # Real seconds, not the election's clock: this bounds real I/O, and nothing moves
            # a manual clock while a test waits for its stop.
            _done, stuck = await asyncio.wait(tasks, timeout=2 * self.timings.request_timeout)
            for task in stuck:
                log.warning(
                    "task did not stop in time",
                    extra={"election": self.name, "node": self.node_id, "task": task.get_name()},
                )
        self._task = self._watch_task = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def events(self) -> EventStream:
        """Subscribe to events (bounded: see :data:`EVENT_QUEUE_BOUND`)."""
        stream = EventStream(self)
        self._streams.add(stream)
        return stream

    def on_event(self, callback: Callable[[ElectionEvent], None]) -> None:
        """Call ``callback`` synchronously for every event (keep it quick)."""
        self._callbacks.append(callback)

    async def wait_leadership(self, timeout: float | None = None) -> Term:
        """Wait until this participant leads and return its term."""
        async with self.clock.timeout(timeout):
            while True:
                await self._is_leader.wait()
                term = self.term
                if term is not None:
                    return term
                await self.clock.sleep(
                    0.01
                )  # leader flag set but deadline passed: let _lead see it

    async def wait_leader(self, timeout: float | None = None) -> str:
        """Wait until some participant is known to lead; return its id."""
        async with self.clock.timeout(timeout):
            while self.leader is None:
                self._leader_changed.clear()
                await self._leader_changed.wait()
            return self.leader

    @contextlib.asynccontextmanager
    async def leadership(self, timeout: float | None = None) -> AsyncIterator[Term]:
        """Wait until leader, then run the body as leader-only work: it is cancelled the moment
        leadership is lost, and the ``async with`` then raises :class:`LeaseLost`."""
        term = await self.wait_leadership(timeout)
        task = asyncio.current_task()
        assert task is not None
        lost: list[LossReason] = []
        cancelled: list[bool] = []

        def on_loss(reason: LossReason) -> None:
            if lost:
                return
            lost.append(reason)
            # resign()/elect() called by the body itself: let it finish, do not cancel it.
            if asyncio.current_task() is not task:
                cancelled.append(True)
                task.cancel(f"leadership of {self.name!r} lost: {reason.value}")

        self._loss_callbacks.add(on_loss)
        try:
            yield term
        except asyncio.CancelledError:
            if cancelled and task.uncancel() == 0:
                raise LeaseLost(self.name, lost[0]) from None
            raise
        finally:
            self._loss_callbacks.discard(on_loss)
        if cancelled:
            task.uncancel()
        if lost and lost[0] is not LossReason.RELEASED:
            raise LeaseLost(self.name, lost[0])

    async def resign(self) -> bool:
        """Stop leading and release the lease so another participant takes over at once. This
        participant then waits for another leader (or one ttl) before campaigning again.
        Whether it stepped down: a participant that does not lead (it handed leadership over
        with :meth:`elect`, lost it, or resigned already) has nothing to resign, and that is
        not an error (as etcd's ``Resign``)."""
        if self.state is not State.LEADER:
            return False
        try:
            await self._step_down(LossReason.RELEASED, successor=None)
        except (StoreError, TimeoutError) as exc:
            # It has stopped leading already (stepping down stops first); only the release did
            # not reach the store, so the lease lapses at its ttl instead of at once. Not the
            # caller's error: `baton elect` resigning after its command must not fail on it.
            log.warning(
                "resign: the lease could not be released; it lapses at its ttl",
                extra={"election": self.name, "node": self.node_id, "error": describe(exc)},
            )
        return True

    async def elect(self, node_id: str) -> None:
        """Hand leadership to ``node_id`` (a planned handover): the lease is released reserved
        for it for one ttl, so only it can acquire in that time. Leader only."""
        check_name("node id", node_id)
        if node_id == self.node_id and self.state is State.LEADER:
            return
        if self.state is not State.LEADER:
            raise NotLeader(
                f"{self.node_id} is not the leader of {self.name!r}: only the leader can hand "
                f"leadership to {node_id!r}"
            )
        await self._step_down(LossReason.RELEASED, successor=node_id)

    # -- internals ---------------------------------------------------------------------------

    def _term_valid(self, epoch: int) -> bool:
        return (
            self._lease is not None
            and self._lease.epoch == epoch
            and self.clock.monotonic() < self._valid_until
        )

    def _emit(self, event: ElectionEvent) -> None:
        for stream in list(self._streams):
            stream._push(event)
        for cb in list(self._callbacks):
            try:
                cb(event)
            except Exception:  # a bad callback must not break the election
                log.exception("election event callback failed")

    def _set_leader(self, leader: str | None, epoch: int | None) -> None:
        if (leader, epoch) != (self.leader, self.leader_epoch):
            self.leader, self.leader_epoch = leader, epoch
            self._leader_changed.set()
            self._emit(NewLeader(leader, epoch))

    def _become_leader(self, lease: Lease, sent_at: float) -> None:
        self._newest_epoch = max(self._newest_epoch, lease.epoch)
        self._lease = lease
        self._valid_until = sent_at + self.timings.renew_deadline
        self._loss_reason = None
        self.state = State.LEADER
        self._is_leader.set()
        log.info(
            "leader", extra={"election": self.name, "node": self.node_id, "epoch": lease.epoch}
        )
        self._emit(NewState(State.LEADER))
        self._set_leader(self.node_id, lease.epoch)

    def _lose(self, reason: LossReason) -> None:
        """Leave the leader state at once (before any await), cancelling leader-only work."""
        lease = self._lease
        if lease is None:
            return
        self._lease = None
        self._ended_epoch = max(self._ended_epoch, lease.epoch)
        self._valid_until = 0.0
        self._loss_reason = reason
        self.state = State.FOLLOWER
        self._is_leader.clear()
        for cb in list(self._loss_callbacks):
            cb(reason)
        log.log(
            logging.INFO if reason is LossReason.RELEASED else logging.WARNING,
            "leadership lost",
            extra={
                "election": self.name,
                "node": self.node_id,
                "epoch": lease.epoch,
                "reason": reason.value,
            },
        )
        self._emit(LeadershipLost(lease.epoch, reason))
        self._emit(NewState(State.FOLLOWER))
        if self.leader == self.node_id:
            self._set_leader(None, None)

    async def _step_down(self, reason: LossReason, successor: str | None) -> None:
        lease = self._lease
        if lease is None:
            return
        # Stop acting first, then tell the store: nobody may start before we have stopped.
        self._lose(reason)
        # Do not campaign again until someone else leads (or one ttl passes): a resign that
        # the same node immediately wins back would hand over nothing.
        self._hold_off_until = self.clock.monotonic() + self.timings.ttl
        # Shielded: a caller cancelled mid-release (e.g. the body that called resign) must not
        # leave the lease held until it expires.
        release = asyncio.ensure_future(self._call(self.store.release(lease, successor=successor)))
        try:
            await asyncio.shield(release)
        finally:
            self._wake.set()

    async def _call(self, aw: Awaitable[T]) -> T:
        """Await a store call within the request timeout."""
        async with self.clock.timeout(self.timings.request_timeout):
            return await aw

    def _election_timeout(self) -> float:
        t = self.timings
        return self._rng.uniform(t.election_timeout_min, t.election_timeout_max)

    async def _run(self) -> None:
        while not self._stopping:
            try:
                if self.state is State.LEADER:
                    await self._lead()
                else:
                    await self._follow()
            except asyncio.CancelledError:
                raise
            except (StoreError, TimeoutError) as exc:
                self.store_failed_at = self.clock.monotonic()
                if self.error_observer is not None:
                    self.error_observer("campaign")
                log.warning(
                    "store call failed",
                    extra={"election": self.name, "node": self.node_id, "error": describe(exc)},
                )
                if self.state is not State.LEADER:
                    await self._sleep_or_wake(self.timings.renew_interval / 2)

    async def _sleep_or_wake(self, delay: float, *, clear: bool = False) -> None:
        """Sleep up to ``delay`` seconds, returning early on a feed wake-up. Followers clear the
        flag before they read the lease (so a change after the read is never missed), not
        here."""
        if clear:
            self._wake.clear()
        with contextlib.suppress(TimeoutError):
            async with self.clock.timeout(max(0.0, delay)):
                await self._wake.wait()

    async def _follow(self) -> None:
        """One follower step: look at the lease, then campaign or wait for a change."""
        self._wake.clear()
        if self._successor_for_me:
            # The feed said a release named this node: campaign at once, without looking at
            # the lease first (one round trip less). The store decides on its own state, so a
            # lease taken or reserved for another since is refused, and the next step looks.
            self._successor_for_me = False
            sent_at = self.clock.monotonic()
            lease = await self._call(self.store.acquire(self.name, self.node_id, self.timings.ttl))
            if lease is not None:
                self._become_leader(lease, sent_at)
            return
        now = self.clock.monotonic()
        if self.leader is None and now < self._hold_off_until:
            # Free when last heard of (this node released it, or the feed said it was released
            # to another), and not this node's to take yet: nothing a read could change. The
            # feed wakes it when someone acquires (or at the end of the hold-off it looks).
            await self._sleep_or_wake(self._hold_off_until - now)
            return
        current = await self._call(self.store.get_lease(self.name))
        if current is not None:
            # Held by another, or by an earlier incarnation of this node that may still be
            # running: either way, wait for a change or for its expiry.
            self._newest_epoch = max(self._newest_epoch, current.epoch)
            self._set_leader(current.holder, current.epoch)
            store_now = await self._call(self.store.now())
            await self._sleep_or_wake(current.expires_at - store_now + 0.001)
            return
        self._set_leader(None, None)
        now = self.clock.monotonic()
        if self._successor_for_me:
            self._successor_for_me = False
        elif now < self._hold_off_until:
            await self._sleep_or_wake(self._hold_off_until - now)
            return
        else:
            await self._sleep_or_wake(self._election_timeout())
            if self._wake.is_set() and not self._successor_for_me:
                return  # something changed while we waited: look again
            self._successor_for_me = False
        sent_at = self.clock.monotonic()
        lease = await self._call(self.store.acquire(self.name, self.node_id, self.timings.ttl))
        if lease is not None:
            self._become_leader(lease, sent_at)
        else:
            # Held (someone was faster) or reserved for another node by a handover: the feed
            # wakes us when that resolves; a reservation lapses after one ttl at the latest.
            await self._sleep_or_wake(self.timings.ttl)

    async def _lead(self) -> None:
        """Renew until leadership is lost or given up."""
        t = self.timings
        lease = self._lease
        assert lease is not None
        next_renewal = self._valid_until - t.renew_deadline + t.renew_interval
        while self.state is State.LEADER and self._lease is lease:
            now = self.clock.monotonic()
            if now >= self._valid_until:
                # No renewal succeeded in time (or this process was paused): stop acting now.
                self._lose(await self._why_lost(lease, unreachable=True))
                await self._give_back(lease)
                return
            if now < next_renewal:
                await self._sleep_or_wake(min(next_renewal, self._valid_until) - now, clear=True)
                continue
            sent_at = self.clock.monotonic()
            budget = min(t.request_timeout, self._valid_until - sent_at)
            try:
                async with self.clock.timeout(budget):
                    renewed = (await self.store.renew(self.node_id, [lease]))[lease.name]
            except (StoreError, TimeoutError) as exc:
                self.store_failed_at = self.clock.monotonic()
                if self.error_observer is not None:
                    self.error_observer("renew")
                log.warning(
                    "renewal failed",
                    extra={"election": self.name, "node": self.node_id, "error": describe(exc)},
                )
                next_renewal = self.clock.monotonic() + min(t.request_timeout, t.renew_interval / 4)
                continue
            if self._lease is not lease:
                return  # resigned or handed over while the renewal was in flight
            if renewed is None:
                self._lose(await self._why_lost(lease, unreachable=False))
                return
            lease = self._lease = renewed
            self._valid_until = sent_at + t.renew_deadline
            if self.renewal_observer is not None:
                self.renewal_observer(self.clock.monotonic() - sent_at)
            next_renewal = sent_at + t.renew_interval

    async def _give_back(self, lease: Lease) -> None:
        """Release a lease this participant stopped using by its own deadline. The store may
        still hold it for this epoch: an acquire or renewal answered after the deadline (a
        slow reply, a pause while it was in flight) holds it there for a whole ttl that nobody
        could use. The release compares the epoch, so it never touches a newer holder's
        lease. Best effort: the participant has stopped acting already, and a release that
        fails leaves the lease to lapse at its ttl, as before."""
        try:
            await self._call(self.store.release(lease))
        except (StoreError, TimeoutError) as exc:
            log.info(
                "a lease past its deadline could not be released; it lapses at its ttl",
                extra={"election": self.name, "node": self.node_id, "error": describe(exc)},
            )

    async def _why_lost(self, lease: Lease, *, unreachable: bool) -> LossReason:
        """Classify a loss. Best effort: the leader has already stopped acting."""
        try:
            current = await self._call(self.store.get_lease(self.name))
        except (StoreError, TimeoutError):
            return LossReason.STORE_UNREACHABLE if unreachable else LossReason.EXPIRED
        if current is not None and current.epoch != lease.epoch:
            return LossReason.PREEMPTED
        return LossReason.EXPIRED

    async def _watch(self) -> None:
        """Follow the change feed for this lease and wake the main loop on every change."""
        since = None
        while not self._stopping:
            try:
                since = since or await self.store.head()
                async for change in self.store.watch(self.name, since=since):
                    since = change.position
                    if change.key == self.name:
                        self._on_change(change)
            except asyncio.CancelledError:
                raise
            except FeedCompacted:
                since = None
                self._wake.set()
            except (StoreError, ConfigError, OSError) as exc:
                log.warning(
                    "change feed failed",
                    extra={"election": self.name, "node": self.node_id, "error": describe(exc)},
                )
                await self.clock.sleep(self.timings.renew_interval / 2)

    def _on_change(self, change: Change) -> None:
        # The feed can lag behind what this participant already knows (it read the lease or
        # acquired it itself), so a change about an older epoch says nothing new.
        epoch = change.epoch or 0
        if epoch < self._newest_epoch:
            return
        self._newest_epoch = epoch
        if change.kind is ChangeKind.ACQUIRED:
            if epoch <= self._ended_epoch:
                # The feed is behind this node's own release (its acquisition of the term it
                # just handed over): taking it as news would name a leader that has gone and
                # send the follower to read the lease while the successor takes over.
                return
            self._set_leader(change.holder, change.epoch)
            mine = self._lease
            if mine is not None and epoch > mine.epoch:
                # Someone holds a newer epoch: ours is over whatever our clock says.
                self._lose(LossReason.PREEMPTED)
            if change.holder != self.node_id:
                self._hold_off_until = 0.0
        elif change.kind in (ChangeKind.RELEASED, ChangeKind.EXPIRED):
            self._ended_epoch = max(self._ended_epoch, epoch)
            if change.holder == self.leader:
                self._set_leader(None, None)
            if change.successor == self.node_id:
                self._successor_for_me = True
            elif change.successor is not None:
                self._hold_off_until = self.clock.monotonic() + self.timings.ttl
        self._wake.set()
