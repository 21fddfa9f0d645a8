"""The etcd backend of the coordination store (etcd 3.4+, through its v3 JSON gateway).

URL: ``etcd://[user:password@]host:port[,host:port...]/prefix[?cacert=/ca.pem]`` (``etcds://``
for TLS). Every key lives under ``<prefix>/<namespace>/``; the prefix holds a marker key
``<prefix>/.baton``, written when a store is first opened on an empty prefix, so that a URL
pointing at someone else's keys (Kubernetes' ``/registry``) is refused before anything is written.

How each guarantee of :mod:`baton.store.base` holds on etcd
-----------------------------------------------------------
*The store's clock* is the etcd member's wall clock, read from the ``Date`` header of its
answers and narrowed to about a round trip (:class:`~baton.store.etcd_gateway.ServerClock`). A
client knows an interval the member's clock lies in, and uses each end where it is safe: it judges
(is this lease expired? is this fence held?) by the lower end, so a lease is never judged expired
before the member's clock passed its expiry; it grants (epochs, expiries of acquired and renewed
leases) by the upper end, so a lease lasts at least its ttl of the member's time from the moment
it was asked for, and the holder's own deadline, counted on its clock from that moment, always
comes first. The cost of an uncertain clock is a lease that lasts longer, never a shorter one.
Members of one cluster must keep their clocks within milliseconds of each other (NTP), as Redis
servers must for a failover: a client that moves to another member starts its interval again.
etcd's own leases are not used: their TTLs are whole seconds with a floor of about 2 s, they
expire silently (no ``expired`` change could be logged), and the revoke runs only every 500 ms.

*Atomicity.* Every operation reads what it needs in one read-only transaction, decides, then
writes in one transaction that compares the ``mod_revision`` of every key it read: if anything it
read changed meanwhile, nothing is written and the operation starts again from the read. Every
change-writing operation also compares the revision counter key, so changes commit one at a time,
in the order of their revisions. The operations of one store take turns (a lock), so a process's
own tasks never fail each other's compares; other clients race, and the compares keep that safe.
A release, and puts fenced by leases only (a leader's writes), first try one round trip that
compares the counter as this store last saw it and the lease's holder, epoch and expiry; when
another client changed something since, that try fails and they read, then write (three round
trips instead of two).

*Revisions* are baton's own counter (the key ``rev``): etcd gives a whole transaction one
revision, while the contract wants one per change. The change log is one key per revision,
written in the same etcd transaction as the change it records.

*Epochs* are ``max(clock in microseconds, last + 1)`` with the last epoch of each name kept in
``epoch/<name>`` for good. A cluster that lost its data (restored from an old snapshot, or
recreated) starts a new incarnation; the clock term keeps epochs above every earlier one as long
as the restore takes longer than the clock's uncertainty (milliseconds).

*Renewal* of many leases sends its requests together, at most 8 in flight: a renewal of 64 or
more leases of one holder and ttl moves them into a *bundle*, whose one key holds their common
expiry, and the next renewal of the same leases is a single put of that key, compared on its
revision and expiry (:mod:`baton.store.etcd_bundles`, :mod:`baton.store.etcd_renewal`); fewer
leases are renewed each on its own key, 120 to a request, each a nested transaction comparing its
holder, epoch and expiry, so that one lost lease does not fail the others. A member's expiry is
its bundle's, in every read, fence and expiry below.

*Acquires* that queue behind another write of the same store commit a group at a time, an
acquire right after ``get_lease`` found the lease free uses that read, and an acquire right after
this store's watch delivered the lease's release (the newest change) commits on what the release
left, without reading (:mod:`baton.store.etcd_acquire`): a successor named by a handover takes
the lease in one round trip.

*Fenced writes.* :class:`~baton.store.base.LeaseHeld` is checked when read and again inside the
writing transaction (holder and epoch unchanged, expiry, its own or its bundle's, still ahead of
the clock as the request leaves): a write can only land while the lease is held, up to one
network latency.

*The change feed* reads the log keys; every watcher watches them through etcd, which sends each
new entry with its value, so a watcher woken by a change takes it from the watch without asking
(:mod:`baton.store.etcd_tail` says when that is safe; otherwise it reads), and looks for due
expiries again only once the soonest expiry it saw is due, or after an acquisition whose expiry
the watch did not bring (an ``acquired`` entry carries the lease's expiry). The log keeps
about ``log_limit`` changes: older positions raise :class:`~baton.errors.FeedCompacted`, as do
positions of another incarnation and positions ahead of the counter (a cluster that went back in
time).

The keys under ``<prefix>/<namespace>/`` are listed in :mod:`baton.store.etcd_keyspace`.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Final

from baton.errors import ConfigError
from baton.store import etcd_bundles as bundles
from baton.store import etcd_keyspace as keyspace
from baton.store.base import (
    Capabilities,
    Change,
    ChangeKind,
    Condition,
    Delete,
    FeedListener,
    Lapse,
    Lease,
    LeaseHeld,
    Op,
    Position,
    Put,
    Record,
    Store,
    TxnResult,
    VersionIs,
    check_floors,
    check_name,
    check_names,
    check_ops,
    check_same_holder,
    check_ttl,
    make_position,
)
from baton.store.etcd_acquire import Acquisition
from baton.store.etcd_gateway import (
    JSON,
    Gateway,
    KeyWatch,
    b64,
    parse_url,
    prefix_end,
    unb64,
)
from baton.store.etcd_keyspace import Keyspace, View, claim_prefix
from baton.store.etcd_renewal import Renewal

#: Leases whose expiry one ``expire_due`` transaction logs (four operations each).
EXPIRE_BATCH: Final = 30

#: now() asks the member when its last answer is older than this (seconds).
FRESH_CLOCK: Final = 0.5

_US = 1_000_000


class EtcdStore(Store):
    """A :class:`~baton.store.base.Store` in etcd v3 (see the module docstring)."""

    capabilities = Capabilities(multi_host=True, durable=True)

    def __init__(
        self, url: str, *, namespace: str = "baton", log_limit: int = keyspace.LOG_LIMIT
    ) -> None:
        self._target = parse_url(url)
        self.url = self._target.display
        self._ks = Keyspace(f"{self._target.prefix}/{namespace}/", log_limit, self.url)
        self._connect_lock = asyncio.Lock()
        self._bundles = bundles.Bundles()
        #: (incarnation, revision, soonest expiry in us or None) of expire_due's last look.
        self._soonest: tuple[str, int, int | None] | None = None
        self._renewal = Renewal(
            self._ks, self._bundles, self._now_us, self._grant_us, bundles.BUNDLE_MIN
        )
        self._acquisition = Acquisition(self._ks, self._bundles, self._now_us, self._grant_us)

    @property
    def requests(self) -> int:
        """Requests this store has sent to etcd (watches aside): round trips, for benchmarks."""
        return self._gateway().requests

    def _key(self, *parts: str) -> str:
        return self._ks.key(*parts)

    def _gateway(self) -> Gateway:
        return self._ks.gw()

    def _now_us(self) -> int:
        """The clock for judging (is it expired?): never ahead of the member's."""
        return int(self._gateway().clock.now() * _US)

    def _grant_us(self) -> int:
        """The clock for granting (epochs, expiries): never behind the member's, so a lease
        lasts at least its ttl of the member's time from the moment it was asked for."""
        return int(self._gateway().clock.latest() * _US)

    # -- lifecycle -----------------------------------------------------------------------------

    async def connect(self) -> None:
        """Reach a member, check its version and credentials and the key prefix."""
        async with self._connect_lock:
            if self._ks.gateway is not None:
                return
            gw = Gateway(self._target)
            try:
                await gw.open()
                await claim_prefix(gw, self._target.prefix)
                await gw.calibrate()
            except BaseException:
                await gw.aclose()
                raise
            self._ks.gateway = gw

    async def close(self) -> None:
        async with self._connect_lock:
            gw, self._ks.gateway = self._ks.gateway, None
            if gw is not None:
                await gw.aclose()

    # -- time ----------------------------------------------------------------------------------

    async def now(self) -> float:
        """The member's clock (see the module docstring), refreshed by one answer unless one
        came within :data:`FRESH_CLOCK` seconds (every answer refreshes it)."""
        clock = self._gateway().clock
        if clock.age() > FRESH_CLOCK:
            # A read any user with access to the prefix may make, served by the member itself.
            probe = {"key": b64(self._key("rev")), "serializable": True, "count_only": True}
            await self._gateway().post("/v3/kv/range", probe, idempotent=True)
        return clock.now()

    # -- leases --------------------------------------------------------------------------------

    def _lease_keys(self, name: str) -> tuple[str, str]:
        return self._key("lease", name), self._key("exp", name)

    def _keys_of(self, name: str) -> list[str]:
        """What judging lease ``name`` reads: holder and epoch, expiry or bundle."""
        return [self._key("lease", name), self._key("exp", name), self._key("bx", name)]

    def _expiry(self, view: View, name: str) -> tuple[int, int, str | None]:
        return bundles.expiry(self._ks, view, name)

    def _held_in(self, view: View, name: str, now: int) -> Lease | None:
        """Lease ``name`` as ``view`` read it, or None when free or expired at ``now``."""
        ident = view.values.get(self._key("lease", name))
        exp, ttl_us, _ = self._expiry(view, name)
        if ident is None or exp <= now:
            return None
        holder, epoch = keyspace.identity(ident)
        return Lease(name, holder, epoch, ttl_us / _US, exp / _US)

    def _left(self, name: str, bid: str | None) -> None:
        self._acquisition.left(name, bid)

    async def acquire(self, name: str, holder: str, ttl: float) -> Lease | None:
        """See :mod:`baton.store.etcd_acquire`."""
        check_name("lease name", name)
        check_name("holder", holder)
        return await self._acquisition.acquire(name, holder, check_ttl(ttl))

    async def renew(self, holder: str, leases: Sequence[Lease]) -> dict[str, Lease | None]:
        """Renew ``leases`` of ``holder``: bundles of this store by one put each, other leases
        in requests of :data:`~baton.store.etcd_renewal.RENEW_CHUNK`, all sent together (see
        :mod:`baton.store.etcd_renewal`)."""
        check_name("holder", holder)
        batch = list({lease.name: lease for lease in check_same_holder(holder, leases)}.values())
        if not batch:
            return {}
        return await self._renewal.renew(holder, batch, self._check_lease)

    @staticmethod
    def _check_lease(lease: Lease) -> None:
        check_name("lease name", lease.name)
        check_ttl(lease.ttl)

    async def release(self, lease: Lease, *, successor: str | None = None) -> bool:
        check_name("lease name", lease.name)
        check_name("holder", lease.holder)
        if successor is not None:
            check_name("successor", successor)
        lk, xk = self._lease_keys(lease.name)
        async with self._ks.writing:
            known = self._ks.known()
            if known is not None:
                # One round trip when no change was made since this store last looked (the
                # usual case for a leader letting go): holder, epoch and expiry are compared
                # inside the transaction instead of read first.
                fast = self._release_in_one_trip(known, lease, successor)
                bid = self._bundle_id(lease)
                if fast is not None and await self._ks.commit(known, *fast):
                    self._left(lease.name, bid)
                    return True
            for attempt in range(keyspace.MAX_ATTEMPTS):
                view = await bundles.read_resolved(self._ks, self._keys_of(lease.name))
                now = self._now_us()
                exp, ttl_us, bid = self._expiry(view, lease.name)
                if lk not in view.values or exp <= now:
                    return False
                if keyspace.identity(view.values[lk]) != (lease.holder, lease.epoch):
                    return False
                writes, change = self._release(lease, successor, now, ttl_us)
                if bid is None:
                    writes.append(keyspace.delete(xk))
                else:
                    writes += bundles.unbundle(self._ks, lease.name, bid)
                    writes += bundles.touch(self._ks, view, bid)
                if await self._ks.commit(view, writes, [change]):
                    self._left(lease.name, bid)
                    return True
                await self._ks.retry_pause(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def _bundle_id(self, lease: Lease) -> str | None:
        bundle = self._bundles.of(lease.name)
        return bundle.id if bundle is not None else None

    def _release_in_one_trip(
        self, known: View, lease: Lease, successor: str | None
    ) -> tuple[list[JSON], list[JSON], list[JSON]] | None:
        """Writes, changes and compares of a release that reads nothing first: the lease's
        holder and epoch, and its expiry (its own, or its bundle's when this store bundled
        it), are compared inside the transaction."""
        lk, xk = self._lease_keys(lease.name)
        now = self._now_us()
        ident = keyspace.value_is(lk, f"{lease.holder}\n{lease.epoch}")
        bundle = self._bundles.of(lease.name)
        if bundle is None:
            writes, change = self._release(lease, successor, now, round(lease.ttl * _US))
            compares = [ident, keyspace.value_above(xk, keyspace.pad(now))]
            return [*writes, keyspace.delete(xk)], [change], compares
        if bundle.members.get(lease.name) != lease.epoch or not bundle.value:
            return None
        bx, key = self._key("bx", lease.name), self._key("bnd", bundle.id)
        writes, change = self._release(lease, successor, now, bundle.ttl_us)
        writes += [
            keyspace.delete(bx),
            keyspace.delete(self._key("bm", bundle.id, lease.name)),
            keyspace.put(key, bundle.value),
        ]
        compares = [
            ident,
            keyspace.value_is(bx, bundle.id),
            keyspace.mod_is(key, bundle.mod),
            keyspace.value_above(key, keyspace.pad(now)),
        ]
        return writes, [change], compares

    def _release(
        self, lease: Lease, successor: str | None, now: int, ttl_us: int
    ) -> tuple[list[JSON], JSON]:
        """The writes (but those of its expiry) and the change of releasing ``lease``."""
        writes = [
            keyspace.delete(self._key("lease", lease.name)),
            keyspace.put(self._key("lapse", lease.name), f"{now} {ttl_us}"),
        ]
        extra: dict[str, Any] = {"h": lease.holder, "e": lease.epoch}
        if successor is not None:
            handover = f"{successor}\n{now + ttl_us}"
            writes.append(keyspace.put(self._key("handover", lease.name), handover))
            extra["s"] = successor
        return writes, keyspace.change(ChangeKind.RELEASED, lease.name, **extra)

    async def get_lease(self, name: str) -> Lease | None:
        check_name("lease name", name)
        view = await bundles.read_resolved(self._ks, self._acquisition.keys(name))
        held = self._held_in(view, name, self._now_us())
        if held is None:
            # Kept for an acquire that follows at once (a campaign): one round trip saved.
            self._acquisition.peeked(name, view)
        return held

    async def list_leases(self, prefix: str = "") -> list[Lease]:
        kinds = ("lease", "exp", "bx")
        ranges = [keyspace.key_range(self._key(kind, prefix)) for kind in kinds]
        ranges.append(keyspace.key_range(self._key("bnd", "")))
        view = await self._ks.read(ranges=ranges)
        for found in view.ranges:
            view.values.update(found)
        now = self._now_us()
        base = self._key("lease", "")
        names = sorted(k[len(base) :] for k, _ in view.ranges[0])
        held = (self._held_in(view, name, now) for name in names)
        return [lease for lease in held if lease is not None]

    async def lapses(self, names: Sequence[str]) -> dict[str, Lapse]:
        wanted = check_names("lease name", names)
        out: dict[str, Lapse] = {}
        # Four keys a name, and room for the bundles they name.
        step = keyspace.READ_CHUNK // 5 - 1
        for i in range(0, len(wanted), step):
            chunk = wanted[i : i + step]
            keys = [k for n in chunk for k in (*self._keys_of(n), self._key("lapse", n))]
            view = await bundles.read_resolved(self._ks, keys)
            now = self._now_us()
            for name in chunk:
                if self._key("lease", name) in view.values:
                    exp, ttl_us, _ = self._expiry(view, name)
                    if exp <= now:  # an expiry nobody logged yet is a lapse already
                        out[name] = Lapse(name, exp / _US, ttl_us / _US)
                    continue
                raw = view.values.get(self._key("lapse", name))
                if raw is not None:
                    at, ttl_us = (int(x) for x in raw.split())
                    out[name] = Lapse(name, at / _US, ttl_us / _US)
        return out

    async def expire_due(self) -> float | None:
        """Log the expiry of the leases due soonest: up to :data:`EXPIRE_BATCH` leases with an
        expiry of their own, or members of the bundle due soonest, whichever is due first."""
        cached = self._soonest
        if cached is not None:
            inc, rev, soonest_us = cached
            # Only an acquisition can bring a lease expiry earlier than the soonest one seen
            # (renewals only postpone): with the expiries of those delivered since that look,
            # no need to look again.
            seen = self._ks.tail.acquired_expiries(inc, rev)
            if seen is not None:
                through, first = seen
                if first is not None:
                    soonest_us = first if soonest_us is None else min(soonest_us, first)
                self._soonest = (inc, through, soonest_us)
                now = self._now_us()
                if soonest_us is None:
                    return None
                if soonest_us > now:
                    return (soonest_us - now) / _US
        self._soonest = None
        xp, bp = self._key("exp", ""), self._key("bnd", "")
        by_value = {"sort_order": "ASCEND", "sort_target": "VALUE"}
        view = await self._ks.read(
            ranges=[
                {**keyspace.key_range(xp), **by_value, "limit": EXPIRE_BATCH + 1},
                {**keyspace.key_range(bp), **by_value, "limit": 1},
            ]
        )
        now = self._now_us()
        soonest = [(keyspace.exp(v)[0], k[len(xp) :]) for k, v in view.ranges[0]]
        due = [name for exp, name in soonest if exp <= now]
        bundle = [(keyspace.exp(v)[0], k[len(bp) :]) for k, v in view.ranges[1]]
        if bundle and bundle[0][0] <= now and (not due or bundle[0][0] <= soonest[0][0]):
            await self._expire_bundle(bundle[0][1])
            return 0.0
        if due:
            await self._expire(due[:EXPIRE_BATCH])
            return 0.0
        nexts = [exp for exp, _ in soonest[:1] + bundle]
        if view.inc is not None:
            self._soonest = (view.inc, view.rev, min(nexts) if nexts else None)
        return (min(nexts) - now) / _US if nexts else None

    async def _expire(self, names: Sequence[str]) -> None:
        """Log the expiry of ``names`` (those still past it when read), oldest first."""
        async with self._ks.writing:
            keys = [k for n in names for k in self._keys_of(n)]
            await self._log_expired(await bundles.read_resolved(self._ks, keys), names)

    async def _expire_bundle(self, bid: str) -> None:
        """Log the expiry of members of bundle ``bid`` (up to :data:`EXPIRE_BATCH`); delete the
        bundle once it has none left."""
        key, members = self._key("bnd", bid), self._key("bm", bid, "")
        async with self._ks.writing:
            listed = await self._ks.read(
                [key], [{**keyspace.key_range(members), "limit": EXPIRE_BATCH, "keys_only": True}]
            )
            names = [k[len(members) :] for k, _ in listed.ranges[0]]
            if not names:
                if key in listed.values:
                    await self._ks.commit(listed, [keyspace.delete(key)])
                return
            keys = [k for n in names for k in (*self._keys_of(n), self._key("bm", bid, n))]
            view = await bundles.read_resolved(self._ks, [key, *keys])
            # An index entry of a lease no longer in the bundle (or no longer held at all) is
            # dropped with the others, so that a due bundle always makes progress.
            stray: list[JSON] = []
            for n in names:
                if self._key("lease", n) not in view.values:
                    stray.append(keyspace.delete(self._key("bm", bid, n)))
                    if view.values.get(self._key("bx", n)) == bid.encode():
                        stray.append(keyspace.delete(self._key("bx", n)))
                elif view.values.get(self._key("bx", n)) != bid.encode():
                    stray.append(keyspace.delete(self._key("bm", bid, n)))
            await self._log_expired(view, names, stray)

    async def _log_expired(
        self, view: View, names: Sequence[str], extra: Sequence[JSON] = ()
    ) -> None:
        now = self._now_us()
        gone: list[tuple[int, str, int, str | None]] = []
        for name in names:
            exp, ttl_us, bid = self._expiry(view, name)
            if self._key("lease", name) in view.values and exp <= now:
                gone.append((exp, name, ttl_us, bid))
        writes: list[JSON] = list(extra)
        changes: list[JSON] = []
        for bid in sorted({g[3] for g in gone if g[3] is not None}):
            writes += bundles.touch(self._ks, view, bid)
        for exp, name, ttl_us, bid in sorted(gone, key=lambda g: (g[0], g[1])):
            holder, epoch = keyspace.identity(view.values[self._key("lease", name)])
            writes += [
                keyspace.delete(self._key("lease", name)),
                keyspace.put(self._key("lapse", name), f"{exp} {ttl_us}"),
            ]
            if bid is None:
                writes.append(keyspace.delete(self._key("exp", name)))
            else:
                writes += bundles.unbundle(self._ks, name, bid)
            changes.append(keyspace.change(ChangeKind.EXPIRED, name, h=holder, e=epoch))
        # Lost to a concurrent writer (a renewal, or another watcher logging the same expiry):
        # the caller's next look sees the outcome.
        if writes and await self._ks.commit(view, writes, changes):
            for _, name, _, bid in gone:
                self._left(name, bid)

    async def next_epochs(self, floors: Mapping[str, int]) -> dict[str, int]:
        wanted = check_floors(floors)
        if not wanted:
            return {}
        keys = {name: self._key("counter", name) for name in wanted}
        async with self._ks.writing:
            for attempt in range(keyspace.MAX_ATTEMPTS):
                view = await self._ks.read(list(keys.values()))
                grant = self._grant_us()
                out = {
                    name: max(grant, int(view.values.get(keys[name], b"0")) + 1, floor)
                    for name, floor in wanted.items()
                }
                if await self._ks.commit(
                    view, [keyspace.put(keys[n], str(e)) for n, e in out.items()]
                ):
                    return out
                await self._ks.retry_pause(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- records -------------------------------------------------------------------------------

    async def get(self, key: str) -> Record | None:
        check_name("record key", key)
        res = await self._gateway().post(
            "/v3/kv/range", {"key": b64(self._key("rec", key))}, idempotent=True
        )
        kvs = res.get("kvs")
        return keyspace.record(key, unb64(kvs[0].get("value"))) if kvs else None

    async def list(self, prefix: str = "") -> tuple[builtins.list[Record], Position]:
        base = self._key("rec", "")
        view = await self._ks.incarnated(ranges=[keyspace.key_range(self._key("rec", prefix))])
        records = [keyspace.record(k[len(base) :], v) for k, v in view.ranges[0]]
        return records, make_position(view.inc or "", view.rev)

    async def txn(self, ops: Sequence[Op], conditions: Sequence[Condition] = ()) -> TxnResult:
        check_ops(ops, conditions)
        keys: builtins.list[str] = []
        for cond in conditions:
            if isinstance(cond, VersionIs):
                keys.append(self._key("rec", check_name("record key", cond.key)))
            elif isinstance(cond, LeaseHeld):
                check_name("lease name", cond.name)
                check_name("holder", cond.holder)
                keys += self._keys_of(cond.name)
            else:
                raise ConfigError(f"unknown transaction condition {cond!r}")
        for op in ops:
            if not isinstance(op, Put | Delete):
                raise ConfigError(f"unknown transaction operation {op!r}")
            keys.append(self._key("rec", op.key))
        async with self._ks.writing:
            fast = await self._txn_in_one_trip(ops, conditions)
            if fast is not None:
                return fast
            for attempt in range(keyspace.MAX_ATTEMPTS):
                view = await bundles.read_resolved(self._ks, keys)
                failed = tuple(c for c in conditions if not self._holds(c, view))
                if failed:
                    return TxnResult(ok=False, revision=None, failed=failed)
                writes, changes, rev = self._ks.record_writes(ops, view.values, view.rev)
                if not changes:
                    return TxnResult(ok=True, revision=view.rev)
                # The fence, once more inside the write: its expiry still ahead of the clock.
                now = keyspace.pad(self._now_us())
                fences = [
                    keyspace.value_above(self._expiry_key(view, c.name), now)
                    for c in conditions
                    if isinstance(c, LeaseHeld)
                ]
                if await self._ks.commit(view, writes, changes, fences):
                    return TxnResult(ok=True, revision=rev)
                await self._ks.retry_pause(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _txn_in_one_trip(
        self, ops: Sequence[Op], conditions: Sequence[Condition]
    ) -> TxnResult | None:
        """Puts fenced by leases only (a leader's writes): with the counter this store last
        saw, the conditions are compared inside the one transaction instead of read first.
        None when that does not apply or did not commit: the caller reads, then writes."""
        known = self._ks.known()
        if known is None or not all(isinstance(op, Put) for op in ops):
            return None
        if not all(isinstance(c, LeaseHeld) for c in conditions):
            return None
        now = keyspace.pad(self._now_us())
        fences: builtins.list[JSON] = []
        for cond in conditions:
            assert isinstance(cond, LeaseHeld)
            lk, xk = self._lease_keys(cond.name)
            fences.append(keyspace.value_is(lk, f"{cond.holder}\n{cond.epoch}"))
            bundle = self._bundles.of(cond.name)
            if bundle is not None:
                # A lease this store bundled: its bundle's expiry (a VALUE compare of the
                # missing exp/ key would fail, and send every such write the long way).
                fences.append(keyspace.value_is(self._key("bx", cond.name), bundle.id))
                xk = self._key("bnd", bundle.id)
            fences.append(keyspace.value_above(xk, now))
        writes, changes, rev = self._ks.record_writes(ops, {}, known.rev)
        if await self._ks.commit(known, writes, changes, fences):
            return TxnResult(ok=True, revision=rev)
        return None

    def _holds(self, cond: Condition, view: View) -> bool:
        if isinstance(cond, VersionIs):
            raw = view.values.get(self._key("rec", cond.key))
            return (int(raw[:20]) if raw is not None else 0) == cond.version
        held = self._held_in(view, cond.name, self._now_us())
        return held is not None and (held.holder, held.epoch) == (cond.holder, cond.epoch)

    def _expiry_key(self, view: View, name: str) -> str:
        """The key that holds lease ``name``'s expiry in ``view``: its own, or its bundle's."""
        _, _, bid = self._expiry(view, name)
        return self._key("exp", name) if bid is None else self._key("bnd", bid)

    # -- change feed ---------------------------------------------------------------------------

    async def head(self) -> Position:
        view = await self._ks.incarnated()
        return make_position(view.inc or "", view.rev)

    async def _changes_after(
        self, incarnation: str, revision: int, prefix: str, limit: int
    ) -> tuple[builtins.list[Change], int]:
        return await self._ks.changes_after(incarnation, revision, prefix, limit)

    @contextlib.asynccontextmanager
    async def _listen(self) -> AsyncIterator[FeedListener]:
        # The log's keys, not the counter: each new entry arrives with its value, and the
        # watcher woken by it reads it from the tail (etcd_tail) instead of asking again.
        log = self._key("log", "")
        tail = self._ks.tail
        listener = KeyWatch(
            self._gateway(), log, prefix_end(log), lambda events: tail.events(log, events)
        )
        opened = False
        try:
            await listener.start()
            tail.opened()
            opened = True
            yield listener
        finally:
            if opened:
                tail.closed()
            await listener.stop()


__all__ = ["EtcdStore"]
