"""Acquiring leases in the etcd store (:mod:`baton.store.etcd`).

An acquire reads the lease's keys, decides, and commits (logging ``expired`` first when the
lease ran out unlogged, then ``acquired``), comparing everything it read. Two ways make that
cheaper without weakening it:

* *A read just made.* A follower looks at the lease (``get_lease``) right before it campaigns;
  when it found the lease free, that read serves the acquire (:meth:`Acquisition.peeked`). The
  commit's compares catch anything written since, and a possibly stale read never refuses: it
  reads again instead.
* *A release just delivered.* When the newest change this store's watches delivered
  (:attr:`~baton.store.etcd_tail.LogTail.newest`) is the release of the lease, to this holder or
  to nobody in particular, the acquire writes at once: the release left the lease's keys absent
  (its handover key, if it named a successor, written by the release), the revision counter
  written by the release, and the epoch key at the released epoch, and the commit compares
  exactly that (the epoch key by its value: the event does not tell its ``mod_revision``). A
  successor named by a handover then takes the lease one round trip after the release reached
  it. Anything written since fails a compare, and the acquire reads as usual.
* *Acquires that wait together commit together.* A store's writes take turns (they all compare
  the revision counter). Acquires that queue up behind another write are taken
  :data:`GROUP` at a time: one read for all their keys and one commit for all their changes, so
  a node acquiring thousands of leases at once makes two round trips per group instead of two
  per lease. When the group's commit fails (another client wrote meanwhile), each acquire runs
  on its own.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from baton.store import etcd_bundles as bundles
from baton.store import etcd_keyspace as keyspace
from baton.store.base import ChangeKind, Lease
from baton.store.etcd_bundles import Bundles, expiry_value
from baton.store.etcd_gateway import JSON
from baton.store.etcd_keyspace import Keyspace, View

#: Acquires committed together (six operations each, within etcd's default 128 per
#: transaction; five keys each, and their bundles, within one read).
GROUP: Final = 16
#: Operations of a group's commit, leaving room for the counter and a trim of the log.
OPS_BUDGET: Final = 120
#: Reads of free leases kept for an acquire that follows (more are dropped, all at once).
PEEKED_MAX: Final = 256

_US = 1_000_000


@dataclass(frozen=True, slots=True)
class _Decision:
    """What acquiring one lease writes and logs, and what it gives."""

    writes: list[JSON]
    changes: list[JSON]
    lease: Lease
    left: str | None  # the bundle the lease's expired holding was in


@dataclass(slots=True)
class _Waiting:
    name: str
    holder: str
    ttl: float
    done: asyncio.Future[Lease | None]


class Acquisition:
    """One store's acquires (see the module docstring)."""

    def __init__(
        self,
        ks: Keyspace,
        owned: Bundles,
        now_us: Callable[[], int],
        grant_us: Callable[[], int],
    ) -> None:
        self.ks = ks
        self.owned = owned
        self.now_us = now_us
        self.grant_us = grant_us
        self._peeked: dict[str, View] = {}
        self._queue: list[_Waiting] = []
        self._drainer: asyncio.Future[None] | None = None

    def keys(self, name: str) -> list[str]:
        """What an acquire of ``name`` reads (and what get_lease reads, to serve it)."""
        return [self.ks.key(kind, name) for kind in ("lease", "exp", "bx", "epoch", "handover")]

    def peeked(self, name: str, view: View) -> None:
        """``get_lease`` found ``name`` free in ``view``: keep it for an acquire that follows."""
        if len(self._peeked) >= PEEKED_MAX:
            self._peeked.clear()
        self._peeked[name] = view

    def _after_release(self, name: str, holder: str) -> tuple[View, list[JSON]] | None:
        """The lease's keys as the newest change delivered, a release of ``name`` that leaves it
        to ``holder`` or to anyone, left them, and the compare that view needs besides its
        ``mods`` (see the module docstring); None when the tail does not show that."""
        tail, known = self.ks.tail, self.ks.known()
        newest = tail.newest
        if newest is None or known is None or known.inc is None:
            return None
        revision, mod, entry = newest
        if revision != tail.high or mod <= 0:
            return None  # a read saw a later change, or the watch did not say where
        if entry.get("k") != ChangeKind.RELEASED.value or entry.get("n") != name:
            return None
        successor, epoch = entry.get("s"), entry.get("e")
        if successor not in (None, holder) or not isinstance(epoch, int):
            return None
        lk, xk, bk, ek, hk = self.keys(name)
        rk, ik = self.ks.key("rev"), self.ks.key("inc")
        view = View(
            rev=revision,
            inc=known.inc,
            # The handover key (reserved for ``holder``, when there is one) is compared by its
            # mod_revision only: a reservation for the acquirer refuses nothing.
            values={rk: str(revision).encode(), ik: known.inc.encode(), ek: str(epoch).encode()},
            mods={
                rk: mod,
                ik: known.mods.get(ik, 0),
                lk: 0,
                xk: 0,
                bk: 0,
                hk: mod if successor is not None else 0,
            },
        )
        return view, [keyspace.value_is(ek, str(epoch))]

    async def acquire(self, name: str, holder: str, ttl: float) -> Lease | None:
        peeked = self._peeked.pop(name, None)
        compares: list[JSON] = []
        released = self._after_release(name, holder)
        if released is not None and (peeked is None or peeked.rev < released[0].rev):
            # The release came after the read get_lease kept (the read of a node that let
            # the lease go, kept until its next campaign, would only fail its compares).
            peeked, compares = released
        if peeked is None and self.ks.writing.locked():
            waiting = _Waiting(name, holder, ttl, asyncio.get_running_loop().create_future())
            self._queue.append(waiting)
            if self._drainer is None or self._drainer.done():
                # A task of its own: a caller cancelled while it waits must not strand the
                # others queued behind it.
                self._drainer = asyncio.ensure_future(self._drain())
            return await waiting.done
        async with self.ks.writing:
            return await self._one(name, holder, ttl, peeked, compares)

    def left(self, name: str, bid: str | None) -> None:
        """``name`` left bundle ``bid`` by this store's last commit, which rewrote its key."""
        if bid is not None:
            self.owned.leave(name)
            self.owned.wrote(bid, self.ks.committed)

    def _decide(self, view: View, name: str, holder: str, ttl: float) -> _Decision | None:
        """Acquire ``name`` as ``view`` read it, or None when it is held or reserved."""
        lk, xk = self.ks.key("lease", name), self.ks.key("exp", name)
        ek, hk = self.ks.key("epoch", name), self.ks.key("handover", name)
        now = self.now_us()
        changes: list[JSON] = []
        writes: list[JSON] = []
        left: str | None = None
        if lk in view.values:
            exp, _, left = bundles.expiry(self.ks, view, name)
            if exp > now:
                return None
            # Expired by the store clock but not logged yet: log it first, so the feed reads
            # "expired" before "acquired".
            old_holder, old_epoch = keyspace.identity(view.values[lk])
            changes.append(keyspace.change(ChangeKind.EXPIRED, name, h=old_holder, e=old_epoch))
            if left is not None:
                writes += bundles.unbundle(self.ks, name, left)
                writes += bundles.touch(self.ks, view, left)
        elif hk in view.values:
            successor, until = keyspace.handover(view.values[hk])
            if successor != holder and until > now:
                return None
        grant, ttl_us = self.grant_us(), round(ttl * _US)
        epoch = max(grant, int(view.values.get(ek, b"0")) + 1)
        # x: its expiry, for watchers that look for the soonest (etcd_tail).
        changes.append(
            keyspace.change(ChangeKind.ACQUIRED, name, h=holder, e=epoch, x=grant + ttl_us)
        )
        writes += [
            keyspace.put(lk, f"{holder}\n{epoch}"),
            keyspace.put(xk, expiry_value(grant + ttl_us, ttl_us)),
            keyspace.put(ek, str(epoch)),
            keyspace.delete(hk),
            keyspace.delete(self.ks.key("lapse", name)),
        ]
        return _Decision(
            writes, changes, Lease(name, holder, epoch, ttl, (grant + ttl_us) / _US), left
        )

    async def _one(
        self,
        name: str,
        holder: str,
        ttl: float,
        peeked: View | None = None,
        compares: list[JSON] | None = None,
    ) -> Lease | None:
        """One acquire, with this store's turn to write held. ``peeked``: a view not read just
        now (with ``compares`` besides its ``mods``), tried first."""
        for attempt in range(keyspace.MAX_ATTEMPTS):
            view = peeked or await bundles.read_resolved(self.ks, self.keys(name))
            decided = self._decide(view, name, holder, ttl)
            if decided is None:
                if peeked is not None:  # maybe stale: only a fresh read may refuse
                    peeked = compares = None
                    continue
                return None
            if await self.ks.commit(view, decided.writes, decided.changes, compares or ()):
                self.left(name, decided.left)
                return decided.lease
            if peeked is None:
                await self.ks.retry_pause(attempt)
            peeked = compares = None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _drain(self) -> None:
        """Take this store's turn for the queued acquires, a group at a time, until none
        waits. Each acquire's outcome (or error) goes to its own waiter."""
        async with self.ks.writing:
            while self._queue:
                group: list[_Waiting] = []
                names: set[str] = set()
                for waiting in list(self._queue):
                    if len(group) < GROUP and waiting.name not in names:
                        group.append(waiting)
                        names.add(waiting.name)
                        self._queue.remove(waiting)
                try:
                    await self._group(group)
                except Exception as exc:
                    for waiting in group:
                        if not waiting.done.done():
                            waiting.done.set_exception(exc)

    async def _group(self, group: list[_Waiting]) -> None:
        group = [w for w in group if not w.done.done()]  # callers cancelled meanwhile
        if len(group) == 1:
            w = group[0]
            w.done.set_result(await self._one(w.name, w.holder, w.ttl))
            return
        view = await bundles.read_resolved(self.ks, [k for w in group for k in self.keys(w.name)])
        decided = [self._decide(view, w.name, w.holder, w.ttl) for w in group]
        for w, d in zip(group, decided, strict=True):
            if d is None and not w.done.done():
                w.done.set_result(None)  # held or reserved, by a read made just now
        taking: list[tuple[_Waiting, _Decision]] = []
        later: list[_Waiting] = []
        ops = 0
        for w, d in zip(group, decided, strict=True):
            if d is None:
                continue
            # Within etcd's 128 operations (the log's and the counter's puts included).
            if ops + len(d.writes) + len(d.changes) <= OPS_BUDGET:
                taking.append((w, d))
                ops += len(d.writes) + len(d.changes)
            else:
                later.append(w)
        # Two expired members of one bundle rewrite its key with the same value: once.
        unique = {json.dumps(op, sort_keys=True): op for _, d in taking for op in d.writes}
        changes = [c for _, d in taking for c in d.changes]
        if taking and await self.ks.commit(view, list(unique.values()), changes):
            # Numbered in order: each decision's changes follow the previous one's.
            for w, d in taking:
                self.left(w.name, d.left)
                if not w.done.done():
                    w.done.set_result(d.lease)
        else:
            later = [w for w, _ in taking] + later  # lost to another writer
        for w in later:  # each on its own
            if not w.done.done():
                w.done.set_result(await self._one(w.name, w.holder, w.ttl))


__all__ = ["GROUP", "OPS_BUDGET", "PEEKED_MAX", "Acquisition"]
