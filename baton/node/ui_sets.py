"""The cascade sets the dashboard shows, read from their node databases (blocking: run it in a
thread).

A set is found through the node databases the cluster knows: the ``location`` of every placed
``cascade-worker`` object, and the ``location`` of every member that reported whether it
reaches its root (``reach/<set>/<node>``, written for the nodes the agents serve). A set none
of whose members is known that way (run only by ``baton cascade run`` with no agent serving
it) is not shown. The members a found node's list names are looked at too, and a partition set
is found through the merge-leaves any of them hosts (seed 004: its only members besides its
root may be those merge-leaves, inside the combined set's root, which reports no reach).

Each set is read as ``baton cascade status`` reads it (:func:`baton.cascade.commands.status`),
with, per member, the agent that runs its worker and those that stand by (its placed group).
Locations are shown without passwords. ``via`` (what the page sends to the cascade routes) is
a member's location only when it holds no password; when every location holds one, ``via`` is
None and the page offers no operation on that set (the command line does them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from baton.cascade import commands
from baton.cascade.db import open_node_db
from baton.cascade.merge import merge_location
from baton.cascade.model import Role
from baton.errors import CascadeError, redact_url
from baton.service.auto_view import Placed


@dataclass(frozen=True, slots=True)
class Found:
    """A known node database: its set, its node name, whether it is a root, and the
    locations of the merge-leaves it hosts (``LOCATION#SET``, one per partition set)."""

    location: str
    set_name: str
    node: str
    root: bool
    hosted: tuple[str, ...] = ()
    #: The locations of the set's other live members, as this node's list has them.
    peers: tuple[str, ...] = ()


def identify(location: str) -> Found | None:
    """What the node database at ``location`` is (None: unreadable, or not a node)."""
    try:
        with open_node_db(location, readonly=True) as db:
            st = db.state()
            parts = sorted(db.merge_leaves()) if st.role.carries_queue else []
            peers = tuple(loc for loc, dead in db.nodes().values() if not dead and loc != location)
    except (CascadeError, OSError):
        return None
    hosted = tuple(merge_location(location, part) for part in parts)
    return Found(location, st.set_name, st.name, st.role is Role.ROOT, hosted, peers)


def pick_via(found: Iterable[Found]) -> str | None:
    """The location the page reaches a set through: a member that is not a root first (a
    failover tags the old root dead in the lists it reaches; a root's own list may be one it
    did not reach), and never one holding a password."""
    usable = [f for f in found if redact_url(f.location) == f.location]
    if not usable:
        return None
    return min(usable, key=lambda f: (f.root, f.location)).location


def _service(m: Mapping[str, Any]) -> dict[str, Any]:
    """A member's service without the time of its last beat (it changes twice a second, and
    the page is sent only what changed)."""
    service = m.get("service") or {}
    return {k: service.get(k) for k in ("state", "phase", "epoch", "holder", "error")}


def read_sets(placed: Iterable[Placed], reporters: Iterable[str]) -> list[dict[str, Any]]:
    """Every set found through ``placed`` objects and ``reporters`` (locations), as the page
    shows it; a set that cannot be read now carries ``error`` (one line) instead of members."""
    by_location = {p.location: p for p in placed}
    sets: dict[str, list[Found]] = {}
    todo = list(dict.fromkeys([*by_location, *reporters]))
    seen = set(todo)
    while todo:
        found = identify(todo.pop(0))
        if found is None:
            continue
        sets.setdefault(found.set_name, []).append(found)
        # The set's other members may host merge-leaves (a combined root does): look at them
        # too, and at those merge-leaves, whose sets are partition sets.
        for more in (*found.peers, *found.hosted):
            if more not in seen:
                seen.add(more)
                todo.append(more)
    out = []
    for set_name, members in sorted(sets.items()):
        via = pick_via(members)
        reach = via or min(members, key=lambda f: (f.root, f.location)).location
        agents = {f.node: by_location[f.location] for f in members if f.location in by_location}
        entry: dict[str, Any] = {"set": set_name, "via": via}
        try:
            status = commands.status(reach).as_dict()
        except Exception as exc:
            said = commands.classify(exc)
            if said is None:
                raise
            out.append({**entry, "error": said[1], "members": []})
            continue
        shown = []
        for m in status["members"]:
            placed_here = agents.get(m["name"])
            shown.append(
                {
                    "name": m["name"],
                    "role": m["role"],
                    "provider": m["provider"],
                    "position": m["position"],
                    "lag_ticks": m["lag_ticks"],
                    "lag_seconds": None
                    if m["lag_seconds"] is None
                    else round(float(m["lag_seconds"]), 1),
                    "paused": m["paused"],
                    "dead": m["dead"],
                    "reachable": m["reachable"],
                    "location": m["location"],
                    "tables": m["tables"],
                    "switching_to": m.get("switching_to"),
                    "service": _service(m),
                    "agent": placed_here.leader if placed_here else None,
                    "standby": [a for a in placed_here.members if a != placed_here.leader]
                    if placed_here
                    else [],
                }
            )
        out.append(
            {
                **entry,
                "error": None,
                "root": status["root"],
                "global_watermark": status["global_watermark"],
                "auto_failover": status["auto_failover"],
                "sync": status["sync"],
                "members": shown,
            }
        )
    return out


__all__ = ["Found", "identify", "pick_via", "read_sets"]
