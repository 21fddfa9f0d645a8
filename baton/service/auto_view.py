"""What automatic failover's actor observes: from the coordination store, the cascade nodes
placed as ``cascade-worker`` objects (their node databases, their groups' members and
leaders), the nodes that hold their membership, the cascade leases of ``baton cascade run`` and
the members' reach reports (:mod:`baton.service.reach`); then, from the node databases, each
set with automatic failover on, as the pure decision reads it
(:class:`~baton.cascade.auto_failover.SetView`).

A cascade node's *membership* is that of the agents of its group: live while any of them holds
its membership (a standby that can take the service over counts: placement moves the
leadership, no failover is needed). It is *served* while its group's leader holds its
membership. A node run by ``baton cascade run`` instead (no object) is both while its cascade
lease is held.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from baton.cascade import auto_switch, sync_mode
from baton.cascade.auto_failover import MemberView, SetView
from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.cascade.set_ops import CascadeSet, seen_of
from baton.errors import CascadeError
from baton.keys import CASCADE, MEMBERS, REACH
from baton.placement.records import read_groups, read_objects
from baton.service.workload import CascadeWorker
from baton.store import Store

#: A reach report older than this many seconds (store time) is no answer.
REACH_FRESH = 5.0


@dataclass(frozen=True, slots=True)
class Placed:
    """A cascade node's service as placement has it."""

    location: str
    members: tuple[str, ...] = ()
    leader: str | None = None


@dataclass(frozen=True, slots=True)
class Cluster:
    """What the store says, read in one pass."""

    placed: list[Placed]
    #: Node agents holding their membership.
    live: frozenset[str]
    #: ``<set>/<node>`` of every held cascade lease (``baton cascade run``).
    run_leases: frozenset[str]
    #: ``<set>/<node>`` -> whether it reaches the root (fresh reports only).
    reaches: Mapping[str, bool] = field(default_factory=dict)
    #: The node databases of the members that reported (fresh reports only).
    reporters: tuple[str, ...] = ()


async def read_cluster(store: Store, fresh: float = REACH_FRESH) -> Cluster:
    """One read of everything the actor needs from the store."""
    objects = await read_objects(store)
    groups = await read_groups(store)
    placed = []
    for obj in objects.values():
        if obj.type != CascadeWorker.type_name or not isinstance(obj.spec.get("location"), str):
            continue
        group = next((g for g, _ in groups.values() if g.object == obj.name), None)
        members = group.members if group is not None else ()
        leader = group.leader if group is not None else None
        placed.append(Placed(obj.spec["location"], members, leader))
    live = frozenset(x.holder for x in await store.list_leases(MEMBERS))
    runs = frozenset(x.name.removeprefix(CASCADE) for x in await store.list_leases(CASCADE))
    now = await store.now()
    records, _ = await store.list(REACH)
    reaches = {}
    reporters = []
    for rec in records:
        try:
            body = json.loads(rec.value)
            if now - float(body["at"]) <= fresh:
                reaches[rec.key.removeprefix(REACH)] = bool(body["reaches"])
                if isinstance(body.get("location"), str) and body["location"]:
                    reporters.append(body["location"])
        except (ValueError, KeyError, TypeError):
            continue  # not a report baton wrote: no answer
    return Cluster(placed, live, runs, reaches, tuple(reporters))


def _identify(location: str) -> tuple[str, str, bool] | None:
    """(set, node, whether it is a root) of the node database at ``location``; None if it
    cannot be read."""
    try:
        with open_node_db(location, readonly=True) as db:
            st = db.state()
    except (CascadeError, OSError):
        return None
    return st.set_name, st.name, st.role is Role.ROOT


def _root_of(view: Mapping[str, MemberView]) -> str | None:
    """The member that is the set's root: the live one whose role says so, else the top of a
    readable member's providers (a root whose database no longer answers)."""
    for name, m in sorted(view.items()):
        if not m.seen.dead and m.seen.state is not None and m.seen.state.role is Role.ROOT:
            return name
    for _name, m in sorted(view.items()):
        st = m.seen.state
        while st is not None and st.provider is not None:
            up = view.get(st.provider)
            if up is None or up.seen.state is None:
                return st.provider
            st = up.seen.state
    return None


def observe(cluster: Cluster) -> list[tuple[CascadeSet, SetView]]:
    """Every set with automatic failover on, as the decision reads it (blocking: node
    databases). Sets are found through their placed members and the members that report
    reaching their root; a set none of whose members can be read is skipped: nothing to act
    through."""
    by_set: dict[str, dict[str, Placed]] = {}
    vias: dict[str, list[tuple[bool, str]]] = {}
    for p in cluster.placed:
        found = _identify(p.location)
        if found is not None:
            by_set.setdefault(found[0], {})[found[1]] = p
            vias.setdefault(found[0], []).append((found[2], p.location))
    # A set none of whose nodes is placed (run by ``baton cascade run``) is found through the
    # members that report whether they reach its root.
    for location in cluster.reporters:
        found = _identify(location)
        if found is not None:
            by_set.setdefault(found[0], {})
            vias.setdefault(found[0], []).append((found[2], location))
    out = []
    for set_name, placed in sorted(by_set.items()):
        # Seen through a member that is not a root first: a failover tags the old root dead
        # in the lists it reaches, and a root's own list may be one it did not reach.
        try:
            c = CascadeSet(min(vias[set_name])[1])
        except (CascadeError, OSError):
            continue  # went away since: the next pass
        if not auto_switch.switch_of(c):
            continue
        members = {}
        for name in sorted(c.nodes):
            here = placed.get(name)
            key = f"{set_name}/{name}"
            if here is not None:
                live = any(m in cluster.live for m in here.members)
                served = here.leader is not None and here.leader in cluster.live
            else:
                live = served = key in cluster.run_leases
            members[name] = MemberView(seen_of(c, name), live, served, cluster.reaches.get(key))
        root = _root_of(members)
        acked = sync_mode.acked_of(c, exclude=root)
        out.append((c, SetView(set_name, root, members, acked)))
    return out


__all__ = ["REACH_FRESH", "Cluster", "Placed", "observe", "read_cluster"]
