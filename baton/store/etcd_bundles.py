"""Lease bundles of the etcd store (:mod:`baton.store.etcd`): many leases of one holder renewed
by one write.

Writing a key per lease costs etcd (through its JSON gateway) about 0.1 ms of server time even
in batches of 120, so a holder of 100,000 leases could not renew them within a second that way.
A store that renews at least :data:`BUNDLE_MIN` leases of one holder and ttl at once moves them
into a *bundle*: the key ``bnd/<id>`` holds their common expiry (``<expiry us> <ttl us>``, as
``exp/<name>`` does for a lease of its own), each member's ``exp/<name>`` is replaced by
``bx/<name>`` naming the bundle, and ``bm/<id>/<name>`` indexes the members (for logging their
expiry). The next renewal of the same leases is one put of the bundle key.

Why one put is enough: the renewal compares the bundle key's ``mod_revision`` with the one this
store wrote last, and its expiry with the store's clock. Every other way a member leaves a
bundle (released, its expiry logged, taken over after expiry, renewed alone by another client)
rewrites the bundle key with the value it read (in the same transaction, which compares that
key's revision): the owner's next renewal then fails its compare and re-checks each lease on its
own. Only the store that made a bundle renews it whole; it keeps the members it put there
(:class:`Bundles`), and a bundle is renewed whole only when a renewal names every one of them at
the epoch and ttl it has there. A member's expiry is judged, and compared inside every fenced
write, by its bundle's key, so a lease is never held past its bundle's expiry by the store's
clock.

A ``VALUE`` compare on a key that does not exist fails in etcd: a one-round-trip path that
compares ``exp/<name>`` (a release, a fenced put) fails for a bundled lease and takes its
read-then-write path, which resolves the bundle.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from baton.errors import StoreUnavailable
from baton.store import etcd_keyspace as keyspace
from baton.store.base import Lease
from baton.store.etcd_gateway import JSON
from baton.store.etcd_keyspace import Keyspace, View

#: A renewal of at least this many leases of one holder and ttl that are not bundled yet moves
#: them into a new bundle (a test may lower it to run the conformance suite on bundles).
BUNDLE_MIN: Final = 64


@dataclass(slots=True)
class Bundle:
    """A bundle this store made: its members (name -> epoch) and the revision it last wrote."""

    id: str
    holder: str
    ttl_us: int
    #: What this store last wrote to the bundle key, and at which revision.
    value: str = ""
    mod: int = 0
    members: dict[str, int] = field(default_factory=dict)


class Bundles:
    """The bundles this store made and still renews whole."""

    def __init__(self) -> None:
        self._by_id: dict[str, Bundle] = {}
        self._of: dict[str, str] = {}

    def new(self, holder: str, ttl_us: int) -> Bundle:
        bundle = Bundle(secrets.token_hex(8), holder, ttl_us)
        self._by_id[bundle.id] = bundle
        return bundle

    def get(self, bundle_id: str) -> Bundle | None:
        return self._by_id.get(bundle_id)

    def of(self, name: str) -> Bundle | None:
        """The bundle of ours ``name`` is in, as far as this store knows."""
        bid = self._of.get(name)
        return None if bid is None else self._by_id.get(bid)

    def split(self, holder: str, batch: Sequence[Lease]) -> tuple[list[Bundle], list[Lease]]:
        """Our bundles of ``holder`` that ``batch`` names whole (every member at the epoch and
        ttl it has there), and the leases of ``batch`` outside them. One pass: this runs for
        every renewal of up to 100,000 leases."""
        named: dict[str, int] = {}
        counted: list[tuple[Lease, str]] = []
        outside: list[Lease] = []
        of, by_id = self._of, self._by_id
        for lease in batch:
            bid = of.get(lease.name)
            b = by_id.get(bid) if bid is not None else None
            if (
                b is not None
                and b.holder == holder
                and b.members.get(lease.name) == lease.epoch
                and round(lease.ttl * 1_000_000) == b.ttl_us
            ):
                named[b.id] = named.get(b.id, 0) + 1
                counted.append((lease, b.id))
            else:
                outside.append(lease)
        whole = [by_id[bid] for bid, count in named.items() if count == len(by_id[bid].members)]
        if len(whole) < len(named):
            ids = {b.id for b in whole}
            outside += [lease for lease, bid in counted if bid not in ids]
        return whole, outside

    def join(self, bundle: Bundle, name: str, epoch: int) -> None:
        self.leave(name)
        bundle.members[name] = epoch
        self._of[name] = bundle.id

    def leave(self, name: str) -> None:
        """``name`` is no longer in the bundle this store put it in (if any)."""
        bid = self._of.pop(name, None)
        bundle = self._by_id.get(bid) if bid is not None else None
        if bundle is not None:
            bundle.members.pop(name, None)
            if not bundle.members:
                del self._by_id[bundle.id]

    def wrote(self, bundle_id: str, revision: int, value: str | None = None) -> None:
        """This store wrote the bundle's key at ``revision`` (``value``: a new expiry)."""
        bundle = self._by_id.get(bundle_id)
        if bundle is not None and revision > bundle.mod:
            bundle.mod = revision
            if value is not None:
                bundle.value = value

    def drop(self, bundle: Bundle) -> None:
        """Stop renewing ``bundle`` whole (its key was changed by someone else)."""
        for name in list(bundle.members):
            self._of.pop(name, None)
        self._by_id.pop(bundle.id, None)


