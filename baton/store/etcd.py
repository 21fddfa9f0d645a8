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

*Renewal* of many leases is one request per 120 leases (etcd's default ``--max-txn-ops`` is 128,
and a nested transaction's operations count against its parent's budget), all sent at once:
each lease is a nested transaction that compares its holder and epoch and that its expiry is
still ahead of the clock, so one lost lease does not fail the others.

*Fenced writes.* :class:`~baton.store.base.LeaseHeld` is checked when read and again inside the
writing transaction (holder and epoch unchanged, expiry still ahead of the clock as the request
leaves): a write can only land while the lease is held, up to one network latency.

*The change feed* reads the log keys; watchers are woken by an etcd watch on the counter key, so
they learn of a change within a round trip. The log keeps about ``log_limit`` changes: older
positions raise :class:`~baton.errors.FeedCompacted`, as do positions of another incarnation and
positions ahead of the counter (a cluster that went back in time).

The keys under ``<prefix>/<namespace>/`` are listed in :mod:`baton.store.etcd_keyspace`.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Final

from baton.errors import ConfigError
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
from baton.store.etcd_gateway import (
    JSON,
    Gateway,
    KeyWatch,
    b64,
    parse_url,
    unb64,
)
from baton.store.etcd_keyspace import Keyspace, View, claim_prefix

