"""The cluster as the store shows it: nodes (live, suspect, dead), the controller, leases.
Used by the node API and by ``baton status`` / ``baton nodes`` (which need no running node).

A node is *live* while it holds its membership lease, *suspect* for ``grace`` seconds after its
membership lapsed, and *dead* after that. The lapse time is the earliest of:

- what the store keeps (:meth:`~baton.store.Store.lapses`): the lease's expiry by the store
  clock, or the moment it was released, until the node acquires it again. This is all a reader
  without history has (``baton nodes`` / ``baton status`` without ``--api``), and it is lost
  only with the store's data (a Redis restart without persistence);
- what this observer saw: a node agent keeps it in :class:`Lapses`, from the change feed (the
  lease's ``expired`` or ``released`` change) and from its own status reads (a lease it saw
  held and now finds gone), whichever comes first. The two disagree for a moment after every
  lapse (the lease stops being listed as soon as the store clock passes its expiry; the feed's
  change is written and read a little later), and a status derived from the feed alone showed
  such a node ``dead`` in that moment, then ``suspect``, then ``dead`` again.

A lapse time, once known, never moves until the node is back, so the state goes live ->
suspect -> dead once.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from baton.keys import CONTROLLER, MEMBERS, NODES, member
from baton.store import Lapse, Lease, Store


class Liveness(StrEnum):
    """A node as the others see it, by its membership lease."""

    LIVE = "live"
    SUSPECT = "suspect"
    DEAD = "dead"


NodeState = Liveness


def node_state(*, held: bool, lapsed_at: float | None, now: float, grace: float) -> NodeState:
    """A node's state at store time ``now``: *live* while its membership lease is ``held``;
    *suspect* from ``lapsed_at`` (when its membership lapsed) until ``grace`` seconds later;
    *dead* after that, and at once when no lapse time is known (the store lost it, and this
    observer never saw the node live)."""
    if held:
        return Liveness.LIVE
    if lapsed_at is None or now - lapsed_at >= grace:
        return Liveness.DEAD
    return Liveness.SUSPECT


class Lapses:
    """When this process first saw each node's membership lapse (store-clock seconds).

    Fed by the membership change feed (:meth:`joined`, :meth:`lapsed`) and by every status
    read (:meth:`observe`). A lapse time is set once, by whichever sighting comes first, and
    kept until the node holds its membership again, so the state derived from it only moves
    forward.
    """

    def __init__(self) -> None:
        #: Nodes seen holding their membership (and not seen losing it since).
        self._live: set[str] = set()
        self._since: dict[str, float] = {}

    def joined(self, node: str) -> None:
        """``node`` holds its membership (acquired, or listed as held)."""
        self._live.add(node)
        self._since.pop(node, None)

    def lapsed(self, node: str, at: float) -> None:
        """``node``'s membership was seen lapsed at ``at`` (an earlier sighting stays)."""
        self._live.discard(node)
        self._since.setdefault(node, at)

    def observe(self, node: str, held: bool, now: float) -> float | None:
        """A status read at ``now`` found ``node``'s membership ``held`` or not; returns when
        its lapse was first seen (None: held, or never seen live)."""
        if held:
            self.joined(node)
            return None
        if node in self._live:
            # Gone from the store before its change reached the feed reader: this is the
            # first sighting of the lapse.
            self.lapsed(node, now)
        return self._since.get(node)


async def cluster_status(
    store: Store, grace: float | None = None, lapses: Lapses | None = None
) -> dict[str, Any]:
    """Every node with its state (see :func:`node_state`), and the controller. ``grace``: how
    long a node stays suspect (None: twice the ttl its membership lease had, for a reader
    that does not know the nodes' config, as the CLI); ``lapses``: this observer's sightings
    (a node agent's), besides what the store keeps."""
    records, _ = await store.list(NODES)
    infos = [json.loads(rec.value) for rec in records]
    leases = {x.name: x for x in await store.list_leases(MEMBERS)}
    kept = await _kept_lapses(store, [member(i["id"]) for i in infos], leases)
    now = await store.now()
    nodes = []
    for info in infos:
        name = member(info["id"])
        lease = leases.get(name)
        held = lease is not None
        seen = lapses.observe(info["id"], held, now) if lapses is not None else None
        lapse = kept.get(name)
        known = [t for t in (seen, lapse.at if lapse else None) if t is not None]
        window = grace if grace is not None else 2 * lapse.ttl if lapse else 0.0
        state = node_state(
            held=held, lapsed_at=min(known) if known else None, now=now, grace=window
        )
        nodes.append({**info, "state": state, "epoch": lease.epoch if lease else None})
    ctl = await store.get_lease(CONTROLLER)
    return {
        "nodes": nodes,
        "controller": {"id": ctl.holder, "epoch": ctl.epoch} if ctl else None,
        "store_time": now,
    }


async def _kept_lapses(
    store: Store, names: list[str], leases: dict[str, Lease]
) -> dict[str, Lapse]:
    """The store's lapses of the membership leases in ``names`` not in ``leases`` (held when
    listed). One taken again between the listing and this read has no lapse any more: it is
    added to ``leases`` (it is live) rather than shown dead."""
    gone = [n for n in names if n not in leases]
    kept = await store.lapses(gone) if gone else {}
    if any(n not in kept for n in gone):
        again = {x.name: x for x in await store.list_leases(MEMBERS)}
        leases.update({n: again[n] for n in gone if n not in kept and n in again})
    return kept