async def read_resolved(ks: Keyspace, keys: Sequence[str], ranges: Sequence[JSON] = ()) -> View:
    """:meth:`Keyspace.read` of ``keys`` and ``ranges``, with the bundle key of every ``bx/``
    key among them that names one, all at one revision."""
    wanted = list(keys)
    prefix = ks.key("bx", "")
    for _ in range(keyspace.MAX_ATTEMPTS):
        view = await ks.read(wanted, ranges)
        named = {ks.key("bnd", v.decode()) for k, v in view.values.items() if k.startswith(prefix)}
        missing = [b for b in sorted(named) if b not in view.mods]
        if not missing:
            return view
        wanted += missing  # a lease was bundled meanwhile, or the first look: read again
    raise StoreUnavailable(f"etcd store {ks.url}: lease bundles keep changing; retry later")


def expiry(ks: Keyspace, view: View, name: str) -> tuple[int, int, str | None]:
    """``(expiry us, ttl us, bundle id or None)`` of lease ``name`` as ``view`` read it (with
    :func:`read_resolved`); a lease without either counts as long expired."""
    raw = view.values.get(ks.key("exp", name))
    if raw is not None:
        exp, ttl = keyspace.exp(raw)
        return exp, ttl, None
    bid = view.values.get(ks.key("bx", name))
    if bid is None:
        return 0, 0, None
    exp, ttl = keyspace.exp(view.values.get(ks.key("bnd", bid.decode())))
    return exp, ttl, bid.decode()


def unbundle(ks: Keyspace, name: str, bid: str) -> list[JSON]:
    """The writes that take ``name`` out of bundle ``bid``: its ``bx/`` and ``bm/`` keys. The
    caller also writes :func:`touch` of the bundle once in the same transaction."""
    return [keyspace.delete(ks.key("bx", name)), keyspace.delete(ks.key("bm", bid, name))]


def touch(ks: Keyspace, view: View, bid: str) -> list[JSON]:
    """Rewrite bundle ``bid``'s key with the value ``view`` read (which the writing transaction
    compares), so that its owner's next renewal fails its compare and re-checks every member;
    nothing when the bundle is gone."""
    key = ks.key("bnd", bid)
    value = view.values.get(key)
    return [] if value is None else [keyspace.put(key, value)]


def expiry_value(expires_us: int, ttl_us: int) -> str:
    return f"{keyspace.pad(expires_us)} {ttl_us}"


def nested(compare: list[JSON], success: list[JSON]) -> JSON:
    return {"request_txn": {"compare": compare, "success": success}}


def answered(answer: JSON) -> bool:
    """Whether a nested transaction's compares held."""
    return bool(answer.get("response_txn", {}).get("succeeded", False))


__all__ = [
    "BUNDLE_MIN",
    "Bundle",
    "Bundles",
    "answered",
    "expiry",
    "expiry_value",
    "nested",
    "read_resolved",
    "touch",
    "unbundle",
]
