"""Where a set's writers write: its current root, found through the members' node lists
(``baton cascade root SET`` and :mod:`baton.cascade.writer`).

A node is the set's root for writers when it says so (its role), no reachable member has
tagged it dead (a failover tags the old root dead in every node list it reaches, but the old
root's own list, if it comes back, still says it is alive), and it is not handing over (a
switchover under way: it refuses writes from the switch tick until the branch took over).
During a switchover the new root is promoted before the old one is demoted: for a moment both
say ``root``, and the one not handing over is the writers' root.

Reads only, read-only connections: finding the root changes nothing and never holds a node's
write lock.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.errors import CascadeError, CascadeInputError, NodeDatabaseError, NodeUnreachable
from baton.errors import redact_url as redact


class RootState(enum.StrEnum):
    """What a writer finds at a set."""

    WRITABLE = "writable"
    """One live root that captures: write there."""
    SWITCHING = "switching"
    """The root hands over to a branch (a switchover under way): it refuses writes until the
    branch has taken over; try again shortly."""
    NONE = "none"
    """No live root (unreachable or tagged dead, none promoted yet: a failover is due or
    under way), or more than one node claims the role."""
    NO_SET = "no-set"
    """The members given belong to another set."""


@dataclass(frozen=True, slots=True)
class Root:
    """A set's root as a writer finds it. ``location`` is the cascade's own (a DSN may hold a
    password: show it through :func:`~baton.errors.redact_url`, never log it)."""

    set_name: str
    state: RootState
    node: str | None = None
    location: str | None = None
    #: The root's last tick (None: no root, or it has not ticked yet).
    tick: int | None = None
    #: Why there is no writable root, in one line (empty when there is one).
    reason: str = ""
    #: Every member's location (the set's node list): where to look again after a move.
    members: tuple[str, ...] = field(default=(), repr=False)

    @property
    def writable(self) -> bool:
        return self.state is RootState.WRITABLE

    def as_dict(self) -> dict[str, object]:
        """As JSON carries it: the location without its password, no member list."""
        return {
            "set": self.set_name,
            "state": self.state.value,
            "root": self.node,
            "location": None if self.location is None else redact(self.location),
            "tick": self.tick,
            "writable": self.writable,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class _Claim:
    """A reachable member that says it is the root."""

    name: str
    location: str
    tick: int | None
    switching_to: str | None


def _node_list(set_name: str, via: Sequence[str]) -> dict[str, tuple[str, bool]] | Root:
    """The node list of the first member of ``set_name`` reachable among ``via``; a
    :attr:`RootState.NO_SET` root when the reachable ones belong to other sets."""
    others: list[str] = []
    unreachable: list[str] = []
    for location in via:
        try:
            with open_node_db(location, readonly=True) as db:
                found = db.state().set_name
                if found == set_name:
                    return db.nodes()
        except NodeDatabaseError:
            unreachable.append(redact(location))
            continue
        others.append(f"{redact(location)} is in set {found}")
    if others:
        return Root(
            set_name,
            RootState.NO_SET,
            reason=f"no set {set_name!r} there: {'; '.join(others)} (check the set's name and "
            "the member's location)",
        )
    raise NodeUnreachable(
        f"set {set_name}: no member reachable at {', '.join(unreachable)}: check that its node "
        "databases are up, or give another member's location"
    )


def _claims(set_name: str, nodes: dict[str, tuple[str, bool]]) -> tuple[list[_Claim], set[str]]:
    """Every reachable member that says it is the root, and the names tagged dead in any
    reachable member's node list."""
    dead = {name for name, (_, tagged) in nodes.items() if tagged}
    claims = []
    for name, (location, _) in sorted(nodes.items()):
        try:
            with open_node_db(location, readonly=True) as db:
                st = db.state()
                if st.set_name != set_name:
                    continue  # a location reused since: not this set's node now
                dead |= {n for n, (_, tagged) in db.nodes().items() if tagged}
                if st.role is not Role.ROOT:
                    continue
                last = db.last_tick()
                switching = db.get_local("switch_to")
        except (CascadeError, OSError):
            continue  # unreachable: it cannot take writes now
        claims.append(_Claim(name, location, None if last is None else last.tick_id, switching))
    return claims, dead


def locate_root(set_name: str, via: str | Sequence[str]) -> Root:
    """The root of ``set_name`` as writers find it, through the members at ``via`` (one
    location or several, tried in order until one answers). Never raises for a set without a
    root: the result's :attr:`Root.state` says so, with the reason. Raises
    :class:`~baton.errors.NodeUnreachable` when no member at ``via`` can be reached, and
    :class:`~baton.errors.CascadeInputError` for a location that is not a cascade node."""
    vias = [via] if isinstance(via, str) else list(via)
    if not vias:
        raise CascadeInputError(f"set {set_name}: give the location of at least one member")
    nodes = _node_list(set_name, vias)
    if isinstance(nodes, Root):
        return nodes
    members = tuple(location for _, (location, _) in sorted(nodes.items()))
    claims, dead = _claims(set_name, nodes)
    live = [c for c in claims if c.name not in dead]
    taking = [c for c in live if c.switching_to is None]
    if len(taking) == 1:
        (c,) = taking
        return Root(set_name, RootState.WRITABLE, c.name, c.location, c.tick, members=members)
    if len(taking) > 1:
        names = " and ".join(c.name for c in taking)
        return Root(
            set_name,
            RootState.NONE,
            reason=f"set {set_name}: {names} both say they are the root: tag the old one dead "
            "(baton cascade failover, or resurrect it) before writing",
            members=members,
        )
    if live:
        c = live[0]
        return Root(
            set_name,
            RootState.SWITCHING,
            c.name,
            c.location,
            c.tick,
            reason=f"set {set_name}: {c.name} hands over to {c.switching_to} (a switchover under "
            f"way): writes are refused until {c.switching_to} is the root",
            members=members,
        )
    tagged = sorted(dead & set(nodes))
    return Root(
        set_name,
        RootState.NONE,
        reason=f"set {set_name} has no live root: no reachable member that is not tagged dead "
        f"says it is the root (tagged dead: {', '.join(tagged) or 'none'}); a failover is due "
        "or under way: see 'baton cascade status'",
        members=members,
    )


__all__ = ["Root", "RootState", "locate_root"]