#: Leases per renewal request (each is a nested transaction of one put).
RENEW_CHUNK: Final = 120
#: Leases whose expiry one ``expire_due`` transaction logs (four operations each).
EXPIRE_BATCH: Final = 30
#: Reads of free leases kept for an acquire that follows (more are dropped, all at once).
PEEKED_MAX: Final = 256

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
        #: The last read of free leases by get_lease, by name, for the acquire that follows.
        self._peeked: dict[str, View] = {}

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
        """The member's clock (see the module docstring), refreshed by one answer."""
        # A read any user with access to the prefix may make, served by the member itself.
        probe = {"key": b64(self._key("rev")), "serializable": True, "count_only": True}
        await self._gateway().post("/v3/kv/range", probe, idempotent=True)
        return self._gateway().clock.now()

    # -- leases --------------------------------------------------------------------------------

    def _lease_keys(self, name: str) -> tuple[str, str]:
        return self._key("lease", name), self._key("exp", name)

    async def acquire(self, name: str, holder: str, ttl: float) -> Lease | None:
        check_name("lease name", name)
        check_name("holder", holder)
        seconds = check_ttl(ttl)
        ttl_us = round(seconds * _US)
        lk, xk = self._lease_keys(name)
        ek, hk = self._key("epoch", name), self._key("handover", name)
        async with self._ks.writing:
            # A follower looks at the lease (get_lease) right before it campaigns: that read
            # serves as this one's, and the commit's compares catch anything written since.
            peeked = self._peeked.pop(name, None)
            for attempt in range(keyspace.MAX_ATTEMPTS):
                view = peeked or await self._ks.read(self._acquire_keys(name))
                now = self._now_us()
                changes: list[JSON] = []
                if lk in view.values:
                    exp, _ = keyspace.exp(view.values.get(xk))
                    if exp > now:
                        if peeked is not None:  # maybe stale: only a fresh read may refuse
                            peeked = None
                            continue
                        return None
                    # Expired by the store clock but not logged yet: log it first, so the feed
                    # reads "expired" before "acquired".
                    old_holder, old_epoch = keyspace.identity(view.values[lk])
                    changes.append(
                        keyspace.change(ChangeKind.EXPIRED, name, h=old_holder, e=old_epoch)
                    )
                elif hk in view.values:
                    successor, until = keyspace.handover(view.values[hk])
                    if successor != holder and until > now:
                        if peeked is not None:
                            peeked = None
                            continue
                        return None
                grant = self._grant_us()
                epoch = max(grant, int(view.values.get(ek, b"0")) + 1)
                changes.append(keyspace.change(ChangeKind.ACQUIRED, name, h=holder, e=epoch))
                writes = [
                    keyspace.put(lk, f"{holder}\n{epoch}"),
                    keyspace.put(xk, f"{keyspace.pad(grant + ttl_us)} {ttl_us}"),
                    keyspace.put(ek, str(epoch)),
                    keyspace.delete(hk),
                    keyspace.delete(self._key("lapse", name)),
                ]
                if await self._ks.commit(view, writes, changes):
                    return Lease(name, holder, epoch, seconds, (grant + ttl_us) / _US)
                if peeked is None:
                    await self._ks.retry_pause(attempt)
                peeked = None
        raise AssertionError("unreachable")  # pragma: no cover

    def _acquire_keys(self, name: str) -> list[str]:
        """What an acquire of ``name`` reads (and what get_lease reads, to serve it)."""
        return [*self._lease_keys(name), self._key("epoch", name), self._key("handover", name)]

    async def renew(self, holder: str, leases: Sequence[Lease]) -> dict[str, Lease | None]:
        """Renew ``leases`` of ``holder``: one request per :data:`RENEW_CHUNK` leases, sent
        together, each lease its own nested transaction (see the module docstring)."""
        check_name("holder", holder)
        batch = list({lease.name: lease for lease in check_same_holder(holder, leases)}.values())
        for lease in batch:
            check_name("lease name", lease.name)
            check_ttl(lease.ttl)
        if not batch:
            return {}
        chunks = [batch[i : i + RENEW_CHUNK] for i in range(0, len(batch), RENEW_CHUNK)]
        answers = await asyncio.gather(*(self._renew_chunk(holder, c) for c in chunks))
        return {name: lease for answer in answers for name, lease in answer.items()}

    async def _renew_chunk(self, holder: str, chunk: Sequence[Lease]) -> dict[str, Lease | None]:
        now, grant = self._now_us(), self._grant_us()
        nested = []
        for lease in chunk:
            lk, xk = self._lease_keys(lease.name)
            ttl_us = round(lease.ttl * _US)
            nested.append(
                {
                    "request_txn": {
                        "compare": [
                            keyspace.value_is(lk, f"{holder}\n{lease.epoch}"),
                            keyspace.value_above(xk, keyspace.pad(now)),
                        ],
                        "success": [keyspace.put(xk, f"{keyspace.pad(grant + ttl_us)} {ttl_us}")],
                    }
                }
            )
        res = await self._gateway().post("/v3/kv/txn", {"success": nested}, idempotent=True)
        out: dict[str, Lease | None] = {}
        answers = res.get("responses", [])
        for lease, answer in zip(chunk, answers, strict=True):
            ok = answer.get("response_txn", {}).get("succeeded", False)
            at = (grant + round(lease.ttl * _US)) / _US
            out[lease.name] = Lease(lease.name, holder, lease.epoch, lease.ttl, at) if ok else None
        return out

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
                now = self._now_us()
                fences = [
                    keyspace.value_is(lk, f"{lease.holder}\n{lease.epoch}"),
                    keyspace.value_above(xk, keyspace.pad(now)),
                ]
                writes, change = self._release(lease, successor, now, round(lease.ttl * _US))
                if await self._ks.commit(known, writes, [change], fences):
                    return True
            for attempt in range(keyspace.MAX_ATTEMPTS):
                view = await self._ks.read([lk, xk])
                now = self._now_us()
                exp, ttl_us = keyspace.exp(view.values.get(xk))
                if lk not in view.values or exp <= now:
                    return False
                if keyspace.identity(view.values[lk]) != (lease.holder, lease.epoch):
                    return False
                writes, change = self._release(lease, successor, now, ttl_us)
                if await self._ks.commit(view, writes, [change]):
                    return True
                await self._ks.retry_pause(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def _release(
        self, lease: Lease, successor: str | None, now: int, ttl_us: int
    ) -> tuple[list[JSON], JSON]:
        """The writes and the change of releasing ``lease`` at ``now``."""
        lk, xk = self._lease_keys(lease.name)
        writes = [
            keyspace.delete(lk),
            keyspace.delete(xk),
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
        lk, xk = self._lease_keys(name)
        view = await self._ks.read(self._acquire_keys(name))
        held = self._held(name, view.values.get(lk), view.values.get(xk), self._now_us())
        if held is None:
            # Kept for an acquire that follows at once (a campaign): one round trip saved.
            if len(self._peeked) >= PEEKED_MAX:
                self._peeked.clear()
            self._peeked[name] = view
        return held

    @staticmethod
    def _held(name: str, ident: bytes | None, exp_raw: bytes | None, now: int) -> Lease | None:
        if ident is None or exp_raw is None:
            return None
        exp, ttl_us = keyspace.exp(exp_raw)
        if exp <= now:
            return None
        holder, epoch = keyspace.identity(ident)
        return Lease(name, holder, epoch, ttl_us / _US, exp / _US)

    async def list_leases(self, prefix: str = "") -> list[Lease]:
        lp, xp = self._lease_keys(prefix)
        view = await self._ks.read(ranges=[keyspace.key_range(lp), keyspace.key_range(xp)])
        now = self._now_us()
        idents = {k[len(self._key("lease", "")) :]: v for k, v in view.ranges[0]}
        exps = {k[len(self._key("exp", "")) :]: v for k, v in view.ranges[1]}
        held = (self._held(n, idents[n], exps.get(n), now) for n in sorted(idents))
        return [lease for lease in held if lease is not None]

    async def lapses(self, names: Sequence[str]) -> dict[str, Lapse]:
        wanted = check_names("lease name", names)
        out: dict[str, Lapse] = {}
        step = keyspace.READ_CHUNK // 3 - 1
        for i in range(0, len(wanted), step):
            chunk = wanted[i : i + step]
            keys = [k for n in chunk for k in (*self._lease_keys(n), self._key("lapse", n))]
            view = await self._ks.read(keys)
            now = self._now_us()
            for name in chunk:
                lk, xk = self._lease_keys(name)
                if lk in view.values:
                    exp, ttl_us = keyspace.exp(view.values.get(xk))
                    if exp <= now:  # an expiry nobody logged yet is a lapse already
                        out[name] = Lapse(name, exp / _US, ttl_us / _US)
                    continue
                raw = view.values.get(self._key("lapse", name))
                if raw is not None:
                    at, ttl_us = (int(x) for x in raw.split())
                    out[name] = Lapse(name, at / _US, ttl_us / _US)
        return out

    async def expire_due(self) -> float | None:
        xp = self._key("exp", "")
        sorted_exps = {**keyspace.key_range(xp), "sort_order": "ASCEND", "sort_target": "VALUE"}
        soonest = await self._gateway().post(
            "/v3/kv/range", {**sorted_exps, "limit": EXPIRE_BATCH + 1}, idempotent=True
        )
        now = self._now_us()
        due: list[str] = []
        for kv in soonest.get("kvs", []):
            exp, _ = keyspace.exp(unb64(kv.get("value")))
            if exp > now:
                return (exp - now) / _US if not due else 0.0
            due.append(unb64(kv["key"]).decode()[len(xp) :])
        if not due:
            return None
        await self._expire(due[:EXPIRE_BATCH])
        return 0.0

    async def _expire(self, names: Sequence[str]) -> None:
        """Log the expiry of ``names`` (those still past it when read), oldest first."""
        async with self._ks.writing:
            await self._expire_locked(names)

    async def _expire_locked(self, names: Sequence[str]) -> None:
        keys = [k for n in names for k in self._lease_keys(n)]
        view = await self._ks.read(keys)
        now = self._now_us()
        gone: list[tuple[int, str, int]] = []
        for name in names:
            lk, xk = self._lease_keys(name)
            exp, ttl_us = keyspace.exp(view.values.get(xk))
            if lk in view.values and exp <= now:
                gone.append((exp, name, ttl_us))
        writes: list[JSON] = []
        changes: list[JSON] = []
        for exp, name, ttl_us in sorted(gone):
            lk, xk = self._lease_keys(name)
            holder, epoch = keyspace.identity(view.values[lk])
            writes += [
                keyspace.delete(lk),
                keyspace.delete(xk),
                keyspace.put(self._key("lapse", name), f"{exp} {ttl_us}"),
            ]
            changes.append(keyspace.change(ChangeKind.EXPIRED, name, h=holder, e=epoch))
        # Lost to a concurrent writer (a renewal, or another watcher logging the same expiry):
        # the caller's next look sees the outcome.
        if changes:
            await self._ks.commit(view, writes, changes)

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
                keys += self._lease_keys(cond.name)
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
                view = await self._ks.read(keys)
                failed = tuple(c for c in conditions if not self._holds(c, view))
                if failed:
                    return TxnResult(ok=False, revision=None, failed=failed)
                writes, changes, rev = self._ks.record_writes(ops, view.values, view.rev)
                if not changes:
                    return TxnResult(ok=True, revision=view.rev)
                # The fence, once more inside the write: its expiry still ahead of the clock.
                now = keyspace.pad(self._now_us())
                fences = [
                    keyspace.value_above(self._key("exp", c.name), now)
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
            fences.append(keyspace.value_above(xk, now))
        writes, changes, rev = self._ks.record_writes(ops, {}, known.rev)
        if await self._ks.commit(known, writes, changes, fences):
            return TxnResult(ok=True, revision=rev)
        return None

    def _holds(self, cond: Condition, view: View) -> bool:
        if isinstance(cond, VersionIs):
            raw = view.values.get(self._key("rec", cond.key))
            return (int(raw[:20]) if raw is not None else 0) == cond.version
        lk, xk = self._lease_keys(cond.name)
        held = self._held(cond.name, view.values.get(lk), view.values.get(xk), self._now_us())
        return held is not None and (held.holder, held.epoch) == (cond.holder, cond.epoch)

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
        listener = KeyWatch(self._gateway(), self._key("rev"))
        try:
            await listener.start()
            yield listener
        finally:
            await listener.stop()


__all__ = ["EtcdStore"]
