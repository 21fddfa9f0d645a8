"""The cluster as the store shows it: nodes (live, suspect, dead), the controller, leases.
Used by the node API and by ``baton status`` / ``baton nodes`` (which need no running node).

A node is *live* while it holds its membership lease, *suspect* for ``grace`` seconds after its
membership lapsed, and *dead* after that. The store says whether the lease is held now, but not
when an expired lease lapsed, so the lapse time is what the observer saw: a node agent keeps it
in :class:`Lapses`, from the change feed (the lease's ``expired`` or ``released`` change) and
from its own status reads (a lease it saw held and now finds gone), whichever comes first. The
two disagree for a moment after every lapse (the lease stops being listed as soon as the store
clock passes its expiry; the feed's change is written and read a little later), and a status
derived from the feed alone showed such a node ``dead`` in that moment, then ``suspect``, then
``dead`` again. Taking the first sighting, and never moving it, makes the state go live ->
suspect -> dead once, ``grace`` after the lapse was first seen.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from baton.store import Store

CONTROLLER = "controller"
MEMBERS = "members/"
NODES = "nodes/"

NodeState = Literal["live", "suspect", "dead"]


def node_state(*, held: bool, lapsed_at: float | None, now: float, grace: float) -> NodeState:
    """A node's state at store time ``now``: *live* while its membership lease is ``held``;
    *suspect* from ``lapsed_at`` (when its lapse was first seen) until ``grace`` seconds later;
    *dead* after that, and at once when no lapse was seen (this observer never knew it live:
    it was down before the observer started, or the observer has no history, as the CLI)."""
    if held:
        return "live"
    if lapsed_at is None or now - lapsed_at >= grace:
        return "dead"
    return "suspect"


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
    store: Store, grace: float, lapses: Lapses | None = None
) -> dict[str, Any]:
    """Every node with its state (see :func:`node_state`), and the controller. Without
    ``lapses`` (no history of lapses, as in the CLI) a node that does not hold its membership
    is dead."""
    records, _ = await store.list(NODES)
    leases = {x.name: x for x in await store.list_leases(MEMBERS)}
    now = await store.now()
    nodes = []
    for rec in records:
        info = json.loads(rec.value)
        lease = leases.get(MEMBERS + info["id"])
        held = lease is not None
        lapsed_at = lapses.observe(info["id"], held, now) if lapses is not None else None
        state = node_state(held=held, lapsed_at=lapsed_at, now=now, grace=grace)
        nodes.append({**info, "state": state, "epoch": lease.epoch if lease else None})
    ctl = await store.get_lease(CONTROLLER)
    return {
        "nodes": nodes,
        "controller": {"id": ctl.holder, "epoch": ctl.epoch} if ctl else None,
        "store_time": now,
    }
