"""Renewal of many leases in the etcd store (:mod:`baton.store.etcd`), with lease bundles
(:mod:`baton.store.etcd_bundles`).

A renewal sends, all at once:

* one request renewing every bundle of this store that it names whole (one nested transaction
  per bundle: its revision as this store wrote it, its expiry ahead of the clock, one put);
* for :data:`~baton.store.etcd_bundles.BUNDLE_MIN` or more other leases of one ttl: requests of
  :data:`RENEW_CHUNK` leases that move them into a new bundle while renewing them (each lease a
  nested transaction comparing its holder and epoch and that its expiry is still ahead);
* for fewer: requests of :data:`RENEW_CHUNK` leases, each renewed on its own key.

A lease that fails there is not lost yet: it may be in a bundle this store does not know of (one
another client made, or a renewal whose answer never came). It is read, and renewed on its own
key when its holder, epoch and expiry say it is still held (one more round trip, only for
failures).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from baton.collector import collector_paused
from baton.store import etcd_bundles as bundles
from baton.store import etcd_keyspace as keyspace
from baton.store.base import Lease
from baton.store.etcd_bundles import Bundle, Bundles, answered, expiry_value, nested
from baton.store.etcd_gateway import JSON
from baton.store.etcd_keyspace import Keyspace

#: Leases per renewal request: one nested transaction each, plus the bundle's put; etcd's
#: default ``--max-txn-ops`` is 128 and a nested transaction's operations count against what
#: its parent leaves (three each here).
RENEW_CHUNK: Final = 120
#: Leases re-checked per read (three keys each, and their bundles' keys).
RECHECK_CHUNK: Final = 25
#: Renewal requests of one store in flight at once (a renewal of 100,000 leases sends 834).
IN_FLIGHT: Final = 8

_US = 1_000_000


class Renewal:
    """One store's renewals: its keyspace, the bundles it made, and its clock (``now_us`` for
    judging, ``grant_us`` for granting: see :mod:`baton.store.etcd`)."""

    def __init__(
        self,
        ks: Keyspace,
        owned: Bundles,
        now_us: Callable[[], int],
        grant_us: Callable[[], int],
        bundle_min: int,
    ) -> None:
        self.ks = ks
        self.owned = owned
        self.now_us = now_us
        self.grant_us = grant_us
        self.bundle_min = bundle_min
        #: Moves into a new bundle under way (see :meth:`renew`).
        self._moving: set[asyncio.Future[dict[str, Lease | None]]] = set()
        #: Requests in flight: more only queue up at the server and time out there.
        self._in_flight = asyncio.Semaphore(IN_FLIGHT)

    def _ident(self, holder: str, epoch: int) -> str:
        return f"{holder}\n{epoch}"

    async def renew(
        self, holder: str, batch: Sequence[Lease], check: Callable[[Lease], object]
    ) -> dict[str, Lease | None]:
        """Renew ``batch`` (leases of ``holder``, one per name); see the module docstring.
        ``check`` validates a lease (raising on bad input) before anything is sent; members of
        a bundle of ours were checked when they joined it."""
        if self._moving:
            await asyncio.wait(list(self._moving))
        with collector_paused():
            whole, rest = self.owned.split(holder, batch)
        for lease in rest:
            check(lease)
        now, grant = self.now_us(), self.grant_us()
        by_ttl: dict[int, list[Lease]] = {}
        for lease in rest:
            by_ttl.setdefault(round(lease.ttl * _US), []).append(lease)
        jobs: list[Awaitable[dict[str, Lease | None]]] = []
        if whole:
            jobs.append(self._renew_whole(holder, whole, now, grant))
        for ttl_us, group in by_ttl.items():
            chunks = [group[i : i + RENEW_CHUNK] for i in range(0, len(group), RENEW_CHUNK)]
            if len(group) >= self.bundle_min:
                # Moving thousands of leases takes seconds: a caller that gives up meanwhile
                # (its timeout) must not leave this store unsure of what moved, so the move
                # finishes on its own, and the next renewal waits for it.
                moving = asyncio.ensure_future(self._bundle_up(holder, chunks, ttl_us, now, grant))
                self._moving.add(moving)
                moving.add_done_callback(self._moving.discard)
                jobs.append(asyncio.shield(moving))
            else:
                jobs += [self._renew_each(holder, chunk, now, grant) for chunk in chunks]
        out: dict[str, Lease | None] = {}
        for answer in await asyncio.gather(*jobs):
            out.update(answer)
        # By identity: ``None in values`` would call Lease.__eq__ 100,000 times.
        if len(out) == len(batch) and all(v is not None for v in out.values()):
            return out
        failed = [x for x in batch if out.get(x.name) is None]
        for i in range(0, len(failed), RECHECK_CHUNK):
            out.update(await self._recheck(holder, failed[i : i + RECHECK_CHUNK]))
        return out

    def _renewed(self, lease: Lease, holder: str, expires_us: int) -> Lease:
        return Lease(lease.name, holder, lease.epoch, lease.ttl, expires_us / _US)

    async def _post(self, success: list[JSON], *, idempotent: bool) -> tuple[list[JSON], int]:
        async with self._in_flight:
            body = {"success": success}
            res = await self.ks.gw().post("/v3/kv/txn", body, idempotent=idempotent)
        revision = int(res.get("header", {}).get("revision", 0))
        answers: list[JSON] = res.get("responses", [])
        return answers, revision

    def _where(self, holder: str, lease: Lease, cutoff: str) -> tuple[list[JSON], list[JSON]]:
        """The compares that ``lease`` is held (by ``holder`` at its epoch, its expiry above
        ``cutoff``) where this store believes it is, and the writes that take it out of there:
        its bundle of ours (``bx/`` and ``bm/``), or its own ``exp/`` key."""
        lk, bx = self.ks.key("lease", lease.name), self.ks.key("bx", lease.name)
        held = keyspace.value_is(lk, self._ident(holder, lease.epoch))
        old = self.owned.of(lease.name)
        if old is not None and old.members.get(lease.name) == lease.epoch:
            old_key = self.ks.key("bnd", old.id)
            compare = [held, keyspace.value_is(bx, old.id), keyspace.value_above(old_key, cutoff)]
            return compare, bundles.unbundle(self.ks, lease.name, old.id)
        xk = self.ks.key("exp", lease.name)
        return [held, keyspace.value_above(xk, cutoff)], [keyspace.delete(xk)]

    async def _renew_whole(
        self, holder: str, whole: list[Bundle], now: int, grant: int
    ) -> dict[str, Lease | None]:
        """Renew bundles of ours by one put each; members of one that fails are re-checked."""
        out: dict[str, Lease | None] = {}
        pending = whole
        # A member released by this store meanwhile rewrote its bundle's key: that bundle is
        # renewed again with its new revision (a few times at most), not taken apart.
        for _ in range(3):
            sent = [(b, b.mod, dict(b.members)) for b in pending]
            ops = []
            for b, mod, _members in sent:
                key = self.ks.key("bnd", b.id)
                value = expiry_value(grant + b.ttl_us, b.ttl_us)
                compare = [keyspace.mod_is(key, mod), keyspace.value_above(key, keyspace.pad(now))]
                ops.append(nested(compare, [keyspace.put(key, value)]))
            answers, revision = await self._post(ops, idempotent=False)
            pending = []
            for (b, mod, members), answer in zip(sent, answers, strict=True):
                if answered(answer):
                    self.owned.wrote(b.id, revision, expiry_value(grant + b.ttl_us, b.ttl_us))
                    ttl, at = b.ttl_us / _US, (grant + b.ttl_us) / _US
                    with collector_paused():
                        for name, epoch in members.items():
                            out[name] = Lease(name, holder, epoch, ttl, at)
                elif b.mod != mod and self.owned.get(b.id) is b:
                    pending.append(b)
                else:
                    self.owned.drop(b)  # changed by another client: its members are re-checked
                    out.update(dict.fromkeys(members))
            if not pending:
                return out
        for b in pending:
            self.owned.drop(b)
            out.update(dict.fromkeys(b.members))
        return out

    async def _bundle_up(
        self, holder: str, chunks: list[list[Lease]], ttl_us: int, now: int, grant: int
    ) -> dict[str, Lease | None]:
        """Renew leases by moving them into a new bundle of ours."""
        bundle = self.owned.new(holder, ttl_us)
        key = self.ks.key("bnd", bundle.id)
        value = expiry_value(grant + ttl_us, ttl_us)
        cutoff = keyspace.pad(now)

        def move(lease: Lease) -> JSON:
            joins = [
                keyspace.put(self.ks.key("bx", lease.name), bundle.id),
                keyspace.put(self.ks.key("bm", bundle.id, lease.name), ""),
            ]
            compare, leave = self._where(holder, lease, cutoff)
            return nested(compare, [*leave, *joins])

        async def send(chunk: list[Lease]) -> dict[str, Lease | None]:
            answers, revision = await self._post(
                [keyspace.put(key, value), *(move(x) for x in chunk)], idempotent=False
            )
            out: dict[str, Lease | None] = {}
            for lease, answer in zip(chunk, answers[1:], strict=True):
                if answered(answer):
                    self.owned.join(bundle, lease.name, lease.epoch)
                    out[lease.name] = self._renewed(lease, holder, grant + ttl_us)
                else:
                    out[lease.name] = None
            self.owned.wrote(bundle.id, revision, value)
            return out

        try:
            answers = await asyncio.gather(*(send(chunk) for chunk in chunks))
        finally:
            if not bundle.members:
                self.owned.drop(bundle)  # its key lapses; expire_due deletes it then
        return {name: lease for answer in answers for name, lease in answer.items()}

    async def _renew_each(
        self, holder: str, chunk: list[Lease], now: int, grant: int
    ) -> dict[str, Lease | None]:
        """Renew each lease on its own key (moving members of a bundle of ours out of it)."""
        cutoff = keyspace.pad(now)
        ops = []
        for lease in chunk:
            xk, ttl_us = self.ks.key("exp", lease.name), round(lease.ttl * _US)
            compare, leave = self._where(holder, lease, cutoff)
            # Its own exp/ key is written, not deleted (etcd refuses both in one transaction).
            writes = [w for w in leave if w != keyspace.delete(xk)]
            writes.append(keyspace.put(xk, expiry_value(grant + ttl_us, ttl_us)))
            ops.append(nested(compare, writes))
        answers, _ = await self._post(ops, idempotent=True)
        out: dict[str, Lease | None] = {}
        for lease, answer in zip(chunk, answers, strict=True):
            if answered(answer):
                self.owned.leave(lease.name)
                out[lease.name] = self._renewed(lease, holder, grant + round(lease.ttl * _US))
            else:
                out[lease.name] = None
        return out

    async def _recheck(self, holder: str, chunk: list[Lease]) -> dict[str, Lease | None]:
        """Read leases a renewal failed for and renew, each on its own key, those still held."""
        keys = [self.ks.key(kind, x.name) for x in chunk for kind in ("lease", "exp", "bx")]
        view = await bundles.read_resolved(self.ks, keys)
        now, grant = self.now_us(), self.grant_us()
        out: dict[str, Lease | None] = dict.fromkeys(x.name for x in chunk)
        ops: list[JSON] = []
        touched: set[str] = set()
        tried: list[tuple[Lease, str | None]] = []
        for lease in chunk:
            lk, xk = self.ks.key("lease", lease.name), self.ks.key("exp", lease.name)
            exp, _, bid = bundles.expiry(self.ks, view, lease.name)
            ident = view.values.get(lk)
            if ident is None or exp <= now or keyspace.identity(ident) != (holder, lease.epoch):
                continue
            ttl_us = round(lease.ttl * _US)
            writes = [keyspace.put(xk, expiry_value(grant + ttl_us, ttl_us))]
            read = [lk, xk, self.ks.key("bx", lease.name)]
            if bid is not None:
                writes += bundles.unbundle(self.ks, lease.name, bid)
                read.append(self.ks.key("bnd", bid))
                touched.add(bid)
            compare = [keyspace.mod_is(k, view.mods.get(k, 0)) for k in read]
            compare.append(keyspace.value_above(read[-1] if bid else xk, keyspace.pad(now)))
            ops.append(nested(compare, writes))
            tried.append((lease, bid))
        if not ops:
            return out
        for bid in sorted(touched):
            # Once per bundle (etcd refuses two puts of one key in a transaction), whether or
            # not its members move: an extra rewrite only makes the owner re-check.
            key = self.ks.key("bnd", bid)
            compare = [keyspace.mod_is(key, view.mods.get(key, 0))]
            ops.append(nested(compare, bundles.touch(self.ks, view, bid)))
        answers, revision = await self._post(ops, idempotent=False)
        for (lease, bid), answer in zip(tried, answers, strict=False):
            if answered(answer):
                self.owned.leave(lease.name)
                if bid is not None:
                    self.owned.wrote(bid, revision)
                out[lease.name] = self._renewed(lease, holder, grant + round(lease.ttl * _US))
        return out


__all__ = ["IN_FLIGHT", "RECHECK_CHUNK", "RENEW_CHUNK", "Renewal"]
