"""``LeaseKeeper``: holds many leases of one holder and renews them all in one store round trip
per renew interval.

A node agent may lead thousands of small things at once (channel upstreams, placed objects);
renewing each on its own would cost thousands of calls per interval. The keeper renews the whole
set with one :meth:`~baton.store.base.Store.renew` call and applies the same safety rule as an
:class:`~baton.lease.election.Election`: a lease whose renewals have not succeeded within
``renew_deadline`` of *sending* the last good one is dropped by the keeper on its own (and
reported lost), before the store could give it to anyone else.

::

    keeper = LeaseKeeper(store, "node-a", Timings())
    await keeper.start()
    got = await keeper.add_many([f"channel/{i}" for i in range(10_000)])  # None: held elsewhere
    lease = keeper.get("channel/7")        # current Lease (epoch for fencing) or None
    await keeper.remove("channel/7")       # release
    await keeper.stop()                    # release everything
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from baton.clock import SYSTEM, Clock
from baton.errors import LossReason, StoreError
from baton.lease.timings import Timings
from baton.logs import describe
from baton.store.base import Lease, Store, check_name

log = logging.getLogger("baton.keeper")

#: How many acquisitions run concurrently in ``add_many``.
ACQUIRE_CONCURRENCY = 64


class LeaseKeeper:
    """Keeps leases of ``holder`` alive. ``on_lost(name, reason)`` is called for each lease the
    keeper stops holding other than by :meth:`remove` or :meth:`stop`."""

    def __init__(
        self,
        store: Store,
        holder: str,
        timings: Timings | None = None,
        on_lost: Callable[[str, LossReason], None] | None = None,
        *,
        clock: Clock = SYSTEM,
    ) -> None:
        self.store = store
        #: Renewal intervals and deadlines are on this clock (tests pass a manual one).
        self.clock = clock
        self.holder = check_name("holder", holder)
        self.timings = timings or Timings()
        self.on_lost = on_lost
        self._leases: dict[str, Lease] = {}
        self._valid_until: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None
        #: Round trips made by renewals (one per cycle, whatever the number of leases).
        self.renewal_calls = 0

    def __len__(self) -> int:
        return len(self._leases)

    def get(self, name: str) -> Lease | None:
        """The lease if it is held and inside its renew deadline, else None."""
        lease = self._leases.get(name)
        if lease is None or self.clock.monotonic() >= self._valid_until.get(name, 0.0):
            return None
        return lease

    def names(self) -> list[str]:
        return sorted(self._leases)

    async def start(self) -> None:
        await self.store.connect()
        if self._task is None:
            self._task = asyncio.create_task(self._renew_loop(), name=f"keeper:{self.holder}")

    async def stop(self) -> None:
        """Stop renewing and release every lease (so others can take them at once)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        held = list(self._leases.values())
        self._leases.clear()
        self._valid_until.clear()
        for lease in held:
            with contextlib.suppress(StoreError, TimeoutError):
                # Real seconds: this bounds real I/O at stop, when nothing moves a test's clock.
                async with asyncio.timeout(self.timings.request_timeout):
                    await self.store.release(lease)

    async def add(self, name: str) -> Lease | None:
        """Acquire ``name`` and keep it; None if someone else holds it."""
        return (await self.add_many([name]))[name]

    async def add_many(self, names: Iterable[str]) -> dict[str, Lease | None]:
        """Acquire each name (concurrently, bounded) and keep those acquired."""
        todo = [check_name("lease name", n) for n in names]
        gate = asyncio.Semaphore(ACQUIRE_CONCURRENCY)

        async def one(name: str) -> Lease | None:
            if name in self._leases:
                return self._leases[name]
            async with gate:
                sent = self.clock.monotonic()
                lease = await self.store.acquire(name, self.holder, self.timings.ttl)
            if lease is not None:
                self._leases[name] = lease
                self._valid_until[name] = sent + self.timings.renew_deadline
            return lease

        results = await asyncio.gather(*(one(n) for n in todo))
        return dict(zip(todo, results, strict=True))

    async def remove(self, name: str) -> bool:
        """Stop keeping ``name`` and release it."""
        lease = self._leases.pop(name, None)
        self._valid_until.pop(name, None)
        if lease is None:
            return False
        return await self.store.release(lease)

    def _drop(self, name: str, reason: LossReason) -> None:
        if self._leases.pop(name, None) is not None:
            self._valid_until.pop(name, None)
            if self.on_lost is not None:
                self.on_lost(name, reason)

    async def _renew_loop(self) -> None:
        t = self.timings
        while True:
            await self.clock.sleep(t.renew_interval)
            # Past their deadline (this process was paused, or renewals kept failing): drop
            # them before anything else, as an Election steps down.
            now = self.clock.monotonic()
            for name, until in list(self._valid_until.items()):
                if now >= until:
                    self._drop(name, LossReason.STORE_UNREACHABLE)
            batch = list(self._leases.values())
            if not batch:
                continue
            sent = self.clock.monotonic()
            try:
                async with self.clock.timeout(max(t.request_timeout, t.renew_interval / 2)):
                    renewed = await self.store.renew(self.holder, batch)
            except (StoreError, TimeoutError) as exc:
                log.warning(
                    "renewal failed",
                    extra={"node": self.holder, "leases": len(batch), "error": describe(exc)},
                )
                continue
            finally:
                self.renewal_calls += 1
            for lease in batch:
                new = renewed.get(lease.name)
                if self._leases.get(lease.name) is not lease:
                    continue  # removed while the renewal was in flight
                if new is None:
                    self._drop(lease.name, LossReason.EXPIRED)
                else:
                    self._leases[lease.name] = new
                    self._valid_until[lease.name] = sent + t.renew_deadline
